#!/usr/bin/env bash
# cache-fill on text: a JSON Lines manifest's field tokenized with a tokenizer.json or a
# SentencePiece model; the embeddings equal the encoder run on Hugging Face tokenizers' ids one text at a
# time (so padding per batch changes nothing); HDF5 string datasets; the tokenization in the
# fingerprint; bad input as one line with its exit code.
source "$(dirname "$0")/lib.sh"
T=$TC_DATA/tokenizers
ENC=$TC_DATA/text4k.pt

py "
import json, sys
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
with open('$WORK/pairs.jsonl', 'w') as f:
    for w, g in tt.wordnet_pairs()[:300]:
        f.write(json.dumps({'word': w, 'gloss': g}) + '\n')
with open('$WORK/glosses.jsonl', 'w') as f:
    for l in open('$WORK/pairs.jsonl'):
        f.write(json.dumps(json.loads(l)['gloss']) + '\n')
"
expect_rc 0
FILL=(--input "$WORK/pairs.jsonl" --text gloss --encoder "$ENC" --threads 2 -b 64 -q)

run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --out "$WORK/b.h5"
expect_rc 0
hf_ids "$T/bert-uncased.json" "$WORK/glosses.jsonl" > "$WORK/hf.txt"
# b.h5's rows against the encoder run on each text's ids alone: checked below, with st.h5's, in one
# Python process (importing torch costs about 2 s a start).
run "$TC_BIN/cache-inspect" --json "$WORK/b.h5"
py "
import h5py, json
t = json.loads(h5py.File('$WORK/b.h5').attrs['text'])['gloss|bert-uncased.json']
print(t['tokenizer_kind'], t['max_length'], t['padding'], t['tokenizer_path'] == '$T/bert-uncased.json')
"
expect_out "wordpiece 48 longest True"

# A sentence-transformers model folder: max_seq_length in sentence_bert_config.json beside
# tokenizer.json is the default maximum length (what SentenceTransformer.encode cuts texts at), ahead
# of tokenizer.json's own; the texts cut are counted in the closing line and --json, against
# Hugging Face's ids of the same texts.
mkdir -p "$WORK/st"
cp "$T/bert-uncased.json" "$WORK/st/tokenizer.json"
echo '{"max_seq_length": 16, "do_lower_case": false}' > "$WORK/st/sentence_bert_config.json"
ST=(--input "$WORK/pairs.jsonl" --text gloss --encoder "$ENC" --threads 2 -b 64 --tokenizer "$WORK/st/tokenizer.json")
run "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st.h5" --json
expect_rc 0
echo "$out" > "$WORK/st.json"
run "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st48.h5" --max-length 48
expect_rc 0
st48_err=$err
py "
import json, h5py, numpy as np, torch
ids = [json.loads(l) for l in open('$WORK/hf.txt')]
m = torch.jit.load('$ENC').eval()
def worst(path, n):  # rows of path against each text's first n - 1 ids and its last, alone
    emb = h5py.File(path)['embeddings/text4k'][:]
    w = 0.0
    for i, x in enumerate(ids):
        x = x[:n - 1] + x[-1:] if len(x) > n else x
        with torch.no_grad():
            want = m(torch.tensor([x]), torch.ones(1, len(x), dtype=torch.int64))[0].numpy()
        w = max(w, float(np.abs(emb[i] - want).max()))
    return emb.shape, w
