#!/usr/bin/env bash
# gc-train on WebDataset tar shards: CLIP-style image-text pairs train as from the same pairs in a
# manifest (read whole or with --stream), and a checkpoint knows each shard (one rewritten since
# is a change of data, not a resume).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/tar_lib.sh"

# ---- gc-train: image-text pairs from shards, CLIP-style, as from the same pairs in a manifest ----
PAIRS=(--query png --passage txt --query-encoder "$D/cnn16.pt" --passage-encoder "$D/text4k_nodrop.pt"
       --tokenizer "passage=$T/bert-uncased.json" --max-length 32 --channels gray --resize 28 --center-crop 28
       --batch-size 10 --steps 4 --optimizer sgd --lr 0.1 --seed 2 --threads 2 -q)
for run_as in tar:"$SHARDS" stream:"$SHARDS" manifest:"$WORK/pairs.jsonl"; do
  name=${run_as%%:*}
  run "$TC_BIN/gc-train" --data "${run_as#*:}" "${PAIRS[@]}" $([ "$name" = stream ] && echo --stream) \
    --out "$WORK/$name-q.pt" --passage-out "$WORK/$name-p.pt"
  expect_rc 0
done
# A checkpoint knows each shard: one rewritten since is a change of data, not a resume.
run "$TC_BIN/gc-train" --data "$SHARDS" "${PAIRS[@]}" --checkpoint-dir "$WORK/ckpt" --out "$WORK/ck-q.pt" \
  --passage-out "$WORK/ck-p.pt"
expect_rc 0
run "$TC_BIN/gc-train" --data "$SHARDS" "${PAIRS[@]}" --checkpoint-dir "$WORK/ckpt" --resume --out "$WORK/ck-q.pt" \
  --passage-out "$WORK/ck-p.pt"
expect_rc 0
touch -d '2000-01-01' "$WORK/shards/0002.tar"
run "$TC_BIN/gc-train" --data "$SHARDS" "${PAIRS[@]}" --checkpoint-dir "$WORK/ckpt" --resume --out "$WORK/ck-q.pt" \
  --passage-out "$WORK/ck-p.pt"
expect_rc 65
expect_err "gc-train: error: $WORK/ckpt/checkpoint.pt: checkpoint was written with other settings (changed: data_files)"
same_params "$WORK/tar-q.pt" "$WORK/manifest-q.pt" "$D/cnn16.pt" 0
same_params "$WORK/tar-p.pt" "$WORK/manifest-p.pt" "$D/text4k_nodrop.pt" 0
same_params "$WORK/stream-q.pt" "$WORK/manifest-q.pt" "" 0
same_params "$WORK/stream-p.pt" "$WORK/manifest-p.pt" "" 0
finish
