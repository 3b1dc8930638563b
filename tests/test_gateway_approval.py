"""The approval gate: the terminal, an API callback, --yes; denials and the undo of an approval."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata import Repository
from strata.errors import ApprovalDenied, CommandForbidden
from strata.gateway import (
    ApprovalDecision,
    ApprovalRequest,
    approve_all,
    ask,
    callback_approver,
    terminal_approver,
)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_text("obj\n")
    r = Repository.init(ws)
    r.snapshot("start")
    try:
        yield r
    finally:
        r.close()


def actions(repo: Repository) -> list[str]:
    return [e.action_type for e in reversed(repo.history())]


def test_low_runs_without_asking(repo: Repository) -> None:
    asked: list[ApprovalRequest] = []
    result = repo.exec("cat notes.txt", approver=callback_approver(lambda r: asked.append(r)))
    assert result.stdout == "one\n" and result.approval is None and not asked


def test_api_callback_sees_the_request_and_approves(repo: Repository) -> None:
    (repo.root / "draft.txt").write_text("unrecorded\n")
    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    result = repo.exec("rm notes.txt", approver=callback_approver(decide))
    assert result.ok and not (repo.root / "notes.txt").exists()
    (request,) = asked
    assert request.command == "rm notes.txt" and request.risk == "medium"
    assert "rm deletes files" in request.reason
    assert request.workspace == str(repo.root)
    assert request.state["changes"] == ["added draft.txt"]  # what it is judged against
    assert result.approval == ApprovalDecision(True, "approved by the callback", "api")
    approvals = repo.history(action="approval")
    assert [e.action_type for e in approvals] == ["approval_decided", "approval_requested"]
    assert approvals[0].data["approved"] is True and approvals[0].data["by"] == "api"
    assert approvals[1].data["command"] == "rm notes.txt"


def test_a_denial_fails_the_step_with_its_reason_and_runs_nothing(repo: Repository) -> None:
    deny = callback_approver(lambda r: ApprovalDecision(False, "not on a Friday", "reviewer"))
    with pytest.raises(ApprovalDenied) as info:
        repo.exec("rm -rf build", approver=deny)
    assert info.value.code == "approval_denied"
    assert "not on a Friday" in str(info.value) and info.value.by == "reviewer"
    assert (repo.root / "build" / "out.o").exists()
    assert actions(repo)[-4:] == [
        "tool_call_started",
        "approval_requested",
        "approval_decided",
        "tool_call_finished",
    ]
    finished = repo.history(action="tool_call_finished")[0]
    assert finished.data["status"] == "denied" and finished.data["reason"] == "not on a Friday"


def test_no_approver_denies_with_a_clear_reason(repo: Repository) -> None:
    with pytest.raises(ApprovalDenied, match="no approver was given"):
        repo.exec("mv notes.txt n.txt")
    assert (repo.root / "notes.txt").exists()


def test_forbid_records_and_raises(repo: Repository) -> None:
    with pytest.raises(CommandForbidden) as info:
        repo.exec("rm notes.txt", profile="read-only", approver=approve_all())
    assert info.value.code == "command_forbidden"
    assert (repo.root / "notes.txt").exists()
    assert repo.history(action="tool_call")[0].data["status"] == "forbidden"
    assert repo.history(action="approval") == []  # nobody is asked about a forbidden command


def test_an_approver_that_raises_denies() -> None:
    def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("socket closed")

    request = ApprovalRequest("rm x", "medium", "why", "/ws")
    answer = ask(broken, request)
    assert not answer.approved and "socket closed" in answer.reason
    assert not ask(callback_approver(lambda r: "yes"), request).approved  # type: ignore[arg-type,return-value]


def test_approved_command_is_one_undo_away(repo: Repository) -> None:
    (repo.root / "wip.txt").write_text("unrecorded work\n")
    result = repo.exec("rm -rf build && echo two >> notes.txt", approver=approve_all())
    assert result.ok and result.decision.risk == "high"
    assert not (repo.root / "build").exists()
    # the snapshot right before the command holds the unrecorded work too
    assert result.before_snapshot is not None
    assert repo.show(result.before_snapshot, "wip.txt") == b"unrecorded work\n"
    assert sorted(c["path"] for c in result.changes) == ["build/out.o", "notes.txt"]
    repo.undo()
    assert (repo.root / "build" / "out.o").read_text() == "obj\n"
    assert (repo.root / "notes.txt").read_text() == "one\n"
    assert (repo.root / "wip.txt").read_text() == "unrecorded work\n"
    repo.redo()  # and back
    assert not (repo.root / "build").exists()
    assert (repo.root / "notes.txt").read_text() == "one\ntwo\n"


def _pty_answer(answer: bytes) -> tuple[ApprovalDecision, str]:
    master, slave = os.openpty()
    name = os.ttyname(slave)
    shown = bytearray()

    def reply() -> None:
        while b"[y/N]" not in shown:
            shown.extend(os.read(master, 4096))
        os.write(master, answer)

    thread = threading.Thread(target=reply, daemon=True)
    thread.start()
    try:
        request = ApprovalRequest(
            "rm -rf build",
            "high",
            "high (rm-recursive): removes folders and everything in them",
            "/ws",
            {"head_event_id": "abc", "changed": 1, "changes": ["modified notes.txt"], "more": 0},
        )
        decision = terminal_approver(name)(request)
        thread.join(timeout=5)
    finally:
        os.close(slave)
        os.close(master)
    return decision, shown.decode()


def test_terminal_route_shows_command_class_reason_state_and_approves() -> None:
    decision, shown = _pty_answer(b"y\n")
    assert decision == ApprovalDecision(True, "approved on the terminal", "terminal")
    assert "command:   rm -rf build" in shown
    assert "risk:      high" in shown
    assert "removes folders" in shown
    assert "modified notes.txt" in shown


def test_the_question_shows_the_risk_first_and_a_commands_terminal_escapes_written_out() -> None:
    """A command that would redraw its own line as ``ls -la`` is shown as it is."""
    disguised = "rm -rf src\r\x1b[2K\x1b]8;;x\x07ls -la\u202e"
    shown = ApprovalRequest(disguised, "high", "removes\x1b[8m folders", "/ws").describe()
    assert shown.splitlines()[0] == "risk:      high"
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "command:   rm -rf src\\r\\x1b[2K\\x1b]8;;x\\x07ls -la\\u202e" in shown
    assert "reason:    removes\\x1b[8m folders" in shown


def test_terminal_route_denies_anything_but_yes() -> None:
    decision, _ = _pty_answer(b"\n")
    assert not decision.approved and "answered ''" in decision.reason


def test_no_terminal_denies_with_a_clear_reason(tmp_path: Path) -> None:
    decision = terminal_approver(tmp_path / "no-tty")(ApprovalRequest("rm x", "medium", "r", "/"))
    assert not decision.approved
    assert "no terminal" in decision.reason and "--yes" in decision.reason
