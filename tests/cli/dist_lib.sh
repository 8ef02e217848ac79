# Shared by the gc_train_dist_*.test.sh scripts (data-parallel gc-train over c10d/Gloo on
# loopback): launching W ranks, waiting for them, and the cached-embeddings job several of them
# train. Sourced after lib.sh.
D=$TC_DATA
export MASTER_ADDR=127.0.0.1
export TRAINCACHE_SHM_PREFIX="tcdist-$$-"
trap 'rm -f /dev/shm/"$TRAINCACHE_SHM_PREFIX"*; rm -rf "$WORK"' EXIT

free_port() { "$TC_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A build without Gloo (pip's LibTorch ships no Gloo headers, and no GPU here for NCCL): every case
# of these scripts needs gloo, so only its refusal is checked, and the test reports itself skipped (77).
if ! have_gloo; then
  RANK=0 WORLD_SIZE=2 MASTER_PORT=$(free_port) run timeout 60 "$TC_BIN/gc-train" --data "$D/pairs.h5" --query q \
    --passage p --encoder "$D/tower.pt" --steps 1 --dist-backend gloo
  expect_rc 69
  expect_err "gc-train: error: --dist-backend: gloo: traincache was built without Gloo (this LibTorch ships no Gloo headers; see docs/gpu.md)"
  finish || exit 1
  echo "skipped: this build has no Gloo (no Gloo headers came with its LibTorch): data-parallel runs on the CPU are not checked"
  exit 77
fi

# start_ranks W NAME ARGS...: starts W ranks of gc-train ARGS in the background, each bounded by
# `timeout` (PIDS[r] is rank r's timeout process; its child is the tool client, which passes its
# signals on and takes its rank along when killed, or with RANKS_DIRECT=1 gc-train itself: a rank
# to stop with SIGSTOP or to kill); rank r's stdout and stderr go to $WORK/NAME.out.r and .err.r.
# wait_ranks W NAME: waits for them, exit codes to NAME.rc.r. launch W NAME ARGS...: both.
start_ranks() {
  local w=$1 name=$2 port r
  shift 2
  port=$(free_port)
  PIDS=()
  TOOL_ARGV=(timeout 120 "$TC_BIN/gc-train" --dist-timeout 60 "$@")
  [ "${RANKS_DIRECT:-0}" = 1 ] || tool_argv "${TOOL_ARGV[@]}"
  for ((r = 0; r < w; r++)); do
    RANK=$r WORLD_SIZE=$w MASTER_PORT=$port "${TOOL_ARGV[@]}" >"$WORK/$name.out.$r" 2>"$WORK/$name.err.$r" <&- &
    PIDS+=($!)
  done
}
wait_ranks() {
  local r
  for ((r = 0; r < $1; r++)); do
    wait "${PIDS[$r]}"
    echo $? >"$WORK/$2.rc.$r"
  done
}
launch() {
  start_ranks "$@"
  wait_ranks "$1" "$2"
}

# wait_lines FILE N: waits (at most 120 s: a loaded CI machine starts ranks slowly) until FILE has N
# lines; a failure of its own when it never does, rather than a confusing one later.
wait_lines() {
  local _
  for _ in $(seq 1200); do
    [ "$({ wc -l <"$1"; } 2>/dev/null || echo 0)" -ge "$2" ] && return
    sleep 0.1
  done
  _fail "$1 never reached $2 lines"
}

# expect_ranks_ok W NAME: every rank exited 0; only rank 0 wrote to stdout.
expect_ranks_ok() {
  local r
  for ((r = 0; r < $1; r++)); do
    expect_eq "$(cat "$WORK/$2.rc.$r")" 0 "$2 rank $r exit (stderr: $(head -c 600 "$WORK/$2.err.$r"))"
    [ "$r" -gt 0 ] && expect_eq "$(cat "$WORK/$2.out.$r")" "" "$2 rank $r stdout"
  done
}


# cached_job: fills $WORK/c.h5 (images.h5 through cnn.pt, with labels) and sets CACHED, the options
# of a small supervised-contrastive run on it.
cached_job() {
  tool "$TC_BIN/cache-fill" -q --input "$D/images.h5" --encoder cnn="$D/cnn.pt" --features images --labels labels \
    --out "$WORK/c.h5" || _fail "cache-fill"
  CACHED=(--cache "$WORK/c.h5" --embeddings cnn --head mlp:32,16 --batch-size 64 --chunk-size 8 --steps 6
          --optimizer sgd --lr 0.5 --seed 2 --threads 1)
}
