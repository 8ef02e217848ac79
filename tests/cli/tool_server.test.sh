#!/usr/bin/env bash
# The tool server behind lib.sh's `run` (tests/cli/tool_server.cpp): a tool it runs ends as the
# same tool started directly does (output, exit code, signal), in the caller's directory, umask and
# environment, and what a client asks with another environment for the libraries' loading runs
# directly. Every other script relies on it: this one compares the two ways side by side.
source "$(dirname "$0")/lib.sh"
if [ "${TC_TOOL_SERVER:-1}" = 0 ]; then
  echo "skipped: TC_TOOL_SERVER=0 turns the tool server off"
  exit 77
fi
D=$TC_DATA
F=$TC_BIN/cache-fill

# expect_served TOOL: the server's log names the last run as a child of its own.
expect_served() {
  local log
  log=$(tail -n 1 "${_TOOL_SOCKET%.sock}.err")
  [[ "$log" == "tool-server: $1: pid "* ]] && _ok || _fail "not run by the server: $log"
}

# served CMD...: runs CMD through the server (run), then directly (TC_TOOL_SERVER=0), and expects
# the same exit code, stdout and stderr, the server's log naming the run as its own.
served() {
  local s_rc s_out s_err
  run "$@"
  s_rc=$rc s_out=$out s_err=$err
  expect_served "${1##*/}"
  TC_TOOL_SERVER=0 run "$@"
  expect_eq "$s_rc" "$rc" "exit code of $*"
  expect_eq "$s_out" "$out" "stdout of $*"
  expect_eq "$s_err" "$err" "stderr of $*"
}

served "$F" --version
expect_rc 0
served "$F" --encoder
expect_rc 64
served "$TC_BIN/gc-train" --cache "$WORK/missing.h5" --embeddings cnn -b 4 -c 2 --epochs 1
expect_rc 66
served "$TC_BIN/cache-inspect" "$D/truncated.h5"
served "$TC_BIN/smart-bench" --help
expect_rc 0

# A fill in a folder of its own with relative paths, a umask of 027, and RANK/WORLD_SIZE (read by
# cache-fill as --shard 1/2) in its environment: the same shard, the same file mode, the same rows.
mkdir -p "$WORK/a" "$WORK/b"
for way in a b; do
  cd "$WORK/$way" || exit 1
  ln -s "$D/images.h5" in.h5
  old=$(umask)
  umask 027
  if [ $way = a ]; then
    RANK=1 WORLD_SIZE=2 run "$F" --input in.h5 --encoder cnn="$D/cnn.pt" --features images --out c.h5 --quiet
    expect_served cache-fill
  else
    RANK=1 WORLD_SIZE=2 TC_TOOL_SERVER=0 run "$F" --input in.h5 --encoder cnn="$D/cnn.pt" --features images --out c.h5 --quiet
  fi
  umask "$old"
  expect_rc 0
  cd - >/dev/null || exit 1
done
expect_eq "$(cd "$WORK/a" && ls -l c.h5.shard-1-of-2 2>&1 | cut -c1-10)" "-rw-r-----" "the served fill's file"
py "
import h5py, numpy as np
a, b = (h5py.File('$WORK/%s/c.h5.shard-1-of-2' % w, 'r') for w in 'ab')
print(a['embeddings/cnn'].shape, np.array_equal(a['embeddings/cnn'][:], b['embeddings/cnn'][:]))
"
expect_out "(44, 32) True"  # the last 44 rows of 300 in batches of 256

# An environment that the libraries read as they load, other than the server's: run directly.
OMP_NUM_THREADS=1 run "$F" --version
expect_rc 0
expect_eq "$(tail -n 1 "${_TOOL_SOCKET%.sock}.err")" \
  "tool-server: $F: run by the client: OMP_NUM_THREADS differs" "the server's log"

# traincache's own: the engines' module is found as a tool loads (run directly); a slab prefix is
# read when a slab is named (served: the child sees the request's, not the server's, "traincache-").
TRAINCACHE_ENGINES_MODULE=$WORK/none.so run "$F" --version
expect_rc 69  # ... so --version's LibTorch line cannot be had
expect_eq "$(tail -n 1 "${_TOOL_SOCKET%.sock}.err")" \
  "tool-server: $F: run by the client: TRAINCACHE_ENGINES_MODULE differs" "the server's log"
TRAINCACHE_SHM_PREFIX=.bad served "$TC_BIN/gc-train" --query shm:a --passage shm:b --encoder "$D/text4k.pt" --steps 1
expect_rc 64
expect_err "gc-train: error: TRAINCACHE_SHM_PREFIX: invalid prefix '.bad' (use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.')"

