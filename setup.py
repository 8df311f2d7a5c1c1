"""The compiled part of plateau (bridge/kafka_api/_record_rows.c); everything else is in
pyproject.toml. A machine without a C compiler or Python's headers is told which is missing
before a compiler error would say it less plainly."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CheckedBuildExt(build_ext):
    def build_extensions(self) -> None:
        compiler = getattr(self.compiler, "compiler_so", None) or ["cc"]
        if shutil.which(compiler[0]) is None:
            raise SystemExit(
                f"plateau builds a C extension and needs a C compiler: {compiler[0]!r} is not "
                "on PATH (Debian/Ubuntu: apt-get install gcc; or set CC)"
            )
        include = Path(sysconfig.get_paths()["include"])
        if not (include / "Python.h").is_file():
            raise SystemExit(
                f"plateau builds a C extension and needs Python's headers: {include}/Python.h "
                "is missing (Debian/Ubuntu: apt-get install python3-dev)"
            )
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "bridge.kafka_api._record_rows",
            sources=["bridge/kafka_api/_record_rows.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
        )
    ],
    cmdclass={"build_ext": CheckedBuildExt},
)