shape, w = worst('$WORK/b.h5', 48)
print(shape, w < 1e-4)
r = json.load(open('$WORK/st.json'))
t = json.loads(h5py.File('$WORK/st.h5').attrs['text'])['gloss|tokenizer.json']
print(r['max_length'], r['texts_cut'] == sum(len(x) > 16 for x in ids) > 0, t['max_length'], worst('$WORK/st.h5', 16)[1] < 1e-4)
"
expect_out "(300, 16) True
16 True 16 True"
py "
import json
n = sum(len(json.loads(l)) > 48 for l in open('$WORK/hf.txt'))
print('' if n == 0 else ', %d text%s cut at 48 tokens' % (n, '' if n == 1 else 's'))"
cut48=$out
err=$st48_err
expect_err_has "(300 encoded$cut48) in "
echo '{"max_seq_length": "long"}' > "$WORK/st/sentence_bert_config.json"
run "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st-bad.h5"
expect_rc 65
expect_err "cache-fill: error: $WORK/st/sentence_bert_config.json: max_seq_length \"long\" is not a length (a whole number of tokens)"
# Lengths past any encoder's position table are refused before a batch is made (issue 84, item 6:
# 256 rows of 2,000,000 tokens took 22 GB and the kernel's OOM killer); a whole number written as a
# float is a length (64.0 was refused).
echo '{"max_seq_length": 1000000000}' > "$WORK/st/sentence_bert_config.json"
run timeout 60 "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st-bad.h5"
expect_rc 65
expect_err "cache-fill: error: $WORK/st/sentence_bert_config.json: max_seq_length 1000000000 is more than the 65536 tokens a text may have (longer than any encoder's position table); give --max-length"
run timeout 60 "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st-bad.h5" --padding max-length --max-length 2000000
expect_rc 64
expect_err "cache-fill: error: --max-length: 2000000 is more than the 65536 tokens a text may have (longer than any encoder's position table)"
expect_no_file "$WORK/st-bad.h5"
# An explicit --max-length stands in for a malformed file's length: it is not read then.
echo '{"max_seq_length": "long"}' > "$WORK/st/sentence_bert_config.json"
run "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st48-again.h5" --max-length 48
expect_rc 0
expect_same "$WORK/st48-again.h5" "$WORK/st48.h5"
echo '{"max_seq_length": 16.0}' > "$WORK/st/sentence_bert_config.json"
run "$TC_BIN/cache-fill" "${ST[@]}" --out "$WORK/st-float.h5"
expect_rc 0
expect_same "$WORK/st-float.h5" "$WORK/st.h5"

# cache-inspect names the text input and its tokenizer; --verify re-tokenizes and re-encodes rows.
run "$TC_BIN/cache-inspect" "$WORK/b.h5"
expect_rc 0
expect_out_re "
  text         gloss: wordpiece $T/bert-uncased.json \(sha256 [0-9a-f]{12}\), max length 48, padding longest, length window 1024
"
run "$TC_BIN/cache-inspect" --json "$WORK/b.h5"
expect_out_has '"text":[{"key":"gloss|bert-uncased.json","field":"gloss","ragged":false,'
run "$TC_BIN/cache-inspect" --verify 20 "$WORK/b.h5"
expect_rc 0
expect_out_re "^$WORK/b.h5	text4k	ok: 20 rows match"
# The same fill in two shards, merged: --verify finds the text input in the job's fingerprint (the
# merged cache's own names only the job and its shards; it once fed the encoder no text, exit 65).
for i in 0 1; do
  run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 -b 8 --shard "$i/2" \
    --out "$WORK/bm.h5"
  expect_rc 0
done
run "$TC_BIN/cache-fill" merge --out "$WORK/bm.h5" "$WORK/bm.h5.shard-0-of-2" "$WORK/bm.h5.shard-1-of-2" -q
expect_rc 0
run "$TC_BIN/cache-inspect" --verify 20 "$WORK/bm.h5"
expect_rc 0
expect_out_re "^$WORK/bm.h5	text4k	ok: 20 rows match"
py "
import json
with open('$WORK/changed.jsonl', 'w') as f:
    for l in open('$WORK/pairs.jsonl'):
        r = json.loads(l); r['gloss'] = r['gloss'][::-1]; f.write(json.dumps(r) + '\n')
"
run "$TC_BIN/cache-inspect" --verify 20 --input "$WORK/changed.jsonl" "$WORK/b.h5"
expect_rc 1
expect_out_re "	MISMATCH: [0-9]+ of 20 rows differ"

# Up to date with the same options; another max length or tokenizer is another fingerprint.
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --out "$WORK/b.h5"
expect_rc 0
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 40 --out "$WORK/b.h5"
expect_rc 73
expect_err_has "changed: text/gloss|bert-uncased.json/max_length"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-cased.json" --max-length 48 --out "$WORK/b.h5"
expect_rc 73
expect_err_has "changed: encoders/text4k/text"

# Fixed-length padding gives the same embeddings (the mask hides the padding).
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --padding max-length \
  --out "$WORK/b_fixed.h5"
expect_rc 0
py "
import h5py, numpy as np
a = h5py.File('$WORK/b.h5')['embeddings/text4k'][:]; b = h5py.File('$WORK/b_fixed.h5')['embeddings/text4k'][:]
print(float(np.abs(a - b).max()) < 1e-4)
"
expect_out "True"

