"""Helpers for the Python tests (run by ctest as plain python3 scripts): counted assertions that
report like tests/cli/lib.sh ("NAME: N passed, M failed"), the tools, a scratch directory and a
slab prefix of the test's own, both removed at exit."""
import atexit
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

BIN = os.environ["TC_BIN"]
DATA = os.environ["TC_DATA"]
SOURCE = os.environ["TC_SOURCE"]
NAME = os.path.basename(sys.argv[0])
# The test's process owns the scratch directory and the slab prefix; processes it starts (spawned
# DataLoader workers, ranks) inherit both through the environment and clean up nothing.
if "TC_PY_OWNER" not in os.environ:
    os.environ["TC_PY_OWNER"] = str(os.getpid())
    os.environ["TC_PY_WORK"] = tempfile.mkdtemp(prefix="tc-py.")
    # Slabs of this test only: parallel tests never meet, and every object is removed at the end.
    os.environ["TRAINCACHE_SHM_PREFIX"] = f"tcpy-{os.getpid()}-"
WORK = os.environ["TC_PY_WORK"]
PREFIX = os.environ["TRAINCACHE_SHM_PREFIX"]
OWNER = os.environ["TC_PY_OWNER"] == str(os.getpid())
_counts = {"passed": 0, "failed": 0}


def _cleanup():
    if not OWNER:
        return
    shutil.rmtree(WORK, ignore_errors=True)
    for path in glob.glob(f"/dev/shm/{PREFIX}*"):
        os.unlink(path)


atexit.register(_cleanup)


def _where():
    frame = traceback.extract_stack(limit=3)[0]
    return f"{os.path.basename(frame.filename)}:{frame.lineno}"


def ok(condition, what: str) -> bool:
    if condition:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print(f"FAIL ({_where()}): {what}", file=sys.stderr)
    return bool(condition)


def eq(got, want, what: str) -> bool:
    if got == want:
        _counts["passed"] += 1
        return True
    _counts["failed"] += 1
    print(f"FAIL ({_where()}): {what}\n  got:  {got!r}\n  want: {want!r}", file=sys.stderr)
    return False


def raises(fn, kind, message=None, code=None):
    """fn() raises `kind`, with str(error) == `message` and error.code == `code` when given."""
    try:
        fn()
    except kind as e:
        good = (message is None or str(e) == message) and (code is None or getattr(e, "code", None) == code)
        if good:
            _counts["passed"] += 1
        else:
            _counts["failed"] += 1
            print(f"FAIL ({_where()}): {kind.__name__} as expected, but\n  got:  [{getattr(e, 'code', '-')}] {e}\n"
                  f"  want: [{code}] {message}", file=sys.stderr)
        return e
    except BaseException as e:  # noqa: B036 - any other exception is the failure being reported
        _counts["failed"] += 1
        print(f"FAIL ({_where()}): expected {kind.__name__}, got {type(e).__name__}: {e}", file=sys.stderr)
        return e
    _counts["failed"] += 1
    print(f"FAIL ({_where()}): expected {kind.__name__}, nothing was raised", file=sys.stderr)
    return None


def tool(*args, check=True, binary=False) -> subprocess.CompletedProcess:
    """Runs a traincache tool (build/bin/NAME ARGS); with `check`, a non-zero exit ends the test."""
    p = subprocess.run([os.path.join(BIN, args[0])] + [str(a) for a in args[1:]], capture_output=True,
                       text=not binary, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise SystemExit(f"{NAME}: {args[0]} {' '.join(map(str, args[1:]))} exited {p.returncode}: {p.stderr}")
    return p


def tool_json(*args):
    return json.loads(tool(*args).stdout)


def cache_fill(out, *args) -> str:
    """A cache made by cache-fill ARGS --out WORK/OUT; its path."""
    path = os.path.join(WORK, out)
    tool("cache-fill", "-q", *args, "--out", path)
    return path


def finish():
    print(f"{NAME}: {_counts['passed']} passed, {_counts['failed']} failed", flush=True)
    sys.exit(1 if _counts["failed"] else 0)


def torchrun_unusable():
    """'' when this Python's torchrun can launch processes here, else why not (tests/torchrun-usable:
    Debian 13's torch has no libuv, which every torchrun rendezvous asks for)."""
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "tests", "torchrun-usable")], capture_output=True,
                       text=True)
    return "" if p.returncode == 0 else (p.stdout + p.stderr).strip() or f"exit {p.returncode}"
