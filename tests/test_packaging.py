"""The wheels: pure Python (``py3-none-any``) without the native parts, platform-tagged with them.

Builds the package twice from this checkout (pip, with build isolation) and
installs the pure wheel on its own, where it must record a snapshot with the
walker and client in Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _wheel(out: Path, **env: str) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def _script(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".data/scripts/strata")]
        return z.read(name)


def _machine_code(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [n for n in z.namelist() if n.endswith(".so")]


def test_without_the_native_parts_the_wheel_is_pure_python_and_works(tmp_path: Path) -> None:
    for how, env in (
        ("off", {"STRATA_NO_NATIVE_BUILD": "1"}),
        ("no compiler", {"CC": "/nonexistent/cc"}),
    ):
        wheel = _wheel(tmp_path / how.replace(" ", "-"), **env)
        assert wheel.name.endswith("-py3-none-any.whl"), (how, wheel.name)
        assert _machine_code(wheel) == [], how
        assert _script(wheel).startswith(b"#!"), how  # the Python launcher
    # installed on its own, it records and reads back without any native part
    target = tmp_path / "installed"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    env = {**os.environ, "PYTHONPATH": str(target), "STRATA_NO_DAEMON": "1", "HOME": str(tmp_path)}

    def strata(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(target / "bin" / "strata"), *args],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    strata("init")
    (ws / "a.txt").write_text("hello again\n")
    strata("snapshot", "-m", "second")
    assert "a.txt" in strata("diff", "HEAD~1", "HEAD", "--stat")
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import strata, importlib.util as u; "
            "print(strata.__file__, u.find_spec('strata._walk'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(target)) and where.rstrip().endswith("None"), where


def test_with_a_compiler_the_wheel_carries_the_native_client_and_walker(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "native")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    assert [n for n in _machine_code(wheel) if "strata/_walk" in n], _machine_code(wheel)
    assert _script(wheel).startswith(b"\x7fELF")  # the native client
