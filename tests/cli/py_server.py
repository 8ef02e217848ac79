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

Usage: py_server.py REQUESTS REPLIES
"""
import os
import sys

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
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        replies.write("%d\n" % (code if code >= 0 else 128 - code))
        replies.flush()


def take_environment(env_file):
    """The caller's environment as os.environ; False when a PYTHON* variable differs from ours."""
    env = {}
    with open(env_file, "rb") as f:
        for item in f.read().split(b"\0"):
            if b"=" in item:
                k, v = item.split(b"=", 1)
                env[k] = v
    python = {k for k in set(env) | set(os.environb) if k.startswith(b"PYTHON")}
    same = all(env.get(k) == os.environb.get(k) for k in python)
    os.environb.clear()
    os.environb.update(env)
    return same


def redirect(fd, path):
    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(f, fd)
    os.close(f)


def main():
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
