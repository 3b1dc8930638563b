"""Real crashes: a child ``strata`` process is killed with SIGKILL at random points.

After each kill the repository is opened again by a fresh command (which
finishes any journal the dead one left), ``strata check`` must pass, and the
workspace must be whole: for a killed rewind, either the state before it (with
the unrecorded work still there) or the target state (with the unrecorded work
kept in an auto-save).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import NOW_MS, CliRunner, open_repo, read_manifest, write_tree

pytestmark = pytest.mark.slow

FILES = 2000
ITERATIONS = 4
TEMP_PREFIX = ".strata-tmp-"


def _initial(i: int) -> bytes:
    return f"file {i}\n".encode() * (1 + i % 7)


def build(root: Path) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """A recorded state A, a recorded state B, then unrecorded edits on top of B.

    Returns (event A, event B, manifest of A, manifest of B plus the edits).
    """
    write_tree(root, {f"d{i % 40:02}/f{i:04}.txt": _initial(i) for i in range(FILES)})
    with open_repo(root) as repo:
        a = repo.snapshot("A").event
        state_a = read_manifest(root)
        for i in range(0, FILES, 2):  # B: half the files rewritten, some removed, some added
            path = root / f"d{i % 40:02}/f{i:04}.txt"
            if i % 10 == 0:
                path.unlink()
            else:
                path.write_bytes(b"B version\n" + _initial(i))
        for i in range(200):
            (root / f"d{i % 40:02}/new{i:03}.bin").write_bytes(bytes([i]) * 300)
        (root / "d01/f0001.txt").chmod(0o755)
        b = repo.snapshot("B").event
        assert a is not None and b is not None
    for i in range(1, 60, 3):  # unrecorded work that a rewind must not lose
        (root / f"d{i % 40:02}/f{i:04}.txt").write_bytes(b"unrecorded edit\n")
    (root / "unrecorded.txt").write_text("brand new, never recorded\n")
    return a.id, b.id, state_a, read_manifest(root)


def strata(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = CliRunner(cwd).env({"STRATA_NOW": str(NOW_MS + 10**6)})
    return subprocess.run(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def kill_after(args: list[str], cwd: Path, delay: float) -> int | None:
    """Start ``strata ARGS``; SIGKILL it after ``delay`` seconds. Its exit code, or None."""
    env = CliRunner(cwd).env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=delay)
        return proc.returncode  # finished before the kill
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def kill_during_apply(args: list[str], cwd: Path, delay: float) -> tuple[int | None, float]:
    """Start ``strata ARGS``; SIGKILL it ``delay`` seconds after its journal appears.

    Returns its exit code (None when killed) and how long the journal had existed.
    """
    journal = cwd / ".strata" / "journal"
    env = CliRunner(cwd).env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None and not any(journal.glob("*.json")):
        time.sleep(0.0005)
    seen = time.monotonic()
    try:
        proc.wait(timeout=delay)
        return proc.returncode, time.monotonic() - seen
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, time.monotonic() - seen


def without_temp_files(state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    temps = [p for p in state if p.rsplit("/", 1)[-1].startswith(TEMP_PREFIX)]
    return {p: v for p, v in state.items() if p not in temps}, temps


def assert_repository_sound(ws: Path) -> None:
    # the first command after the crash takes the lock and finishes any journal
    reopened = strata("status", "--json", cwd=ws)
    assert reopened.returncode == 0, reopened.stderr
    check = strata("check", "--json", cwd=ws)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["ok"] is True
    assert not any((ws / ".strata" / "journal").glob("*.json")), "a journal was left pending"


def _timed(args: list[str], cwd: Path) -> float:
    start = time.monotonic()
    result = strata(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return time.monotonic() - start


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, Any, Any, float]:
    """One prepared workspace to copy per iteration, and how long a full rewind takes."""
    base = tmp_path_factory.mktemp("crash-template")
    ws = base / "ws"
    a, b, state_a, state_bu = build(ws)
    probe = base / "probe"
    shutil.copytree(ws, probe, symlinks=True)
    duration = _timed(["rewind", a], probe)
    return ws, a, b, state_a, state_bu, duration


def _fresh_copy(template_ws: Path, where: Path) -> Path:
    ws = where / "ws"
    shutil.copytree(template_ws, ws, symlinks=True)
    return ws


def _check_rewind_outcome(
    ws: Path, out: Path, state_a: Any, state_bu: Any, *, rewind_back: bool = False
) -> str:
    """'old' or 'target'; anything else (a mixed workspace, lost work) fails."""
    assert_repository_sound(ws)
    state, temps = without_temp_files(read_manifest(ws))
    assert temps == [], f"temporary files left after recovery: {temps}"
    if state == state_bu:
        return "old"
    assert state == state_a, "a mixed workspace: neither the old nor the target state"
    # the unrecorded work is in the auto-save made before the first write
    history = json.loads(strata("history", "--json", cwd=ws).stdout)
    autos = [e for e in history if e["action_type"] == "auto_save"]
    assert len(autos) == 1
    assert strata("export", autos[0]["id"], str(out), cwd=ws).returncode == 0
    assert read_manifest(out) == state_bu
    if rewind_back:
        assert strata("rewind", autos[0]["id"], cwd=ws).returncode == 0
        assert read_manifest(ws) == state_bu
    return "target"


def test_killed_rewind_leaves_the_old_or_the_target_state(
    template: tuple[Path, str, str, Any, Any, float], tmp_path: Path
) -> None:
    template_ws, a, _b, state_a, state_bu, duration = template
    rng = random.Random(20240611)
    outcomes = []
    for n in range(ITERATIONS):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        delay = rng.uniform(0.05, duration * 1.1)
        finished = kill_after(["rewind", a], ws, delay)
        assert finished in (None, 0), f"rewind failed on its own with exit {finished}"
        outcome = _check_rewind_outcome(
            ws, tmp_path / f"auto{n}", state_a, state_bu, rewind_back=n == 0
        )
        outcomes.append(outcome)
        shutil.rmtree(tmp_path / f"run{n}")  # 2,000 files a copy: keep the disk light
    assert len(outcomes) == ITERATIONS


def test_rewind_killed_while_writing_is_completed_by_the_next_command(
    template: tuple[Path, str, str, Any, Any, float], tmp_path: Path
) -> None:
    """Kills aimed at the writes themselves (after the journal is durable)."""
    template_ws, a, _b, state_a, state_bu, duration = template
    rng = random.Random(99)
    killed_mid_write = 0
    for n in range(ITERATIONS - 1):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        finished, _ = kill_during_apply(["rewind", a], ws, rng.uniform(0, duration / 3))
        assert finished in (None, 0)
        if finished is None:
            killed_mid_write += 1
        if n % 2:  # crash the recovery too: it must be as restartable as the rewind
            kill_after(["status"], ws, rng.uniform(0.05, duration / 2))
        outcome = _check_rewind_outcome(
            ws, tmp_path / f"auto{n}", state_a, state_bu, rewind_back=n == 0
        )
        assert outcome == "target", "once the journal is written, the rewind completes"
        shutil.rmtree(tmp_path / f"run{n}")
    assert killed_mid_write > 0, "no kill landed while the rewind was writing"


def test_killed_snapshot_leaves_a_sound_repository(
    template: tuple[Path, str, str, Any, Any, float], tmp_path: Path
) -> None:
    template_ws, _a, b, _state_a, state_bu, duration = template
    rng = random.Random(7)
    for n in range(2):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        (ws / ".strata" / "statcache").unlink(missing_ok=True)  # make the scan read every file
        delay = rng.uniform(0.05, duration)
        finished = kill_after(["snapshot", "-m", "killed?"], ws, delay)
        assert finished in (None, 0)
        assert_repository_sound(ws)
        history = json.loads(strata("history", "--json", cwd=ws).stdout)
        assert history[0]["id"] == b or history[0]["rationale"] == "killed?"
        # the next snapshot records the workspace exactly
        again = strata("snapshot", "--json", cwd=ws)
        assert again.returncode == 0, again.stderr
        head = json.loads(strata("history", "--json", "--limit", "1", cwd=ws).stdout)[0]
        out = tmp_path / f"export{n}"
        assert strata("export", head["id"], str(out), cwd=ws).returncode == 0
        assert read_manifest(out) == state_bu
        assert read_manifest(ws) == state_bu
        shutil.rmtree(tmp_path / f"run{n}")
