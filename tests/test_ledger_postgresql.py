"""A ledger on PostgreSQL: init, convert both ways, concurrent writers, a server that goes away."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import ALICE, BOT
from pgcluster import Cluster
from strata import Repository
from strata.errors import UsageError
from strata.ledger.drivers.postgresql import (
    APPEND_LOCK,
    LedgerConflict,
    LedgerUnreachable,
    PostgresDriver,
    admission_key,
)
from strata.ledger.ledger import Ledger, Operation, moved
from strata.ledger.records import verify_chain
from test_ledger_drivers import make_records

STRATA = [sys.executable, "-m", "strata"]


def strata(ws: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    done = subprocess.run(
        [*STRATA, *argv], cwd=ws, capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def _history(repo: Repository) -> list[tuple[str, str, str | None]]:
    return [(e.id, e.action_type, e.snapshot_ref) for e in repo.history()]


def test_init_on_postgresql_records_into_the_database(tmp_path: Path, pg_url: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    out = json.loads(strata(ws, "init", "--ledger", pg_url, "--json").stdout)
    assert out["ledger"] == "postgresql"
    (ws / "a.txt").write_text("two\n")
    strata(ws, "snapshot", "-m", "two")
    assert "two" in strata(ws, "history").stdout
    driver = PostgresDriver(pg_url)
    try:
        assert driver.count() > 0
        assert verify_chain(driver.scan()) is None
        assert "postgresql" in (ws / ".strata" / "config.toml").read_text()
    finally:
        driver.close()
    assert strata(ws, "check").returncode == 0


def test_a_bad_ledger_choice_is_one_line(tmp_path: Path) -> None:
    done = strata(tmp_path, "init", "--ledger", "mysql://x", check=False)
    assert done.returncode == 2
    assert "postgresql://" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".strata").exists()


@pytest.mark.parametrize("first", ["sqlite", "jsonl"])
def test_convert_to_postgresql_and_back_keeps_ids_and_chain_head(
    tmp_path: Path, pg_url: str, first: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Repository.init(ws, ledger=first, author=ALICE) as repo:
        (ws / "a.txt").write_text("one\n")
        one = repo.snapshot("one").event
        (ws / "a.txt").write_text("two\n")
        repo.snapshot("two")
        assert one is not None
        repo.rewind(one.id)
        repo.bookmark("add", "start", ref=one.id)
        head, history, view = repo.ledger.chain_head(), _history(repo), repo.view()
        result = repo.convert_ledger(pg_url)
        assert result.head == head and result.driver == "postgresql"
    with Repository.open(ws) as repo:
        assert repo.ledger.driver.name == "postgresql"
        assert repo.ledger.chain_head() == head
        assert _history(repo) == history
        assert repo.view() == view
        assert repo.check() == []
        (ws / "b.txt").write_text("more\n")
        repo.snapshot("on postgresql")
        head, history = repo.ledger.chain_head(), _history(repo)
        back = repo.convert_ledger(first)
        assert back.head == head and back.driver == first
    with Repository.open(ws) as repo:
        assert repo.ledger.driver.name == first
        assert repo.ledger.chain_head() == head
        assert _history(repo) == history
        assert repo.check() == []


def test_convert_into_a_database_that_holds_a_ledger_is_refused(
    tmp_path: Path, pg_url: str
) -> None:
    PostgresDriver(pg_url, create=True).close()
    other = PostgresDriver(pg_url)
    other.append(make_records(5))
    other.close()
    ws = tmp_path / "ws"
    ws.mkdir()
    with Repository.init(ws, author=ALICE) as repo:
        head = repo.ledger.chain_head()
        with pytest.raises(UsageError, match="already holds"):
            repo.convert_ledger(pg_url)
        assert repo.ledger.driver.name == "sqlite" and repo.ledger.chain_head() == head


# -- several writers -------------------------------------------------------------------------

WRITER = """
import sys
from strata.ledger.drivers.postgresql import PostgresDriver
from strata.ledger.ledger import Ledger, moved
url, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
driver = PostgresDriver(url)
ledger = Ledger(driver)
for i in range(n):
    with driver.admission("main"):  # what a writing command holds (Core.writing)
        op = ledger.begin("snapshot", {"name": who, "kind": "agent"})
        before = op.before
        event = op.add_event({
            "id": ledger.new_id(), "ts": op.ts, "author": {"name": who, "kind": "agent"},
            "action_type": "snapshot", "branch": "main", "files": [f"{who}/{i}"],
            "snapshot_ref": None, "parent_event_id": before.branches.get("main"),
            "rationale": f"{who} {i}",
        })
        op.after = moved(
            before, head_event=event["id"], branches={**before.branches, "main": event["id"]}
        )
        ledger.commit(op)
