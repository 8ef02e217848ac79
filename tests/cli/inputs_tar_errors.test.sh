#!/usr/bin/env bash
# WebDataset tar shards that cannot be read as asked: bad shards are one line, their exit code, and
# nothing written; the default field and what it names; a fill killed part way resumes to
# identical bytes.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/tar_lib.sh"

run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --labels cls --out "$WORK/tar.h5" "${FILL[@]}"
expect_rc 0

# ---- bad shards: one line, the code, nothing written ---------------------------------------------
refused() {  # $1: exit code, $2: the message after "cache-fill: error: ", $3: --input
  run "$TC_BIN/cache-fill" --input "$3" --features png --labels cls --out "$WORK/bad.h5" "${FILL[@]}"
  expect_rc "$1"
  expect_err "cache-fill: error: $2"
  expect_no_file "$WORK/bad.h5"
  expect_no_file "$WORK/bad.h5.partial"
}
B=$WORK/bad
refused 65 "$B/traversal.tar: member '../b.png': not a relative name inside the shard" "$B/traversal.tar"
refused 65 "$B/absolute.tar: member '/abs/a.png': not a relative name inside the shard" "$B/absolute.tar"
refused 65 "$B/apart.tar: duplicate key 'a' (its members are not together)" "$B/apart.tar"
refused 65 "$B/twice.tar: duplicate member 'a.png'" "$B/twice.tar"
refused 65 "$B/cat00.tar: duplicate key 'cat00' (also in $WORK/shards/0000.tar)" "{$WORK/shards/0000.tar,$B/cat00.tar}"
refused 65 "$B/truncated.tar: not a readable tar file: Truncated tar archive" "$B/truncated.tar"
refused 65 "$B/oversized.tar: not a readable tar file: Truncated input file (needed 245760 bytes, only 60928 available)" \
  "$B/oversized.tar"
refused 65 "$B/nottar.tar: not a readable tar file: Unrecognized archive format" "$B/nottar.tar"
refused 65 "$B/empty.tar: the shards hold no samples" "$B/empty.tar"
refused 66 "$WORK/shards/0004.tar: no such file or directory" "$WORK/shards/{0000..0004}.tar"
refused 66 "$WORK/shards/*.tgz: matches no file" "$WORK/shards/*.tgz"
refused 64 "$WORK/shards/{0000..0003.tar: a '{' without its '}'" "$WORK/shards/{0000..0003.tar"
refused 64 "$WORK/shards/{0000}.tar: '{0000}' is neither a range {A..B} of integers nor a list {a,b}" \
  "$WORK/shards/{0000}.tar"
# Issue 43: a shard cut at a member boundary (item 29); patterns naming too many shards, with ranges
# near the int64 limits (item 11); a FIFO as a shard is 66 like any input that is not a file (32).
refused 65 "$B/cut.tar: ends without the end-of-archive blocks: truncated (an interrupted download or copy?)" "$B/cut.tar"
refused 64 "$WORK/{0..9999}{0..9999}.tar: names over 1,000,000 shards" "$WORK/{0..9999}{0..9999}.tar"
refused 64 "$WORK/{-9223372036854775808..9223372036854775807}.tar: names over 1,000,000 shards" \
  "$WORK/{-9223372036854775808..9223372036854775807}.tar"
refused 64 "$WORK/{0..999}{0..999}{9223372036854775806..9223372036854775807}.tar: names over 1,000,000 shards" \
  "$WORK/{0..999}{0..999}{9223372036854775806..9223372036854775807}.tar"
mkfifo "$WORK/fifo.tar"
refused 66 "$WORK/fifo.tar: not a regular file (a FIFO)" "$WORK/fifo.tar"
# A member larger than its kind can hold is refused before it is read (item 30).
run "$TC_BIN/cache-fill" --input "$B/bigtext.tar" --text txt --tokenizer "$T/bert-uncased.json" --encoder "$D/text4k.pt" \
  --out "$WORK/bad.h5" -q
expect_rc 65
expect_err "cache-fill: error: $B/bigtext.tar: a.txt: is 17.00 MiB: text and json members over 16.00 MiB are not read"
# A field no sample has is a usage error naming the fields there are (item 16).
run "$TC_BIN/cache-fill" --input "$SHARDS" --features pgn --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 64
expect_err "cache-fill: error: $SHARDS: no sample has a field 'pgn' (the shards' fields: cls, json, png, txt); did you mean 'png'?"
# Alternatives, as WebDataset's to_tuple("jpg;png") (item 21): each sample's image, whichever it has.
run "$TC_BIN/cache-fill" --input "$WORK/mixed.tar" --features 'jpg;png' --labels cls --out "$WORK/mixed.h5" "${FILL[@]}"
expect_rc 0
# (The same image in another batch: equal up to the last bits, which MKL's kernels in pip's
# LibTorch let depend on the batch.)
py "
import h5py, numpy as np
m, t = h5py.File('$WORK/mixed.h5'), h5py.File('$WORK/tar.h5')
tk = [k.decode() for k in t['keys'][:]]
print([k.decode() for k in m['keys'][:]], m['labels'][:].tolist(),
      np.allclose(m['embeddings/cnn'][0], t['embeddings/cnn'][tk.index('cat00')], rtol=1e-5, atol=1e-6))
