"""A ledger on PostgreSQL: init, convert both ways, concurrent writers, a server that goes away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from conftest import ALICE
from pgcluster import Cluster
from strata import Repository
from strata.errors import UsageError
from strata.ledger.drivers.postgresql import (
    APPEND_LOCK,
    LedgerConflict,
    LedgerUnreachable,
    PostgresDriver,
)
from strata.ledger.ledger import Ledger
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
    with driver.admission():  # what a writing command holds (Core.writing)
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