# Length windows: by default 16 batches of texts are sorted by length, encoded in batches of
# similar length and stored in input order; the embeddings equal those of batches as read.
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --length-window 0 \
  --out "$WORK/b_nowin.h5" --json
expect_rc 0
expect_out_has '"length_window":0'
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --length-window 100 \
  --out "$WORK/b_win.h5" --json
expect_rc 0
expect_out_has '"length_window":128'  # rounded up to whole batches of 64
py "
import h5py, numpy as np
a = h5py.File('$WORK/b.h5')['embeddings/text4k'][:]
for f in ('b_nowin', 'b_win'):
    b = h5py.File('$WORK/%s.h5' % f)['embeddings/text4k'][:]
    print(f, float(np.abs(a - b).max()) < 1e-5)
print(h5py.File('$WORK/b.h5').attrs['length_window'], h5py.File('$WORK/b_win.h5').attrs['length_window'])
"
expect_out "b_nowin True
b_win True
1024 128"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --length-window 64 \
  --out "$WORK/b_win.h5"
expect_rc 73
expect_err_has "changed: options/length_window"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --padding max-length --length-window 128 \
  --out "$WORK/b_bad.h5"
expect_rc 64
expect_err "cache-fill: error: --length-window: has nothing to gain with --padding max-length"

# Batches by tokens: the sorted window is cut into batches of at most --max-tokens token slots
# (rows x the batch's longest text) and -b rows. The tokens and slots cache-fill counts equal those
# of the rule applied here to Hugging Face's lengths (cut at 48, special tokens included).
slots_of() {  # slots_of MAX_TOKENS: "tokens slots" by the documented rule, one window of 300 rows
  "$TC_PYTHON" -c "
import json
lengths = sorted(min(len(json.loads(l)), 48) for l in open('$WORK/hf.txt'))
slots, rows, longest = 0, 0, 0
for n in lengths + [None]:
    if n is None or rows == 64 or ($1 and rows and (rows + 1) * n > $1):
        slots += rows * longest
        rows = 0
    if n is not None:
        rows, longest = rows + 1, n
print(sum(lengths), slots)"
}
for cap in 256 0; do
  run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --max-tokens $cap \
    --out "$WORK/b_tok$cap.h5" --json
  expect_rc 0
  expect_out_has "\"max_tokens\":$cap,"
  expect_eq "$(printf '%s' "$out" | "$TC_PYTHON" -c 'import json, sys; d = json.load(sys.stdin); print(d["tokens"], d["token_slots"])')" \
    "$(slots_of $cap)" "tokens and token slots with --max-tokens $cap"
done
py "
import h5py, numpy as np
a = h5py.File('$WORK/b.h5')['embeddings/text4k'][:]
for f in ('b_tok256', 'b_tok0'):
    print(f, float(np.abs(a - h5py.File('$WORK/%s.h5' % f)['embeddings/text4k'][:]).max()) < 1e-5)
print(h5py.File('$WORK/b.h5').attrs['max_tokens'], h5py.File('$WORK/b_tok256.h5').attrs['max_tokens'])
"
expect_out "b_tok256 True
b_tok0 True
1024 256"
# An update's length windows are cut by --max-tokens as a fill's are (its view of the rows to
# encode had no cap: batches of -b rows whatever their length) (issue 84, item 12): the 100 rows an
# update adds take the token slots the rule gives for them, as the fill's --json reports.
head -n 200 "$WORK/pairs.jsonl" > "$WORK/grow.jsonl"
run "$TC_BIN/cache-fill" "${FILL[@]:2}" --input "$WORK/grow.jsonl" --tokenizer "$T/bert-uncased.json" --max-length 48 \
  --max-tokens 256 --out "$WORK/grow.h5"
expect_rc 0
cp "$WORK/pairs.jsonl" "$WORK/grow.jsonl"
run "$TC_BIN/cache-fill" "${FILL[@]:2}" --input "$WORK/grow.jsonl" --tokenizer "$T/bert-uncased.json" --max-length 48 \
  --max-tokens 256 --out "$WORK/grow.h5" --update --json
