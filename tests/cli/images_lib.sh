# Shared by the inputs_images_*.test.sh scripts, sourced after lib.sh: images_reference.py's
# folders and flat.pt (an encoder that returns its input) under $WORK.
D=$TC_DATA
REF=$TC_SOURCE/tests/cli/images_reference.py

run "$TC_PYTHON" "$REF" make "$WORK"
expect_rc 0
FILL=(--encoder "$WORK/flat.pt" --threads 2 -q)
