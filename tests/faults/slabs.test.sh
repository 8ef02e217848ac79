#!/usr/bin/env bash
# Shared-memory slabs with bad bytes, truncated under their readers, left behind by killed runs, or
# owned by someone else: never a crash, never a silent read of wrong data.
source "$(dirname "$0")/../cli/lib.sh"
D=$TC_DATA
export TRAINCACHE_SHM_PREFIX="tcfault-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"* /dev/shm/.*"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
S="$TC_BIN/shm-cache"
obj() { echo "/dev/shm/${TRAINCACHE_SHM_PREFIX}$1"; }
# poke NAME OFFSET BYTE: writes one byte into a slab's object.
poke() {
  "$TC_PYTHON" -c "
import sys
with open(sys.argv[1], 'r+b') as f: f.seek(int(sys.argv[2])); f.write(bytes([int(sys.argv[3])]))" "$(obj "$1")" "$2" "$3"
}
states_offset() { "$S" stat "$1" --json | "$TC_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['slab']['offsets']['states'])"; }

# ---- a slot state other than empty/writing/filled (it indexed a 3-entry table: segfault)
run "$S" create v --len 8 --dims 4 --dtype float32 --slots 8 -q
expect_rc 0
off=$(states_offset v)
poke v $((off + 8 * 3)) 7
run "$S" get v 3
expect_rc 65
expect_err "shm-cache: error: v: slot 3 of index 3 holds an invalid state: corrupt slab (shm-cache repair resets it)"
run "$S" stat v
expect_rc 0
expect_out_has "0 filled, 0 writing, 7 empty, 1 invalid (corrupt; repair resets them)"
run "$S" stat v --json
expect_out_has '"invalid":1'
run "$S" repair v
expect_rc 0
expect_err "shm-cache: v: 1 slot left by dead writers returned to empty"
run "$S" get v 3
expect_rc 1
expect_err "shm-cache: error: v: index 3: miss (empty)"
run "$S" get v -1
expect_rc 64
expect_err "shm-cache: error: index: expected a non-negative integer, got '-1'"

# ---- header corruption: every field is checked against the object before anything is trusted
for field_off in 8 12 16 96 104; do  # version, layout, dtype, slots, item_bytes
  cp "$(obj v)" "$WORK/v.bak"
  poke v $field_off 255
  run "$S" stat v
  [ "$rc" -eq 65 ] && _ok || _fail "header byte $field_off: exit $rc"
  cp "$WORK/v.bak" "$(obj v)"
done

# ---- a prefix that would leave /dev/shm
# A directory or a link that carries the prefix is not a slab: list skips it, rm --all leaves it.
mkdir "/dev/shm/${TRAINCACHE_SHM_PREFIX}adir"
ln -s /etc/passwd "/dev/shm/${TRAINCACHE_SHM_PREFIX}alink"
run "$S" list
expect_rc 0
[[ "$out" != *adir* && "$out" != *alink* ]] && _ok || _fail "list showed a directory or link: $out"
rmdir "/dev/shm/${TRAINCACHE_SHM_PREFIX}adir"
rm "/dev/shm/${TRAINCACHE_SHM_PREFIX}alink"
run env TRAINCACHE_SHM_PREFIX=./../../x "$S" list
expect_rc 64
expect_err "shm-cache: error: TRAINCACHE_SHM_PREFIX: invalid prefix './../../x' (use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.')"

# ---- smart-bench's temporary slab: removed on SIGINT; after SIGKILL listed as smart-bench's and
# removed by rm --stale
BENCH=(--data "$D/big.h5" --strategy stochastic --cache-fraction 0.5 --epochs 50 --batch-size 64 --model-ms 5 -q)
for sig in INT TERM; do
  "$TC_BIN/smart-bench" "${BENCH[@]}" >/dev/null 2>"$WORK/sb.err" &
  pid=$!
  for _ in $(seq 1 500); do [ -e "$(obj smart-bench-stochastic-$pid)" ] && break; sleep 0.02; done
  expect_file "$(obj smart-bench-stochastic-$pid)"
  sleep 0.3
  kill -$sig $pid
  wait $pid
  expect_eq "$?" 130 "smart-bench exit after SIG$sig"
  expect_eq "$(cat "$WORK/sb.err")" "smart-bench: interrupted: stopping after this batch; interrupt again to stop at once
smart-bench: error: interrupted"
  expect_no_file "$(obj smart-bench-stochastic-$pid)"
done
"$TC_BIN/smart-bench" "${BENCH[@]}" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 500); do [ -e "$(obj smart-bench-stochastic-$pid)" ] && break; sleep 0.02; done
kill -KILL $pid
wait $pid 2>/dev/null
run "$S" list
expect_out_re "smart-bench-stochastic-$pid .* pid $pid \(smart-bench\)"
run "$S" stat smart-bench-stochastic-$pid
expect_out_has ", temporary"
run "$S" rm --stale
expect_rc 0
expect_err "shm-cache: removed smart-bench-stochastic-$pid"
expect_no_file "$(obj smart-bench-stochastic-$pid)"
expect_file "$(obj v)"  # not temporary: kept