expect_rc 0
expect_eq "$(printf '%s' "$out" | "$TC_PYTHON" -c 'import json, sys; d = json.load(sys.stdin); print(d["rows_encoded"], d["tokens"], d["token_slots"])')" \
  "$("$TC_PYTHON" -c "
import json
lengths = sorted(min(len(json.loads(l)), 48) for l in list(open('$WORK/hf.txt'))[200:])
slots, rows, longest = 0, 0, 0
for n in lengths + [None]:
    if n is None or rows == 64 or (rows and (rows + 1) * n > 256):
        slots += rows * longest
        rows = 0
    if n is not None:
        rows, longest = rows + 1, n
print(len(lengths), sum(lengths), slots)")" "the update's rows, tokens and token slots under --max-tokens 256"
# An error in a row the update encodes names the input's row, as a fill's does (it named the row's
# place among the rows to encode: "row 0" for row 300).
printf '{"word": "x", "gloss": ""}\n' >> "$WORK/grow.jsonl"
run "$TC_BIN/cache-fill" "${FILL[@]:2}" --input "$WORK/grow.jsonl" --tokenizer "$T/bert-uncased.json" --max-length 48 \
  --max-tokens 256 --out "$WORK/grow.h5" --update
expect_rc 65
expect_err "cache-fill: error: $WORK/grow.jsonl: field 'gloss' row 300: empty text"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --max-tokens 512 \
  --out "$WORK/b_tok256.h5"
expect_rc 73
expect_err_has "changed: options/max_tokens"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-length 48 --max-tokens 512 \
  --length-window 0 --out "$WORK/b_bad.h5"
expect_rc 64
expect_err "cache-fill: error: --max-tokens: caps the batches of texts sorted by length (--length-window), and this fill sorts none"
run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/bert-uncased.json" --max-tokens -5 --out "$WORK/b_bad.h5"
expect_rc 64
expect_err "cache-fill: error: --max-tokens: must be an integer >= 0, got '-5' (see --help)"
# The padding share in the bottleneck line, with what lowers it when it is large: every text padded
# to 48 tokens.
run "$TC_BIN/cache-fill" --input "$WORK/pairs.jsonl" --text gloss --encoder "$ENC" --threads 2 -b 64 --tokenizer "$T/bert-uncased.json" --max-length 48 --padding max-length \
  --out "$WORK/b_pad.h5"
expect_rc 0
expect_err_re $'\ncache-fill: bound by [^\n]*; padding [0-9]+% of the token slots: pad each batch to its longest \(--padding longest\)(\n|$)'

# Resume in windows: killed after some windows are committed (4,000 rows: 16 windows, 8 commits),
# a re-run gives the bytes of an uninterrupted fill.
py "
import json, sys
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
with open('$WORK/many.jsonl', 'w') as f:
    for w, g in tt.wordnet_pairs()[:4000]:
        f.write(json.dumps({'gloss': g}) + '\n')
"
RES=(--input "$WORK/many.jsonl" --text gloss --tokenizer "$T/bert-uncased.json" --max-length 64 --encoder "$ENC"
     -b 32 --length-window 256 --commit-rows 512 --threads 1 -q)
run "$TC_BIN/cache-fill" "${RES[@]}" --out "$WORK/ref.h5"
expect_rc 0
for target in 1024 3072; do
  killed_fill "$WORK/k$target.h5" "$target" "${RES[@]}"
  expect_rc 0
  expect_same "$WORK/k$target.h5" "$WORK/ref.h5"
done
py "import h5py; print(h5py.File('$WORK/ref.h5')['embeddings/text4k'].shape)"
expect_out "(4000, 16)"

# SentencePiece and byte-level BPE; an HDF5 string dataset gives what the manifest gives.
for tok in spm-unigram.model roberta-bpe.json; do
  run "$TC_BIN/cache-fill" "${FILL[@]}" --tokenizer "$T/$tok" --max-length 64 --out "$WORK/$tok.h5"
  expect_rc 0
done
py "
import h5py, json
with h5py.File('$WORK/g.h5', 'w') as f:
    f['gloss'] = [json.loads(l)['gloss'].encode() for l in open('$WORK/pairs.jsonl')]
"
run "$TC_BIN/cache-fill" --input "$WORK/g.h5" --text gloss --encoder "$ENC" --threads 2 -b 64 -q \
  --tokenizer "$T/spm-unigram.model" --max-length 64 --out "$WORK/g_out.h5"
