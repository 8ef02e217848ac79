"""The two ways docs/python.md installs the package: PYTHONPATH=python (the library found in the
checkout's build/lib), and pip into a virtual environment with Debian's packages visible, the
library bundled (no download: --no-deps --no-build-isolation); and what a missing or foreign
library says."""
import os
import shutil
import site
import subprocess
import sys

from tc_check import DATA, SOURCE, WORK, eq, finish, ok, raises
import traincache
from traincache import _capi

SMOKE = """
import numpy as np, traincache
s = traincache.Slab.create("smoke", 4, (3,), "int16")
s.put(2, [1, -2, 3])
print(traincache.library_path())
print(s.get(2).tolist(), traincache.CacheDataset(__import__("sys").argv[1]).fields)
s.remove()
"""


def python(code, *args, env=None, cwd=WORK, exe=sys.executable):
    """Runs `code` in a fresh interpreter with only `env`'s package path: (exit code, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRAINCACHE_LIBRARY")}
    p = subprocess.run([exe, "-c", code, *args], env={**base, **(env or {})}, cwd=cwd, capture_output=True,
                       text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    built = os.environ["TRAINCACHE_LIBRARY"]  # ctest's: the library this build made
    cache = os.path.join(WORK, "c.h5")
    subprocess.run([os.path.join(os.environ["TC_BIN"], "cache-fill"), "-q", "--input", f"{DATA}/images.h5",
                    "--features", "vec", "--encoder", f"mlp={DATA}/mlp.pt", "--out", cache], check=True)

    # PYTHONPATH=python: the checkout's build/lib when it is there, else a clear error.
    in_tree = os.path.join(SOURCE, "build", "lib", "libtraincache_c.so")
    rc, out, err = python(SMOKE, cache, env={"PYTHONPATH": os.path.join(SOURCE, "python")})
    if os.path.isfile(in_tree) and os.path.samefile(in_tree, built):
        eq((rc, out.splitlines()), (0, [in_tree, "[1, -2, 3] ('mlp',)"]), "PYTHONPATH=python finds build/lib")
    elif os.path.isfile(in_tree):
        # build/ is another build's (make test-debian13 builds in build-debian13 beside Debian 12's
        # build/, whose library links that system's HDF5): nothing to say about this build.
        print("note: build/lib is another build's library; the PYTHONPATH=python case is not checked")
    else:
        ok(rc == 1 and "libtraincache_c.so: not found (looked in" in err, f"no build/lib: a clear error ({err})")

    # pip into a venv that sees Debian's torch, numpy and h5py; the library is copied into the package.
    venv, src = os.path.join(WORK, "venv"), os.path.join(WORK, "src")
    shutil.copytree(os.path.join(SOURCE, "python"), src)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    if sys.prefix != sys.base_prefix:  # run from a venv itself (the pip leg): the new one sees its packages too
        inner = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                                "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(inner, "outer.pth"), "w") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--no-deps", "--no-build-isolation",
                          "--no-index", src], env={**os.environ, "TRAINCACHE_LIBRARY": built}, capture_output=True,
                         text=True)
    eq(pip.returncode, 0, f"pip install --no-deps --no-build-isolation ./python ({pip.stderr[-2000:]})")
    vpy = os.path.join(venv, "bin", "python")
    rc, out, err = python(SMOKE, cache, exe=vpy)
    lines = out.splitlines()
    ok(rc == 0 and lines and lines[0].startswith(os.path.join(venv, "lib")) and lines[0].endswith(
        "traincache/libtraincache_c.so"), f"the installed package uses its bundled library ({out} {err})")
    eq(lines[1:], ["[1, -2, 3] ('mlp',)"], "and works from any directory")
    rc, out, err = python("import traincache; print(traincache.version())", exe=vpy)
    eq(out.strip(), _capi.version(), "the bundled library is the one this build made")
    # Found beside the package, the library is loaded without asking the dynamic linker's places
    # (ctypes.util.find_library starts ldconfig and gcc, in every process that imports the package).
    rc, out, err = python("import ctypes.util\ndef asked(name):\n    raise SystemExit('find_library asked for ' + name)\n"
                          "ctypes.util.find_library = asked\nimport traincache\nprint(traincache.version())", exe=vpy)
    eq((rc, out.strip()), (0, _capi.version()), f"a bundled library: find_library not asked ({err.strip()})")

    # A library that cannot be found or loaded, or another ABI version.
    rc, out, err = python("import traincache\ntry:\n    traincache.Slab.attach('x')\nexcept traincache.TraincacheError as e:"
                          "\n    print(e.code, e)", env={"PYTHONPATH": os.path.join(SOURCE, "python"),
                                                          "TRAINCACHE_LIBRARY": "/nonexistent/libtraincache_c.so"})
    ok(out.startswith("69 /nonexistent/libtraincache_c.so: cannot load: "), f"a missing library: 69 ({out} {err})")
    old_abi = _capi.ABI_VERSION
    _capi.ABI_VERSION, _capi._lib = old_abi + 1, None
    raises(lambda: traincache.version(), traincache.TraincacheError,
           f"{built}: C ABI version {old_abi}, this package needs {old_abi + 1}: rebuild it from the same checkout", 69)
    _capi.ABI_VERSION, _capi._lib = old_abi, None
    eq(traincache.library_path(), built, "$TRAINCACHE_LIBRARY comes first")
    finish()


if __name__ == "__main__":
    main()