# ---- gc-train --cache-shm: a poisoned row, another owner, a dead writer
tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
  --out "$WORK/c.h5" || _fail "cache-fill"
TRAIN=(--cache "$WORK/c.h5" --embeddings cnn -b 50 --steps 1 --cache-shm sh -q)
run "$TC_BIN/gc-train" "${TRAIN[@]}"
expect_rc 0
run "$S" stat sh-cnn --json
expect_out_has '"sealed":true'
data_off=$("$S" stat sh-cnn --json | "$TC_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['slab']['offsets']['data'])")
cp "$(obj sh-cnn)" "$WORK/sh.bak"
poke sh-cnn $((data_off + 128 * 77 + 5)) 66   # one byte of row 77 (32 floats a row)
run "$TC_BIN/gc-train" "${TRAIN[@]}"
expect_rc 65
expect_err "gc-train: error: sh-cnn: slab contents changed after it was filled and sealed (remove it: shm-cache rm sh-cnn)"
cp "$WORK/sh.bak" "$(obj sh-cnn)"
if [ "$(id -u)" -eq 0 ]; then
  chown 65534 "$(obj sh-cnn)"
  run "$TC_BIN/gc-train" "${TRAIN[@]}"
  expect_rc 65
  expect_err "gc-train: error: sh-cnn: slab is owned by another user (uid 65534); use --trust-slab-owner to share it, or another --cache-shm name"
  run "$TC_BIN/gc-train" "${TRAIN[@]}" --trust-slab-owner
  expect_rc 0
  chown 0 "$(obj sh-cnn)"
  # A slab read as an input (shm:NAME) is another user's only when trusted, as --cache-shm's is:
  # cache-fill, shm-cache fill and smart-bench read one whatever its owner before.
  "$S" create own-in --len 64 --dims 1,28,28 --slots 64 -q
  "$S" fill own-in --from "$D/images.h5" --dataset images --rows 0:64 -q
  chown 65534 "$(obj own-in)"
  run "$TC_BIN/cache-fill" --input shm:own-in --encoder cnn="$D/cnn.pt" --out "$WORK/own.h5" -q
  expect_rc 65
  expect_err "cache-fill: error: shm:own-in: slab is owned by another user (uid 65534); use --trust-slab-owner to read it"
  expect_no_file "$WORK/own.h5"
  run "$TC_BIN/cache-fill" --input shm:own-in --encoder cnn="$D/cnn.pt" --out "$WORK/own.h5" -q --trust-slab-owner
  expect_rc 0
  "$S" create own-copy --len 64 --dims 1,28,28 --slots 64 -q
  run "$S" fill own-copy --from shm:own-in -q
  expect_rc 65
  expect_err "shm-cache: error: shm:own-in: slab is owned by another user (uid 65534); use --trust-slab-owner to read it"
  run "$S" fill own-copy --from shm:own-in -q --trust-slab-owner
  expect_rc 0
  run "$TC_BIN/smart-bench" --shm own-in --items 64 --epochs 1 --strategy none -q
  expect_rc 65
  expect_err "smart-bench: error: own-in: slab is owned by another user (uid 65534); use --trust-slab-owner to read it"
  chown 0 "$(obj own-in)"
else
  echo "slabs.test.sh: skipped: the other-owner case needs root (chown)" >&2
fi
# A slot left WRITING by a writer that died (pid 999999 does not exist) in a slab not yet sealed is
# repaired and refilled at once (it was waited on for 120 s, then exit 75). The seal word is the
# header's uint64 at byte 448 (docs/shm-cache.md).
"$TC_PYTHON" -c "
import sys, struct
p, off = sys.argv[1], int(sys.argv[2])
with open(p, 'r+b') as f:
    f.seek(448); f.write(struct.pack('<Q', 0))
    f.seek(off + 8 * 10); f.write(struct.pack('<Q', 1 | (999999 << 8)))" "$(obj sh-cnn)" "$(states_offset sh-cnn)"
run "$S" stat sh-cnn --json
expect_out_has '"sealed":false'
run "$S" stat sh-cnn
expect_out_has "299 filled, 1 writing, 0 empty"
run timeout 60 "$TC_BIN/gc-train" "${TRAIN[@]}"
expect_rc 0
run "$S" stat sh-cnn
expect_out_has "300 filled, 0 writing, 0 empty"
run "$S" stat sh-cnn --json
expect_out_has '"sealed":true'
# An invalid state in the slab: corrupt, refused at once.
poke sh-cnn $(( $(states_offset sh-cnn) + 8 * 12 )) 9
run timeout 60 "$TC_BIN/gc-train" "${TRAIN[@]}"
expect_rc 65
expect_err "gc-train: error: sh-cnn: 1 slot(s) hold an invalid state: corrupt slab (remove it: shm-cache rm sh-cnn)"

finish
