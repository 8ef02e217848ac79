"""Bundles the C ABI library that `make` built (build/lib/libtraincache_c.so, or $TRAINCACHE_LIBRARY)
into the package, so that an installed copy needs no checkout. Metadata: pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = os.environ.get("TRAINCACHE_LIBRARY") or os.path.join(HERE, "..", "build", "lib", "libtraincache_c.so")
        if not os.path.isfile(lib):
            raise SystemExit(f"traincache: {lib}: not found; run make first (or set TRAINCACHE_LIBRARY)")
        shutil.copy2(lib, os.path.join(self.build_lib, "traincache", "libtraincache_c.so"))


setup(cmdclass={"build_py": BuildPyWithLibrary})
