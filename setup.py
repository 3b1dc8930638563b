"""Build steps pyproject.toml cannot say: the native ``strata`` client and ``strata._walk``.

The ``strata`` command is ``native/strata.c`` compiled, when a C compiler is
found: it hands served commands to the workspace's watcher without starting
Python (about 2 ms instead of 11 ms on a small tree) and runs ``strata-py``,
the Python launcher (``bin/strata``), for everything else. Without a
compiler, or with ``STRATA_NO_NATIVE_BUILD=1``, ``strata`` is the Python
launcher itself: the same commands, each a few milliseconds slower, and the
wheel is pure Python (``py3-none-any``), installable on any platform.

``native/walk.c`` is compiled the same way into ``strata._walk``: the listing
and ``lstat`` calls of a full scan (a no-op snapshot without a watcher), run
on two threads without the interpreter; without it the scan makes the same
calls in Python.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Distribution, Extension, setup

#: the command that copies ``script-files`` (setuptools has no module of its own for it)
build_scripts = Distribution().get_command_class("build_scripts")

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "native" / "strata.c"


def _version() -> str:
    text = (HERE / "src" / "strata" / "_version.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"\\]+)"$', text, re.MULTILINE)
    if found is None:
        raise SystemExit("setup.py: no __version__ in src/strata/_version.py")
    return found.group(1)


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def native_problem() -> str | None:
    """Why the native parts are not built here (None: they are)."""
    if os.environ.get("STRATA_NO_NATIVE_BUILD") == "1":
        return "STRATA_NO_NATIVE_BUILD=1"
    if not sys.platform.startswith("linux"):
        return f"the native parts are built on Linux only (this is {sys.platform})"
    compiler = _compiler()
    if not compiler or shutil.which(compiler[0]) is None:
        return f"no C compiler ({compiler[0] if compiler else 'CC is empty'} not found)"
    return None


#: whether this build compiles the native client and walker; without them the wheel is
#: pure Python (``py3-none-any``) and installs on any platform
NATIVE = native_problem() is None


def compile_client(target: Path) -> str | None:
    """Compile the native client to ``target``; None when built, else why not."""
    problem = native_problem()
    if problem is not None:
        return problem
    compiler = _compiler()
    command = [
        *compiler,
        "-O2",
        "-std=c11",
        "-Wall",
        f'-DSTRATA_VERSION="{_version()}"',
        "-o",
        str(target),
        str(SOURCE),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"{shlex.join(command)} failed: {done.stderr.strip()[-500:]}"
    return None


class BuildScripts(build_scripts):
    """Copy ``bin/strata`` as ``strata-py``, and as ``strata`` unless the native client builds."""

    def run(self) -> None:
        """Copy the scripts, then put the native client in place of ``strata`` if it builds."""
        self.force = True  # `strata` may be the native client from an earlier build
        super().run()
        out = Path(self.build_dir)
        launcher = out / "strata"
        shutil.copy2(launcher, out / "strata-py")
        native = out / "strata.native"
        problem = compile_client(native)
        if problem is None:
            os.replace(native, launcher)
            self.announce("built the native strata client", level=2)
        else:
            native.unlink(missing_ok=True)
            print(f"strata: the Python launcher is the strata command ({problem})", file=sys.stderr)


class PlatformDistribution(Distribution):
    """A distribution whose wheel names its platform when its native parts are built.

    ``strata`` is then machine code and ``strata._walk`` an extension module; without
    them (:data:`NATIVE` false) the wheel is pure Python: ``py3-none-any``.
    """

    def has_ext_modules(self) -> bool:
        """True when the wheel holds machine code, so is built for this platform."""
        return NATIVE


def extensions() -> list[Extension]:
    """``strata._walk``, a full scan's listing and ``lstat`` calls in C, where it can build.

    It is optional: without it (no compiler, not Linux, ``STRATA_NO_NATIVE_BUILD=1``) a scan
    runs the same steps in Python.
    """
    if not NATIVE:
        return []
    return [
        Extension(
            "strata._walk",
            ["native/walk.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        )
    ]


setup(
    cmdclass={"build_scripts": BuildScripts},
    distclass=PlatformDistribution,
    ext_modules=extensions(),
)
