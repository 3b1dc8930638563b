"""The public core: a transaction commits all or nothing, in a fixed order; ids a user meets.

Covers what :mod:`strata.core` promises to every client (the CLI, runs, the
Draft, and features to come): an exception inside ``core.transaction()``
leaves the repository as it was; callbacks run after the ledger holds the
operation; a JSONL batch cut short by a crash is invisible and cut away; a run
id is a ref; a short prefix shared by two events is refused.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CliRunner
from strata import Repository
from strata.errors import AmbiguousRef, UnknownRef


def test_an_exception_inside_a_transaction_commits_nothing(repo: Repository, ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    repo.snapshot("one")
    ops_before, events_before = len(repo.operations()), len(repo.history())
    (ws / "a.txt").write_text("two\n")
    with (
        pytest.raises(RuntimeError, match="changed my mind"),
        repo.transaction("experiment") as tx,
    ):
        result, _ = tx.snapshot("two")
        assert result.event is not None  # recorded in the transaction ...
        raise RuntimeError("changed my mind")
    # ... but never committed: no operation, no event, HEAD where it was
    assert len(repo.operations()) == ops_before
    assert len(repo.history()) == events_before
    head = repo.head()
    assert head is not None and head.rationale == "one"
    assert repo.check() == []
    # the work is still unrecorded, and the next snapshot records it
    assert repo.snapshot("two again").event is not None


def test_commit_callbacks_run_after_the_ledger_holds_the_operation(
    repo: Repository, ws: Path
) -> None:
    seen: list[str] = []
    (ws / "a.txt").write_text("one\n")
    with repo.transaction("experiment") as tx:
        tx.snapshot("one")
        tx.on_commit(lambda: seen.append(repo.operations(limit=1)[0].command))
        assert seen == []  # not before commit
    assert seen == ["experiment"]


def test_an_operation_that_changes_nothing_writes_nothing(repo: Repository) -> None:
    before = repo.ledger.chain_head()
    with repo.transaction("nothing"):
        pass
    assert repo.ledger.chain_head() == before
    assert repo.operations() == []


def test_a_jsonl_batch_cut_short_by_a_crash_leaves_no_orphan_events(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws, ledger="jsonl")
    for n in range(3):
        (ws / "a.txt").write_text(f"{n}\n")
        repo.snapshot(f"snapshot {n}")
    repo.close()
    data = ws / ".strata" / "ledger" / "events.jsonl"
    lines = data.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[-1])["kind"] == "operation"
    # the last batch: its event, the ref moves, then its operation record
    first = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "event")
    orphan = json.loads(lines[first])
    assert orphan["body"]["rationale"] == "snapshot 2"
    assert {json.loads(line)["kind"] for line in lines[first + 1 : -1]} == {"ref"}
    # a crash after the batch's event and ref lines, before its operation line; the index
    # is gone too
    data.write_bytes(b"".join(lines[:-1]))
    (ws / ".strata" / "ledger" / "events.idx").unlink()

    reader = make_repo(ws, init=False)
    assert [e.rationale for e in reader.history()] == ["snapshot 1", "snapshot 0"]
    head = reader.head()
    assert head is not None and head.rationale == "snapshot 1"
    # the next writer cuts the orphan lines away and appends after the last whole batch
    (ws / "b.txt").write_text("b\n")
    reader.snapshot("after the crash")
    assert orphan["body"]["id"].encode() not in data.read_bytes()
    assert [e.rationale for e in reader.history()] == [
        "after the crash",
        "snapshot 1",
        "snapshot 0",
    ]
    assert reader.check() == []


def test_a_run_id_is_a_ref_for_diff_show_and_rewind(repo: Repository, ws: Path) -> None:
    (ws / "f.txt").write_text("before\n")
    repo.snapshot("start")
    result = repo.execute_run([sys.executable, "-c", "open('f.txt', 'w').write('by the run\\n')"])
    assert result.ok
    (ws / "f.txt").write_text("by hand\n")
    assert repo.show(result.run_id, "f.txt") == b"by the run\n"
    diff = repo.diff(result.run_id)
    assert [f.path for f in diff.files] == ["f.txt"]
    repo.rewind(result.run_id)
    assert (ws / "f.txt").read_text() == "by the run\n"
    # nothing was lost: the hand edit was saved before the rewind
    assert any(
        e.rationale.startswith("auto-save") or e.action_type == "auto_save"
        for e in repo.history(limit=5)
    )


def test_a_run_id_works_on_the_command_line(run_cli: CliRunner, ws: Path) -> None:
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    (ws / "f.txt").write_text("before\n")
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    script = "echo said by the command; echo by the run > f.txt"
    code, out, err = run_cli("run", "--json", "--", "sh", "-c", script, cwd=ws)
    assert code == 0, err
    run_id = json.loads(out)["run_id"]  # stdout is the JSON alone ...
    assert "said by the command" in err  # ... the command's own output goes to stderr
    code, out, err = run_cli("show", f"{run_id}:f.txt", cwd=ws)
    assert (code, out) == (0, "by the run\n"), err
    (ws / "f.txt").write_text("by hand\n")
    # a run id alone: what the run changed (not the run's files against the working tree)
    code, out, err = run_cli("diff", run_id, cwd=ws)
    assert code == 0, err
    assert "-before" in out and "+by the run" in out and "by hand" not in out
    assert run_cli("rewind", run_id, cwd=ws)[0] == 0
    assert (ws / "f.txt").read_text() == "by the run\n"
    # the text output names the run by the id the other commands take
    code, _, err = run_cli("run", "--", "true", cwd=ws)
    said = re.search(r"recorded run (\w+)", err)
    runs = json.loads(run_cli("history", "--action", "run", "--json", cwd=ws)[1])
    assert said is not None and said.group(1) == runs[0]["operation_id"], err
    # an option strata run does not know, before the command, is a typo: exit 125
    code, _, err = run_cli("run", "--bogus", "--", "true", cwd=ws)
    assert code == 125 and "--bogus" in err, err


class SharedPrefixRandom(random.Random):
    """Random bits whose top 16 bits are always the same: every id starts alike."""

    def getrandbits(self, k: int) -> int:
        return (0xBEEF << (k - 16)) | super().getrandbits(k - 16)


def test_a_prefix_two_events_share_is_refused(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws, rng=SharedPrefixRandom(7))
    ids = []
    for n in range(2):
        (ws / "a.txt").write_text(f"{n}\n")
        event = repo.snapshot(f"s{n}").event
        assert event is not None
        ids.append(event.id)
    assert ids[0][:4] == ids[1][:4] and ids[0] != ids[1]
    with pytest.raises(AmbiguousRef) as caught:
        repo.resolve(ids[0][:4])
    assert set(ids) <= set(caught.value.candidates)
    with pytest.raises(AmbiguousRef):
        repo.rewind(ids[0][:4])
    assert (ws / "a.txt").read_text() == "1\n"  # refused before anything moved
    # a longer prefix that only one event has resolves
    n = next(n for n in range(5, 21) if ids[0][:n] != ids[1][:n])
    point = repo.resolve(ids[0][:n])
    assert point.event is not None and point.event.id == ids[0]


def test_an_unknown_ref_is_refused(repo: Repository, ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")
    repo.snapshot("one")
    with pytest.raises(UnknownRef):
        repo.resolve("zzzzzzzz")


def test_history_of_an_empty_folder_finds_its_snapshot(run_cli: CliRunner, ws: Path) -> None:
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    (ws / "emptydir").mkdir()
    assert run_cli("snapshot", "-m", "an empty folder", cwd=ws)[0] == 0
    code, out, err = run_cli("history", "--file", "emptydir", "--json", cwd=ws)
    assert code == 0, err
    events = json.loads(out)
    events = events["events"] if isinstance(events, dict) else events
    assert [e["rationale"] for e in events] == ["an empty folder"]


def test_publish_expect_needs_eight_characters(run_cli: CliRunner, ws: Path) -> None:
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("published\n")
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    (ws / ".strata/draft/files/a.txt").write_text("drafted\n")
    code, out, err = run_cli("review", "--json", cwd=ws)
    assert code == 0, err
    snapshot_id = json.loads(out)["draft_snapshot_id"]
    code, _, err = run_cli("publish", "--expect", snapshot_id[:6], cwd=ws)
    assert code == 2, err
    assert "at least 8 characters" in err
    assert (ws / "a.txt").read_text() == "published\n"
    # an event id (what 'draft status' shows) is not a snapshot id: a usage error too
    code, out, _ = run_cli("draft", "status", "--json", cwd=ws)
    code, _, err = run_cli("publish", "--expect", json.loads(out)["tip_event_id"], cwd=ws)
    assert code == 2 and "snapshot id" in err, err
    code, _, err = run_cli("publish", "--expect", snapshot_id[:8], cwd=ws)
    assert code == 0, err


def test_one_undo_reverses_a_publish_with_the_drafts_last_edits(
    run_cli: CliRunner, ws: Path
) -> None:
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("published\n")
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    (ws / ".strata" / "draft" / "files" / "a.txt").write_text("edited in the Draft\n")
    before = [o["id"] for o in json.loads(run_cli("op", "log", "--json", cwd=ws)[1])]
    code, _, err = run_cli("publish", cwd=ws)
    assert code == 0, err
    assert (ws / "a.txt").read_text() == "edited in the Draft\n"
    ops = json.loads(run_cli("op", "log", "--json", cwd=ws)[1])
    assert [o["command"] for o in ops if o["id"] not in before] == ["publish"]
    code, out, err = run_cli("undo", "--json", cwd=ws)
    assert code == 0, err
    assert json.loads(out)["command"] == "publish"
    assert (ws / "a.txt").read_text() == "published\n"


def test_a_branch_named_by_rewind_is_heads_branch_not_a_detached_head(
    run_cli: CliRunner, ws: Path
) -> None:
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    for n in ("1", "2"):
        (ws / "a.txt").write_text(n)
        assert run_cli("snapshot", "-m", n, cwd=ws)[0] == 0
    code, out, err = run_cli("rewind", "HEAD~1", "--branch", "feat", cwd=ws)
    assert code == 0, err
    assert "will start the new branch feat" in out and "not a branch tip" not in out
    status = json.loads(run_cli("status", "--json", cwd=ws)[1])
    assert (status["branch"], status["detached"], status["next_branch"]) == ("feat", False, "feat")
    (ws / "a.txt").write_text("3")
    assert run_cli("snapshot", "-m", "3", cwd=ws)[0] == 0
    status = json.loads(run_cli("status", "--json", cwd=ws)[1])
    assert (status["branch"], status["detached"], status["next_branch"]) == ("feat", False, None)
    # rewinding off a tip without --branch: detached, and the generated name is said
    code, out, _ = run_cli("rewind", "HEAD~1", cwd=ws)
    assert "HEAD is not a branch tip: the next snapshot will start branch feat-2" in out
    status = json.loads(run_cli("status", "--json", cwd=ws)[1])
    assert (status["branch"], status["detached"], status["next_branch"]) == (None, True, "feat-2")


@pytest.mark.parametrize("name", ["../x", "a/../../b", ".hidden", "a.lock", "a//b", "x/", "a*"])
def test_branch_names_follow_gits_rules(run_cli: CliRunner, ws: Path, name: str) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("x")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    code, _, err = run_cli("branch", "create", name, cwd=ws)
    assert code == 2 and "invalid branch name" in err, err
    assert run_cli("branch", "create", "feature/ok", cwd=ws)[0] == 0


@pytest.mark.parametrize("room", [64 << 20, 3000], ids=["all-kept", "room-for-some"])
def test_a_rewind_writes_each_file_its_own_bytes_read_once(
    repo: Repository, ws: Path, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    from strata.core import journals
    from strata.store.objects import DiskObjectStore

    monkeypatch.setattr(journals, "KEPT_OBJECTS", room)
    old = {f"f{i}.txt": f"file {i} v1\n" * (40 * i + 1) for i in range(8)}
    old["big.bin"] = "".join(chr(65 + i % 26) for i in range(journals.KEPT_OBJECT + 10))
    for name, text in old.items():
        (ws / name).write_text(text)
    first = repo.snapshot("v1").event
    assert first is not None
    for name in old:
        (ws / name).write_text("edited\n")
    repo.snapshot("v2")
    reads: list[str] = []
    chunks = DiskObjectStore.iter_chunks
    monkeypatch.setattr(
        DiskObjectStore,
        "iter_chunks",
        lambda store, oid: reads.append(oid) or chunks(store, oid),  # type: ignore[func-returns-value]
    )
    repo.rewind(first.id)
    assert {name: (ws / name).read_text() for name in old} == old
    assert len(set(reads)) == len(old)
    # each object is read (and checked) once; one too big to keep, or past the room
    # for kept objects, is read again as it is written
    if room > journals.KEPT_OBJECT:
        assert len(reads) == len(old) + 1
    else:
        assert len(old) + 1 < len(reads) < 2 * len(old)
    assert repo.check() == []