# Signals: a tool killed ends its client with the same signal; one the client gets is passed on
# (SIGINT: cache-fill stops at the next batch, exit 130, as when it is started directly); a client
# killed outright takes its tool with it. Standard input closed, as `run` closes it: the tool's is
# closed too (not the client's connection, which would outlive a killed client).
long_fill() {
  local log=${_TOOL_SOCKET%.sock}.err n
  n=$(wc -l <"$log")
  "$_TOOL_CLIENT" "$_TOOL_SOCKET" "$F" --input "$D/big.h5" --encoder cnn="$D/cnn.pt" --features images \
    --out "$WORK/$1.h5" -b 1 --commit-rows 16 --quiet 2>"$WORK/$1.err" <&- &
  client=$!
  tool=""
  for _ in $(seq 300); do
    tool=$(sed -n "$((n + 1))s/^tool-server: cache-fill: pid //p" "$log")
    [ -n "$tool" ] && [ -e "$WORK/$1.h5.partial/journal.json" ] && break
    sleep 0.1
  done
  [ -n "$tool" ] && _ok || _fail "no pid in the server's log: $(tail -n 2 "$log")"
}
long_fill killed
# (the tool may have opened a file of its own as descriptor 0 since, as it does when started directly)
# (a descriptor 0 that cannot be read fails: the check would pass on nothing)
stdin_of_tool=$(readlink /proc/"$tool"/fd/0)
[ -n "$stdin_of_tool" ] && [[ "$stdin_of_tool" != socket:* ]] && _ok ||
  _fail "the served tool's stdin is a socket or unreadable: '$stdin_of_tool'"
kill -KILL "$tool"
wait "$client"
expect_eq "$?" 137 "the client's exit when its tool was killed"
long_fill interrupted
kill -INT "$client"
wait "$client"
rc=$? err=$(cat "$WORK/interrupted.err")
expect_rc 130
expect_err_re "^cache-fill: interrupted: stopping after this batch, what is encoded kept \(run the same command again to resume\); interrupt again to stop at once
cache-fill: interrupted after [0-9]+ rows; progress kept in $WORK/interrupted.h5.partial \(run the same command again to resume\)$"
long_fill orphaned
kill -KILL "$client"
wait "$client" 2>/dev/null
for _ in $(seq 50); do kill -0 "$tool" 2>/dev/null || break; sleep 0.1; done
kill -0 "$tool" 2>/dev/null && _fail "the tool of a killed client still runs" || _ok

# ---- The suite's shared Python (py_server.py --shared; lib.sh's py sends it the checks whose code
# says `import ... torch`): a check it runs sees what `python3 -c` started here sees; one whose
# environment sets otherwise a variable read as Python starts (PYTHONHASHSEED) or a library loads
# runs itself; a server that ended leaves the script's own to answer. A server of this script's own,
# so that killing it ends no other script's (and one where TC_PY_SERVER=0 keeps the suite's off).
# The checks name torch only in a comment: they go where a check importing it goes, without paying
# for the import on the direct side.
export TC_PY_SHARED=$WORK/shared TC_PY_SERVER=1
run "$TC_PYTHON" "$TC_SOURCE/tests/cli/py_server.py" --shared "$TC_PY_SHARED"
expect_rc 0
read -r shared _ <"$TC_PY_SHARED/pid"
CHECK="import os, sys  # as a check that imports torch
print(os.getcwd(), sys.argv, sys.path[0], os.environ.get('TC_SEEN'), sys.stdin, 'torch' in sys.modules)
print('to stderr', file=sys.stderr)
sys.exit(3)"
mkdir -p "$WORK/here"
cd "$WORK/here" || exit 1
TC_SEEN=yes py "$CHECK"
expect_rc 3
expect_out "$WORK/here ['-c']  yes None True"  # torch: imported already
expect_err "to stderr"
TC_SEEN=yes run "$TC_PYTHON" -c "$CHECK"
expect_rc 3
expect_out "$WORK/here ['-c']  yes None False"
expect_err "to stderr"
# Served: the check is a child of the server's child (a fork, not a Python started).
SERVED="import os  # as a check that imports torch
print(open('/proc/%d/stat' % os.getppid()).read().split()[3] == '$shared')"
py "$SERVED"
expect_out True
CHECK="import os  # as a check that imports torch
print(hash('tc'))"
PYTHONHASHSEED=7 run "$TC_PYTHON" -c "$CHECK"
direct=$out
PYTHONHASHSEED=7 py "$CHECK"
expect_eq "$out" "$direct" "a check's hash under PYTHONHASHSEED=7"
cd - >/dev/null || exit 1
# The server killed: the script's own Python answers.
kill -KILL "$shared"
for _ in $(seq 100); do _py_alive "$shared" || break; sleep 0.05; done
py "$SERVED"
expect_rc 0
expect_out False
# A reply line that comes in two parts, the second after one of py's one-second waits has run out
# (a loaded machine can leave the script unscheduled that long between two bytes): its exit code
# is the whole line, 42, not the part read last. A stand-in server answers the one request.
mkdir "$WORK/split"
mkfifo "$WORK/split/requests"
(
  exec 8<>"$WORK/split/requests"
  read -r request <&8
  printf 4 >"$request/reply"
  sleep 1.5
  printf '2\n' >"$request/reply"
) &
split=$!
echo "$split $TC_PYTHON" >"$WORK/split/pid"
TC_PY_SHARED=$WORK/split py "import sys  # as a check that imports torch"
expect_rc 42
wait "$split"

finish