expect_rc 0
py "
import h5py, numpy as np
a = h5py.File('$WORK/g_out.h5')['embeddings/text4k'][:]; b = h5py.File('$WORK/spm-unigram.model.h5')['embeddings/text4k'][:]
print(float(np.abs(a - b).max()) < 1e-5)
"
expect_out "True"

# ---- variable-layout slabs of token ids: ragged rows padded per batch ---------------------------
# Hugging Face tokenizers' ids of the 300 glosses (truncated to 48 as above) in a slab; cache-fill on the
# slab gives the embeddings of the text fill.
export TRAINCACHE_SHM_PREFIX="tctext-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT
py "
import h5py, json, numpy as np
with h5py.File('$WORK/ids.h5', 'w') as f:
    d = f.create_dataset('ids', (300,), dtype=h5py.vlen_dtype(np.int32))
    for i, line in enumerate(open('$WORK/hf.txt')):
        ids = json.loads(line)
        d[i] = np.array(ids[:47] + ids[-1:] if len(ids) > 48 else ids, dtype=np.int32)
"
run "$TC_BIN/shm-cache" create ids --len 300 --variable --dtype int32 --limit 1MiB
expect_rc 0
run "$TC_BIN/shm-cache" fill ids --from "$WORK/ids.h5" --dataset ids
expect_rc 0
run "$TC_BIN/cache-fill" --input shm:ids --encoder "$ENC" --threads 2 -b 64 -q --out "$WORK/ragged.h5" --json
expect_rc 0
expect_out_has '"length_window":1024'
py "
import h5py, json, numpy as np
a = h5py.File('$WORK/b.h5')['embeddings/text4k'][:]; b = h5py.File('$WORK/ragged.h5')['embeddings/text4k'][:]
print(float(np.abs(a - b).max()) < 1e-5, json.loads(h5py.File('$WORK/ragged.h5').attrs['text']))
"
expect_out "True {'shm:ids|ragged': {'field': 'shm:ids', 'pad_id': 0, 'ragged': True}}"
run "$TC_BIN/cache-fill" --input shm:ids --encoder "$TC_DATA/text.pt" --threads 2 -b 64 -q --out "$WORK/bad.h5"
expect_rc 65
expect_err_re "^cache-fill: error: encoder 'text': token id [0-9]+ of input row [0-9]+ is beyond its embedding table tok of 1000 rows$"
expect_no_file "$WORK/bad.h5"
py "
import h5py, numpy as np
with h5py.File('$WORK/neg.h5', 'w') as f:
    d = f.create_dataset('ids', (2,), dtype=h5py.vlen_dtype(np.int32))
    d[0] = np.array([2, 5, 3], dtype=np.int32); d[1] = np.array([2, -1, 3], dtype=np.int32)
"
run "$TC_BIN/shm-cache" create neg --len 2 --variable --dtype int32 --limit 1KiB
run "$TC_BIN/shm-cache" fill neg --from "$WORK/neg.h5" --dataset ids
run "$TC_BIN/cache-fill" --input shm:neg --encoder "$ENC" -q --out "$WORK/bad.h5"
expect_rc 65
expect_err "cache-fill: error: shm:neg row 1: token id -1 is not a vocabulary index"
run "$TC_BIN/cache-fill" --input "$TC_DATA/images.h5" --features vec --encoder "$TC_DATA/mlp.pt" --length-window 64 \
  -q --out "$WORK/bad.h5"
expect_rc 64
expect_err "cache-fill: error: --length-window: sorts texts (--text) or token sequences (a variable-layout slab) by length; there are none"
run "$TC_BIN/shm-cache" create fl --len 3 --variable --dtype float32 --limit 1KiB
run "$TC_BIN/cache-fill" --input shm:fl --encoder "$ENC" -q --out "$WORK/bad.h5"
expect_rc 65
expect_err "cache-fill: error: shm:fl: a variable-layout input slab must hold integer token sequences, not float32"

