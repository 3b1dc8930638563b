"""terminal_exec: bounded runs, the recorded diff and events, the capability registry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata import Repository
from strata.errors import (
    CommandNotFound,
    GatewayError,
    PathOutsideWorkspace,
    UnsupportedCapability,
    UsageError,
)
from strata.gateway import Gateway, approve_all, run_capability, terminal_exec


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\n")
    (ws / "sub").mkdir()
    r = Repository.init(ws)
    r.snapshot("start")
    try:
        yield r
    finally:
        r.close()


def test_a_tiny_timeout_is_honoured(repo: Repository) -> None:
    start = time.monotonic()
    result = repo.exec(["sleep", "30"], timeout_s=0.01)
    assert time.monotonic() - start < 5
    assert result.timed_out and result.exit_code is None and not result.ok
    finished = repo.history(action="tool_call_finished")[0]
    assert finished.data["status"] == "timed_out"


def _gone(mark: str) -> bool:
    """True once no process runs ``sleep MARK`` (dead, or a zombie waiting for its adopter).

    Looked up by its command line: the command runs confined, in a PID namespace of
    its own, so the PID it sees is not the host's.
    """
    for _ in range(100):
        alive = False
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                cmdline = (status.parent / "cmdline").read_bytes()
                state = status.read_text()
            except OSError:
                continue
            if cmdline == f"sleep\0{mark}\0".encode() and "State:\tZ" not in state:
                alive = True
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_timeout_kills_the_whole_process_group(repo: Repository) -> None:
    result = repo.exec("sleep 30.0117 & wait", timeout_s=0.5, approver=approve_all())
    assert result.timed_out
    assert _gone("30.0117"), "the background sleep outlived the timeout"


def test_nothing_it_started_outlives_it(repo: Repository) -> None:
    result = repo.exec("sleep 30.0118 >/dev/null 2>&1 &", timeout_s=10)
    assert result.ok and not result.timed_out
    assert _gone("30.0118"), "the background sleep outlived the command"


def test_output_is_clipped_and_the_command_killed(repo: Repository) -> None:
    start = time.monotonic()
    result = repo.exec(["yes"], max_output=10_000, timeout_s=30)
    assert time.monotonic() - start < 10  # 'yes' never ends by itself
    assert result.truncated and not result.timed_out and not result.ok
    assert len(result.stdout) + len(result.stderr) == 10_000
    assert result.stdout.startswith("y\ny\n")
    assert repo.history(action="terminal_step")[0].data["truncated"] is True


def test_small_output_is_whole(repo: Repository) -> None:
    result = repo.exec("echo out; echo err >&2", max_output=100)
    assert (result.stdout, result.stderr, result.truncated) == ("out\n", "err\n", False)
    assert result.exit_code == 0 and result.ok


def test_exit_code_is_the_commands(repo: Repository) -> None:
    result = repo.exec(["false"])
    assert result.exit_code == 1 and not result.ok
    assert repo.history(action="tool_call_finished")[0].data["status"] == "failed"


def test_the_diff_becomes_file_artifacts_and_events_tell_the_story(repo: Repository) -> None:
    before = len(repo.history())
    result = repo.exec("echo two >> notes.txt && echo new > sub/new.txt", approver=approve_all())
    assert sorted((c["path"], c["status"]) for c in result.changes) == [
        ("notes.txt", "modified"),
        ("sub/new.txt", "added"),
    ]
    artifacts = repo.history(action="file_artifact")
    assert sorted(e.files[0] for e in artifacts) == ["notes.txt", "sub/new.txt"]
    assert {e.data["run_id"] for e in artifacts} == {result.run_id}
    events = list(reversed(repo.history()))[before:]
    gateway_events = [
        e.action_type
        for e in events
        if e.action_type.startswith(("tool_call", "terminal_step", "approval", "file_artifact"))
    ]
    assert gateway_events == [
        "tool_call_started",
        "approval_requested",
        "approval_decided",
        "terminal_step_started",
        "terminal_step_finished",
        "file_artifact",
        "file_artifact",
        "tool_call_finished",
    ]
    assert len({e.data["tool_call_id"] for e in events if "tool_call_id" in e.data}) == 1
    assert any(e.action_type == "run" for e in events)  # the run with its snapshots


def test_a_missing_program_ends_the_call_recorded(repo: Repository) -> None:
    with pytest.raises(CommandNotFound):
        repo.exec(["no-such-program-here"], approver=approve_all())
    finished = repo.history(action="tool_call")[0]
    assert finished.action_type == "tool_call_finished"
    assert finished.data["status"] == "error" and finished.data["error"] == "CommandNotFound"


def test_cwd_inside_the_workspace_only(repo: Repository, tmp_path: Path) -> None:
    assert repo.exec(["pwd"], cwd="sub").stdout.strip() == str((repo.root / "sub").resolve())
    with pytest.raises(PathOutsideWorkspace):
        repo.exec(["pwd"], cwd=tmp_path)


def test_the_step_count_is_bounded(repo: Repository) -> None:
    gateway = repo.gateway(max_steps=2)
    gateway.exec(["true"])
    gateway.exec(["true"])
    with pytest.raises(GatewayError, match="step limit reached"):
        gateway.exec(["true"])


def test_bad_arguments_record_nothing(repo: Repository) -> None:
    count = len(repo.history())
    for bad in ("", "   "):
        with pytest.raises(UsageError):
            repo.exec(bad)
    with pytest.raises(UsageError):
        repo.exec(["true"], timeout_s=0)
    assert len(repo.history()) == count


def test_terminal_exec_function_and_gateway_share_the_policy(repo: Repository) -> None:
    assert terminal_exec(repo, "cat notes.txt").stdout == "one\n"
    assert Gateway(repo, profile="full").decide("rm notes.txt").decision == "allow"


# -- capabilities ---------------------------------------------------------------------


def test_unknown_capability_kind(repo: Repository) -> None:
    with pytest.raises(UnsupportedCapability) as info:
        run_capability(repo, "pdf", {})
    assert str(info.value) == "unsupported capability kind: pdf"
    assert info.value.code == "unsupported_capability"


def test_terminal_exec_capability(repo: Repository) -> None:
    out = run_capability(repo, "terminal_exec", {"command": "cat notes.txt"})
    assert out["stdout"] == "one\n" and out["exit_code"] == 0
    out = run_capability(repo, "terminal_exec", {"argv": ["ls", "sub"]})
    assert out["decision"] == "allow"
    with pytest.raises(UsageError):
        run_capability(repo, "terminal_exec", {"cmd": "ls"})


def test_docx_create_append_read_recorded_and_undoable(repo: Repository) -> None:
    made = run_capability(
        repo, "docx", {"action": "create", "path": "docs/report.docx", "paragraphs": ["Title"]}
    )
    assert made["changed_paths"] == ["docs/report.docx"]
    run_capability(
        repo,
        "docx",
        {"action": "append", "path": "docs/report.docx", "paragraphs": ["Body", "End"]},
    )
    read = run_capability(repo, "docx", {"action": "read", "path": "docs/report.docx"})
    assert read["paragraphs"] == ["Title", "Body", "End"]
    assert read["text"] == "Title\nBody\nEnd"
    repo.undo()  # the append
    read = run_capability(repo, "docx", {"action": "read", "path": "docs/report.docx"})
    assert read["paragraphs"] == ["Title"]
    with pytest.raises(UsageError, match="exists already"):
        run_capability(repo, "docx", {"action": "create", "path": "docs/report.docx"})


def test_excel_write_and_read(repo: Repository) -> None:
    run_capability(
        repo,
        "excel",
        {"action": "write", "path": "book.xlsx", "sheet": "Data", "cells": {"A1": "name", "B2": 3}},
    )
    run_capability(
        repo,
        "excel",
        {"action": "write", "path": "book.xlsx", "sheet": "Data", "cells": {"B2": 4.5}},
    )
    read = run_capability(repo, "excel", {"action": "read", "path": "book.xlsx", "sheet": "Data"})
    assert read["cells"] == {"A1": "name", "B2": 4.5}
    some = run_capability(
        repo, "excel", {"action": "read", "path": "book.xlsx", "sheet": "Data", "cells": ["A1"]}
    )
    assert some["cells"] == {"A1": "name"}
    with pytest.raises(UsageError, match="no sheet"):
        run_capability(repo, "excel", {"action": "read", "path": "book.xlsx", "sheet": "Nope"})


@pytest.mark.parametrize("path", ["../out.docx", "/etc/out.docx", ".strata/x.docx", "link/x.docx"])
def test_capability_paths_stay_in_the_workspace(
    repo: Repository, tmp_path: Path, path: str
) -> None:
    (repo.root / "link").symlink_to(tmp_path)
    with pytest.raises(PathOutsideWorkspace):
        run_capability(repo, "docx", {"action": "create", "path": path, "paragraphs": []})
    assert not list(tmp_path.glob("*.docx"))
