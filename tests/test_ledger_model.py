"""The ledger's model as a user meets it: state and annotation events, branches,
bookmarks, operations, history filters, the event fields and schema checks."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ALICE, BOT, CliRunner, as_json, assert_user_error, ok
from strata import Repository
from strata.errors import (
    BookmarkLocked,
    BranchInUse,
    NameTaken,
    UnknownRef,
    UsageError,
)
from strata.ledger.drivers.sqlite import SqliteDriver
from strata.ledger.events import Event
from strata.ledger.records import Record
from strata.store.objects import hash_bytes

MakeRepo = Callable[..., Repository]

# -- helpers ---------------------------------------------------------------------------


def record(
    repo: Repository, ws: Path, files: dict[str, str | bytes], message: str = "", **kwargs: Any
) -> Event:
    """Write ``files`` into the workspace and snapshot; the event must be new."""
    for name, data in files.items():
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    event = repo.snapshot(message or f"write {', '.join(files)}", **kwargs).event
    assert event is not None
    return event


def three(repo: Repository, ws: Path) -> tuple[Event, Event, Event]:
    """Three snapshots on main: f.txt = 1, 2, 3."""
    return (
        record(repo, ws, {"f.txt": "1\n"}, "one"),
        record(repo, ws, {"f.txt": "2\n"}, "two"),
        record(repo, ws, {"f.txt": "3\n"}, "three"),
    )


def rewrite_record(db: Path, seq: int, mutate: Callable[[dict[str, Any]], None]) -> None:
    """Change the body of record ``seq`` and re-seal it and every later record.

    The chain and the index stay consistent, so only what ``mutate`` did is wrong.
    """
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("DROP TRIGGER IF EXISTS records_no_update")
        rows = con.execute("SELECT seq, line FROM records ORDER BY seq").fetchall()
        records = [Record.from_line(bytes(line)) for _, line in rows]
        prev = ""
        con.execute("BEGIN")
        for r in records:
            body = r.body
            if r.seq == seq:
                mutate(body)
            sealed = Record.seal(r.seq, r.kind, body, prev)
            prev = sealed.hash
            if sealed != r:
                con.execute("UPDATE records SET line = ? WHERE seq = ?", (sealed.to_line(), r.seq))
        con.execute("COMMIT")
    finally:
        con.close()
    driver = SqliteDriver(db)
    try:
        driver.rebuild_index()
    finally:
        driver.close()


def event_seq(db: Path, event_id: str) -> int:
    con = sqlite3.connect(db)
    try:
        for seq, line in con.execute("SELECT seq, line FROM records WHERE kind = 'event'"):
            if json.loads(line)["body"]["id"] == event_id:
                return int(seq)
    finally:
        con.close()
    raise AssertionError(f"no record for {event_id}")


# -- state and annotation events ------------------------------------------------------------


def test_a_rewind_is_an_annotation_anchored_at_its_target(ws: Path, repo: Repository) -> None:
    a, b, c = three(repo, ws)
    result = repo.rewind(b.id)
    rewind = result.event
    assert rewind.action_type == "rewind"
    assert rewind.snapshot_ref is None and not rewind.is_state
    assert rewind.parent_event_id is None
    assert rewind.anchor_event_id == b.id
    assert repo.head() == b
    # naming the annotation names the point it is anchored at
    assert repo.resolve(rewind.id).event == b

    d = record(repo, ws, {"g.txt": "new\n"}, "from b")
    assert d.parent_event_id == b.id, "a state event's parent is a state event, never a rewind"
    assert [repo.resolve(f"HEAD~{n}").event for n in range(3)] == [d, b, a]
    assert repo.resolve("HEAD~").event == b
    assert repo.resolve(f"{d.id}~2").event == a
    with pytest.raises(UnknownRef):
        repo.resolve("HEAD~3")
    # the abandoned tip is a state event too and walks its own line
    assert repo.resolve(f"{c.id}~1").event == b
    assert repo.check() == []


def test_head_n_never_walks_through_annotations(ws: Path, repo: Repository) -> None:
    a, b, c = three(repo, ws)
    repo.rewind(a.id)
    repo.rewind(c.id)  # two annotations between c and the next state event
    repo.restore(a.id, ["f.txt"])  # and a restore: HEAD stays at c
    d = record(repo, ws, {"f.txt": "4\n"})
    actions = [e.action_type for e in repo.history()]
    assert actions[:4] == ["snapshot", "restore", "rewind", "rewind"]
    assert repo.resolve("HEAD~1").event == c
    assert repo.resolve("HEAD~2").event == b
    assert repo.resolve("HEAD~3").event == a
    assert d.parent_event_id == c.id


def test_snapshot_after_rewinding_starts_a_new_branch(ws: Path, repo: Repository) -> None:
    a, _, c = three(repo, ws)
    repo.rewind(a.id)
    view = repo.view()
    assert view.detached and view.head_event == a.id
    assert view.branches == {"main": c.id}, "a rewind moves HEAD, never a branch tip"

    d = record(repo, ws, {"f.txt": "other\n"}, "diverge")
    assert d.branch not in ("", "main")
    view = repo.view()
    assert view.branches == {"main": c.id, d.branch: d.id}
    assert view.head_branch == d.branch and not view.detached
    # the abandoned line is still whole and reachable
    assert repo.resolve("main").event == c
    assert repo.resolve("main~2").event == a
    assert repo.show(c.id, "f.txt") == b"3\n"

    # a second divergence from the same point gets another generated name
    repo.rewind(a.id)
    e = record(repo, ws, {"f.txt": "third line of work\n"})
    assert e.branch not in ("main", d.branch)
    assert set(repo.view().branches) == {"main", d.branch, e.branch}
    assert repo.check() == []


def test_rewind_branch_names_the_new_branch(ws: Path, repo: Repository) -> None:
    a, _, c = three(repo, ws)
    repo.rewind(a.id, branch="experiment")
    assert repo.view().branches == {"main": c.id}, "the name exists once something is recorded"
    d = record(repo, ws, {"f.txt": "x\n"})
    assert d.branch == "experiment"
    assert repo.view().branches == {"main": c.id, "experiment": d.id}
    with pytest.raises(NameTaken, match="exists"):
        repo.rewind(a.id, branch="experiment")
    with pytest.raises(UsageError, match="looks like an id"):
        repo.rewind(a.id, branch="cafe")


def test_old_tips_stay_reachable_from_the_cli(
    ws: Path, run_cli: CliRunner, make_repo: MakeRepo
) -> None:
    repo = make_repo(ws)
    a, _, c = three(repo, ws)
    repo.close()
    ok(run_cli("rewind", a.id, "--branch", "retry", cwd=ws))
    (ws / "f.txt").write_text("retry\n")
    ok(run_cli("snapshot", "-m", "retry", cwd=ws))
    branches = as_json(run_cli("branch", "list", "--json", cwd=ws))
    tips = {b["name"]: b["tip_event_id"] for b in branches["branches"]}
    assert tips["main"] == c.id
    assert branches["head"]["branch"] == "retry"

    diff = as_json(run_cli("diff", c.id, "HEAD", "--json", cwd=ws))
    assert [f["path"] for f in diff["files"]] == ["f.txt"]
    ok(run_cli("rewind", "main", cwd=ws))
    assert (ws / "f.txt").read_text() == "3\n"
    ok(run_cli("rewind", "retry", cwd=ws))
    assert (ws / "f.txt").read_text() == "retry\n"


def test_rewinding_forward_to_the_tip_is_a_fast_forward(ws: Path, repo: Repository) -> None:
    a, _, c = three(repo, ws)
    repo.rewind(a.id)
    assert repo.view().detached
    repo.rewind(c.id)
    view = repo.view()
    assert not view.detached and view.head_branch == "main"
    assert (ws / "f.txt").read_text() == "3\n"
    d = record(repo, ws, {"f.txt": "4\n"})
    assert d.branch == "main" and d.parent_event_id == c.id
    assert repo.view().branches == {"main": d.id}, "no new branch"


def test_rewinding_to_a_branch_name_puts_head_on_that_branch(ws: Path, repo: Repository) -> None:
    a, _, c = three(repo, ws)
    repo.rewind(a.id)
    d = record(repo, ws, {"f.txt": "side\n"})
    repo.rewind("main")
    assert repo.view().head_branch == "main" and not repo.view().detached
    e = record(repo, ws, {"f.txt": "4\n"})
    assert e.branch == "main" and e.parent_event_id == c.id
    assert repo.view().branches == {"main": e.id, d.branch: d.id}


# -- branches -------------------------------------------------------------------------------


def test_branch_create_switch_list_and_delete(
    ws: Path, run_cli: CliRunner, make_repo: MakeRepo
) -> None:
    repo = make_repo(ws)
    _, b, c = three(repo, ws)
    repo.close()

    created = as_json(run_cli("branch", "create", "feature", "HEAD~1", "--json", cwd=ws))
    assert created == {"schema": 1, "name": "feature", "tip_event_id": b.id}
    listed = as_json(run_cli("branch", "list", "--json", cwd=ws))
    assert listed["head"] == {"branch": "main", "event_id": c.id}
    assert listed["branches"] == [
        {"name": "feature", "tip_event_id": b.id, "head": False},
        {"name": "main", "tip_event_id": c.id, "head": True},
    ]
    assert (ws / "f.txt").read_text() == "3\n", "create does not move HEAD or files"

    ok(run_cli("branch", "switch", "feature", cwd=ws))
    assert (ws / "f.txt").read_text() == "2\n"
    (ws / "f.txt").write_text("feature work\n")
    made = as_json(run_cli("snapshot", "--json", cwd=ws))
    listed = as_json(run_cli("branch", "list", "--json", cwd=ws))
    assert {r["name"]: r["tip_event_id"] for r in listed["branches"]} == {
        "feature": made["event_id"],
        "main": c.id,
    }
    history = as_json(run_cli("history", "--branch", "feature", "--json", cwd=ws))
    assert [(e["action_type"], e.get("anchor_event_id")) for e in history] == [
        ("snapshot", None),
        ("branch_switch", b.id),  # the switch is an annotation on the branch it moved to
    ]
    assert history[0]["id"] == made["event_id"]

    assert_user_error(run_cli("branch", "delete", "feature", cwd=ws), says="HEAD's branch")
    assert_user_error(run_cli("branch", "create", "main", cwd=ws), says="exists")
    assert_user_error(run_cli("branch", "switch", "nope", cwd=ws), says="nope")

    ok(run_cli("branch", "switch", "main", cwd=ws))
    assert (ws / "f.txt").read_text() == "3\n"
    deleted = as_json(run_cli("branch", "delete", "feature", "--json", cwd=ws))
    assert deleted == {
        "schema": 1,
        "name": "feature",
        "tip_event_id": made["event_id"],
        "deleted": True,
    }
    listed = as_json(run_cli("branch", "list", "--json", cwd=ws))
    assert [r["name"] for r in listed["branches"]] == ["main"]

    # deleting removed a name, not an event
    assert ok(run_cli("show", f"{made['event_id']}:f.txt", cwd=ws)) == "feature work\n"
    assert_user_error(run_cli("rewind", "feature", cwd=ws), says="unknown ref")
    ok(run_cli("branch", "create", "feature", made["event_id"], cwd=ws))
    assert ok(run_cli("show", "feature:f.txt", cwd=ws)) == "feature work\n"
    assert ok(run_cli("check", cwd=ws)).startswith("ok:")


def test_branch_operations_from_the_api(ws: Path, repo: Repository) -> None:
    a, _, c = three(repo, ws)
    assert repo.branch_create("old", a.id) == a.id
    switched = repo.branch_switch("old")
    assert switched.restored_paths == ["f.txt"]
    assert repo.view().head_branch == "old" and repo.head() == a
    d = record(repo, ws, {"f.txt": "on old\n"})
    assert d.branch == "old" and d.parent_event_id == a.id
    assert repo.view().branches == {"main": c.id, "old": d.id}
    with pytest.raises(BranchInUse, match="HEAD's branch"):
        repo.branch_delete("old")
    repo.branch_switch("main")
    assert repo.branch_delete("old") == d.id
    assert repo.view().branches == {"main": c.id}
    assert repo.resolve(d.id).event == d
    assert [e.id for e in repo.history(branch="old", action="snapshot")] == [d.id]
    with pytest.raises(UnknownRef):
        repo.branch_delete("old")
    assert repo.check() == []


@pytest.mark.parametrize("name", ["abcd", "ghjk", "deadbeef", "0123", "mnpqrstvwxyz", "a1b2c3"])
def test_names_that_look_like_ids_are_refused(ws: Path, repo: Repository, name: str) -> None:
    record(repo, ws, {"f.txt": "1\n"})
    repo.bookmark("add", "fine")
    attempts: list[Callable[[], object]] = [
        lambda: repo.branch_create(name),
        lambda: repo.bookmark("add", name),
        lambda: repo.bookmark("rename", "fine", new_name=name),
        lambda: repo.rewind("HEAD", branch=name),
        lambda: repo.snapshot("x", bookmark=name),
    ]
    for attempt in attempts:
        with pytest.raises(UsageError, match="looks like an id"):
            attempt()
    assert set(repo.view().branches) == {"main"}
    assert set(repo.view().bookmarks) == {"fine"}


@pytest.mark.parametrize("name", ["HEAD", "@", "a~1", "has space", "-dash", "x:y", ""])
def test_names_that_are_ref_syntax_are_refused(ws: Path, repo: Repository, name: str) -> None:
    record(repo, ws, {"f.txt": "1\n"})
    with pytest.raises(UsageError):
        repo.branch_create(name)
    with pytest.raises(UsageError):
        repo.bookmark("add", name)


def test_id_like_names_are_refused_by_the_cli(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    for args in (
        ["branch", "create", "abcd"],
        ["bookmark", "add", "ghjk"],
        ["snapshot", "save", "beef"],
        ["rewind", "HEAD", "--branch", "cafe"],
    ):
        assert_user_error(run_cli(*args, cwd=ws), says="looks like an id", code=2)  # usage
    ok(run_cli("bookmark", "add", "abc", cwd=ws))  # three letters cannot be an id prefix


def test_names_resolve_as_refs_everywhere(
    ws: Path, run_cli: CliRunner, make_repo: MakeRepo
) -> None:
    repo = make_repo(ws)
    a, b, _ = three(repo, ws)
    repo.bookmark("add", "mybookmark", ref=a.id)
    repo.branch_create("mybranch", b.id)
    repo.close()

    diff = as_json(run_cli("diff", "mybookmark", "HEAD", "--json", cwd=ws))
    assert diff["files"][0]["path"] == "f.txt" and diff["files"][0]["status"] == "modified"
    assert ok(run_cli("show", "mybookmark:f.txt", cwd=ws)) == "1\n"
    assert ok(run_cli("show", "mybranch~1:f.txt", cwd=ws)) == "1\n"
    assert ok(run_cli("show", "main~2:f.txt", cwd=ws)) == "1\n"
    out = ws.parent / "exported"
    ok(run_cli("export", "mybranch", out, cwd=ws))
    assert (out / "f.txt").read_text() == "2\n"
    assert (
        as_json(run_cli("diff", "mybranch", "mybookmark", "--json", cwd=ws))["files_changed"] == 1
    )
    ok(run_cli("rewind", "mybranch", cwd=ws))
    assert (ws / "f.txt").read_text() == "2\n"
    listed = as_json(run_cli("branch", "list", "--json", cwd=ws))
    assert listed["head"] == {"branch": "mybranch", "event_id": b.id}
    ok(run_cli("rewind", "mybookmark", cwd=ws))
    assert (ws / "f.txt").read_text() == "1\n"
    ok(run_cli("bookmark", "add", "second", "mybookmark", cwd=ws))
    marks = as_json(run_cli("bookmark", "list", "--json", cwd=ws))
    assert {m["name"]: m["target_event_id"] for m in marks} == {
        "mybookmark": a.id,
        "second": a.id,
    }


# -- bookmarks ------------------------------------------------------------------------------


def test_bookmark_lifecycle(ws: Path, repo: Repository) -> None:
    a, b, c = three(repo, ws)
    assert repo.bookmark("add", "good").target == c.id
    assert repo.bookmark("add", "older", ref="HEAD~2").target == a.id
    with pytest.raises(NameTaken, match="exists"):
        repo.bookmark("add", "good", ref=a.id)

    assert repo.bookmark("move", "older", ref=b.id).target == b.id
    assert repo.bookmark("rename", "older", new_name="middle").name == "middle"
    with pytest.raises(NameTaken, match="exists"):
        repo.bookmark("rename", "middle", new_name="good")
    assert {n: m.target for n, m in repo.view().bookmarks.items()} == {"good": c.id, "middle": b.id}

    assert repo.bookmark("lock", "good").locked is True
    for action, kwargs in (
        ("move", {"ref": a.id}),
        ("rename", {"new_name": "great"}),
        ("delete", {}),
    ):
        with pytest.raises(BookmarkLocked, match="locked"):
            repo.bookmark(action, "good", **kwargs)
    assert repo.view().bookmarks["good"].target == c.id
    assert repo.view().bookmarks["good"].locked

    repo.bookmark("unlock", "good")
    assert repo.bookmark("move", "good", ref=a.id).target == a.id
    assert repo.bookmark("rename", "good", new_name="great").name == "great"
    assert repo.bookmark("delete", "great").to_json() == {
        "name": "great",
        "action": "delete",
        "deleted": True,
    }
    assert set(repo.view().bookmarks) == {"middle"}
    with pytest.raises(UnknownRef):
        repo.bookmark("delete", "great")
    with pytest.raises(UnknownRef):
        repo.resolve("great")
    assert repo.resolve("middle").event == b
    # a bookmark follows its event, not HEAD
    record(repo, ws, {"f.txt": "4\n"})
    assert repo.view().bookmarks["middle"].target == b.id
    assert repo.check() == []


def test_a_locked_bookmark_is_a_one_line_error_on_the_cli(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    (ws / "f.txt").write_text("2\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("bookmark", "add", "release", "HEAD~1", cwd=ws))
    assert ok(run_cli("bookmark", "lock", "release", cwd=ws)).startswith("Locked bookmark release")
    for args in (
        ["bookmark", "move", "release", "HEAD"],
        ["bookmark", "rename", "release", "v1"],
        ["bookmark", "delete", "release"],
    ):
        err = assert_user_error(run_cli(*args, cwd=ws), says="bookmark 'release' is locked")
        assert "strata bookmark unlock release" in err
    marks = as_json(run_cli("bookmark", "list", "--json", cwd=ws))
    assert len(marks) == 1 and marks[0]["name"] == "release" and marks[0]["locked"] is True

    ok(run_cli("bookmark", "unlock", "release", cwd=ws))
    moved = as_json(run_cli("bookmark", "move", "release", "HEAD", "--json", cwd=ws))
    head = as_json(run_cli("status", "--json", cwd=ws))["head_event_id"]
    assert moved["target_event_id"] == head and moved["locked"] is False
    ok(run_cli("bookmark", "rename", "release", "v1", cwd=ws))
    ok(run_cli("bookmark", "delete", "v1", cwd=ws))
    assert ok(run_cli("bookmark", "list", cwd=ws)) == "No bookmarks.\n"
    assert_user_error(run_cli("bookmark", "delete", "v1", cwd=ws), says="unknown bookmark")
    assert_user_error(run_cli("bookmark", "add", "v1", "nosuchref", cwd=ws), says="nosuchref")


def test_snapshot_save_records_and_bookmarks_in_one_operation(ws: Path, repo: Repository) -> None:
    record(repo, ws, {"f.txt": "1\n"})
    ops_before = len(repo.operations())
    (ws / "f.txt").write_text("2\n")
    result = repo.snapshot("known good", bookmark="known-good")
    assert result.event is not None
    assert repo.view().bookmarks["known-good"].target == result.event.id
    ops = repo.operations()
    assert len(ops) == ops_before + 1, "one operation, not two"
    assert ops[0].command == "snapshot"
    assert ops[0].view_after.bookmarks["known-good"].target == result.event.id

    # unique names: refused before anything is recorded
    (ws / "f.txt").write_text("3\n")
    with pytest.raises(NameTaken, match="exists"):
        repo.snapshot("again", bookmark="known-good")
    assert repo.head() == result.event
    # nothing changed: no event and no bookmark
    record(repo, ws, {"f.txt": "3\n"})
    unchanged = repo.snapshot("same", bookmark="nothing-new")
    assert unchanged.unchanged and "nothing-new" not in repo.view().bookmarks


def test_snapshot_save_on_the_cli(ws: Path, run_cli: CliRunner) -> None:
    (ws / "f.txt").write_text("1\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    saved = as_json(run_cli("snapshot", "save", "before-upgrade", "-m", "ok", "--json", cwd=ws))
    marks = as_json(run_cli("bookmark", "list", "--json", cwd=ws))
    assert marks == [
        {"name": "before-upgrade", "target_event_id": saved["event_id"], "locked": False}
    ]
    out = ok(run_cli("snapshot", "save", "again", cwd=ws))
    assert "Nothing changed" in out and "no bookmark again" in out
    assert len(as_json(run_cli("bookmark", "list", "--json", cwd=ws))) == 1


# -- operations and history filters --------------------------------------------------------


def test_operation_groups_events(ws: Path, run_cli: CliRunner) -> None:
    (ws / "base.txt").write_text("base\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    base = as_json(run_cli("snapshot", "--json", cwd=ws))["event_id"]
    grouped = []
    for step in range(3):
        (ws / f"step{step}.py").write_text(f"step = {step}\n")
        made = as_json(
            run_cli(
                "snapshot",
                "--operation",
                "rename-user",
                "--scope",
                "block",
                "-m",
                f"step {step} of 3",
                "--json",
                cwd=ws,
            )
        )
        grouped.append(made["event_id"])
    (ws / "after.txt").write_text("after\n")
    after = as_json(run_cli("snapshot", "--json", cwd=ws))["event_id"]

    events = as_json(run_cli("history", "--operation", "rename-user", "--json", cwd=ws))
    assert [e["id"] for e in events] == grouped[::-1]
    assert {(e["operation_id"], e["action_scope"]) for e in events} == {("rename-user", "block")}

    groups = as_json(run_cli("history", "--group-by", "operation", "--expand", "--json", cwd=ws))
    by_key = {g["key"]: g for g in groups}
    assert len(groups) == 3
    rename = by_key["rename-user"]
    assert rename["group_by"] == "operation"
    assert rename["count"] == 3
    assert rename["event_ids"] == grouped[::-1]
    assert [e["id"] for e in rename["events"]] == grouped[::-1]
    assert rename["changed_paths"] == ["step0.py", "step1.py", "step2.py"]
    assert rename["first_ts"] <= rename["last_ts"]
    others = [g for k, g in by_key.items() if k != "rename-user"]
    assert sorted(i for g in others for i in g["event_ids"]) == sorted([base, after])
    assert all(g["count"] == 1 for g in others)

    plain = as_json(run_cli("history", "--group-by", "operation", "--json", cwd=ws))
    assert all("events" not in g for g in plain), "--expand adds the events"
    text = ok(run_cli("history", "--group-by", "operation", "--expand", cwd=ws))
    assert "rename-user" in text and "3 events" in text and "step 1 of 3" in text


@pytest.fixture
def varied(ws: Path, repo: Repository) -> Repository:
    """A history with two authors of two kinds, two branches, rewinds, auto-saves and folders."""
    a = record(repo, ws, {"src/app.py": "v1\n", "README": "hi\n"}, author=ALICE)
    record(repo, ws, {"src/lib/util.py": "u1\n"}, author=BOT, operation="refactor", scope="file")
    record(repo, ws, {"src/app.py": "v2\n"}, author=BOT, operation="refactor", scope="file")
    (ws / "notes.txt").write_text("unrecorded\n")
    repo.rewind(a.id, author=ALICE)  # auto-saves notes.txt
    record(repo, ws, {"docs/guide.md": "guide\n"}, author=ALICE)  # starts a branch
    record(repo, ws, {"src/appendix.py": "not below src/app.py\n"}, author=BOT)
    return repo


FILTERS: list[tuple[str, dict[str, str], Callable[[Event], bool]]] = [
    ("author", {"author": "alice"}, lambda e: e.author.name == "alice"),
    ("author", {"author": "bot"}, lambda e: e.author.name == "bot"),
    ("author_kind", {"author_kind": "agent"}, lambda e: e.author.kind == "agent"),
    ("author_kind", {"author_kind": "system"}, lambda e: e.author.kind == "system"),
    ("action", {"action": "snapshot"}, lambda e: e.action_type == "snapshot"),
    ("action", {"action": "rewind"}, lambda e: e.action_type == "rewind"),
    ("action", {"action": "auto_save"}, lambda e: e.action_type == "auto_save"),
    ("branch", {"branch": "main"}, lambda e: e.branch == "main"),
    ("operation", {"operation": "refactor"}, lambda e: e.operation_id == "refactor"),
    ("path", {"path": "src"}, lambda e: any(f.startswith("src/") for f in e.files)),
    ("path", {"path": "src/app.py"}, lambda e: "src/app.py" in e.files),
    ("path", {"path": "src/lib/"}, lambda e: any(f.startswith("src/lib/") for f in e.files)),
    ("path", {"path": "notes.txt"}, lambda e: "notes.txt" in e.files),
]


@pytest.mark.parametrize(("label", "kwargs", "keep"), FILTERS, ids=[str(f[1]) for f in FILTERS])
def test_each_history_filter_narrows_exactly(
    varied: Repository, label: str, kwargs: dict[str, str], keep: Callable[[Event], bool]
) -> None:
    everything = varied.history()
    want = [e.id for e in everything if keep(e)]
    got = [e.id for e in varied.history(**kwargs)]  # type: ignore[arg-type]
    assert got == want
    assert 0 < len(got) < len(everything), f"{label} must select something, not everything"
    assert [e.id for e in varied.history(**kwargs, limit=1)] == want[:1]  # type: ignore[arg-type]


def test_filters_combine(varied: Repository) -> None:
    both = varied.history(author="bot", path="src/app.py")
    assert [e.rationale for e in both] == ["write src/app.py"]
    assert varied.history(author="alice", author_kind="agent") == []
    side = [b for b in varied.view().branches if b != "main"]
    assert len(side) == 1
    on_side = varied.history(branch=side[0])
    assert [e.files for e in on_side] == [("src/appendix.py",), ("docs/guide.md",)]


def test_history_filters_on_the_cli(ws: Path, varied: Repository, run_cli: CliRunner) -> None:
    varied.close()
    cases = [
        (["--author", "alice"], {"author": "alice"}),
        (["--author-kind", "agent"], {"author_kind": "agent"}),
        (["--action", "rewind"], {"action": "rewind"}),
        (["--branch", "main"], {"branch": "main"}),
        (["--file", "src"], {"path": "src"}),
        (["--operation", "refactor"], {"operation": "refactor"}),
    ]
    reopened = Repository.open(ws)
    try:
        for flags, kwargs in cases:
            shown = as_json(run_cli("history", *flags, "--json", cwd=ws))
            assert [e["id"] for e in shown] == [
                e.id
                for e in reopened.history(**kwargs)  # type: ignore[arg-type]
            ], flags
        assert ok(run_cli("history", "--author", "nobody", cwd=ws)) == "No matching events.\n"
    finally:
        reopened.close()
    (ws / "sub").mkdir()
    from_sub = as_json(run_cli("history", "--file", "../src/lib", "--json", cwd=ws / "sub"))
    assert [(e["action_type"], e["files"]) for e in from_sub] == [
        ("rewind", ["notes.txt", "src/app.py", "src/lib/util.py"]),  # the paths it wrote
        ("snapshot", ["src/lib/util.py"]),
    ]


# -- the event fields ------------------------------------------------------------------------


COMMON_KEYS = {
    "id",
    "ts",
    "author",
    "action_type",
    "branch",
    "operation_id",
    "action_scope",
    "diff_mode",
    "rationale",
    "files",
    "snapshot_ref",
}


def test_every_event_carries_the_documented_fields(
    ws: Path, varied: Repository, run_cli: CliRunner
) -> None:
    varied.close()
    events = as_json(run_cli("history", "--json", cwd=ws))
    kinds = {e["action_type"] for e in events}
    assert kinds == {"snapshot", "auto_save", "rewind"}
    ids = {e["id"] for e in events}
    for e in events:
        assert set(e) >= COMMON_KEYS, e
        assert set(e["author"]) >= {"name", "kind"}
        assert e["author"]["kind"] in ("human", "agent", "llm", "system")
        assert e["operation_id"] and e["branch"]
        assert e["action_scope"] in ("line", "block", "file", "project")
        assert e["diff_mode"] in ("unified", "ast", "schema", "binary")
        assert isinstance(e["files"], list)
        if e["snapshot_ref"] is not None:
            assert "parent_event_id" in e and not e.get("anchor_event_id")
            assert e["parent_event_id"] is None or e["parent_event_id"] in ids
        else:
            assert e["anchor_event_id"] in ids
            assert e.get("parent_event_id") is None
    refactor = [e for e in events if e["operation_id"] == "refactor"]
    assert len(refactor) == 2 and {e["action_scope"] for e in refactor} == {"file"}
    assert {e["author"]["name"] for e in events if e["action_type"] == "auto_save"} == {"strata"}


def test_binary_changes_carry_artifact_impacts(ws: Path, repo: Repository) -> None:
    blob = bytes(range(256)) * 4
    first = record(repo, ws, {"model.bin": blob, "notes.txt": "text\n"})
    impacts = {i["path"]: i for i in first.artifact_impacts}
    assert set(impacts) == {"model.bin"}, "text files carry no artifact impact"
    made = impacts["model.bin"]
    assert made["kind"] == "binary"
    assert made["hash_before"] is None
    assert made["hash_after"] == hash_bytes(blob)
    assert made["bytes_changed"] == len(blob)
    assert made["summary"]

    changed = blob[:100] + b"\xff\xfe\xfd" + blob[103:]
    second = record(repo, ws, {"model.bin": changed})
    (impact,) = second.artifact_impacts
    assert impact["path"] == "model.bin"
    assert impact["hash_before"] == made["hash_after"]
    assert impact["hash_after"] != made["hash_after"]
    assert 0 < impact["bytes_changed"] <= 3
    shown = second.to_json()["artifact_impacts"]
    assert shown[0]["bytes_changed"] == impact["bytes_changed"]
    (ws / "model.bin").unlink()
    third = record(repo, ws, {})
    assert third.artifact_impacts[0]["hash_after"] is None
    assert repo.check() == []


# -- schemas ---------------------------------------------------------------------------------


def test_check_passes_on_a_history_with_every_kind_of_event(varied: Repository) -> None:
    varied.bookmark("add", "mark")
    varied.bookmark("lock", "mark")
    varied.branch_create("extra", "main")
    varied.undo()
    assert varied.check() == []


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda b: b.update(action_scope="galaxy"), "action_scope"),
        (lambda b: b.update(surprise=1), "surprise"),
        (lambda b: b.pop("diff_mode"), "diff_mode"),
        (lambda b: b.update(snapshot_ref="not-a-snapshot"), "snapshot_ref"),
    ],
    ids=["bad-enum", "unknown-field", "missing-field", "bad-pattern"],
)
def test_check_reports_an_event_that_breaks_the_schema(
    ws: Path,
    run_cli: CliRunner,
    make_repo: MakeRepo,
    mutate: Callable[[dict[str, Any]], None],
    complaint: str,
) -> None:
    repo = make_repo(ws)
    _, b, _ = three(repo, ws)
    db = repo.layout.ledger
    repo.close()
    seq = event_seq(db, b.id)
    rewrite_record(db, seq, mutate)

    # the chain is consistent again, so only the schema is broken
    ok(run_cli("ledger", "verify", cwd=ws))
    code, _, err = run_cli("check", cwd=ws)
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err
    problems = [line for line in err.splitlines() if line.startswith("problem: ")]
    assert problems, err
    assert problems[0].startswith(f"problem: record {seq} (event): ")
    assert complaint in problems[0]
    assert "was modified" not in err and "does not follow" not in err


def test_check_reports_an_unknown_author_kind_without_crashing(
    ws: Path, run_cli: CliRunner, make_repo: MakeRepo
) -> None:
    repo = make_repo(ws)
    _, b, _ = three(repo, ws)
    db = repo.layout.ledger
    repo.close()
    seq = event_seq(db, b.id)
    rewrite_record(db, seq, lambda body: body["author"].update(kind="robot"))
    code, out, err = run_cli("check", "--json", cwd=ws)
    assert code == 1, err
    report = json.loads(out)
    assert report["ok"] is False
    assert any(p.startswith(f"record {seq} (event)") and "robot" in p for p in report["problems"])


def test_the_schemas_ship_in_the_package() -> None:
    from strata.ledger.schemas import SCHEMAS, schema_text

    for name in SCHEMAS:
        schema = json.loads(schema_text(name))
        assert schema["title"] == name
        assert schema["$schema"].startswith("https://json-schema.org/")


def test_a_stored_event_body_round_trips_through_the_api(ws: Path, repo: Repository) -> None:
    a = record(repo, ws, {"f.txt": "1\n"})
    stored = repo.ledger.event(a.id)
    assert stored == a.to_json()
    assert Event.from_json(stored, seq=a.seq) == a


def test_errors_are_strata_errors(ws: Path, repo: Repository) -> None:
    with pytest.raises(UnknownRef):
        repo.bookmark("add", "early")  # nothing recorded yet
    with pytest.raises(UnknownRef):
        repo.branch_create("early")
