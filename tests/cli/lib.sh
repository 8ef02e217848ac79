# Helpers for the CLI tests: run a command, then assert its exit code, stdout and stderr exactly.
# Each test file sources this, calls `run ...` and `expect_* ...`, and ends with `finish`.
set -u
: "${TC_BIN:?}" "${TC_DATA:?}" "${TC_PYTHON:?}"
export LC_ALL=C
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tc-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PASSED=0
FAILED=0
rc=0
out=""
err=""

# torchrun_unusable: nothing when this Python's torchrun can launch processes here, else why not
# (tests/torchrun-usable: Debian 13's torch has no libuv, which every torchrun rendezvous asks for).
torchrun_unusable() { "$TC_PYTHON" "$TC_SOURCE/tests/torchrun-usable" 2>&1; }

# hf_ids TOKENIZER STRINGS: Hugging Face tokenizers' ids of each line of STRINGS, one JSON array a
# line: the committed ones, or under TRAINCACHE_TOKENIZERS=live|record the library's own
# (tests/cli/tokenizer_reference.py).
hf_ids() { "$TC_PYTHON" "$TC_SOURCE/tests/cli/tokenizer_reference.py" "$@"; }

# run CMD...: runs it with stdin closed, capturing $rc, $out and $err. cache-fill, gc-train,
# smart-bench and cache-inspect, alone or behind env or timeout, run as children of one process a
# script that has loaded LibTorch already (_served), unless TC_TOOL_SERVER=0.
run() {
  local t0=${EPOCHREALTIME:-}
  tool_argv "$@"
  local _SERVED=$TOOL_SERVED
  "${TOOL_ARGV[@]}" <&- >"$WORK/.out" 2>"$WORK/.err"
  rc=$?
  _ran "$t0" "$@"
}
# tool CMD...: runs CMD with the shell's own descriptors (a set-up step whose output goes where the
# script says), through the tool server where `run` would (tool_argv).
tool() {
  tool_argv "$@"
  "${TOOL_ARGV[@]}"
}
# tool_argv CMD...: sets TOOL_ARGV to CMD with the tool client in front of the tool where it is
# served (_served; TOOL_SERVED=1), else to CMD (TOOL_SERVED=0): what `run` and `tool` run, and for
# a simple command of the caller's own, such as one in the background whose $! must be the process
# that runs (timeout, or the client that passes its signals on and whose death takes its tool
# along). The server is started only from the script's own shell: one started in a subshell would
# end with it.
tool_argv() {
  TOOL_ARGV=("$@")
  TOOL_SERVED=0
  if { [ "$BASHPID" = "$$" ] || [ -n "${_TOOL_SOCKET:-}" ]; } && _served "$@"; then
    TOOL_ARGV=("${@:1:_AT-1}" "$_TOOL_CLIENT" "$_TOOL_SOCKET" "${@:_AT}")
    TOOL_SERVED=1
  fi
}
# tools_path: sets TOOLS_PATH, the folders to put first on PATH for commands that name the tools as
# a user does (the docs' examples): there cache-fill, gc-train, smart-bench and cache-inspect are
# scripts that hand their arguments to the tool server (as `run` would), then $TC_BIN; $TC_BIN
# alone where the server is off. Called from the script's own shell (not in $(...)).
tools_path() {
  local dir=$WORK/.tools-bin t
  TOOLS_PATH=$TC_BIN
  _served "$TC_BIN/cache-fill" || return 0
  mkdir -p "$dir"
  for t in cache-fill gc-train smart-bench cache-inspect; do
    printf '#!/bin/sh\nexec "%s" "%s" "%s" "$@"\n' "$_TOOL_CLIENT" "$_TOOL_SOCKET" "$TC_BIN/$t" >"$dir/$t"
    chmod +x "$dir/$t"
  done
  TOOLS_PATH=$dir:$TC_BIN
}
# _served CMD...: whether CMD runs a tool that the tool server runs (tests/cli/tool_server.cpp: a
# fork of a process with LibTorch loaded instead of loading it, ~0.5 CPU seconds a start); _AT is
# then its place in CMD (1, or after env's or timeout's own arguments). The server, started at the
# script's first, runs it as the tool runs as a process of its own (arguments, environment,
# directory, descriptors, umask, limits, signals, exit code or signal); tests/cli/tool_server.test.sh
# compares the two. A command whose environment changes what libraries read as they load (OMP_*,
# LD_*, TRAINCACHE_ENGINES_MODULE, ...) the client execs itself. Commands in the background (`&`)
# or in $(...) start the tools directly unless started through `tool` or tool_argv.
_served() {
  [ "${TC_TOOL_SERVER:-1}" != 0 ] || return 1
  _AT=1
  if [ "$1" = env ] || [ "$1" = timeout ]; then
    _AT=2
    while [ "$_AT" -le $# ]; do  # the wrapper's options, and env's NAME=VALUE
      case "${!_AT}" in
        -u | -C | -s | -k) _AT=$((_AT + 2)) ;;
        -*) _AT=$((_AT + 1)) ;;
        *=*) [ "$1" = env ] || break; _AT=$((_AT + 1)) ;;
        *) break ;;
      esac
    done
    [ "$1" = env ] || _AT=$((_AT + 1))  # timeout's duration
  fi
  case "${!_AT:-}" in
    "$TC_BIN"/cache-fill | "$TC_BIN"/gc-train | "$TC_BIN"/smart-bench | "$TC_BIN"/cache-inspect) ;;
    *) return 1 ;;
  esac
  [ -n "${_TOOL_SOCKET:-}" ] || _tools_start
}
# The server says "ready" on a FIFO that this shell keeps open, and ends when every reader has
# closed it (this shell and what it started since). Started from a subshell, as py's server is.
_tools_start() {
  local server=${TC_BIN%/bin}/tests/tool-server line=""
  _TOOL_CLIENT=${TC_BIN%/bin}/tests/tool-client
  local at=$WORK/.tools.$BASHPID  # a subshell's server ends with it; the script then starts its own
  if [ -x "$server" ] && [ -x "$_TOOL_CLIENT" ] && mkfifo "$at"; then
    ("$server" "$at.sock" </dev/null >"$at" 2>"$at.err" &)
    exec {_TOOLS_READY}<"$at"
    read -r -u "$_TOOLS_READY" line
  fi
  if [ "$line" != ready ]; then
    TC_TOOL_SERVER=0
    return 1
  fi
  _TOOL_SOCKET=$at.sock
}
# _ran T0 CMD...: after a command (run's or py's): logged, and its output in $out and $err.
_ran() {
  _run_log "$@"
  out=$(cat "$WORK/.out")
  err=$(cat "$WORK/.err")
}
# TC_RUN_LOG: each command's seconds, script and line and exit code appended there (what makes the suite slow):
# the first caller outside the shared *lib.sh files (py's caller, not py), and for Python `-c`
# whether its code imports torch.
_run_log() {
  [ -n "${TC_RUN_LOG:-}" ] || return 0
  local t0=$1 i=1 what="${2##*/} ${*:3:1}"
  while [ $((i + 1)) -lt ${#BASH_SOURCE[@]} ] && [[ "${BASH_SOURCE[i]}" == *lib.sh ]]; do i=$((i + 1)); done
  [[ "$what" == *" -c" && "${4:-}" =~ import[^$'\n']*torch ]] && what+=" (torch)"
  [ "${_SERVED:-}" = 1 ] && what+=" (served)"
  printf '%s %s:%s rc=%s %s\n' "$(awk "BEGIN{print $EPOCHREALTIME - $t0}")" "${BASH_SOURCE[i]##*/}" \
    "${BASH_LINENO[i - 1]}" "$rc" "$what" >>"$TC_RUN_LOG"
}

_ok() { PASSED=$((PASSED + 1)); }
_fail() {
  FAILED=$((FAILED + 1))
  local src=${BASH_SOURCE[2]:-${BASH_SOURCE[1]:-?}} line=${BASH_LINENO[1]:-${BASH_LINENO[0]}}
  printf 'FAIL (%s:%s): %s\n' "${src##*/}" "$line" "$1" >&2
  printf '  exit: %s\n  stdout: %s\n  stderr: %s\n' "$rc" "${out:0:2000}" "${err:0:2000}" >&2
}

expect_rc() { [ "$rc" -eq "$1" ] && _ok || _fail "expected exit $1, got $rc"; }
expect_err() { [ "$err" = "$1" ] && _ok || _fail "expected stderr exactly: $1"; }
expect_err_has() { [[ "$err" == *"$1"* ]] && _ok || _fail "expected stderr to contain: $1"; }
expect_out() { [ "$out" = "$1" ] && _ok || _fail "expected stdout exactly: $1"; }
expect_out_has() { [[ "$out" == *"$1"* ]] && _ok || _fail "expected stdout to contain: $1"; }
expect_no_out() { [ -z "$out" ] && _ok || _fail "expected empty stdout"; }
expect_one_line_err() { [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && _ok || _fail "expected a one-line stderr"; }
expect_file() { [ -e "$1" ] && _ok || _fail "expected file $1 to exist"; }
expect_no_file() { [ ! -e "$1" ] && _ok || _fail "expected no file $1"; }
expect_same() { cmp -s "$1" "$2" && _ok || _fail "expected $1 and $2 to be byte-identical"; }
expect_eq() { [ "$1" = "$2" ] && _ok || _fail "expected '$2', got '$1'${3:+ ($3)}"; }

# py CODE: runs CODE as `run python3 -c CODE` would (torch, h5py and numpy at hand), in a child of
# one Python a script that has imported h5py and numpy already (tests/cli/py_server.py): a fork
# instead of an interpreter start and those imports, 0.2-0.3 CPU seconds a check. CODE that imports
# torch goes to the suite's shared server instead where ctest started one (TC_PY_SHARED: a fork
# instead of importing torch, 1.3-2.5 CPU seconds), unless TC_PY_SERVER=0.
py() {
  local t0=${EPOCHREALTIME:-} _SERVED=""
  mkdir -p "$WORK/.py"
  printf '%s' "$1" >"$WORK/.py/code"
  printf '%s\0%s\0%s\0' "$PWD" "$WORK/.out" "$WORK/.err" >"$WORK/.py/where"
  : >"$WORK/.out" >"$WORK/.err"  # nothing of the command before, whatever becomes of this one
  env -0 >"$WORK/.py/env"
  if [[ "$1" =~ import[^$'\n']*torch ]] && _py_shared; then
    _SERVED=1
  else
    [ -n "${_PY_REQUESTS:-}" ] || _py_start
    echo "$WORK/.py" >&"$_PY_REQUESTS"
    if ! read -r rc <&"$_PY_REPLIES"; then
      rc=125
      echo "py: the Python server ended" >"$WORK/.err"
    fi
  fi
  _ran "$t0" "$TC_PYTHON" -c "$1"
}
# _py_alive PID: PID runs (not a zombie that its new parent has yet to reap: kill -0 finds those).
_py_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) && [[ "$stat" != *") Z "* ]]
}
# _py_shared: the request in $WORK/.py sent to the shared server in $TC_PY_SHARED, and $rc its
# check's exit code; false (nothing sent) when there is none, or it is another Python's. The reply
# FIFO is held open for reading and writing: the server's open never waits, and a server that
# ended (checked each second) is seen. A read that runs out of time keeps what it had read of the
# line (bash reads a FIFO a byte at a time, and a loaded machine can leave this shell unscheduled
# past the second between the two bytes of "0\n"): the rest comes with the next read.
_py_shared() {
  local server="" python="" fd part="" line=""
  [ -n "${TC_PY_SHARED:-}" ] && [ "${TC_PY_SERVER:-1}" != 0 ] && [ -p "$TC_PY_SHARED/requests" ] || return 1
  read -r server python <"$TC_PY_SHARED/pid" 2>/dev/null || return 1
  [ "$python" = "$TC_PYTHON" ] && _py_alive "$server" || return 1
  [ -p "$WORK/.py/reply" ] || mkfifo "$WORK/.py/reply" || return 1
  exec {_PY_REPLY}<>"$WORK/.py/reply" {fd}<>"$TC_PY_SHARED/requests"
  echo "$WORK/.py" >&"$fd"
  exec {fd}>&-
  until read -r -t 1 part <&"$_PY_REPLY"; do
    line+=$part
    if ! _py_alive "$server"; then
      line=125 part=""
      echo "py: the shared Python server ended" >"$WORK/.err"
      break
    fi
  done
  rc=$line$part
  exec {_PY_REPLY}>&-
}
# The server reads requests from one FIFO and answers on another; it ends when this shell (and
# whatever it started since, which inherits the descriptor) has closed the first. It is started
# from a subshell, so that it is no job of this shell's: a script's `wait` does not wait for it.
_py_start() {
  mkfifo "$WORK/.py-requests" "$WORK/.py-replies"
  ("$TC_PYTHON" "$TC_SOURCE/tests/cli/py_server.py" "$WORK/.py-requests" "$WORK/.py-replies" \
    </dev/null >/dev/null 2>"$WORK/.py-server.err" &)
  exec {_PY_REQUESTS}>"$WORK/.py-requests" {_PY_REPLIES}<"$WORK/.py-replies"
}

# have_gloo: whether this build has c10d's Gloo process group (pip's LibTorch ships no Gloo headers).
have_gloo() { grep -qx '#define TRAINCACHE_WITH_GLOO' "$TC_BIN/../generated/traincache_dist_config.h"; }

# no_cuda: sets NO_CUDA to a CUDA device this machine lacks and NO_CUDA_WHY to the words that refuse
# it: cuda:0 where CUDA is not available (CI's machines), a device past the last where it is.
no_cuda() {
  if "$TC_BIN/cache-fill" --version 2>/dev/null | grep -qx 'CUDA: available'; then
    NO_CUDA=cuda:99
    NO_CUDA_WHY="no CUDA device 99: this machine has $("$TC_PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
  else
    NO_CUDA=cuda:0
    NO_CUDA_WHY="CUDA is not available (this LibTorch has no CUDA support or no GPU is visible)"
  fi
}

# killed_fill OUT N ARGS...: starts cache-fill ARGS --out OUT, kills it (SIGKILL) once N rows are
# committed (expected: it got there, and no OUT exists), then runs it again to the end ($rc, $out,
# $err are the second run's).
killed_fill() {
  local target=$1 rows=$2 pid
  shift 2
  "$TC_BIN/cache-fill" "$@" --out "$target" 2>/dev/null &
  pid=$!
  if wait_committed "$target.partial" "$rows"; then _ok; else _fail "no progress to $rows rows"; fi
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  expect_no_file "$target" # a reader never sees an incomplete cache
  run "$TC_BIN/cache-fill" "$@" --out "$target"
}

# py_later WANT CODE [re]: Python CODE (one that imports torch) run at finish in one process with
# the script's other such checks, instead of now: importing torch costs 2-3 s a start. Its standard
# output must be WANT (compared as expect_out does; with `re`, match the regular expression WANT as
# expect_out_re does); one PASS or FAIL each, naming the caller's line. CODE must read only files
# that stay as they are until the script ends (copy them if not); its jit_load(PATH) is
# torch.jit.load once for each content among the script's checks (a module they only read).
py_later() {
  PY_LATER_N=$((${PY_LATER_N:-0} + 1))
  local i=1
  while [[ "${BASH_SOURCE[i]}" == *lib.sh ]]; do i=$((i + 1)); done  # same_params' caller, not same_params
  mkdir -p "$WORK/.py_later"
  printf '%s' "$2" >"$WORK/.py_later/$PY_LATER_N.py"
  printf '%s' "$1" >"$WORK/.py_later/$PY_LATER_N.want"
  printf '%s' "${3:-}" >"$WORK/.py_later/$PY_LATER_N.mode"
  printf '%s:%s' "${BASH_SOURCE[i]##*/}" "${BASH_LINENO[i - 1]}" >"$WORK/.py_later/$PY_LATER_N.where"
}

# check_py_later: the checks py_later recorded, in one Python process (called by finish).
check_py_later() {
  [ -n "${PY_LATER_N:-}" ] || return 0
  py "
import contextlib, hashlib, io, sys, traceback
d, n = '$WORK/.py_later', $PY_LATER_N
modules = {}
def jit_load(path):  # torch.jit.load, once for each content (the checks only read what they load)
    import torch
    key = hashlib.sha256(open(path, 'rb').read()).hexdigest()
    if key not in modules:
        modules[key] = torch.jit.load(path)
    return modules[key]
for i in range(1, n + 1):
    got = io.StringIO()
    try:
        with contextlib.redirect_stdout(got):
            exec(compile(open('%s/%d.py' % (d, i)).read(), '%s/%d.py' % (d, i), 'exec'),
                 {'__name__': 'check', 'jit_load': jit_load})
    except Exception:
        print(traceback.format_exc(), file=got)
    open('%s/%d.got' % (d, i), 'w').write(got.getvalue())
"
  local i got want mode where
  for i in $(seq 1 "$PY_LATER_N"); do
    where=$(cat "$WORK/.py_later/$i.where")
    if [ "$rc" -ne 0 ] || [ ! -e "$WORK/.py_later/$i.got" ]; then
      _fail "the checks of py_later did not run ($where)"
      continue
    fi
    got=$(cat "$WORK/.py_later/$i.got")
    want=$(cat "$WORK/.py_later/$i.want")
    mode=$(cat "$WORK/.py_later/$i.mode")
    if { [ "$mode" = re ] && [[ "$got" =~ $want ]]; } || [ "$got" = "$want" ]; then
      _ok
    else
      FAILED=$((FAILED + 1))
      printf 'FAIL (%s): expected stdout %s: %s\n  got: %s\n' "$where" "$([ "$mode" = re ] && echo "to match" || echo exactly)" \
        "$want" "${got:0:3000}" >&2
    fi
  done
}

# same_params A B [START [TOL]]: the TorchScript files' parameters agree within TOL relative
# (max |a-b| / max |a|, default 1e-5), and moved away from START's by more than 1e-3 when given.
# The files are copied now (a later step may overwrite them) and compared at finish (py_later).
same_params() {
  local dir
  SAME_PARAMS_N=$((${SAME_PARAMS_N:-0} + 1))
  dir="$WORK/.same_params/$SAME_PARAMS_N"
  mkdir -p "$dir"
  if ! cp "$1" "$dir/a.pt" || ! cp "$2" "$dir/b.pt" || { [ -n "${3:-}" ] && ! cp "$3" "$dir/base.pt"; }; then
    _fail "same_params: cannot read $1, $2 or ${3:-}"
    return
  fi
  py_later "ok" "
import torch
a = dict(jit_load('$dir/a.pt').named_parameters()); b = dict(jit_load('$dir/b.pt').named_parameters())
if sorted(a) != sorted(b):
    print('names differ: $1 vs $2')
else:
    worst = max(float((a[k] - b[k]).abs().max() / a[k].abs().max()) for k in a)
    base = '${3:+$dir/base.pt}'
    moved = max(float((a[k] - t).abs().max()) for k, t in jit_load(base).named_parameters()) if base else 1
    print('ok' if worst <= ${4:-1e-5} and moved > 1e-3 else '$1 vs $2 differ by %g (moved %g)' % (worst, moved))
"
}

finish() {
  check_py_later
  # TC_RUN_LOG: the script's seconds, and the CPU seconds of the commands it waited for.
  if [ -n "${TC_RUN_LOG:-}" ]; then
    times >"$WORK/.times"  # a builtin: in this shell, not a subshell that has no children
    printf 'SCRIPT %s wall %s cpu %s\n' "${0##*/}" "$SECONDS" \
      "$(tail -1 "$WORK/.times" | awk '{gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4}')" >>"$TC_RUN_LOG"
    # and each command the tool server left to its client, with why (tool_server.cpp)
    cat "$WORK"/.tools.*.err 2>/dev/null | sed -n "s/^tool-server: \(.*run by the client.*\)/UNSERVED ${0##*/} \1/p" >>"$TC_RUN_LOG"
  fi
  echo "${0##*/}: $PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}

expect_err_re() { [[ "$err" =~ $1 ]] && _ok || _fail "expected stderr to match: $1"; }
expect_out_re() { [[ "$out" =~ $1 ]] && _ok || _fail "expected stdout to match: $1"; }

# hold_lock FILE PID: another process (flock(1) standing in for a run) holds FILE, which names PID.
hold_lock() {
  (
    exec 9>"$1"
    flock -n 9 || exit 1
    echo "$2" >&9 # only once locked: a non-empty file means the lock is held
    sleep 5
  ) &
  holder=$!
  for _ in $(seq 1 100); do [ -s "$1" ] && break; sleep 0.02; done
}

# fingerprint_option CACHE KEY [JSON]: options.KEY of CACHE's fingerprint set to JSON, or dropped
# without it, as another cache-fill would have written it; the fingerprint's digest follows.
fingerprint_option() {
  py "
import h5py, json, hashlib
with h5py.File('$1', 'r+') as f:
    fp = json.loads(f.attrs['fingerprint_json'])
    if $# > 2:
        fp['options']['$2'] = json.loads('${3:-}')
    else:
        del fp['options']['$2']
    text = json.dumps(fp, separators=(',', ':'), sort_keys=True)
    f.attrs['fingerprint_json'] = text
    f.attrs['fingerprint'] = hashlib.sha256(text.encode()).hexdigest()
print('ok')"
  expect_out ok
}

# fixture_copy DIR CMD...: DIR's files copied under $WORK, DIR made first by `CMD... DIR` where it is
# missing (a fixtures.* test makes it once for the suite; a script run by hand makes it itself).
fixture_copy() {
  local dir=$1
  shift
  if [ ! -d "$dir" ]; then
    run "$@" "$dir"
    expect_rc 0
  fi
  cp -r "$dir/." "$WORK/" && _ok || _fail "cannot copy $dir"
}

# wait_committed PARTIAL N: waits until the journal has committed at least N rows (the partial directory exists for 0).
wait_committed() {
  local journal=$1/journal.json i c
  for i in $(seq 1 1500); do
    if [ "$2" -eq 0 ] && [ -d "$1" ]; then return 0; fi
    c=$(grep -o '"committed_rows": [0-9]*' "$journal" 2>/dev/null | grep -o '[0-9]*$')
    if [ -n "$c" ] && [ "$c" -ge "$2" ]; then return 0; fi
    sleep 0.01
  done
  return 1
}
