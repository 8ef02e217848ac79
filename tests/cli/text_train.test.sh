#!/usr/bin/env bash
# gc-train raw mode on text: a JSON Lines manifest's query, passage and hard-negative fields
# (lists of strings) tokenized once and padded per batch, and per chunk. Gradient-cached steps
# equal the full-batch step; padding to --max-length trains the same as padding per chunk; the
# evaluation before training equals an independent computation on Hugging Face tokenizers' ids; two
# data-parallel ranks train like one process; HDF5 string datasets and CSV; checkpoints keep the
# tokenisation; bad input as one line with its exit code.
source "$(dirname "$0")/lib.sh"
T=$TC_DATA/tokenizers
ENC=$TC_DATA/text4k_nodrop.pt
export MASTER_ADDR=127.0.0.1

py "
import csv, json, sys, h5py, numpy as np
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
p = tt.wordnet_pairs()[:400]
rows = [{'word': w, 'gloss': g, 'negs': [p[(i + 7) % len(p)][1], p[(i + 13) % len(p)][1]]} for i, (w, g) in enumerate(p)]
with open('$WORK/pairs.jsonl', 'w') as f:
    for r in rows:
        f.write(json.dumps(r) + '\n')
with open('$WORK/pairs.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['word', 'gloss', 'neg'])
    for r in rows:
        w.writerow([r['word'], r['gloss'], r['negs'][0]])
str_t = h5py.string_dtype()
with h5py.File('$WORK/pairs.h5', 'w') as f:
    f.create_dataset('word', data=[r['word'] for r in rows], dtype=str_t)
    f.create_dataset('gloss', data=[r['gloss'] for r in rows], dtype=str_t)
    f.create_dataset('negs', data=[r['negs'] for r in rows], dtype=str_t)
for name in ('words', 'glosses'):
    with open('$WORK/%s.jsonl' % name, 'w') as f:
        for r in rows[300:]:
            f.write(json.dumps(r['word' if name == 'words' else 'gloss']) + '\n')
"
expect_rc 0

TRAIN=(--data "$WORK/pairs.jsonl" --query word --passage gloss --negatives negs --encoder "$ENC"
       --tokenizer "$T/bert-uncased.json" --max-length 48 --batch-size 32 --optimizer sgd --lr 0.5
       --temperature 0.5 --steps 2 --seed 3 --threads 2 -q)

# ---- exactness: chunks of 5 (each trimmed to its own longest text) against the full batch
loss_of() { grep -o '"loss":[-0-9.e]*' <<<"$1" | head -1 | cut -d: -f2; }
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --json -o "$WORK/gc.pt"
expect_rc 0
expect_out_has '"mode":"raw-tied"'
expect_out_has '"utf8_replaced":0'
loss_float32=$(loss_of "$out")
run "$TC_BIN/gc-train" "${TRAIN[@]}" --no-gradcache -o "$WORK/full.pt"
expect_rc 0
same_params "$WORK/gc.pt" "$WORK/full.pt" "$ENC" 1e-4
# Padding every text to --max-length trains the same (the padding is masked).
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --padding max-length -o "$WORK/fixed.pt"
expect_rc 0
same_params "$WORK/gc.pt" "$WORK/fixed.pt" "$ENC" 1e-4

# Chunks by length: the batch's texts are taken shortest first and cut at --max-tokens token slots
# (rows x the chunk's longest text); a cap that splits most chunks trains as the full batch does.
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --max-tokens 40 -o "$WORK/capped.pt"
expect_rc 0
same_params "$WORK/capped.pt" "$WORK/full.pt" "$ENC" 1e-4
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --max-tokens -1
expect_rc 64
expect_err "gc-train: error: --max-tokens: must be an integer >= 0, got '-1' (see --help)"

# An integer buffer stays integer: a transformer exported from Hugging Face keeps its position ids in
# an int64 buffer and embeds them; gc-train once converted every tensor of the module to the float
# type (65 "expected ... Long, Int; but got CPUFloatType"). The fixture text4k_positions.pt wraps
# this encoder so (scripts/make-test-fixtures, WithPositions) and adds nothing to its output, so it
# trains as the plain encoder does, in float32 and float64.
for dtype in float32 float64; do
  plain=$loss_float32  # float32 is the default: the first run above
  if [ $dtype = float64 ]; then
    run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --dtype $dtype --json
    expect_rc 0
    plain=$(loss_of "$out")
  fi
  run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --dtype $dtype --encoder "$TC_DATA/text4k_positions.pt" --json
  expect_rc 0
  expect_eq "$(loss_of "$out")" "$plain" "the loss with an int64 position buffer, $dtype"
done

# ---- the same rows from CSV (one negative per row) and HDF5 string datasets (a 2-D negatives
# dataset: two per row) train like the JSON Lines manifest
run "$TC_BIN/gc-train" "${TRAIN[@]/pairs.jsonl/pairs.h5}" --chunk-size 5 -o "$WORK/h5.pt"
expect_rc 0
same_params "$WORK/gc.pt" "$WORK/h5.pt" "$ENC" 1e-6
CSV=("${TRAIN[@]/pairs.jsonl/pairs.csv}")
run "$TC_BIN/gc-train" "${CSV[@]/negs/neg}" --chunk-size 5 -o "$WORK/csv.pt"
expect_rc 0
py "
import json
with open('$WORK/one_neg.jsonl', 'w') as f:
    for l in open('$WORK/pairs.jsonl'):
        r = json.loads(l); r['negs'] = r['negs'][0]; f.write(json.dumps(r) + '\n')
"
run "$TC_BIN/gc-train" "${TRAIN[@]:2}" --data "$WORK/one_neg.jsonl" --chunk-size 5 -o "$WORK/one.pt"
expect_rc 0
same_params "$WORK/csv.pt" "$WORK/one.pt" "$ENC" 1e-6

# ---- evaluation: held-out rows 300..399 scored with the untrained encoder equal recall@1 and
# MRR computed from Hugging Face tokenizers' ids by the encoder itself
run "$TC_BIN/gc-train" "${TRAIN[@]}" --eval-rows 300: --steps 1 --chunk-size 8 --json
expect_rc 0
echo "$out" >"$WORK/eval.json"
hf_ids "$T/bert-uncased.json" "$WORK/words.jsonl" >"$WORK/q.txt"
hf_ids "$T/bert-uncased.json" "$WORK/glosses.jsonl" >"$WORK/p.txt"
py_later "ok" "
import json, torch
m = torch.jit.load('$ENC').eval()
def enc(path):
    out = []
    for line in open(path):
        ids = json.loads(line)
        ids = ids[:47] + ids[-1:] if len(ids) > 48 else ids
        with torch.no_grad():
            out.append(m(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.int64))[0])
    return torch.nn.functional.normalize(torch.stack(out).double(), dim=1)
