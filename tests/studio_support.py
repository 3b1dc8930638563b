"""A workspace with some history for the studio's tests, and the browser they drive."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from strata import Author, Repository

BOT = Author("bot", "agent")
ALICE = Author("alice", "human")

#: a 1x1 PNG, red then blue
RED = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763"
    "f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
BLUE = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763"
    "6060f80f0001040100a5a8c4f50000000049454e44ae426082"
)
HOSTILE = "<img src=x onerror=alert(1)>.txt"


def history(root: Path) -> Path:
    """A workspace: alice's start, a bot's edit, a new file, a bookmark, an image change."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text("def answer():\n    return 41\n")
    (root / "logo.png").write_bytes(RED)
    (root / HOSTILE).write_text("<script>alert('x')</script>\x1b[31m\n")
    with Repository.create(root)[0] as repo:
        repo.snapshot("start", author=ALICE)
        (root / "app.py").write_text("def answer():\n    return 42\n")
        repo.snapshot("fix the answer", author=BOT)
        (root / "notes.md").write_text("# Notes\n")
        (root / "logo.png").write_bytes(BLUE)
        repo.snapshot("add notes, recolour the logo", author=ALICE, bookmark="v1")
    return root


def chromium() -> str:
    """Debian's chromium (installed by scripts/dev), or skip."""
    pytest.importorskip("playwright.sync_api")
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed ('scripts/dev test' installs it)")
    return found


def launch_args() -> list[str]:
    """Chromium refuses to run as root inside its own sandbox."""
    return ["--no-sandbox"] if os.geteuid() == 0 else []


@contextmanager
def studio_process(*args: str, cwd: Path | None = None, home: Path | None = None) -> Iterator[str]:
    """``strata studio ARGS`` running; yields its first line, then stops it with SIGTERM.

    Leaving the block checks that the studio stopped cleanly (exit 0).
    """
    with subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env={**os.environ, "HOME": str(home)} if home else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as served:
        try:
            assert served.stdout is not None
            yield served.stdout.readline()
            served.send_signal(signal.SIGTERM)
            assert served.wait(timeout=20) == 0
        except BaseException:
            served.kill()
            raise
