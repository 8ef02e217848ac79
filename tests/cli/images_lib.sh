# Shared by the inputs_images_*.test.sh scripts, sourced after lib.sh: images_reference.py's
# folders and flat.pt (an encoder that returns its input), copied under $WORK.
D=$TC_DATA
REF=$TC_SOURCE/tests/cli/images_reference.py

# Made once for the three scripts (fixtures.images); a script run by hand makes it itself.
fixture_copy "$D/images-reference" "$TC_PYTHON" "$REF" make
FILL=(--encoder "$WORK/flat.pt" --threads 2 -q)