"
expect_out "['m0', 'm1'] [0, 1] True"
O=$B/oddities.tar
run "$TC_BIN/cache-fill" --input "$B/notobject.tar" --features png --labels json.label --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 65
expect_err "cache-fill: error: $B/notobject.tar: a.json: not a JSON object"
run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --labels json.nope --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 65
expect_err "cache-fill: error: $WORK/shards/0000.tar: cat00.json: no field 'nope'"
run "$TC_BIN/cache-fill" --input "$O" --features png --labels json.label --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 65
expect_err "cache-fill: error: $O: a.json: field 'label' is neither a string nor an integer"
run "$TC_BIN/cache-fill" --input "$O" --text txt --tokenizer "$T/bert-uncased.json" --encoder "$D/text4k.pt" \
  --strict-utf8 --out "$WORK/bad.h5" -q
expect_rc 65
expect_err "cache-fill: error: $O: a.txt: invalid UTF-8 at byte 4 (without --strict-utf8 it is replaced with U+FFFD)"
expect_no_file "$WORK/bad.h5"
run "$TC_BIN/cache-fill" --input "$O" --text txt --tokenizer "$T/bert-uncased.json" --encoder "$D/text4k.pt" \
  --out "$WORK/utf8.h5"
expect_rc 0
expect_err_has "cache-fill: warning: 1 ill-formed UTF-8 sequences in the text fields replaced with U+FFFD"
run "$TC_BIN/cache-fill" --input "$SHARDS" --features png --labels nope --on-error skip --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 64
expect_err "cache-fill: error: $SHARDS: no sample has a field 'nope' (the shards' fields: cls, json, png, txt)"
run "$TC_BIN/cache-fill" --input "$SHARDS" --features txt --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 65
expect_err "cache-fill: error: $SHARDS: field 'txt' holds no images (image fields end in jpg, png, webp, ...; text is read with --text)"
# Without --features the shards' only image field is read; their cls field, not stored without
# --labels, is named (issue 43, item 16). With no image field, the message lists the fields.
run "$TC_BIN/cache-fill" --input "$SHARDS" --out "$WORK/default.h5" "${FILL[@]:0:${#FILL[@]}-1}"
expect_rc 0
expect_err_has "cache-fill: warning: $SHARDS: the shards' 'cls' field is not stored (--labels cls stores it as labels)"
py "
import h5py
a, b = h5py.File('$WORK/default.h5'), h5py.File('$WORK/tar.h5')
print(a['embeddings/cnn'][:].tobytes() == b['embeddings/cnn'][:].tobytes(), 'labels' in a)
"
expect_out "True False"
# The only image field is no default for an encoder that reads text: a caption without an image
# is a row of a text fill.
run "$TC_BIN/cache-fill" --input "$WORK/texts.tar" --text txt --tokenizer "$T/bert-uncased.json" --encoder "$D/text4k.pt" \
  --out "$WORK/texts.h5" -q
expect_rc 0
py "import h5py; print([k.decode() for k in h5py.File('$WORK/texts.h5')['keys'][:]])"
expect_out "['t0', 't1']"
run "$TC_BIN/cache-fill" --input "$WORK/mixed.tar" --out "$WORK/bad.h5" "${FILL[@]}"
expect_rc 64
expect_err "cache-fill: error: --features: no input dataset for encoder 'cnn': name the shards' image field with --features FIELD or their text field with --text FIELD (the shards have cls, jpg, png)"

# ---- SIGKILL during a fill from shards resumes to identical bytes --------------------------------
ARGS=(--input "$WORK/big/{00000..00005}.tar" --features png --labels cls --channels gray --encoder cnn="$D/cnn.pt"
      --threads 2 --batch-size 40 --commit-rows 200 --workers 1)
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/ref.h5"
expect_rc 0
expect_err_re "ref\.h5: 1200 rows \(1200 encoded\)"
killed_fill "$WORK/killed.h5" 400 "${ARGS[@]}"
expect_rc 0
expect_err_re "resumed at [0-9]+"
expect_same "$WORK/killed.h5" "$WORK/ref.h5"

# Shards of 200 samples in batches of 64: batches end where a shard ends, so commits fall off the
# 64-row grid (528, 664, ...); the journal takes what the fill committed and the rerun resumes.
ARGS=(--input "$WORK/big/{00000..00005}.tar" --features png --labels cls --channels gray --encoder cnn="$D/cnn.pt"
      --threads 2 --batch-size 64 --commit-rows 128 --workers 1)
run "$TC_BIN/cache-fill" "${ARGS[@]}" --out "$WORK/ref64.h5"
expect_rc 0
killed_fill "$WORK/killed64.h5" 400 "${ARGS[@]}"
expect_rc 0
expect_err_re "resumed at [0-9]+"
expect_same "$WORK/killed64.h5" "$WORK/ref64.h5"

finish
