"""The first hook after the watcher has gone: it records here, and misses no change.

The watcher exits when idle; the next PreToolUse finds none, records the
person's work in its own process (its walk started while its modules load,
``strata.store.prefetch``) and starts a new watcher once it has answered.
Each test records the workspace through a watcher, stops it, changes files
the ways an editor or a person does (in place, nested, renamed, deleted,
with the old mtime put back), then runs the real hook: the person's event
must hold every change and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import CliRunner, as_json, ok

AUTO = {"STRATA_NO_DAEMON": ""}


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Iterator[Path]:
    root = tmp_path / "ws"
    for i in range(3):
        (root / f"pkg{i}" / "deep" / "deeper").mkdir(parents=True)
        for j in range(20):
            (root / f"pkg{i}" / f"m{j}.py").write_text(f"x = {j}\n")
        (root / f"pkg{i}" / "deep" / "deeper" / "leaf.txt").write_text("leaf\n")
    (root / "top.txt").write_text("top\n")
    ok(run_cli("init", cwd=root))
    # recorded through a watcher (the stat cache then holds its token), which then goes
    ok(run_cli("watch", "--daemon", "--no-capture", "--json", cwd=root))
    try:
        (root / "top.txt").write_text("top v2\n")
        ok(run_cli("snapshot", "-m", "through the watcher", cwd=root, env=AUTO))
    finally:
        ok(run_cli("watch", "--stop", cwd=root))
    yield root
    run_cli("watch", "--stop", cwd=root)


def pre_tool_use(run_cli: CliRunner, ws: Path) -> subprocess.CompletedProcess[str]:
    payload = {
        "session_id": "s-cold",
        "transcript_path": str(ws.parent / "t.jsonl"),
        "cwd": str(ws),
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": str(ws / "agent.txt"), "old_string": "", "new_string": "a"},
    }
    return subprocess.run(
        [sys.executable, "-m", "strata", "hook", "claude-code"],
        input=json.dumps(payload), cwd=ws, env=run_cli.env(AUTO), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip


def persons_event(run_cli: CliRunner, ws: Path, change: Callable[[Path], None]) -> list[str]:
    """Make ``change`` with no watcher running, run the hook; the files of the person's event."""
    change(ws)
    done = pre_tool_use(run_cli, ws)
    assert done.returncode == 0, done.stderr
    event = as_json(run_cli("history", "--limit", "1", "--json", cwd=ws))[0]
    assert event["author"]["kind"] == "human", event
    files: list[str] = event["files"]
    return sorted(files)


def in_place(ws: Path) -> None:
    with open(ws / "pkg1" / "m3.py", "a") as f:  # the folder's mtime does not move
        f.write("y = 1\n")
    with open(ws / "pkg2" / "deep" / "deeper" / "leaf.txt", "r+") as f:
        f.write("LEAF")  # same size, nested two folders down


def renamed_and_deleted(ws: Path) -> None:
    (ws / "pkg0" / "m1.py").rename(ws / "pkg0" / "deep" / "moved.py")
    (ws / "pkg1" / "m2.py").unlink()
    (ws / "pkg2" / "deep" / "new.txt").write_text("new\n")


def mtime_put_back(ws: Path) -> None:
    """Same size, the old mtime restored: only the ctime (and the bytes) tell, as git checks."""
    target = ws / "pkg0" / "m7.py"
    before = target.stat()
    target.write_text("x = 9\n")  # same length as "x = 7\n"
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_mtime_ns == before.st_mtime_ns


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (in_place, ["pkg1/m3.py", "pkg2/deep/deeper/leaf.txt"]),
        # (the move is one entry: pkg0/m1.py found again as pkg0/deep/moved.py)
        (renamed_and_deleted, ["pkg0/deep/moved.py", "pkg1/m2.py", "pkg2/deep/new.txt"]),
        (mtime_put_back, ["pkg0/m7.py"]),
    ],
)
def test_a_change_made_while_no_watcher_ran_is_the_persons(
    workspace: Path, run_cli: CliRunner, change: Callable[[Path], None], expected: list[str]
) -> None:
    assert persons_event(run_cli, workspace, change) == expected
    status = as_json(run_cli("status", "--json", cwd=workspace))
    assert status["changes"] == []  # everything recorded, nothing else


def test_a_change_made_right_after_the_cold_hook_is_not_lost(
    workspace: Path, run_cli: CliRunner
) -> None:
    """The hook starts a watcher once it has answered; what changes meanwhile is still seen."""
    persons_event(run_cli, workspace, in_place)
    (workspace / "pkg0" / "m5.py").write_text("x = 55\n")  # the watcher may be starting
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = as_json(run_cli("watch", "--status", "--json", cwd=workspace))
        if status["running"]:
            break
        time.sleep(0.1)
    assert status["running"], "the hook started no watcher"
    (workspace / "pkg1" / "m6.py").write_text("x = 66\n")
    assert persons_event(run_cli, workspace, lambda ws: None) == ["pkg0/m5.py", "pkg1/m6.py"]


def test_a_stat_cache_that_is_corrupt_means_a_full_walk(
    workspace: Path, run_cli: CliRunner
) -> None:
    (workspace / ".strata" / "statcache").write_bytes(b"\x00garbage")
    assert persons_event(run_cli, workspace, in_place) == [
        "pkg1/m3.py",
        "pkg2/deep/deeper/leaf.txt",
    ]


def test_a_file_tools_hook_loads_neither_the_shell_classifier_nor_the_sandbox(
    workspace: Path, run_cli: CliRunner
) -> None:
    """An Edit is judged by its path: the command classifier and the executor stay unloaded."""
    in_place(workspace)
    payload = {
        "session_id": "s-cold",
        "transcript_path": str(workspace.parent / "t.jsonl"),
        "cwd": str(workspace),
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": str(workspace / "a.txt"), "old_string": "", "new_string": "a"},
    }
    done = subprocess.run(
        [sys.executable, "-m", "strata", "hook", "claude-code"],
        input=json.dumps(payload), cwd=workspace, capture_output=True, text=True, timeout=60,
        env=run_cli.env({**AUTO, "PYTHONPROFILEIMPORTTIME": "1"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "strata.gateway.decision" in loaded  # judged by the gateway all the same
    assert "strata.gateway.classify" not in loaded and "bashlex" not in loaded
    assert "strata.gateway.exec" not in loaded and "strata.gateway.approval" not in loaded
    assert "strata.sandbox.bwrap" not in loaded  # nothing runs confined: no bubblewrap argv
    event = as_json(run_cli("history", "--limit", "1", "--json", cwd=workspace))[0]
    assert event["files"] == ["pkg1/m3.py", "pkg2/deep/deeper/leaf.txt"]
