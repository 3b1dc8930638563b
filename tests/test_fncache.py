"""The methods ``dataclasses`` writes, compiled once and kept between runs (``strata._fncache``).

Run against a copy of the installed package (its ``__pycache__`` is where the
code is kept), with byte code writing on, as an installed ``strata`` runs.
"""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

import strata

PROGRAM = """
import dataclasses, sys
from strata import _fncache
_fncache.install()

@dataclasses.dataclass(frozen=True, order=True)
class Point:
    x: int
    y: int = 2
    tags: tuple = ()

p = Point(1)
assert (p.x, p.y, p.tags) == (1, 2, ())
assert p == Point(1, 2) and p < Point(1, 3) and hash(p) == hash(Point(1))
assert repr(p) == "Point(x=1, y=2, tags=())", repr(p)
try:
    p.x = 5
except dataclasses.FrozenInstanceError:
    pass
else:
    sys.exit("a frozen dataclass was changed")
print(len(_fncache._cache), _fncache._new)
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    found = tmp_path / "site"
    shutil.copytree(
        Path(strata.__file__).parent, found / "strata", ignore=shutil.ignore_patterns("__pycache__")
    )
    return found


def run(site: Path) -> tuple[int, int]:
    """Run :data:`PROGRAM` with the copy; (texts kept, texts compiled by this run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env={**env, "PYTHONPATH": str(site)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kept, new = done.stdout.split()
    return int(kept), int(new)


def cache_file(site: Path) -> Path:
    return (
        site / "strata" / "__pycache__" / f"dataclass-code.{sys.implementation.cache_tag}.marshal"
    )


def test_the_methods_are_compiled_once_and_the_same_from_the_cache(site: Path) -> None:
    kept, new = run(site)
    assert new == kept > 0  # the first run compiles every text
    path = cache_file(site)
    written = path.stat().st_mtime_ns
    assert run(site) == (kept, 0)  # the second compiles none, and its dataclass is the same
    assert path.stat().st_mtime_ns == written  # nothing new: not written again


def test_a_corrupt_or_foreign_cache_is_ignored_and_written_again(site: Path) -> None:
    kept, _ = run(site)
    path = cache_file(site)
    for junk in (
        b"\x00garbage",
        MAGIC_NUMBER + b"\xffnot marshal",
        b"XXXX" + path.read_bytes()[4:],
    ):
        path.write_bytes(junk)
        assert run(site) == (kept, kept)  # everything compiled again, the program as before
        data = path.read_bytes()
        assert (
            data.startswith(MAGIC_NUMBER) and len(marshal.loads(data[len(MAGIC_NUMBER) :])) == kept
        )


def test_nothing_is_written_where_byte_code_is_not(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not cache_file(site).exists()


def test_the_install_step_writes_what_every_command_loads_even_with_byte_code_writing_off(
    site: Path,
) -> None:
    # scripts/dev runs `python -m strata._fncache` after compileall: CI and many shells set
    # PYTHONDONTWRITEBYTECODE, under which no command writes the file itself
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-m", "strata._fncache"], env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = cache_file(site)
    assert path.is_file()
    probe = (
        "import sys; from strata import _fncache; _fncache.install(); import strata.cli, "
        "strata.repo; print(_fncache._new)"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["0"]  # nothing left for a command to compile