driver.close()
"""


def test_writers_racing_on_one_branch_queue_and_lose_nothing(pg_url: str) -> None:
    PostgresDriver(pg_url, create=True).close()
    writers, per_writer = ["w1", "w2", "w3", "w4"], 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, pg_url, who, str(per_writer)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in writers
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    driver = PostgresDriver(pg_url)
    try:
        assert verify_chain(driver.scan()) is None
        assert driver.verify_index() == []
        events = [r.body for r in driver.scan(kind="event")]
        tip = Ledger(driver).view().branches["main"]
    finally:
        driver.close()
    assert sorted(e["rationale"] for e in events) == sorted(
        f"{who} {i}" for who in writers for i in range(per_writer)
    )  # every one, once
    # one line of history: each event's parent is the event before it, the tip is the last
    assert [e["parent_event_id"] for e in events] == [None] + [e["id"] for e in events[:-1]]
    assert tip == events[-1]["id"]


def test_a_writer_that_skipped_admission_is_refused_and_writes_nothing(pg_url: str) -> None:
    records = make_records(10)
    first = PostgresDriver(pg_url, create=True)
    second = PostgresDriver(pg_url)
    first.append(records[:5])
    # both build on record 5; the first to append wins
    first.append(records[5:8])
    with pytest.raises(LedgerConflict, match="another writer appended 3"):
        second.append(records[5:7])
    assert second.count() == 8
    assert verify_chain(second.scan()) is None
    first.close()
    second.close()


# -- faults ----------------------------------------------------------------------------------


def test_server_stopped_then_back(tmp_path: Path, pg_cluster: Cluster) -> None:
    url = pg_cluster.new_database()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    strata(ws, "init", "--ledger", url)
    driver = PostgresDriver(url)
    before = driver.count()
    driver.close()
    pg_cluster.stop()
    try:
        (ws / "a.txt").write_text("two\n")
        done = strata(ws, "snapshot", "-m", "while down", check=False)
        assert done.returncode == 1
        assert "cannot be reached" in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2  # the error and its hint
    finally:
        pg_cluster.start()
    driver = PostgresDriver(url)
    try:
        assert driver.count() == before  # nothing half-written
    finally:
        driver.close()
    strata(ws, "snapshot", "-m", "back")
    assert strata(ws, "check").returncode == 0
    assert "back" in strata(ws, "history").stdout


def test_a_killed_connection_fails_one_append_and_the_next_one_reconnects(
    tmp_path: Path, pg_url: str, pg_cluster: Cluster
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Repository.init(ws, ledger=pg_url, author=ALICE) as repo:
        (ws / "a.txt").write_text("one\n")
        repo.snapshot("one")
        count = repo.ledger.driver.count()
        pid = repo.ledger.driver._db.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(pg_cluster.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        (ws / "a.txt").write_text("two\n")
        # the first use after the drop finds the connection gone and opens a new one
        repo.snapshot("two")
        assert repo.ledger.driver.count() > count
        assert repo.check() == []


def test_a_connection_killed_during_an_append_writes_nothing(
    pg_url: str, pg_cluster: Cluster
) -> None:
    records = make_records(12)
    driver = PostgresDriver(pg_url, create=True)
    driver.append(records[:6])
    pid = driver._db.info.backend_pid
    with psycopg.connect(pg_url) as holder:  # holds the append lock: the append waits on it
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
        failed: list[BaseException] = []

        def append() -> None:
            try:
                driver.append(records[6:])
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=append)
        thread.start()
        deadline = time.monotonic() + 30
        with psycopg.connect(pg_cluster.url(), autocommit=True) as admin:
            while not admin.execute(
                "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            ).fetchall():
                assert time.monotonic() < deadline
                time.sleep(0.01)
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(30)
    assert len(failed) == 1 and isinstance(failed[0], LedgerUnreachable)
    assert "\n" not in str(failed[0])
    assert driver.count() == 6  # reconnected; nothing of the batch was written
    driver.append(records[6:])
    assert list(driver.scan()) == records
    driver.close()


# -- per-branch admission ----------------------------------------------------------------------


def _propose(ledger: Ledger, branch: str, who: str) -> tuple[Operation, str]:
    """An operation recording one event on ``branch`` (HEAD there), not yet committed."""
    op = ledger.begin("snapshot", {"name": who, "kind": "agent"})
    before = replace(op.before, head_branch=branch, head_event=op.before.branches.get(branch))
    op.before = before
    event = op.add_event(
        {
            "id": ledger.new_id(),
            "ts": op.ts,
            "author": {"name": who, "kind": "agent"},
            "action_type": "snapshot",
            "branch": branch,
            "files": [f"{who}.txt"],
            "snapshot_ref": None,
            "parent_event_id": before.branches.get(branch),
        }
    )
    op.after = moved(
        before,
        head_branch=branch,
        head_event=event["id"],
        branches={**before.branches, branch: event["id"]},
    )
    return op, event["id"]


def test_writers_on_two_branches_do_not_wait_for_each_other(pg_url: str) -> None:
    PostgresDriver(pg_url, create=True).close()
    first, second = PostgresDriver(pg_url), PostgresDriver(pg_url)
    a = Ledger(first)
    a.workspace = "one"
    try:
        with first.admission("main"):
            op, main_event = _propose(a, "main", "ann")
            # the writer of another branch is admitted while main's writer holds its turn
            entered = threading.Event()

            def other_branch() -> None:
                b = Ledger(second)
                b.workspace = "two"
                with second.admission("feature"):
                    entered.set()
                    op2, _ = _propose(b, "feature", "bob")
                    b.commit(op2)

            thread = threading.Thread(target=other_branch)
            thread.start()
            assert entered.wait(10), "the writer of 'feature' waited for main's"
            thread.join(30)
            a.commit(op)  # accepted after bob's: another branch moved, not main
        # a writer of main is queued while main is held
        holder = PostgresDriver(pg_url)
        with holder.admission("main"), psycopg.connect(pg_url, autocommit=True) as probe:
            key = admission_key("main")
            assert probe.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (False,)
        holder.close()
        view = a.view()
        assert view.branches["main"] == main_event
        assert set(view.branches) == {"main", "feature"}  # neither move was dropped
        b = Ledger(second)
        b.workspace = "two"
        assert a.view().head_branch == "main" and b.view().head_branch == "feature"
        records = list(first.scan())
        assert verify_chain(records) is None
        assert {r.lane for r in records} == {"main", "feature"}  # one chain per branch
    finally:
        first.close()
        second.close()


def test_a_conflicting_proposal_is_refused_with_the_events_it_missed(pg_url: str) -> None:
    PostgresDriver(pg_url, create=True).close()
    first, second = PostgresDriver(pg_url), PostgresDriver(pg_url)
    a, b = Ledger(first), Ledger(second)
    a.workspace, b.workspace = "one", "two"
    try:
        a.commit(_propose(a, "main", "ann")[0])
        # both read main's tip; neither queued (a writer that skipped admission)
        op_a, won = _propose(a, "main", "ann")
        op_b, lost = _propose(b, "main", "bob")
        a.commit(op_a)
        count = first.count()
        with pytest.raises(LedgerConflict, match="branch main") as refused:
            b.commit(op_b)
        assert refused.value.missed == (won,)
        assert won in str(refused.value)
        assert first.count() == count  # nothing written
        assert second.seek_event(lost) is None
        # on the branch as it is now, the same change is accepted
        retry, again = _propose(b, "main", "bob")
        b.commit(retry)
        assert a.view().branches["main"] == again
        assert verify_chain(first.scan()) is None
    finally:
        first.close()
        second.close()


# -- several workspaces ----------------------------------------------------------------------

LOOP = """
import os, subprocess, sys
ws, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    with open(os.path.join(ws, name + ".txt"), "a") as f:
        f.write(f"{i}\\n")
    subprocess.run([sys.executable, "-m", "strata", "snapshot", "-m", f"{name} {i}"],
                   cwd=ws, check=True, capture_output=True)
