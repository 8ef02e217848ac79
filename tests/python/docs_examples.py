"""Runs docs/python.md as a reader would: every ```sh and ```python block in order, in one scratch
directory that has the repository's scripts/ and the built tools on PATH, with the package found
the way the page says (PYTHONPATH=python). A ```python FILE block is saved as FILE instead of run.
A ```text block right after a block is that block's exact standard output. ```console blocks
(installation) are left to install.py.

Usage: docs_examples.py [DOC]   (default: docs/python.md)"""
import os
import re
import signal
import subprocess
import sys

from tc_check import BIN, SOURCE, WORK, eq, finish, ok, torchrun_unusable

BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def blocks(text):
    """(language, info, body) of each fenced block, with the text block that follows each one."""
    found = [(m.group(1), m.group(2).strip(), m.group(3)) for m in BLOCK.finditer(text)]
    out = []
    for lang, info, body in found:
        if lang == "text" and out and out[-1][3] is None:
            out[-1] = out[-1][:3] + (body,)
        else:
            out.append((lang, info, body, None))
    return out


def rank_logs(here):
    """The end of each log torchrun's --log_dir kept in `here` (a page's torchrun block sends its
    stderr to /dev/null: the ranks' own output says why it failed)."""
    out = ""
    for root, _, files in os.walk(os.path.join(here, "torchrun-logs")):
        for name in sorted(files):
            with open(os.path.join(root, name), errors="replace") as f:
                text = f.read()[-1500:]
            if text.strip():
                out += f"\n--- {os.path.relpath(os.path.join(root, name), here)}:\n{text}"
    return out


def run_block(cmd, here, env, limit=240):
    """(exit code, stdout, stderr) of CMD in its own session; after LIMIT seconds the code says so,
    with what the session still ran (torchrun, its ranks, their workers), and all of it is killed."""
    with subprocess.Popen(cmd, cwd=here, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=limit)
            return p.returncode, out, err
        except subprocess.TimeoutExpired:
            ps = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,time,args", "-s", str(p.pid)],
                                capture_output=True, text=True).stdout
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return f"none: still running after {limit} s:\n{ps}", out, err


def main():
    doc = sys.argv[1] if len(sys.argv) > 1 else os.path.join(SOURCE, "docs", "python.md")
    here = os.path.join(WORK, "docs")
    os.makedirs(here)
    os.symlink(os.path.join(SOURCE, "scripts"), os.path.join(here, "scripts"))
    # `python3` in the page is the Python with Debian's torch (this one), whatever else is on PATH.
    # A script, not a link: a link to a venv's python elsewhere runs the base interpreter (a venv is
    # found beside the path it was started by), without the venv's packages.
    os.makedirs(os.path.join(here, ".bin"))
    with open(os.path.join(here, ".bin", "python3"), "w") as f:
        f.write('#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
    os.chmod(os.path.join(here, ".bin", "python3"), 0o755)
    env = dict(os.environ, PATH=f"{BIN}:{here}/.bin:{os.environ['PATH']}", PYTHONPATH=os.path.join(SOURCE, "python"))
    # The page's claim is that the package finds build/lib by itself: test that when the build is there.
    if os.path.realpath(os.environ.get("TC_BUILD", "")) == os.path.realpath(os.path.join(SOURCE, "build")):
        env.pop("TRAINCACHE_LIBRARY", None)
    ran = skipped = 0
    no_torchrun = torchrun_unusable()
    for n, (lang, info, body, want) in enumerate(blocks(open(doc).read())):
        if lang == "python" and info:
            with open(os.path.join(here, info), "w") as f:
                f.write(body)
            continue
        if lang not in ("sh", "python"):
            continue
        if no_torchrun and lang == "sh" and body.lstrip().startswith("torchrun"):
            print(f"note: block {n} (torchrun) is not run here: {no_torchrun}")
            skipped += 1
            continue
        cmd = ["bash", "-euo", "pipefail", "-c", body] if lang == "sh" else [sys.executable, "-c", body]
        code, out, err = run_block(cmd, here, env)
        ran += 1
        first = body.strip().splitlines()[0]
        if not ok(code == 0, f"block {n} ({lang}: {first}) exits 0, got {code}: {err[-3000:]}" + rank_logs(here)):
            break
        if want is not None:
            eq(out, want, f"block {n} ({lang}: {first}): its output as the page shows it")
    ok(ran >= 8 - skipped, f"the page's blocks ran ({ran}, {skipped} torchrun blocks skipped)")
    finish()


if __name__ == "__main__":
    main()
