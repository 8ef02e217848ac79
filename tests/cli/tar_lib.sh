# Shared by the inputs_tar_*.test.sh scripts, sourced after lib.sh: the shards and folders of
# tar_shards.py under $WORK, and the preprocessing every fill of them uses.
export TRAINCACHE_SHM_PREFIX="tctar-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
D=$TC_DATA
T=$TC_DATA/tokenizers

fixture_copy "$TC_DATA/tar-shards" "$TC_PYTHON" "$TC_SOURCE/tests/cli/tar_shards.py" make  # fixtures.tar
FILL=(--encoder cnn="$D/cnn.pt" --channels gray --resize 28 --center-crop 28 --batch-size 5 --threads 2 -q)
SHARDS="$WORK/shards/{0000..0003}.tar"