"""


def test_two_workspaces_sharing_a_ledger_and_a_store_record_concurrently_losing_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    shared = tmp_path / "team-objects"
    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
        (ws / "README.md").write_text("the project\n")
    strata(one, "init", "--ledger", pg_url, "--objects", str(shared))
    strata(two, "init", "--ledger", pg_url, "--objects", str(shared))
    assert (two / ".strata" / "objects").resolve() == shared.resolve()
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    loops = [
        subprocess.Popen(
            [sys.executable, "-c", LOOP, str(ws), name, "6"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ws, name in ((one, "one"), (two, "two"))
    ]
    for loop in loops:
        _, err = loop.communicate(timeout=300)
        assert loop.returncode == 0, err
    driver = PostgresDriver(pg_url)
    try:
        assert verify_chain(driver.scan()) is None
        assert driver.verify_index() == []
        said = [r.body.get("rationale") for r in driver.scan(kind="event")]
    finally:
        driver.close()
    wanted = [f"{name} {i}" for name in ("one", "two") for i in range(6)]
    assert sorted(s for s in said if s in wanted) == sorted(wanted)  # each once
    for ws, name in ((one, "one"), (two, "two")):
        assert strata(ws, "check").returncode == 0
        # each workspace's HEAD is its own last snapshot, whose files it reads back
        assert strata(ws, "show", f"HEAD:{name}.txt").stdout == "".join(f"{i}\n" for i in range(6))
        assert "nothing to record" in strata(ws, "status").stdout.lower() or (
            f"{name}.txt" not in strata(ws, "status").stdout
        )


def _two_workspaces(tmp_path: Path, pg_url: str) -> tuple[Path, Path]:
    """Two workspaces recording into one ledger and one store folder."""
    shared = tmp_path / "team-objects"
    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
        (ws / "README.md").write_text("the project\n")
        strata(ws, "init", "--ledger", pg_url, "--objects", str(shared))
    return one, two


def _branches(ws: Path) -> dict[str, str]:
    listed = json.loads(strata(ws, "branch", "list", "--json").stdout)
    return {b["name"]: b["tip_event_id"] for b in listed["branches"]}


def test_undo_after_another_workspace_moved_the_branch_is_refused_naming_its_events(
    tmp_path: Path, pg_url: str
) -> None:
    one, two = _two_workspaces(tmp_path, pg_url)
    (one / "a.txt").write_text("one's\n")
    strata(one, "snapshot", "-m", "one's change")
    (two / "b.txt").write_text("two's\n")
    theirs = json.loads(strata(two, "snapshot", "-m", "two's change", "--json").stdout)
    their_event = theirs["event_id"]
    driver = PostgresDriver(pg_url)
    count = driver.count()
    done = strata(one, "undo", check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: refused: undo would move branch main back")
    assert their_event in first  # the other workspace's event, named
    assert driver.count() == count  # nothing written
    driver.close()
    assert _branches(one)["main"] == their_event == _branches(two)["main"]
    assert (one / "a.txt").read_text() == "one's\n"  # the files stay as they were
    assert strata(one, "check").returncode == 0


def test_undo_keeps_what_other_workspaces_moved_since(tmp_path: Path, pg_url: str) -> None:
    one, two = _two_workspaces(tmp_path, pg_url)
    start = _branches(one)["main"]
    (one / "a.txt").write_text("one's\n")
    strata(one, "snapshot", "-m", "one's change")
    # meanwhile the other workspace marks a point and starts a branch of its own there
    strata(two, "bookmark", "add", "reviewed", start)
    strata(two, "branch", "create", "feature", start)
    strata(one, "undo")  # one's snapshot: main goes back, and only main
    assert _branches(one) == {"main": start, "feature": start}
    marks = json.loads(strata(one, "bookmark", "list", "--json").stdout)
    assert [m["name"] for m in marks] == ["reviewed"]
    assert _branches(two) == {"main": start, "feature": start}
    strata(one, "redo")
    assert _branches(one)["main"] != start and _branches(one)["feature"] == start
    assert [m["name"] for m in json.loads(strata(one, "bookmark", "list", "--json").stdout)] == [
        "reviewed"
    ]
    assert strata(one, "check").returncode == 0


def _record_on_feature(other: Repository, two: Path, at: str, mark: str) -> str:
    """The other workspace starts branch ``feature`` at ``at``, records on it, bookmarks it."""
    other.branch_create("feature", at)
    other.branch_switch("feature")
    (two / "b.txt").write_text("theirs\n")
    theirs = other.snapshot("on feature").event
    assert theirs is not None
    other.bookmark("add", mark, ref=theirs.id)  # feature's newest records
    return theirs.id


@pytest.mark.parametrize("back", ["sqlite", "jsonl"])
def test_a_shared_ledger_converted_back_keeps_every_branch_bookmark_and_its_head(
    tmp_path: Path, pg_url: str, back: str
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    with Repository.init(one, author=ALICE) as repo:  # SQLite
        (one / "a.txt").write_text("one\n")
        first = repo.snapshot("first").event
        assert first is not None
        repo.bookmark("add", "start", ref=first.id)
        repo.convert_ledger(pg_url)
    with (
        Repository.init(two, ledger=pg_url, objects=one / ".strata" / "objects") as other,
        Repository.open(one) as repo,
    ):
        (one / "a.txt").write_text("two\n")
        mine = repo.snapshot("second, on main").event
        assert mine is not None
        # the other workspace writes last: a branch of its own, a bookmark
        theirs = _record_on_feature(other, two, first.id, "theirs")
        shared = repo.view()
        assert shared.head_branch == "main" and shared.head_event == mine.id
        assert other.view().head_branch == "feature"
        result = repo.convert_ledger(back)
    with Repository.open(one) as repo:
        assert repo.ledger.driver.name == back
        assert repo.ledger.chain_head() == result.head
        view = repo.view()
        assert view == shared
        assert view.branches == {"main": mine.id, "feature": theirs}
        assert sorted(view.bookmarks) == ["start", "theirs"]
        assert (view.head_branch, view.head_event) == ("main", mine.id)
        assert repo.check() == []
        assert repo.ledger.verify() is None
        # one history again: undo steps over the conversion's record to the newest operation
        assert repo.undo().command == "bookmark add"
        assert sorted(repo.view().bookmarks) == ["start"]
        assert repo.view().branches == {"main": mine.id, "feature": theirs}


def test_a_bundle_of_a_shared_ledger_states_and_verifies_every_branch_head(
    tmp_path: Path, pg_url: str
) -> None:
    from strata.sync.bundle import export_bundle, verify_bundle
    from test_bundle import repack

    shared = tmp_path / "team-objects"
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    with (
        Repository.init(one, ledger=pg_url, objects=shared, author=ALICE) as repo,
        Repository.init(two, ledger=pg_url, objects=shared) as other,
    ):
        (one / "a.txt").write_text("one\n")
        first = repo.snapshot("first").event
        assert first is not None
        _record_on_feature(other, two, first.id, "reviewed")
        (one / "a.txt").write_text("two\n")
        repo.snapshot("second")  # the newest record is main's
        heads = repo.ledger.chain_heads()
        assert {"main", "feature"} <= set(heads)
        file = tmp_path / "audit.tar.zst"
        exported = export_bundle(repo, file)
        assert exported["heads"] == heads
        records = list(repo.ledger.driver.scan())
    written = json.loads(strata(one, "ledger", "head", "--json").stdout)["heads"]
    assert written == heads  # what an auditor writes down
    report = verify_bundle(file)
    assert report.problems == [] and report.heads == heads
    # the bookmark's records dropped and the later ones renumbered: each branch's chain
    # still links up and main's head is the same; only feature's head tells
    dropped = [r for r in records if r.lane == "feature" and r.kind in ("bookmark", "operation")]
    kept = [r for r in records if r not in dropped[-2:]]
    forged = [replace(r, seq=n) for n, r in enumerate(kept, 1)]
    assert verify_chain(forged) is None and forged[-1].hash == records[-1].hash
    bad = tmp_path / "forged.tar.zst"
    bad.write_bytes(file.read_bytes())
    repack(bad, {"records.jsonl": b"".join(r.to_line() + b"\n" for r in forged)})
    problems = verify_bundle(bad).problems
    assert any("branch feature" in p for p in problems), problems


def _round_trips(driver: PostgresDriver, tmp_path: Path, work: Any) -> int:
    """How many times ``work()`` waits for the server on the driver's connection.

    Read from libpq's protocol trace: each turn from messages the client sent
    (``F``) to messages the server sent (``B``) is one round trip.
    """
    trace = tmp_path / "trace.txt"
    with trace.open("w") as out:
        db = driver._db
        db.pgconn.trace(out.fileno())
        db.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            work()
        finally:
            db.pgconn.untrace()
    sides = [line.split("\t", 1)[0] for line in trace.read_text().splitlines()]
    sides = [side for side in sides if side in ("F", "B")]
    return sum(1 for a, b in itertools.pairwise(sides) if (a, b) == ("F", "B"))


def test_a_shared_ledger_operation_waits_for_the_server_four_times(
    tmp_path: Path, pg_url: str
) -> None:
    PostgresDriver(pg_url, create=True).close()
    driver = PostgresDriver(pg_url)
    ledger = Ledger(driver)
    ledger.workspace = "one"
    try:
        ledger.commit(_propose(ledger, "main", "ann")[0])  # the lanes and refs exist

        def operation() -> None:
            with driver.admission("main"):  # what a writing command holds around it
                ledger.commit(_propose(ledger, "main", "ann")[0])

        # the lock with the view and the branch's head; the check; the writes and the
        # commit; the unlock (it was about twenty)
        assert _round_trips(driver, tmp_path, operation) == 4
        assert verify_chain(driver.scan()) is None
        assert len(list(driver.scan(kind="event"))) == 2
    finally:
        driver.close()


def test_undo_of_an_agents_change_another_workspace_built_on_writes_no_file(
    tmp_path: Path, pg_url: str
) -> None:
    shared = tmp_path / "team-objects"
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    with (
        Repository.init(one, ledger=pg_url, objects=shared, author=ALICE) as repo,
        Repository.init(two, ledger=pg_url, objects=shared) as other,
    ):
        (one / "a.txt").write_text("mine\n")
        repo.snapshot("mine")
        (one / "a.txt").write_text("the agent's\n")
        agents = repo.snapshot("the agent's edit", author=BOT).event  # undo puts files back
        assert agents is not None
        (two / "b.txt").write_text("theirs\n")
        theirs = other.snapshot("theirs").event  # on main, after the agent's
        assert theirs is not None and repo.view().branches["main"] == theirs.id
        count = repo.ledger.driver.count()
        with pytest.raises(LedgerConflict, match="branch main back") as refused:
            repo.undo()
        assert theirs.id in str(refused.value)
        assert (one / "a.txt").read_text() == "the agent's\n"  # no file written
        assert not any((one / ".strata" / "journal").glob("*"))  # nothing left to finish
        assert repo.ledger.driver.count() == count
        assert repo.view().branches["main"] == theirs.id
        assert repo.check() == []
