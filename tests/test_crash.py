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
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
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


CHILD = Path(__file__).with_name("crash_child.py")


@dataclass(frozen=True)
class Step:
    """One filesystem change of a command: the ``os`` function and the paths it was given."""

    func: str
    paths: tuple[str, ...]


def _step_child(args: list[str], cwd: Path, stop_at: int) -> tuple[subprocess.Popen[bytes], int]:
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(write_end), str(stop_at), *args],
            cwd=cwd,
            env=CliRunner(cwd).env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
    return proc, read_end


def _read_all(fd: int, timeout: float = 120) -> bytes:
    chunks = []
    deadline = time.monotonic() + timeout
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the command under test neither reported nor ended"
            chunk = pipe.read(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            if chunks[-1].endswith(b"\n"):  # a stopped child reports one line, then waits
                return b"".join(chunks)


def record_steps(args: list[str], cwd: Path) -> list[Step]:
    """Run ``strata ARGS`` to its end; the filesystem changes it made, in order."""
    proc, report = _step_child(args, cwd, 0)
    steps = json.loads(_read_all(report))
    assert proc.wait(timeout=120) == 0, f"strata {args} failed on its own"
    return [Step(func, tuple(paths)) for func, paths in steps]


def kill_at_step(args: list[str], cwd: Path, stop_at: int) -> Step:
    """Start ``strata ARGS`` and SIGKILL it just before its ``stop_at``-th filesystem change.

    The child reports reaching that step and waits there, so the kill lands
    exactly at it; the test fails if the command ended first or died otherwise.
    Returns the step it was killed at.
    """
    assert stop_at >= 1
    proc, report = _step_child(args, cwd, stop_at)
    try:
        line = _read_all(report)
        assert line, f"strata {args} ended (exit {proc.wait()}) before its step {stop_at}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"not killed by SIGKILL: {proc.returncode}"
    func, paths = json.loads(line)
    return Step(func, tuple(paths))


def after_journal(steps: list[Step]) -> range:
    """The step numbers (1-based) after the journal is in place: the writes it covers."""
    for number, step in enumerate(steps, 1):
        if step.func == "replace" and "/.strata/journal/" in step.paths[-1]:
            return range(number + 1, len(steps) + 1)
    raise AssertionError("the command never wrote a journal")


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


@pytest.fixture(scope="module")
def template(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, str, Any, Any, list[Step]]:
    """One prepared workspace to copy per iteration, and the steps of a full rewind."""
    base = tmp_path_factory.mktemp("crash-template")
    ws = base / "ws"
    a, b, state_a, state_bu = build(ws)
    probe = base / "probe"
    shutil.copytree(ws, probe, symlinks=True)
    steps = record_steps(["rewind", a], probe)
    assert read_manifest(probe) == state_a
    return ws, a, b, state_a, state_bu, steps


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
    template: tuple[Path, str, str, Any, Any, list[Step]], tmp_path: Path
) -> None:
    template_ws, a, _b, state_a, state_bu, steps = template
    rng = random.Random(20240611)
    outcomes = []
    for n in range(ITERATIONS):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        kill_at_step(["rewind", a], ws, rng.randint(1, len(steps)))
        outcome = _check_rewind_outcome(
            ws, tmp_path / f"auto{n}", state_a, state_bu, rewind_back=n == 0
        )
        outcomes.append(outcome)
        shutil.rmtree(tmp_path / f"run{n}")  # 2,000 files a copy: keep the disk light
    assert len(outcomes) == ITERATIONS


def test_rewind_killed_while_writing_is_completed_by_the_next_command(
    template: tuple[Path, str, str, Any, Any, list[Step]], tmp_path: Path
) -> None:
    """Kills aimed at the writes themselves (after the journal is durable)."""
    template_ws, a, _b, state_a, state_bu, steps = template
    rng = random.Random(99)
    writes = after_journal(steps)
    for n in range(ITERATIONS - 1):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        # the first third of the writes: the workspace is then the most mixed
        kill_at_step(["rewind", a], ws, rng.choice(writes[: max(1, len(writes) // 3)]))
        if n % 2:  # crash the recovery too: it must be as restartable as the rewind
            probe = _fresh_copy(ws, tmp_path / f"probe{n}")
            recovery = record_steps(["status"], probe)
            shutil.rmtree(tmp_path / f"probe{n}")
            assert recovery, "the recovery changed nothing: the rewind was not cut short"
            kill_at_step(["status"], ws, rng.randint(1, len(recovery)))
        outcome = _check_rewind_outcome(
            ws, tmp_path / f"auto{n}", state_a, state_bu, rewind_back=n == 0
        )
        assert outcome == "target", "once the journal is written, the rewind completes"
        trash = ws / ".strata" / "trash"  # the replaced files of the killed rewind: deleted
        assert not trash.exists() or os.listdir(trash) == []
        shutil.rmtree(tmp_path / f"run{n}")


def test_a_rewind_killed_while_emptying_its_trash_leaves_nothing_there(
    template: tuple[Path, str, str, Any, Any, list[Step]], tmp_path: Path
) -> None:
    """The files a rewind replaced wait in the trash; the recovery deletes them."""
    template_ws, a, _b, state_a, state_bu, steps = template
    emptying = [
        n
        for n, step in enumerate(steps, 1)
        if step.func == "unlink" and re.fullmatch(r"\d+-[0-9a-f]{8}-\d+", step.paths[0])
    ]
    assert emptying, "the rewind replaced no file through the trash"
    ws = _fresh_copy(template_ws, tmp_path / "run")
    kill_at_step(["rewind", a], ws, emptying[0])
    trash = ws / ".strata" / "trash"
    assert os.listdir(trash), "killed before the trash was emptied: the files wait there"
    assert _check_rewind_outcome(ws, tmp_path / "auto", state_a, state_bu) == "target"
    assert os.listdir(trash) == []


def test_killed_snapshot_leaves_a_sound_repository(
    template: tuple[Path, str, str, Any, Any, list[Step]], tmp_path: Path
) -> None:
    template_ws, _a, b, _state_a, state_bu, _steps = template
    rng = random.Random(7)
    probe = _fresh_copy(template_ws, tmp_path / "probe")
    (probe / ".strata" / "statcache").unlink(missing_ok=True)
    steps = record_steps(["snapshot", "-m", "killed?"], probe)
    for n in range(2):
        ws = _fresh_copy(template_ws, tmp_path / f"run{n}")
        (ws / ".strata" / "statcache").unlink(missing_ok=True)  # make the scan read every file
        kill_at_step(["snapshot", "-m", "killed?"], ws, rng.randint(1, len(steps)))
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
