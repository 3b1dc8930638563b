"""The Draft's time travel: rewind to a revision, undo it; a failed step leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import as_json, assert_user_error, ok
from strata import Repository
from strata.agent.loop import run_agent
from strata.errors import ProviderCancelled, ProviderError, UndoError, UnknownRef, WorkshopBusy
from strata.providers.base import CancelToken
from strata.providers.scripted import Scripted


def _draft_with_two_revisions(repo: Repository) -> tuple[str, str, str]:
    """A Draft whose revisions hold a.txt as 'one', then 'two' (and b.txt); their ids and base."""
    (repo.root / "a.txt").write_text("older\n")
    repo.snapshot("older")
    (repo.root / "a.txt").write_text("zero\n")
    repo.snapshot("base")
    draft = repo.draft()
    (draft.path / "a.txt").write_text("one\n")
    first = draft.record("first")
    (draft.path / "a.txt").write_text("two\n")
    (draft.path / "b.txt").write_text("new\n")
    second = draft.record("second")
    assert first is not None and second is not None
    return first.id, second.id, draft.base.id


def test_rewind_brings_the_files_back_and_records_a_new_revision(repo: Repository) -> None:
    first, second, _ = _draft_with_two_revisions(repo)
    draft = repo.draft()
    result = draft.rewind(first[:10])
    assert (draft.path / "a.txt").read_text() == "one\n"
    assert not (draft.path / "b.txt").exists()
    assert sorted(result.paths) == ["a.txt", "b.txt"]
    # nothing erased: the tip is a new revision saying where it went and came from
    tip = draft.tip()
    assert tip.id == result.revision_event_id and tip.parent_event_id == second
    assert tip.data["rewind"] == {"to": first, "from": second}
    assert repo.tree_of(tip) == repo.tree_of(repo.event(first))
    # Published untouched
    assert (repo.root / "a.txt").read_text() == "zero\n"


def test_rewind_to_base_and_undo_puts_the_files_back(repo: Repository) -> None:
    _, second, _ = _draft_with_two_revisions(repo)
    draft = repo.draft()
    draft.rewind("base")
    assert (draft.path / "a.txt").read_text() == "zero\n"
    undone = repo.undo()
    assert undone.command == "draft rewind"
    assert (draft.path / "a.txt").read_text() == "two\n"
    assert (draft.path / "b.txt").read_text() == "new\n"
    assert repo.tree_of(draft.tip()) == repo.tree_of(repo.event(second))
    with pytest.raises(UndoError, match="not redone"):  # refs alone would leave the files behind
        repo.redo()
    assert (draft.path / "a.txt").read_text() == "two\n"


def test_unrecorded_edits_are_recorded_before_a_rewind(repo: Repository) -> None:
    first, _, _ = _draft_with_two_revisions(repo)
    draft = repo.draft()
    (draft.path / "a.txt").write_text("unsaved\n")
    draft.rewind(first)
    repo.undo()
    assert (draft.path / "a.txt").read_text() == "unsaved\n"


def test_an_unknown_revision_changes_nothing(repo: Repository) -> None:
    _draft_with_two_revisions(repo)
    draft = repo.draft()
    tip = draft.tip().id
    with pytest.raises(UnknownRef):
        draft.rewind("ffffffff")
    # a Published event that is not the Draft's is no revision of it
    with pytest.raises(UnknownRef):
        draft.rewind(next(e.id for e in repo.history() if e.rationale == "older"))
    assert draft.tip().id == tip and (draft.path / "a.txt").read_text() == "two\n"


def test_a_second_step_is_refused_while_one_runs(repo: Repository) -> None:
    _draft_with_two_revisions(repo)
    draft = repo.draft()
    with draft.step("agent step 1"), pytest.raises(WorkshopBusy, match="in progress"):
        draft.rewind("base")
    assert (draft.path / "a.txt").read_text() == "two\n"


def test_a_failed_step_puts_the_draft_back(repo: Repository) -> None:
    _draft_with_two_revisions(repo)
    draft = repo.draft()
    with pytest.raises(RuntimeError), draft.step("agent step"):
        (draft.path / "a.txt").write_text("half\n")
        (draft.path / "c.txt").write_text("stray\n")
        raise RuntimeError("the model call failed")
    assert (draft.path / "a.txt").read_text() == "two\n"
    assert not (draft.path / "c.txt").exists()


def test_a_failed_agent_step_leaves_the_draft_as_before(repo: Repository) -> None:
    (repo.root / "a.txt").write_text("zero\n")
    repo.snapshot("base")
    write = "write_file"
    provider = Scripted(
        [
            {"tool_calls": [{"name": write, "arguments": {"path": "a.txt", "content": "1\n"}}]},
            {
                "tool_calls": [
                    {"name": write, "arguments": {"path": "a.txt", "content": "2\n"}},
                    {"name": write, "arguments": {"path": "b.txt", "content": "2\n"}},
                ]
            },
        ]
    )
    cancel = CancelToken()

    def stop_after_first_write_of_step_2(
        step: int, call_id: str, tool: str, result: object
    ) -> None:
        if step == 1:
            cancel.cancel()  # a Ctrl-C between the two tool calls of step 2

    with pytest.raises(ProviderCancelled):
        run_agent(
            repo, provider, "edit", cancel=cancel, on_tool_result=stop_after_first_write_of_step_2
        )
    draft = repo.draft()
    # step 1 is recorded; step 2's first write is undone
    assert (draft.path / "a.txt").read_text() == "1\n"
    assert repo.tree_of(draft.tip()) == draft.workspace.scan().tree


def test_a_killed_step_is_put_back_on_the_next_write(repo: Repository, tmp_path: Path) -> None:
    import subprocess
    import sys

    _draft_with_two_revisions(repo)
    draft = repo.draft()
    child = (
        "import os, signal, sys\n"
        "from strata import Repository\n"
        "repo = Repository.open(sys.argv[1])\n"
        "d = repo.draft(create=False)\n"
        "with d.step('agent step'):\n"
        "    (d.path / 'a.txt').write_text('half\\n')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", child, str(repo.root)], check=False)
    assert proc.returncode == -9
    assert (draft.path / "a.txt").read_text() == "half\n"
    repo.snapshot("next write")  # any write finishes what the killed step left
    assert (draft.path / "a.txt").read_text() == "two\n"
    assert not list(repo.layout.runs.glob("*.lease"))


def test_cli_draft_rewind(run_cli, ws: Path) -> None:
    (ws / "a.txt").write_text("zero\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    status = as_json(run_cli("draft", "status", "--json", cwd=ws))
    files = Path(status["path"])
    ok(run_cli("draft", "run", "--sandbox", "none", "--", "sh", "-c", "echo one > a.txt", cwd=ws))
    out = as_json(run_cli("draft", "rewind", "base", "--json", cwd=ws))
    assert out["paths"] == ["a.txt"] and out["files_changed"] == 1
    assert (files / "a.txt").read_text() == "zero\n"
    assert_user_error(run_cli("draft", "rewind", "nosuchrev", cwd=ws), says="nosuchrev")
    ok(run_cli("undo", cwd=ws))
    assert (files / "a.txt").read_text() == "one\n"


def test_a_failed_agent_step_keeps_edits_made_by_hand_before_it(repo: Repository) -> None:
    (repo.root / "a.txt").write_text("zero\n")
    repo.snapshot("base")
    draft = repo.draft()
    (draft.path / "mine.txt").write_text("by hand\n")  # not recorded
    provider = Scripted([])  # the first model call fails
    with pytest.raises(ProviderError):
        run_agent(repo, provider, "edit")
    assert (draft.path / "mine.txt").read_text() == "by hand\n"
