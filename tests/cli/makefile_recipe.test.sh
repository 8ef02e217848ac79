#!/usr/bin/env bash
# The Makefile of cache-fill.md ("In a Makefile", issue 85, goal 2), read from the page itself, runs
# as a user's would through each change a photo folder sees: the first fill; nothing changed (Make
# runs nothing); a photo touched (cache-fill runs and leaves the cache and its time, so gc-train does
# not run); a photo changed, one added, a copy of one, one removed (an update of that row, listed
# by key in cache.changes, then training); the preprocessing edited in the Makefile and the encoder replaced
# (the cache filled again, every row). No recipe needs a fallback: every run exits 0.
source "$(dirname "$0")/lib.sh"
D=$TC_DATA
tools_path  # the tools as a user names them, served (lib.sh)
export PATH="$TOOLS_PATH:$PATH"
command -v make >/dev/null || { echo "make: not found"; exit 1; }

# The page's make block, with the test's encoder (the test CNN, as resnet18.pt), preprocessing and
# training sizes.
awk '/^```make$/ {on = 1; next} /^```$/ {on = 0} on' "$TC_SOURCE/docs/cache-fill.md" |
  sed -e 's/^PREP    := .*/PREP    := --channels gray --resize 28 --center-crop 28/' \
    -e 's/^TRAIN   := .*/TRAIN   := --embeddings resnet18 --head mlp:16,8 --loss supcon --epochs 1 -b 8/' >"$WORK/Makefile"
expect_eq "$(grep -c 'cache-fill --input $(PHOTOS)' "$WORK/Makefile")" 1 "the page's Makefile"
cp "$D/cnn.pt" "$WORK/resnet18.pt"
py "
import os
from PIL import Image
for c in ('cat', 'dog'):
    os.makedirs('$WORK/photos/' + c)
    for i in range(8):
        Image.new('L', (40, 30), 25 * i + (20 if c == 'dog' else 0)).save(f'$WORK/photos/{c}/{i}.png')
"
expect_rc 0

mtime() { date -r "$WORK/$1" +%s%N 2>/dev/null || echo none; }
# step: `make model.pt`, then one line: whether cache-fill ran, whether cache.h5 changed, whether
# gc-train ran, and cache.changes' lines by change ("-" for none).
step() {
  local stamp cache model
  stamp=$(mtime cache.stamp) cache=$(mtime cache.h5) model=$(mtime model.pt)
  run make -C "$WORK" -s model.pt
  expect_rc 0
  local changes
  changes=$("$TC_PYTHON" -c "
import collections, json, sys
c = collections.Counter(json.loads(l)['change'] for l in open(sys.argv[1]))
print(' '.join(f'{k} {v}' for k, v in sorted(c.items())) or '-')" "$WORK/cache.changes")
  echo "$([ "$(mtime cache.stamp)" != "$stamp" ] && echo fill || echo -)" \
    "$([ "$(mtime cache.h5)" != "$cache" ] && echo cache || echo -)" \
    "$([ "$(mtime model.pt)" != "$model" ] && echo train || echo -)" "$changes"
}

expect_eq "$(step)" "fill cache train added 16" "the first make"
expect_eq "$(step)" "- - - added 16" "nothing changed: Make runs nothing"
touch "$WORK/photos/cat/3.png"
expect_eq "$(step)" "fill - - -" "a photo touched: the cache up to date, its time kept"
py "from PIL import Image; Image.new('L', (40, 30), 7).save('$WORK/photos/cat/3.png')"
expect_eq "$(step)" "fill cache train changed 1" "a photo changed"
expect_eq "$(head -1 "$WORK/cache.changes")" '{"change":"changed","row":3,"old_row":3,"key":"cat/3.png","encoded":true}'
py "from PIL import Image; Image.new('L', (40, 30), 9).save('$WORK/photos/dog/9.png')"
expect_eq "$(step)" "fill cache train added 1" "a photo added"
cp "$WORK/photos/dog/9.png" "$WORK/photos/dog/10.png"
expect_eq "$(step)" "fill cache train copy 1" "a copy of a photo: its row copied, not encoded"
rm "$WORK/photos/cat/5.png"
expect_eq "$(step)" "fill cache train removed 1" "a photo removed"
expect_eq "$(cat "$WORK/cache.changes")" '{"change":"removed","row":null,"old_row":5,"key":"cat/5.png","encoded":false}'
sed -i 's/^PREP    := .*/PREP    := --channels gray --resize 32 --center-crop 28/' "$WORK/Makefile"
expect_eq "$(step)" "fill cache train added 17" "the preprocessing changed: filled again"
cp "$D/cnn_other.pt" "$WORK/resnet18.pt"
expect_eq "$(step)" "fill cache train added 17" "the encoder replaced: filled again"
expect_eq "$(step)" "- - - added 17" "and then nothing to do"
run "$TC_BIN/cache-inspect" --check "$WORK/cache.h5"
expect_rc 0

finish
