"""Undo and redo in the manner of jj: every command is an operation; undo appends its inverse.

Refs go back on undo, and the files too when the undone operation changed
them; unrecorded work is auto-saved first, so nothing is ever lost, and
nothing in the ledger is ever erased.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from conftest import CliRunner, as_json, assert_user_error, ok, open_repo, read_manifest
from strata import Repository
from strata.errors import NothingToRedo, NothingToUndo, UnknownRef
from strata.ledger.events import Event
from strata.ledger.ledger import View

MakeRepo = Callable[..., Repository]


# -- helpers ---------------------------------------------------------------------------


def record(repo: Repository, ws: Path, text: str, name: str = "f.txt") -> Event:
    (ws / name).write_text(text)
    event = repo.snapshot(f"{name} = {text.strip()}").event
    assert event is not None
    return event


def record_lines(db: Path) -> list[bytes]:
    con = sqlite3.connect(db)
    try:
        return [bytes(r[0]) for r in con.execute("SELECT line FROM records ORDER BY seq")]
    finally:
        con.close()


def state(repo: Repository, ws: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The view and the files: what undo and redo must put back."""
    return repo.view().to_json(), read_manifest(ws)


# -- undo appends ------------------------------------------------------------------------


def test_undo_appends_and_erases_nothing(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    (ws / "f.txt").write_text("2\n")
    second = as_json(run_cli("snapshot", "--json", cwd=ws))
    db = ws / ".strata" / "ledger.db"
    before = record_lines(db)
    ops_before = as_json(run_cli("op", "log", "--json", cwd=ws))
    head_before = ok(run_cli("ledger", "head", cwd=ws))

    undone = as_json(run_cli("undo", "--json", cwd=ws))
    assert undone["undone_operation_id"] == ops_before[0]["id"] and undone["command"] == "snapshot"

    after = record_lines(db)
    assert after[: len(before)] == before, "undo rewrote history"
    assert len(after) > len(before)
    ops = as_json(run_cli("op", "log", "--json", cwd=ws))
    assert len(ops) == len(ops_before) + 1
    assert ops[1:] == ops_before
    assert ops[0]["command"] == "undo" and ops[0]["details"]["undid"] == ops_before[0]["id"]
    assert ops[0]["view_after"] == ops_before[0]["view_before"]
    assert ok(run_cli("ledger", "head", cwd=ws)) != head_before
    assert ok(run_cli("ledger", "verify", cwd=ws)).startswith("ok:")
    assert ok(run_cli("check", cwd=ws)).startswith("ok:")
    # the undone event is still there, by id
    assert ok(run_cli("show", f"{second['event_id']}:f.txt", cwd=ws)) == "2\n"
    text = ok(run_cli("op", "log", cwd=ws)).splitlines()
    assert text[0].split()[3] == "undo" and f"(reverses {ops_before[0]['id'][:12]})" in text[0]


def test_undo_of_a_snapshot_moves_refs_back_and_leaves_the_files(
    ws: Path, repo: Repository
) -> None:
    a = record(repo, ws, "1\n")
    b = record(repo, ws, "2\n")
    repo.bookmark("add", "at-b")
    repo.undo()  # the bookmark
    assert repo.view().bookmarks == {}
    repo.undo()  # the snapshot
    assert repo.head() == a
    assert repo.view().branches == {"main": a.id}
    assert (ws / "f.txt").read_text() == "2\n", "undo of a snapshot leaves the files"
    status = repo.status()
    assert [(c.path, c.status) for c in status.changes] == [("f.txt", "modified")]
    assert repo.resolve(b.id).event == b, "the undone event stays in the ledger"
    assert repo.check() == []

    # recording again makes a new event; nothing is lost or duplicated
    again = repo.snapshot("again").event
    assert again is not None and again.id != b.id
    assert again.snapshot_ref and b.snapshot_ref
    assert repo.manifest(again.snapshot_ref)["tree"] == repo.manifest(b.snapshot_ref)["tree"]
    assert again.parent_event_id == a.id


def test_undo_of_a_rewind_puts_the_files_back_and_keeps_auto_saved_work(
    ws: Path, repo: Repository
) -> None:
    a = record(repo, ws, "1\n")
    record(repo, ws, "2\n")
    (ws / "f.txt").write_text("unrecorded\n")
    (ws / "new.txt").write_text("also unrecorded\n")
    before = read_manifest(ws)
    view_before = repo.view()

    rewound = repo.rewind(a.id)
    assert rewound.auto_save is not None
    assert (ws / "f.txt").read_text() == "1\n" and not (ws / "new.txt").exists()

    repo.undo()
    assert read_manifest(ws) == before
    # the auto-save belonged to the rewind: undone with it, the work is unrecorded again
    assert repo.view() == view_before, "HEAD and branches as before the rewind"
    assert {c.path for c in repo.status().changes} == {"f.txt", "new.txt"}
    # ... and still in the ledger, so nothing is lost
    assert rewound.auto_save.snapshot_ref is not None
    assert repo.show(rewound.auto_save.id, "f.txt") == b"unrecorded\n"
    assert repo.check() == []

    repo.redo()
    assert (ws / "f.txt").read_text() == "1\n" and not (ws / "new.txt").exists()
    assert repo.head() == a


def test_undo_auto_saves_work_made_since_the_operation(ws: Path, repo: Repository) -> None:
    a = record(repo, ws, "1\n")
    record(repo, ws, "2\n")
    repo.rewind(a.id)
    (ws / "f.txt").write_text("edited after the rewind\n")
    result = repo.undo()
    assert result.command == "rewind"
    assert (ws / "f.txt").read_text() == "2\n"
    saved = [e for e in repo.history() if e.action_type == "auto_save"]
    assert len(saved) == 1
    assert repo.show(saved[0].id, "f.txt") == b"edited after the rewind\n"
    assert repo.check() == []


def test_undo_twice_undoes_two_operations_and_redo_reapplies(ws: Path, repo: Repository) -> None:
    a = record(repo, ws, "1\n")
    b = record(repo, ws, "2\n")
    c = record(repo, ws, "3\n")
    assert repo.undo().command == "snapshot"
    assert repo.head() == b
    assert repo.undo().command == "snapshot"
    assert repo.head() == a
    assert repo.view().branches == {"main": a.id}
    assert repo.redo().command == "snapshot"
    assert repo.head() == b
    assert repo.redo().command == "snapshot"
    assert repo.head() == c
    with pytest.raises(NothingToRedo):
        repo.redo()
    assert repo.check() == []


def _snap(repo: Repository, ws: Path, step: int) -> None:
    record(repo, ws, f"step {step}\n")


def _rewind(repo: Repository, ws: Path, step: int) -> None:
    repo.rewind("HEAD~1")


def _edit_then_rewind(repo: Repository, ws: Path, step: int) -> None:
    (ws / "f.txt").write_text(f"unrecorded {step}\n")
    repo.rewind("HEAD~1")


def _bookmark(repo: Repository, ws: Path, step: int) -> None:
    repo.bookmark("add", f"mark-{step}")


def _branch(repo: Repository, ws: Path, step: int) -> None:
    repo.branch_create(f"side-{step}", "HEAD~1")
    repo.branch_switch(f"side-{step}")


STEPS: dict[str, Callable[[Repository, Path, int], None]] = {
    "snapshot": _snap,
    "rewind": _rewind,
    "edit+rewind": _edit_then_rewind,
    "bookmark": _bookmark,
    "branch": _branch,
}
PAIRS = [
    ("snapshot", "snapshot"),
    ("snapshot", "rewind"),
    ("snapshot", "edit+rewind"),
    ("rewind", "bookmark"),
    ("bookmark", "rewind"),
    ("edit+rewind", "edit+rewind"),
    ("rewind", "snapshot"),
    ("branch", "snapshot"),
]


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_undo_undo_redo_redo_returns_to_the_state_after_both(
    ws: Path, repo: Repository, first: str, second: str
) -> None:
    for step in range(3):
        record(repo, ws, f"base {step}\n")
    STEPS[first](repo, ws, 1)
    STEPS[second](repo, ws, 2)
    end = state(repo, ws)

    repo.undo()
    repo.undo()
    assert state(repo, ws)[0] != end[0]
    repo.redo()
    repo.redo()
    assert state(repo, ws) == end
    assert repo.check() == []


def test_redo_after_undo_with_an_auto_save_in_between(ws: Path, repo: Repository) -> None:
    """An undo that had to auto-save must not hide the undos before it from redo."""
    a = record(repo, ws, "1\n")
    record(repo, ws, "2\n")
    repo.rewind(a.id)
    c = record(repo, ws, "3\n")
    repo.undo()  # the snapshot: f.txt = 3 stays, unrecorded now
    repo.undo()  # the rewind: 3 is auto-saved, then f.txt = 2
    assert (ws / "f.txt").read_text() == "2\n"
    assert repo.redo().command == "rewind"
    assert (ws / "f.txt").read_text() == "1\n"
    assert repo.redo().command == "snapshot"
    assert repo.head() == c
    assert repo.check() == []


def test_undoing_a_redo_then_undoing_again_goes_further_back(ws: Path, repo: Repository) -> None:
    a = record(repo, ws, "1\n")
    b = record(repo, ws, "2\n")
    record(repo, ws, "3\n")
    repo.undo()
    repo.redo()
    repo.undo()  # reverses the redo
    assert repo.head() == b
    repo.undo()  # then the snapshot before it
    assert repo.head() == a
    repo.undo()
    assert repo.head() is None
    with pytest.raises(NothingToUndo):
        repo.undo()
    assert repo.view() == View()
    assert repo.check() == []


def test_undoing_everything_empties_the_view(ws: Path, repo: Repository) -> None:
    record(repo, ws, "1\n")
    record(repo, ws, "2\n")
    (ws / "f.txt").write_text("dirty\n")
    repo.rewind("HEAD~1")
    repo.bookmark("add", "mark")
    repo.branch_create("side", "HEAD")
    undone = [repo.undo().command for _ in range(5)]
    assert undone == ["branch create", "bookmark add", "rewind", "snapshot", "snapshot"]
    with pytest.raises(NothingToUndo):
        repo.undo()
    assert repo.view() == View()
    assert (ws / "f.txt").read_text() == "dirty\n", "the files from before the rewind"
    assert repo.check() == []


def test_undoing_everything_empties_the_view_even_after_an_auto_save(
    ws: Path, repo: Repository
) -> None:
    a = record(repo, ws, "1\n")
    repo.undo()
    (ws / "f.txt").write_text("unrecorded\n")
    repo.rewind(a.id)  # auto-saves "unrecorded" first
    repo.undo()
    with pytest.raises(NothingToUndo):
        repo.undo()
    assert (ws / "f.txt").read_text() == "unrecorded\n"
    assert repo.view() == View()


def test_undo_of_ref_operations(ws: Path, repo: Repository) -> None:
    a = record(repo, ws, "1\n")
    b = record(repo, ws, "2\n")
    repo.branch_create("side", a.id)
    repo.bookmark("add", "mark", ref=a.id)
    repo.bookmark("lock", "mark")
    repo.undo()
    assert repo.view().bookmarks["mark"].locked is False
    repo.undo()
    assert repo.view().bookmarks == {}
    repo.branch_switch("side")
    assert (ws / "f.txt").read_text() == "1\n"
    repo.undo()
    assert repo.view().head_branch == "main" and repo.head() == b
    assert (ws / "f.txt").read_text() == "2\n"
    repo.branch_delete("side")
    repo.undo()
    assert repo.view().branches == {"main": b.id, "side": a.id}
    repo.undo()  # the branch create
    assert repo.view().branches == {"main": b.id}
    assert repo.check() == []


def test_redo_only_follows_an_undo(ws: Path, repo: Repository) -> None:
    record(repo, ws, "1\n")
    record(repo, ws, "2\n")
    with pytest.raises(NothingToRedo):
        repo.redo()
    repo.undo()
    record(repo, ws, "another\n")  # a new operation ends the chance to redo
    with pytest.raises(NothingToRedo):
        repo.redo()


def test_undo_and_redo_of_a_run_with_live_steps(ws: Path, repo: Repository) -> None:
    """``run --watch``: undo goes back before the first step, redo brings the files back."""
    from strata.runs.watch import LiveCapture

    base = record(repo, ws, "orig\n")
    script = (
        "import pathlib, time\n"
        "pathlib.Path('f.txt').write_text('one\\n')\n"
        "time.sleep(0.6)\n"
        "pathlib.Path('f.txt').write_text('two\\n')\n"
        "time.sleep(0.6)\n"
    )
    captures: list[LiveCapture] = []

    def around() -> LiveCapture:
        captures.append(LiveCapture(repo, debounce_ms=100, serve=False))
        return captures[-1]

    result = repo.execute_run([sys.executable, "-c", script], cwd=ws, around=around)
    assert result.exit_code == 0
    assert captures[0].events and captures[0].errors == []  # at least one live step
    after = state(repo, ws)
    assert (ws / "f.txt").read_text() == "two\n"

    assert repo.undo().command == "run"
    assert (ws / "f.txt").read_text() == "orig\n"
    assert repo.head() == base  # before the run's first step, not on one of them
    assert repo.status().clean

    assert repo.redo().command == "run"
    assert (ws / "f.txt").read_text() == "two\n"
    assert state(repo, ws) == after
    assert repo.status().clean
    redo_op = repo.operations(limit=1)[0]
    assert redo_op.command == "redo" and redo_op.details["tree_after"] is not None
    redo_event, undo_event = [e for e in repo.history() if e.action_type in ("undo", "redo")]
    assert undo_event.rationale.startswith("undo to the state before run ")
    assert redo_event.rationale.startswith("redo to the state after run ")

    # the next undo reverses the redo, the one after goes past the run (its live steps too)
    repo.undo()
    assert (ws / "f.txt").read_text() == "orig\n" and repo.head() == base
    assert repo.undo().command == "snapshot"
    assert repo.check() == []


def test_nothing_to_undo_on_a_fresh_repository(ws: Path, run_cli: CliRunner) -> None:
    ok(run_cli("init", cwd=ws))
    assert_user_error(run_cli("undo", cwd=ws), says="nothing to undo")
    assert_user_error(run_cli("redo", cwd=ws), says="nothing to redo")
    assert as_json(run_cli("op", "log", "--json", cwd=ws)) == []
    assert ok(run_cli("ledger", "head", cwd=ws)) == "(empty ledger)\n"


def test_op_log_lists_every_operation(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    (ws / "f.txt").write_text("2\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("bookmark", "add", "m", cwd=ws))
    (ws / "f.txt").write_text("dirty\n")
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    ok(run_cli("undo", cwd=ws))
    ok(run_cli("redo", cwd=ws))
    ops = as_json(run_cli("op", "log", "--json", cwd=ws))
    assert [o["command"] for o in ops] == [
        "redo",
        "undo",
        "rewind",  # its auto-save of the dirty file is part of it
        "bookmark add",
        "snapshot",
        "snapshot",
    ]
    for o in ops:
        assert set(o) >= {
            "id",
            "seq",
            "command",
            "ts",
            "author",
            "event_ids",
            "view_before",
            "view_after",
        }
    assert [o["seq"] for o in ops] == sorted((o["seq"] for o in ops), reverse=True)
    assert ops[0]["details"]["redid"] == ops[2]["id"]
    assert ops[1]["details"]["undid"] == ops[2]["id"]
    assert ops[3]["view_after"] == ops[2]["view_before"]
    limited = as_json(run_cli("op", "log", "--limit", "2", "--json", cwd=ws))
    assert limited == ops[:2]
    lines = ok(run_cli("op", "log", cwd=ws)).splitlines()
    assert len(lines) == len(ops)
    assert "re-applies" in lines[0] and "reverses" in lines[1]


# -- the stateful property ----------------------------------------------------------------

PATHS = ("a.txt", "b.bin", "d/c.txt")
CONTENTS = st.one_of(
    st.sampled_from([b"", b"one\n", b"two\n", b"\x00\x01\x02binary"]), st.binary(max_size=12)
)


def workspace_files(root: Path) -> dict[str, bytes]:
    """Regular files of the workspace (folders are checked separately)."""
    found = read_manifest(root)
    for rel, entry in found.items():
        if entry[0] == "dir":
            assert any(k.startswith(rel + "/") for k in found), f"empty folder {rel} left behind"
    return {rel: entry[2] for rel, entry in found.items() if entry[0] == "file"}


@dataclass(frozen=True)
class Done:
    """An operation the model expects undo to reverse."""

    command: str
    changes_files: bool
    files_before: dict[str, bytes]
    files_after: dict[str, bytes]
    head_before: str | None
    head_after: str | None


class UndoMachine(RuleBasedStateMachine):
    """Random commands, with a model of what undo and redo must give back."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="strata-undo-"))
        self.root = self.tmp / "ws"
        self.root.mkdir()
        self.repo: Repository | None = None
        self.files: dict[str, bytes] = {}
        self.content: dict[str, dict[str, bytes]] = {}  # state event -> its files
        self.order: list[str] = []  # state events in the order they appeared
        self.head: str | None = None
        self.done: list[Done] = []
        self.undone: list[Done] = []
        self.names = 0
        # HEAD once everything is undone: None, unless a command auto-saved while there was
        # nothing left to undo (undo skips auto-saves, so their ref moves stay; see
        # test_undoing_everything_empties_the_view_even_after_an_auto_save)

    @initialize(seed=st.integers(0, 2**32 - 1))
    def start(self, seed: int) -> None:
        self.repo = open_repo(self.root, seed=seed)

    # -- the model -------------------------------------------------------------------

    @property
    def r(self) -> Repository:
        assert self.repo is not None
        return self.repo

    def dirty(self) -> bool:
        """Unrecorded work: files HEAD does not hold (with no HEAD, any file at all)."""
        if self.head is None:
            return bool(self.files)
        return self.files != self.content[self.head]

    def run(self, action: Callable[[], object], *, auto_save: bool) -> object:
        """Run a command; learn the state events it recorded; check the files and HEAD."""
        before = dict(self.files)
        known = set(self.content)
        action()
        new = [e for e in self.r.history(limit=3) if e.is_state and e.id not in known]
        assert len(new) <= 1, new
        for e in new:
            self.content[e.id] = before
            self.order.append(e.id)
        saved = [e for e in new if e.action_type == "auto_save"]
        assert bool(saved) == auto_save, "an auto-save exactly when work was unrecorded"
        return saved[0].id if saved else None

    def check_workspace(self) -> None:
        assert workspace_files(self.root) == self.files
        assert self.r.view().head_event == self.head

    def push(self, done: Done) -> None:
        self.done.append(done)
        self.undone.clear()  # redo only follows an undo

    # -- rules -----------------------------------------------------------------------

    @rule(path=st.sampled_from(PATHS), data=st.one_of(st.none(), CONTENTS))
    def edit(self, path: str, data: bytes | None) -> None:
        target = self.root / path
        if data is None:
            if target.exists():
                target.unlink()
                if target.parent != self.root and not any(target.parent.iterdir()):
                    target.parent.rmdir()
            self.files.pop(path, None)
        else:
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)
            self.files[path] = data

    @rule()
    def snapshot(self) -> None:
        expect = self.head is None or self.dirty()  # the first snapshot records even nothing
        before_head = self.head
        result = self.r.snapshot("step")
        assert result.unchanged == (not expect)
        if result.event is None:
            return
        self.content[result.event.id] = dict(self.files)
        self.order.append(result.event.id)
        self.head = result.event.id
        self.push(
            Done("snapshot", False, dict(self.files), dict(self.files), before_head, self.head)
        )
        self.check_workspace()

    def _restore_op(self, command: str, target: str, action: Callable[[], object]) -> None:
        before = dict(self.files)
        head_before = self.head  # an auto-save belongs to the operation: undone with it
        self.run(action, auto_save=self.dirty())
        self.files = dict(self.content[target])
        self.head = target
        self.push(Done(command, True, before, dict(self.files), head_before, target))
        self.check_workspace()

    @rule(pick=st.integers(0, 10**6))
    def rewind(self, pick: int) -> None:
        if not self.order:
            return
        target = self.order[pick % len(self.order)]
        if target == self.head and not self.dirty():  # already there: nothing is recorded
            assert self.r.rewind(target).event is None
            return
        self._restore_op("rewind", target, lambda: self.r.rewind(target))

    @rule(pick=st.integers(0, 10**6))
    def branch_create_and_switch(self, pick: int) -> None:
        if not self.order:
            return
        target = self.order[pick % len(self.order)]
        self.names += 1
        name = f"b{self.names}-side"  # generated names end in -N: never these
        self.r.branch_create(name, target)
        self.push(Done("branch create", False, {}, {}, self.head, self.head))
        self._restore_op("branch switch", target, lambda: self.r.branch_switch(name))

    @rule()
    def bookmark_add(self) -> None:
        if self.head is None:
            with pytest.raises(UnknownRef):
                self.r.bookmark("add", "never")
            return
        self.names += 1
        self.r.bookmark("add", f"mark-{self.names}")
        self.push(Done("bookmark add", False, {}, {}, self.head, self.head))

    @rule()
    def undo(self) -> None:
        if not self.done:
            with pytest.raises(NothingToUndo):
                self.r.undo()
            return
        top = self.done.pop()
        if top.changes_files:
            self.run(self.r.undo, auto_save=self.dirty())
            self.files = dict(top.files_before)
        else:
            assert self.r.undo().command == top.command
            top = replace(top, files_after=dict(self.files))  # what a redo brings back
        self.head = top.head_before
        self.undone.append(top)
        self.check_workspace()

    @rule()
    def redo(self) -> None:
        if not self.undone:
            with pytest.raises(NothingToRedo):
                self.r.redo()
            return
        top = self.undone.pop()
        if top.changes_files:
            before = dict(self.files)
            self.run(self.r.redo, auto_save=self.dirty())
            again = replace(top, command="redo", files_before=before, head_before=self.head)
            self.files = dict(top.files_after)
        elif self.dirty():  # unrecorded edits: a redo that moves only refs leaves them
            assert self.r.redo().command == top.command
            again = replace(top, command="redo", head_before=self.head)
        else:  # clean: the files come back as the undo found them
            before = dict(self.files)
            assert self.r.redo().command == top.command
            self.files = dict(top.files_after)
            again = replace(
                top, command="redo", changes_files=True, files_before=before, head_before=self.head
            )
        self.head = top.head_after
        self.done.append(again)
        self.check_workspace()

    @rule(dirty=st.sampled_from(PATHS))
    def undo_twice_edit_redo_twice(self, dirty: str) -> None:
        self.undo()
        self.undo()
        self.edit(dirty, b"edited between undo and redo\n")
        self.redo()
        self.redo()

    # -- the end -----------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if self.repo is not None:
                self.final_checks()
        finally:
            if self.repo is not None:
                self.repo.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def final_checks(self) -> None:
        repo = self.r
        assert repo.check() == []
        states = [e for e in repo.history() if e.is_state]
        assert {e.id for e in states} == set(self.content), [
            (e.action_type, e.rationale) for e in states if e.id not in self.content
        ]
        for n, e in enumerate(states):
            out = self.tmp / f"export-{n}"
            repo.export(e.id, out)
            assert workspace_files(out) == self.content[e.id], e.action_type
        for _ in range(4 * len(repo.operations()) + 5):
            if not self.done:
                break
            self.undo()
        else:
            raise AssertionError("undo never ran out of operations")
        with pytest.raises(NothingToUndo):
            repo.undo()
        assert repo.view() == View(), "undoing everything empties the view"
        assert repo.check() == []
        assert repo.ledger.verify() is None


@pytest.mark.slow
def test_random_commands_undo_and_redo_keep_the_repository_sound() -> None:
    run_state_machine_as_test(
        UndoMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            # a failure is reported as found: no minutes spent shrinking it
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
        ),
    )


def test_the_model_checks_something() -> None:
    """A machine that undoes nothing must still fail on a wrong file: the model is live."""
    machine = UndoMachine()
    try:
        machine.start(1)
        machine.edit("a.txt", b"x")
        machine.snapshot()
        (machine.root / "a.txt").write_bytes(b"changed behind the model's back")
        with pytest.raises(AssertionError):
            machine.check_workspace()
        machine.files["a.txt"] = b"changed behind the model's back"
        machine.rewind(0)
        assert (machine.root / "a.txt").read_bytes() == b"x"
        machine.undo()
        assert (machine.root / "a.txt").read_bytes() == b"changed behind the model's back"
    finally:
        machine.teardown()


# -- operation groups: one user action, many operations ----------------------------------------


@pytest.mark.parametrize("ledger", ["sqlite", "jsonl"])
def test_a_group_is_undone_whole_and_redone_the_persons_edits_stay(
    tmp_path: Path, make_repo: Callable[..., Repository], ledger: str
) -> None:
    """An agent's prompt: two tool calls and the person's edit between them, one group."""
    from strata.ledger.events import Author

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    (ws / "notes.txt").write_text("notes\n")
    repo = make_repo(ws, ledger=ledger)
    base = repo.snapshot("base").event
    agent, person = Author("session-1", "agent"), Author("alice", "human")
    prompt = repo.new_group("prompt", "fix the bug", agent, session_id="session-1")
    with repo.grouped(prompt):
        (ws / "app.py").write_text("x = 9\n")
        repo.snapshot("Bash sed", author=agent)
        (ws / "notes.txt").write_text("notes\nthe person's line\n")
        repo.snapshot("changes made outside the agent", author=person)
        (ws / "new.py").write_text("made\n")
        repo.snapshot("Write new.py", author=agent, paths=["new.py"])
    steps = [o for o in repo.operations() if o.group]
    assert len(steps) == 3 and {o.group["id"] for o in steps if o.group} == {prompt.id}
    assert steps[0].group == prompt.to_json()
    assert {e.operation_id for e in repo.history(limit=3)} == {prompt.id}  # the events' too
    after = state(repo, ws)

    result = repo.undo()
    assert result.group is not None and result.group["title"] == "fix the bug"
    assert (ws / "app.py").read_text() == "x = 1\n" and not (ws / "new.py").exists()
    assert (ws / "notes.txt").read_text() == "notes\nthe person's line\n"  # theirs: kept
    assert repo.head() == base
    assert [c.path for c in repo.status().changes] == ["notes.txt"]

    repo.redo()
    assert state(repo, ws) == after
    repo.undo()  # the redo, reversed
    assert (ws / "app.py").read_text() == "x = 1\n" and not (ws / "new.py").exists()
    with pytest.raises(NothingToUndo):  # the group stays undone; before it, only 'base'
        repo.undo()
        repo.undo()
    assert repo.check() == []


def test_undo_step_reverses_only_the_last_step_of_a_group(ws: Path, repo: Repository) -> None:
    from strata.ledger.events import Author

    (ws / "a.txt").write_text("a\n")
    repo.snapshot("base")
    agent = Author("session-1", "agent")
    with repo.grouped(repo.new_group("prompt", "two edits", agent)):
        (ws / "a.txt").write_text("a1\n")
        repo.snapshot("first", author=agent)
        (ws / "b.txt").write_text("b\n")
        repo.snapshot("second", author=agent)
    result = repo.undo(step=True)
    assert result.group is None
    assert not (ws / "b.txt").exists() and (ws / "a.txt").read_text() == "a1\n"
    repo.undo()  # the rest of the group
    assert (ws / "a.txt").read_text() == "a\n"