q, p = enc('$WORK/q.txt'), enc('$WORK/p.txt')
s = q @ p.t()
rank = (s > s.diag().unsqueeze(1)).sum(1).double()
got = json.load(open('$WORK/eval.json'))['eval_before']
want = {'rows': 100, 'recall_at_1': float((rank < 1).double().mean()),
        'mrr_at_10': float(torch.where(rank < 10, 1 / (rank + 1), torch.zeros_like(rank)).mean())}
print('ok' if got['rows'] == 100 and all(abs(got[k] - want[k]) < 1e-9 for k in ('recall_at_1', 'mrr_at_10'))
      else 'got %s want %s' % (got, want))
"

# ---- two data-parallel ranks over Gloo train like one process with the whole batch
# two_ranks NAME ARGS...: gc-train TRAIN ARGS on two ranks writing $WORK/NAME.pt; both must exit 0,
# and the result must equal the one-process run's.
# Without Gloo in this build (pip's LibTorch) the ranks are not started: a note says so.
two_ranks() {
  local name=$1 port r
  shift
  if ! have_gloo; then
    echo "note: two ranks ($name) not checked: this build has no Gloo"
    return
  fi
  port=$("$TC_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  tool_argv timeout 120 "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --threads 1 --dist-timeout 60 "$@" \
    -o "$WORK/$name.pt"
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_PORT=$port "${TOOL_ARGV[@]}" >"$WORK/$name.out.$r" 2>"$WORK/$name.err.$r" <&- &
    pids[r]=$!
  done
  wait "${pids[0]}"
  rc0=$?
  wait "${pids[1]}"
  rc1=$?
  expect_eq "$rc0,$rc1" "0,0" "rank exits (stderr: $(head -c 400 "$WORK/$name.err.0") $(head -c 400 "$WORK/$name.err.1"))"
  same_params "$WORK/gc.pt" "$WORK/$name.pt" "$ENC" 1e-4
}
two_ranks dist

export TRAINCACHE_SHM_PREFIX="tctrain-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"* /dev/shm/."$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT

# ---- --data-cache: each side's token sequences in a sealed slab every process of the node shares,
# tokenized by one of them; the same trained bytes.
# dc_counts: "slabs stored slots" of the data_cache record on stdin.
dc_counts() {
  "$TC_PYTHON" -c "
import json, sys
c = json.load(sys.stdin)['data_cache']
print(len(c['slabs']), c['stored'], c['slots'])"
}
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --data-cache full --json -o "$WORK/dc.pt"
expect_rc 0
expect_same "$WORK/gc.pt" "$WORK/dc.pt"
# 400 words; 400 glosses and their 800 negatives.
expect_eq "$(printf '%s' "$out" | dc_counts)" "2 1600 1600"
expect_eq "$(ls /dev/shm | grep -c "^$TRAINCACHE_SHM_PREFIX")" "0" "temporary token slabs removed"
# Kept: the next run finds the sequences and tokenizes nothing.
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --data-cache full --data-cache-keep tok --json -o "$WORK/k1.pt"
expect_eq "$(printf '%s' "$out" | dc_counts)" "2 1600 1600"
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --data-cache full --data-cache-keep tok --json -o "$WORK/k2.pt"
expect_eq "$(printf '%s' "$out" | dc_counts)" "2 0 1600"
expect_same "$WORK/gc.pt" "$WORK/k2.pt"
run "$TC_BIN/shm-cache" stat tok-1
expect_out_has "1200 filled, 0 writing"
run "$TC_BIN/shm-cache" stat tok-1 --json
expect_out_has '"sealed":true'
# Two processes started together tokenize each side once between them.
for i in 1 2; do
  tool "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --data-cache full --json -o "$WORK/two$i.pt" > "$WORK/two$i.json" &
  pids[i]=$!
done
wait "${pids[1]}" && wait "${pids[2]}"
expect_eq "$?" "0" "two runs at once"
expect_same "$WORK/gc.pt" "$WORK/two1.pt"
expect_same "$WORK/gc.pt" "$WORK/two2.pt"
expect_eq "$(( $(dc_counts < "$WORK/two1.json" | cut -d' ' -f2) + $(dc_counts < "$WORK/two2.json" | cut -d' ' -f2) ))" \
  "1600" "sequences stored by the two runs"
# A claim left by a dead process is taken over.
echo 999999999 > "/dev/shm/.${TRAINCACHE_SHM_PREFIX}tc2-0.claim"
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --data-cache full --data-cache-keep tc2 --json -o "$WORK/tc2.pt"
expect_rc 0
expect_eq "$(printf '%s' "$out" | dc_counts)" "2 1600 1600"
expect_no_file "/dev/shm/.${TRAINCACHE_SHM_PREFIX}tc2-0.claim"
# A sealed slab whose bytes changed, and a slab made for other items, are refused (65).
run "$TC_BIN/shm-cache" stat tok-0 --json
printf '%s' "$out" > "$WORK/stat.json"
py "
import json, mmap
s = json.load(open('$WORK/stat.json'))['slab']
with open(s['path'], 'r+b') as f:
    m = mmap.mmap(f.fileno(), 0)
    m[s['offsets']['data']] ^= 1
"
run "$TC_BIN/gc-train" "${TRAIN[@]}" --data-cache full --data-cache-keep tok
expect_rc 65
expect_err "gc-train: error: tok-0: slab changed since it was sealed (remove it: shm-cache rm tok-0)"
run "$TC_BIN/shm-cache" create other-0 --len 4 --variable --dtype int32 --limit 1KiB
run "$TC_BIN/gc-train" "${TRAIN[@]}" --data-cache full --data-cache-keep other
expect_rc 65
expect_err "gc-train: error: other-0: slab holds other items than this run's data (remove it: shm-cache rm other-0)"
# Two data-parallel ranks share the sequences and train like one process.
two_ranks distdc --data-cache full
for n in tok-0 tok-1 tc2-0 tc2-1 other-0; do "$TC_BIN/shm-cache" rm -q "$n"; done
expect_eq "$(ls -a /dev/shm | grep -c "$TRAINCACHE_SHM_PREFIX")" "0" "slabs and claims left"

# ---- token ids in variable-layout slabs (ragged rows, no tokenizer) train like the text fields
for side in word gloss; do
  py "
import json
with open('$WORK/$side.txt', 'w') as f:
    for l in open('$WORK/pairs.jsonl'):
        f.write(json.dumps(json.loads(l)['$side']) + '\n')
"
  hf_ids "$T/bert-uncased.json" "$WORK/$side.txt" >"$WORK/$side.ids"
  py "
import h5py, json, numpy as np
with h5py.File('$WORK/$side.h5', 'w') as f:
    d = f.create_dataset('ids', (400,), dtype=h5py.vlen_dtype(np.int64))
    for i, line in enumerate(open('$WORK/$side.ids')):
        ids = json.loads(line)
        d[i] = np.array(ids[:47] + ids[-1:] if len(ids) > 48 else ids)
"
  run "$TC_BIN/shm-cache" create "$side" --len 400 --variable --dtype int64 --limit 4MiB
  run "$TC_BIN/shm-cache" fill "$side" --from "$WORK/$side.h5" --dataset ids
  expect_rc 0
done
SLABS=(--query shm:word --passage shm:gloss --encoder "$ENC" --batch-size 32 --optimizer sgd --lr 0.5
       --temperature 0.5 --steps 2 --seed 3 --threads 2 -q --chunk-size 5)
run "$TC_BIN/gc-train" "${SLABS[@]}" -o "$WORK/slab.pt"
expect_rc 0
run "$TC_BIN/gc-train" "${TRAIN[@]}" --negatives "" --chunk-size 5 -o "$WORK/noneg.pt"
expect_rc 0
same_params "$WORK/slab.pt" "$WORK/noneg.pt" "$ENC" 1e-5
run "$TC_BIN/gc-train" "${SLABS[@]}" --negatives shm:word
expect_rc 64
expect_err "gc-train: error: --negatives: hard negatives of token sequences are read from text fields (--tokenizer)"
run "$TC_BIN/gc-train" "${SLABS[@]}" --encoder "$TC_DATA/text.pt"
expect_rc 65
expect_err_re "^gc-train: error: query encoder: shm:word holds token id [0-9]+, beyond its embedding table tok of 1000 rows$"

# ---- checkpoints: resume continues; another tokenisation is refused
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --steps 1 --checkpoint-dir "$WORK/ck"
expect_rc 0
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --checkpoint-dir "$WORK/ck" --resume -o "$WORK/resumed.pt"
expect_rc 0
same_params "$WORK/gc.pt" "$WORK/resumed.pt" "$ENC" 1e-5
run "$TC_BIN/gc-train" "${TRAIN[@]}" --chunk-size 5 --max-length 40 --checkpoint-dir "$WORK/ck" --resume
expect_rc 65
expect_err_has "checkpoint was written with other settings (changed: text)"

# ---- bad input: one line each, documented exit codes
# A manifest's text fields and the tokenizer are read before LibTorch is loaded: these refusals come
# with no engines module to load (TRAINCACHE_ENGINES_MODULE naming nothing; it would be exit 69).
NO_MODULE=$WORK/none.so
bad() {  # bad JSONL-LINES -> runs gc-train on a manifest of those lines
  printf '%s\n' "$@" >"$WORK/bad.jsonl"
  TRAINCACHE_ENGINES_MODULE=$NO_MODULE run "$TC_BIN/gc-train" "${TRAIN[@]:2}" --data "$WORK/bad.jsonl" --batch-size 2 --steps 1
}
bad '{"word":"a","gloss":"b","negs":["c","d"]}' '{"word":"e","gloss":"f","negs":["g"]}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl:2: field 'negs' holds 1 strings but the first row holds 2 (every row needs the same number)"
bad '{"word":"a","gloss":"b","negs":["c","d"]}' '{"word":"e","gloss":"f","negs":["g",""]}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl: field 'negs' row 1 item 1: empty text"
bad '{"word":"a","gloss":"b","negs":[]}' '{"word":"e","gloss":"f","negs":["g"]}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl:1: field 'negs' is an empty list"
bad '{"word":"a","gloss":"b","negs":["c"]}' '{"word":"e","gloss":"f","negs":[3]}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl:2: field 'negs' is missing or not a string or a list of strings"
bad '{"word":"a","gloss":"b","negs":"c"}' '{"word":7,"gloss":"f","negs":"g"}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl:2: field 'word' is a number, not a string"
bad '{"word":"a","gloss":["b","x"],"negs":"c"}' '{"word":"e","gloss":["f","y"],"negs":"g"}'
expect_rc 65
expect_err "gc-train: error: $WORK/bad.jsonl: text field 'gloss' must hold one string per row (a manifest field or an HDF5 string dataset)"
# Counted per field: two in the query's field, one in an unread field.
printf '{"word":"caf\xe9 cr\xe8me","gloss":"b","negs":"c","x":"\xff"}\n{"word":"e","gloss":"f","negs":"g"}\n' >"$WORK/latin1.jsonl"
run "$TC_BIN/gc-train" "${TRAIN[@]:2:${#TRAIN[@]}-3}" --data "$WORK/latin1.jsonl" --batch-size 2 --steps 1 --json
expect_rc 0
expect_out_has '"utf8_replaced":2'
expect_err_has "gc-train: warning: 2 ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)"
TRAINCACHE_ENGINES_MODULE=$NO_MODULE run "$TC_BIN/gc-train" "${TRAIN[@]:2}" --data "$WORK/latin1.jsonl" \
  --batch-size 2 --steps 1 --strict-utf8
expect_rc 65
expect_err "gc-train: error: $WORK/latin1.jsonl:1: invalid UTF-8 at byte 13 (without --strict-utf8 it is replaced with U+FFFD)"
# A tokenizer larger than the encoder's embedding table (text.pt has 1000 rows).
run "$TC_BIN/gc-train" "${TRAIN[@]}" --encoder "$TC_DATA/text.pt"
expect_rc 65
expect_err_re "^gc-train: error: query encoder: .*/bert-uncased.json has [0-9]+ tokens but no embedding table holds them \(its tables: tok \(1000 rows\), pos \(64 rows\)\): token ids beyond the table cannot be embedded \(is this the encoder's tokenizer\? --vocab-table NAME picks the table, none skips this check\)$"
run "$TC_BIN/gc-train" "${TRAIN[@]}" --tokenizer "answer=$T/bert-uncased.json"
expect_rc 64
expect_err "gc-train: error: --tokenizer: expected FILE, query=FILE or passage=FILE, got 'answer=$T/bert-uncased.json'"
run "$TC_BIN/gc-train" --cache "$WORK/none.h5" --embeddings e --tokenizer "$T/bert-uncased.json"
expect_rc 64
expect_err "gc-train: error: --tokenizer: tokenizes raw text (--data); cached embeddings (--cache) need none"
TRAINCACHE_ENGINES_MODULE=$NO_MODULE run "$TC_BIN/gc-train" "${TRAIN[@]}" --tokenizer "$WORK/pairs.csv"
expect_rc 65
expect_one_line_err
# Without a tokenizer, a text field is read as image paths.
run "$TC_BIN/gc-train" --data "$WORK/pairs.jsonl" --query word --passage gloss --encoder "$ENC" --steps 1 -q
expect_rc 66
expect_one_line_err
finish
