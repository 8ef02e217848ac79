"""The Python behind tests/cli/lib.sh's `py CODE`: one process a script, started at its first `py`,
that has imported numpy and h5py once and forks a child for each CODE, so that a check pays for a
fork instead of an interpreter start and those imports (0.2-0.3 CPU seconds each, ~140 checks in the
suite).

A child runs CODE as `python3 -c CODE` would: in a fresh __main__, sys.argv ['-c'], '' first on
sys.path, in the caller's directory and environment, stdin closed, stdout and stderr to the files
named, ended by the interpreter's own exit (atexit handlers: h5py closes and flushes what CODE left
open), with its exit code. Where the caller's environment sets a PYTHON* variable otherwise than the
server's (read only when an interpreter starts), the child runs `python3 -c CODE` itself instead.

Protocol: the caller writes one line to REQUESTS, the folder holding code, env (`env -0`), cwd, out
and err paths; the server answers with the exit code on one line of REPLIES (128 + N for signal N).
It ends when REQUESTS is closed by every writer.

A second kind serves every script of a ctest run (fixtures.py_shared): started with --shared
FOLDER, it has imported torch too (1.3-2.5 CPU seconds a start, ~20 scripts), goes on its own
(setsid, its own descriptors to /dev/null and FOLDER/log) and reads requests from FOLDER/requests,
a FIFO any script may write a line to; for each it forks a child that forks the check, waits for
it and writes the exit code to the request folder's `reply` FIFO (which the caller holds open).
FOLDER/pid names it once it reads (`PID PYTHON`). It ends on SIGTERM (the fixture's cleanup), or
after an hour without a request, or once FOLDER/pid no longer names it (an interrupted run, a
removed build). Where the caller's environment sets otherwise than the server's a variable that the
interpreter, OpenMP, BLAS or torch read as they load (LOAD_TIME), the check runs `python3 -c CODE`
itself, as above.

Usage: py_server.py REQUESTS REPLIES
       py_server.py --shared FOLDER      (made where missing; returns once the server reads)
       py_server.py --stop FOLDER        (ends the shared server FOLDER/pid names)
"""
import os
import select
import signal
import sys
import time



def load_time():
    """Prefixes of the variables read once, as the interpreter starts or a library loads: the lines of
    read_at_load.txt (the tool server's list too) but its `tools NAME` ones."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "read_at_load.txt"), "rb") as f:
        lines = [line.split() for line in f if line.strip() and not line.startswith(b"#")]
    return tuple(w[-1] for w in lines if w[0] != b"tools")


LOAD_TIME = load_time()
IDLE_SECONDS = 3600

try:  # the checks' usual imports, made once; a Python without them still serves
    import h5py  # noqa: F401
    import numpy  # noqa: F401
except ImportError:
    pass


def serve(requests_path, replies_path):
    """Forks a child per request; returns the request's folder in the child, never in the server."""
    requests = open(requests_path, "r")
    replies = open(replies_path, "w")
    while True:
        line = requests.readline()
        if not line:
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            return line.rstrip("\n")
        replies.write(exit_line(pid))
        replies.flush()


def exit_line(pid):
    """The reply for child PID once it has ended: its exit code, 128 + N for signal N."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "%d\n" % (code if code >= 0 else 128 - code)


def take_environment(env_file):
    """The caller's environment as os.environ; False when a LOAD_TIME variable differs from ours."""
    env = {}
    with open(env_file, "rb") as f:
        for item in f.read().split(b"\0"):
            if b"=" in item:
                k, v = item.split(b"=", 1)
                env[k] = v
    read = {k for k in set(env) | set(os.environb) if k.startswith(LOAD_TIME)}
    same = all(env.get(k) == os.environb.get(k) for k in read)
    os.environb.clear()
    os.environb.update(env)
    return same


def redirect(fd, path):
    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(f, fd)
    os.close(f)


def start_shared(folder):
    """Starts the shared server on its own; returns in the server only. This process exits 0 once
    FOLDER/pid names the server, 1 when it never does."""
    os.makedirs(folder, exist_ok=True)
    stop_shared(folder)  # one left by an interrupted run
    pid_file = os.path.join(folder, "pid")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            log = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd, to in ((0, null), (1, null), (2, log)):
                os.dup2(to, fd)
            return  # the server
        os._exit(0)
    os.wait()
    for _ in range(600):
        if os.path.exists(pid_file):
            os._exit(0)
        time.sleep(0.05)
    print("py_server.py: the shared server did not start (%s/log)" % folder, file=sys.stderr)
    os._exit(1)


def stop_shared(folder):
    """Ends the shared server FOLDER/pid names, if it runs: SIGTERM, and the file removed (which
    ends it within a minute where the signal cannot reach it)."""
    pid_file = os.path.join(folder, "pid")
    try:
        pid = open(pid_file).read().split(" ", 1)[0]
        os.unlink(pid_file)
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            if b"py_server.py" in f.read():
                os.kill(int(pid), signal.SIGTERM)
    except (OSError, ValueError):
        pass


def serve_shared(folder):
    """The shared server's loop; returns the request's folder in a check's process, never here."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    requests_path, pid_file = os.path.join(folder, "requests"), os.path.join(folder, "pid")
    if os.path.exists(requests_path):
        os.unlink(requests_path)
    os.mkfifo(requests_path, 0o600)
    requests = os.open(requests_path, os.O_RDWR)  # never at its end, however many writers come and go
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children that wait for the checks reap themselves
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    me = "%d %s\n" % (os.getpid(), sys.executable)
    with open(pid_file + ".tmp", "w") as f:
        f.write(me)
    os.rename(pid_file + ".tmp", pid_file)
    pending, last = b"", time.monotonic()
    while True:
        if not select.select([requests], [], [], 60)[0]:
            try:
                mine = open(pid_file).read() == me
            except OSError:
                mine = False
            if not mine or time.monotonic() - last > IDLE_SECONDS:
                os._exit(0)
            continue
        pending += os.read(requests, 65536)
        last = time.monotonic()
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if os.fork() == 0:
                os.close(requests)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                return wait_for_check(os.fsdecode(line))


def wait_for_check(folder):
    """In the child of the shared server: forks the check (returns FOLDER there), waits for it and
    writes its exit code to FOLDER/reply, which its caller holds open (nobody reads: nothing sent)."""
    pid = os.fork()
    if pid == 0:
        return folder
    line = exit_line(pid)
    try:
        reply = os.open(os.path.join(folder, "reply"), os.O_WRONLY | os.O_NONBLOCK)
        os.write(reply, line.encode())
    except OSError:
        pass
    os._exit(0)


def main():
    if sys.argv[1] == "--stop":
        stop_shared(sys.argv[2])
        return
    if sys.argv[1] == "--shared":
        start_shared(sys.argv[2])
        folder = serve_shared(sys.argv[2])
    else:
        folder = serve(sys.argv[1], sys.argv[2])
    code = open(os.path.join(folder, "code")).read()
    cwd, out, err = open(os.path.join(folder, "where")).read().split("\0")[:3]
    os.close(0)
    redirect(1, out)
    redirect(2, err)  # first: what fails below is reported where the caller reads it
    same = take_environment(os.path.join(folder, "env"))
    os.chdir(cwd)
    if not same:
        os.execv(sys.executable, [sys.executable, "-c", code])
    import types
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    sys.argv = ["-c"]
    sys.path[0] = ""
    sys.stdin = None
    exec(compile(code, "<string>", "exec"), module.__dict__)


if __name__ == "__main__":
    main()
