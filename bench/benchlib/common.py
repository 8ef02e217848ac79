"""Helpers every benchmark of make bench uses: running a tool and measuring its CPU time, peak memory and closing JSON."""
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the source tree


def temp_beside(path: str) -> str:
    """A temporary file beside `path`, created exclusively under an unpredictable name (mkstemp) and
    closed: the caller writes it and renames it into place."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    os.close(fd)
    return tmp


# The vector instructions a figure can depend on, as /proc/cpuinfo's flags name them.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8")


def cpu_info() -> dict:
    """The first processor's block of /proc/cpuinfo, key by key ({} where it cannot be read)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip() and info:
                    break
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def machine() -> dict:
    """What the figures of one run were measured on: the CPU's model name, vendor family and model,
    the vector instructions it has (ISA_FLAGS), the cores this process may use, the memory, the
    kernel and the UTC date."""
    info = cpu_info()
    flags = set(info.get("flags", "").split())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": info.get("model name"), "cpu_family": info.get("cpu family"), "cpu_model": info.get("model"),
            "isa": [f for f in ISA_FLAGS if f in flags], "cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(memory / 2**30, 1), "kernel": platform.release(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


def log(msg: str) -> None:
    print(f"run-bench: {msg}", file=sys.stderr, flush=True)


def process_usage(cmd, env=None):
    """Runs cmd and returns the resource usage of that process alone (wait4's), not of this one."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run-bench: {cmd[0]} failed: {proc.stderr.read().decode()}")
    return usage


def peak_rss_kib(cmd) -> int:
    """Runs cmd and returns its own peak resident set size (KiB)."""
    return process_usage(cmd).ru_maxrss


def cpu_seconds(cmd, env) -> float:
    """Runs cmd and returns its own CPU seconds (user + system)."""
    usage = process_usage(cmd, env)
    return usage.ru_utime + usage.ru_stime


def gc_train_peak_and_speed(cmd):
    """Runs gc-train --json: its peak RSS (KiB, the VmHWM it reports: wait4's figure would count this
    Python process's memory at the fork, hundreds of MB once torch is imported) and samples/s."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"run-bench: gc-train failed: {p.stderr}")
    j = json.loads(p.stdout)
    return j["peak_rss_bytes"] // 1024, j["samples_per_second"]


def cache_fill_json(cmd, env=None):
    p = subprocess.run(cmd + ["--json", "--force"], capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        raise SystemExit(f"run-bench: cache-fill failed: {p.stderr}")
    return json.loads(p.stdout)


def median_pair(cmd, env_a, env_b, pairs=8):
    """CPU seconds of cmd under env_a and env_b, run in adjacent pairs after one warm-up pair: the
    median of each side."""
    cpu_seconds(cmd, env_a), cpu_seconds(cmd, env_b)
    runs = [(cpu_seconds(cmd, env_a), cpu_seconds(cmd, env_b)) for _ in range(pairs)]
    return [sum(sorted(side)[pairs // 2 - 1:pairs // 2 + 1]) / 2 for side in zip(*runs)]