# ---- bad input: one line, its exit code, no output file ----------------------------------------
bad() { run "$TC_BIN/cache-fill" --encoder "$ENC" --threads 2 -q --out "$WORK/bad.h5" "$@"; expect_one_line_err; expect_no_file "$WORK/bad.h5"; }
bad --input "$WORK/pairs.jsonl" --text gloss
expect_rc 64
expect_err "cache-fill: error: --tokenizer: encoder 'text4k' reads text: give its tokenizer.json or .model"
bad --input "$WORK/pairs.jsonl" --text glos --tokenizer "$T/bert-uncased.json"
expect_rc 64
expect_err "cache-fill: error: $WORK/pairs.jsonl: no field 'glos' (fields: gloss, word); did you mean 'gloss'?"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$WORK/none.json"
expect_rc 66
expect_err "cache-fill: error: $WORK/none.json: no such file or directory"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$T/bert-uncased.json" --max-length 0
expect_rc 64
expect_err "cache-fill: error: --max-length: must be a positive integer, got '0' (see --help)"
bad --input "$WORK/pairs.jsonl" --text "" --tokenizer "$T/bert-uncased.json"
expect_rc 64
expect_err "cache-fill: error: --text: empty field list"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$T"
expect_rc 64
expect_err "cache-fill: error: $T: is a directory; name its tokenizer.json (or the SentencePiece .model file)"
bad --input "$TC_DATA/tokens.h5" --text input_ids --tokenizer "$T/bert-uncased.json"
expect_rc 65
expect_err "cache-fill: error: $TC_DATA/tokens.h5: text field 'input_ids' must hold one string per row (a manifest field or a 1-D HDF5 string dataset)"
echo '{"model": {"type": "Unigram", "vocab": []}}' > "$WORK/uni.json"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$WORK/uni.json"
expect_rc 65
expect_err_has "unsupported tokenizer component: model Unigram"
echo 'not json' > "$WORK/junk.json"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$WORK/junk.json"
expect_rc 65
expect_err "cache-fill: error: $WORK/junk.json: not a valid tokenizer.json: invalid JSON"
cp "$T/bert-uncased.json" "$WORK/b.model"
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$WORK/b.model"
expect_rc 65
expect_err_re "^cache-fill: error: $WORK/b.model: not a valid SentencePiece model: "
bad --input "$WORK/pairs.jsonl" --text gloss --tokenizer "$T/bert-uncased.json" --encoder "$TC_DATA/text.pt"
expect_rc 65
expect_err "cache-fill: error: encoder 'text': $T/bert-uncased.json has 4000 tokens but no embedding table holds them (its tables: tok (1000 rows), pos (64 rows)): token ids beyond the table cannot be embedded (is this the encoder's tokenizer? --vocab-table NAME picks the table, none skips this check)"
printf '{"t": "fine"}\n{"t": 7}\n' > "$WORK/num.jsonl"
bad --input "$WORK/num.jsonl" --text t --tokenizer "$T/bert-uncased.json"
expect_rc 65
expect_err "cache-fill: error: $WORK/num.jsonl:2: field 't' is a number, not a string"
printf '{"t": "fine"}\n{"t": ""}\n' > "$WORK/empty.jsonl"
bad --input "$WORK/empty.jsonl" --text t --tokenizer "$T/bert-uncased.json"
expect_rc 65
expect_err "cache-fill: error: $WORK/empty.jsonl: field 't' row 1: empty text"
printf '{"t": "caf\xe9 ok"}\n{"t": "fine \xff\xfe"}\n' > "$WORK/latin1.jsonl"
bad --input "$WORK/latin1.jsonl" --text t --tokenizer "$T/bert-uncased.json" --strict-utf8
expect_rc 65
expect_err "cache-fill: error: $WORK/latin1.jsonl:1: invalid UTF-8 at byte 11 (without --strict-utf8 it is replaced with U+FFFD)"
run "$TC_BIN/cache-fill" --encoder "$ENC" --threads 2 --input "$WORK/latin1.jsonl" --text t \
  --tokenizer "$T/bert-uncased.json" --out "$WORK/latin1.h5" --json
expect_rc 0
expect_err_has "cache-fill: warning: 3 ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)"
expect_out_has '"utf8_replaced":3'
printf 'id,t\n1,"caf\xe9"\n' > "$WORK/latin1.csv"
bad --input "$WORK/latin1.csv" --text t --tokenizer "$T/bert-uncased.json" --strict-utf8
expect_rc 65
expect_err "cache-fill: error: $WORK/latin1.csv:2: invalid UTF-8 in field 't' at byte 4 (without --strict-utf8 it is replaced with U+FFFD)"
finish
