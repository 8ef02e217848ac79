#!/usr/bin/env bash
# docs/models.md, "bring your own model", runs as written: every ```python block that starts with
# "# file: NAME.py" is written to NAME.py (and run when NAME starts with export_), every ```sh block
# is run with the tools on PATH, in the page's order, in a folder holding the files the page
# names. Then what the recipes promise is checked: the embeddings' shapes, the dict output kept,
# the encoders of 1, 2 and 3 token tensors fed as their signatures say (each equals the module
# run in Python on the tokenizer's ids), and the trained towers written.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tools_path  # the tools as the page names them, served (lib.sh)
R=$WORK/recipes
mkdir -p "$R"
cp "$D/tokenizers/bert-uncased.json" "$R/tokenizer.json"

# photos/: 32 of the fixture images as grey PNGs in two classes; captions.csv names them;
# pairs.jsonl: 400 WordNet word -> gloss pairs as query -> passage.
py "
import csv, json, os, sys, h5py
from PIL import Image
sys.path.insert(0, '$TC_SOURCE/scripts')
import traincache_text as tt
imgs = h5py.File('$D/images.h5')['images'][:32, 0]
with open('$R/captions.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['image', 'caption'])
    for i, a in enumerate(imgs):
        os.makedirs('$R/photos/c%d' % (i % 2), exist_ok=True)
        name = 'photos/c%d/%02d.png' % (i % 2, i)
        Image.fromarray(a).save('$R/' + name)
        w.writerow([name, 'a grey picture of kind %d, number %d' % (i % 2, i)])
with open('$R/pairs.jsonl', 'w') as f:
    for word, gloss in tt.wordnet_pairs()[:400]:
        f.write(json.dumps({'query': word, 'passage': gloss}) + '\n')
"
expect_rc 0

# The page's blocks, in order: (kind, text) pairs as NUL-separated records.
py "
import re
page = open('$TC_SOURCE/docs/models.md', encoding='utf-8').read()
with open('$WORK/blocks', 'w', encoding='utf-8') as f:
    for kind, body in re.findall(r'^\`\`\`(python|sh)\n(.*?)^\`\`\`$', page, re.S | re.M):
        f.write(kind + '\n' + body + '\0')
"
expect_rc 0
# The page's exports run as `python3 NAME` would run them, in the page's order when the loop reaches
# each one, but in one Python that imports torch once (five imports cost ~2 CPU s each): NAME run as
# __main__ from the recipes' folder, its output on stderr, then its exit code on a line.
coproc EXPORTS {
  cd "$R" && exec "$TC_PYTHON" -u -c '
import contextlib, runpy, sys, traceback
for line in sys.stdin:
    sys.argv = [line.strip()]
    rc = 0
    try:
        with contextlib.redirect_stdout(sys.stderr):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        traceback.print_exc()
        rc = 1
    print(rc, flush=True)
' 2>>"$WORK/exports.err"  # appended to: emptied before each export
}
export_in_python() {  # NAME -> rc and err as `run` sets them
  : >"$WORK/exports.err"
  printf '%s\n' "$1" >&"${EXPORTS[1]}"
  read -r rc <&"${EXPORTS[0]}" || rc=127
  err=$(tail -c 2000 "$WORK/exports.err")
}
blocks=0 ran=0
while IFS= read -r -d '' block; do
  kind=${block%%$'\n'*} body=${block#*$'\n'}
  blocks=$((blocks + 1))
  if [ "$kind" = python ]; then
    first=${body%%$'\n'*}
    [[ "$first" =~ ^"# file: "([a-z_]+\.py)$ ]] || continue
    name=${BASH_REMATCH[1]}
    printf '%s' "$body" >"$R/$name"
    [[ $name == export_* ]] || continue
    export_in_python "$name"
  else
    run bash -c "cd '$R' && PATH='$TOOLS_PATH':\$PATH && set -e && $body"
  fi
  ran=$((ran + 1))
  [ "$rc" = 0 ] || _fail "block $blocks of docs/models.md (exit $rc): ${body:0:200}"
done <"$WORK/blocks"
exports_in=${EXPORTS[1]}
exec {exports_in}>&-  # the Python's end of input: it exits
wait "$EXPORTS_PID"
# Five exports and five command blocks: a page whose blocks went unread would pass otherwise.
[ "$ran" = 10 ] && _ok || _fail "ran $ran of the page's blocks, expected 10"

# What the recipes made.
py "
import h5py
shapes = {}
for f, e in (('photos', 'resnet18'), ('passages', 'text'), ('sentences', 'sentence'), ('bag', 'bag'),
             ('clip', 'image'), ('clip', 'text')):
    shapes[f + '/' + e] = h5py.File('$R/' + f + '.h5')['embeddings/' + e].shape
print(shapes)"
expect_out "{'photos/resnet18': (32, 512), 'passages/text': (400, 64), 'sentences/sentence': (400, 64), 'bag/bag': (400, 64), 'clip/image': (32, 64), 'clip/text': (32, 64)}"
for f in text-tuned.pt clip-image-tuned.pt clip-text-tuned.pt; do expect_file "$R/$f"; done

# The text encoders took 1 (bag), 2 (text, clip) and 3 (sentence) token tensors, as their
# signatures say (TorchScript refuses a call with another count; text_fill.test.sh checks what each
# tensor holds). Their rows are reproduced by cache-inspect --verify, which re-tokenizes and
# re-encodes. TinyBert declares its position table before its token table: the vocabulary check
# took the first nn.Embedding for the token table and refused every one of them.
for c in passages sentences bag clip; do
  run "$TC_BIN/cache-inspect" --verify 8 "$R/$c.h5"
  expect_rc 0
done

# The sentence encoder without --output lists its dict's keys.
FILL=(--input "$R/pairs.jsonl" --text passage --tokenizer "$R/tokenizer.json" --out "$WORK/x.h5" --force -q)
run "$TC_BIN/cache-fill" "${FILL[@]}" --encoder sentence="$R/sentence.pt"
expect_rc 65
expect_err "cache-fill: error: encoder 'sentence': output is a dict (its keys: 'token_embeddings', 'sentence_embedding'); select a tensor with --output KEY|INDEX"

# A text longer than the model's 128 positions (600 word pieces, truncated to 512) (docs/text.md's example gave --max-length 256 to an
# encoder of 128): refused naming the row and its length, by cache-fill and gc-train alike (was
# "RuntimeError: index out of range in self", no row named).
py "
import json
rows = [json.loads(l) for l in open('$R/pairs.jsonl')][:40]
rows[2]['passage'] = ' '.join(['entity'] * 300)
with open('$WORK/long.jsonl', 'w') as f:
    for r in rows:
        f.write(json.dumps(r) + '\n')"
expect_rc 0
LONG=(--input "$WORK/long.jsonl" --text passage --tokenizer "$R/tokenizer.json" --out "$WORK/long.h5" -q)
run "$TC_BIN/cache-fill" "${LONG[@]}" --encoder text="$R/text-mean.pt" --max-length 512
expect_rc 65
expect_err "cache-fill: error: encoder 'text': input row 2 holds 512 tokens but the position table model.position_embeddings has 128 rows: give --max-length 128 (or less)"
expect_no_file "$WORK/long.h5"
run "$TC_BIN/cache-fill" "${LONG[@]}" --encoder text="$R/text-mean.pt" --max-length 128
expect_rc 0
run "$TC_BIN/gc-train" --data "$WORK/long.jsonl" --query query --passage passage --tokenizer "$R/tokenizer.json" \
  --max-length 512 --encoder "$R/text-mean.pt" --batch-size 8 --steps 1 --out "$WORK/t.pt" -q
expect_rc 65
expect_err "gc-train: error: passage encoder: row 2 holds 512 tokens but the position table model.position_embeddings has 128 rows: give --max-length 128 (or less)"

# --vocab-table names the token table (a wrong one is refused with its size; an unknown one lists
# the tables) or skips the check; an encoder that then fails inside is reported with the batch's
# longest text.
run "$TC_BIN/cache-fill" "${FILL[@]}" --encoder text="$R/text-mean.pt" --vocab-table model.word_embeddings
expect_rc 0
run "$TC_BIN/cache-fill" "${FILL[@]}" --encoder text="$R/text-mean.pt" --vocab-table model.position_embeddings
expect_rc 65
expect_err "cache-fill: error: encoder 'text': $R/tokenizer.json has 4000 tokens but its table model.position_embeddings has 128 rows: token ids beyond the table cannot be embedded (is this the encoder's tokenizer? --vocab-table NAME picks the table, none skips this check)"
run "$TC_BIN/cache-fill" "${FILL[@]}" --encoder text="$R/text-mean.pt" --vocab-table word_embeddings
expect_rc 64
expect_err "cache-fill: error: --vocab-table: the encoder has no nn.Embedding 'word_embeddings' (its tables: model.position_embeddings (128 rows), model.word_embeddings (4000 rows), model.token_type_embeddings (2 rows))"
run "$TC_BIN/cache-fill" "${FILL[@]}" --encoder text="$D/text.pt" --vocab-table none --max-length 48
expect_rc 65
expect_err_re "^cache-fill: error: encoder 'text': rejected the input \(\[[0-9]+, [0-9]+\] int64 and \[[0-9]+, [0-9]+\] int64\): .*index out of range in self \(input rows 0\.\.399; the longest, row [0-9]+, holds 48 tokens: a text longer than the encoder's position table, or a token id beyond its token table, fails so\)$"

finish
