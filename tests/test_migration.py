"""Format-1 ledgers are migrated to format 2 when a repository is opened.

Two sources of format-1 ledgers:

* ``tests/data/ledger-v1.db``, written by the format-1 code itself (commit
  ``fe76319``). Regenerate it with ``STRATA_REGENERATE_V1=1 pytest
  tests/test_migration.py -k regenerate`` (needs git and that commit). Its
  snapshot objects are not shipped, so only the ledger is checked in full.
* A repository made with the current code whose ledger is rewritten in the
  format-1 schema with raw SQL, so every object exists and ``check`` must
  pass in full.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import NOW_MS, CliRunner
from strata import Repository
from strata.ledger.events import Event
from strata.ledger.migrate import ledger_format

MakeRepo = Callable[..., Repository]

FIXTURE = Path(__file__).parent / "data" / "ledger-v1.db"
V1_COMMIT = "fe76319"

# The format-1 schema exactly as commit fe76319 wrote it (src/strata/ledger/sqlite.py).
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ts TEXT NOT NULL,
    author_name TEXT NOT NULL,
    author_kind TEXT NOT NULL,
    action_type TEXT NOT NULL,
    rationale TEXT NOT NULL,
    files TEXT NOT NULL,
    snapshot_ref TEXT,
    parent_event_id TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_author ON events(author_name);
CREATE INDEX IF NOT EXISTS events_snapshot ON events(snapshot_ref);
CREATE TABLE IF NOT EXISTS event_files (
    seq INTEGER NOT NULL REFERENCES events(seq),
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS event_files_path ON event_files(path, seq);
CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, event_id TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"""
V1_COLUMNS = (
    "seq, id, ts, author_name, author_kind, action_type, rationale, files, "
    "snapshot_ref, parent_event_id, data"
)


def _dumps(value: Any) -> str:
    """How format 1 stored JSON columns (``strata.ledger.events.dumps`` at fe76319)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def v1_rows(db: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The events (as dicts) and HEAD of a format-1 ledger (or of its kept ``v1_`` tables)."""
    con = sqlite3.connect(db)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        events, refs = ("v1_events", "v1_refs") if "v1_events" in names else ("events", "refs")
        rows = con.execute(f"SELECT {V1_COLUMNS} FROM {events} ORDER BY seq").fetchall()
        head = con.execute(f"SELECT event_id FROM {refs} WHERE name = 'HEAD'").fetchone()
    finally:
        con.close()
    keys = [c.strip() for c in V1_COLUMNS.split(",")]
    return [dict(zip(keys, row, strict=True)) for row in rows], head[0] if head else None


def write_v1_ledger(db: Path, events: list[Event], head: str | None) -> None:
    """Replace ``db`` with a format-1 ledger holding ``events`` (oldest first)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript("BEGIN;" + V1_SCHEMA + "INSERT INTO meta VALUES ('format', '1');COMMIT;")
        con.execute("BEGIN")
        for e in events:
            cur = con.execute(
                f"INSERT INTO events({V1_COLUMNS}) VALUES (NULL,?,?,?,?,?,?,?,?,?,?)",
                (
                    e.id,
                    e.ts,
                    e.author.name,
                    e.author.kind,
                    e.action_type,
                    e.rationale,
                    _dumps(list(e.files)),
                    e.snapshot_ref,
                    e.parent_event_id,
                    _dumps(e.data),
                ),
            )
            con.executemany(
                "INSERT INTO event_files(seq, path) VALUES (?, ?)",
                [(cur.lastrowid, p) for p in e.files],
            )
        if head is not None:
            con.execute("INSERT INTO refs VALUES ('HEAD', ?)", (head,))
        con.execute("COMMIT")
    finally:
        con.close()


def as_v1(event: Event) -> dict[str, Any]:
    """The format-1 row an event migrated from."""
    return {
        "seq": None,
        "id": event.id,
        "ts": event.ts,
        "author_name": event.author.name,
        "author_kind": event.author.kind,
        "action_type": event.action_type,
        "rationale": event.rationale,
        "files": _dumps(list(event.files)),
        "snapshot_ref": event.snapshot_ref,
        "parent_event_id": event.parent_event_id,
        "data": _dumps(event.data),
    }


def assert_migrated_like(repo: Repository, rows: list[dict[str, Any]], head: str | None) -> None:
    """The migrated ledger tells the same history as the format-1 rows."""
    assert ledger_format(repo.layout.ledger) == 2
    migrated = list(reversed(repo.history()))
    assert [e.id for e in migrated] == [r["id"] for r in rows]
    assert [{**as_v1(e), "seq": r["seq"]} for e, r in zip(migrated, rows, strict=True)] == rows
    assert repo.view().head_event == head
    assert repo.ledger.verify() is None
    assert repo.ledger.driver.verify_index() == []
    by_id = {e.id: e for e in migrated}
    for e in migrated:
        assert e.branch == "main"
        assert e.operation_id
        if e.snapshot_ref is None:
            assert e.anchor_event_id == e.data["target_event_id"]
            assert by_id[e.anchor_event_id].is_state
        else:
            assert e.anchor_event_id is None
    ops = repo.operations()
    assert len(ops) == len(rows), "one operation per format-1 event"
    assert all(o.details == {"migrated_from_format": 1} for o in ops)


# -- a ledger written by the format-1 code ----------------------------------------------------

GENERATOR = r"""
import itertools, random, shutil, sqlite3, sys
from pathlib import Path
import strata
assert strata.__file__.startswith(sys.argv[1]), strata.__file__
from strata.repo import Repository
from strata.ledger.events import Author

ws = Path(sys.argv[2]); ws.mkdir()
ticks = itertools.count(int(sys.argv[4]), 1000)
repo = Repository.init(ws, clock=lambda: next(ticks), rng=random.Random(1),
                       author=Author("v1-user", "human"))
# fe76319 diffs a first snapshot against the empty tree without storing it
from strata.store.tree import EMPTY_TREE, encode_rows
repo.objects.put(encode_rows(()), oid=EMPTY_TREE)
repo.objects.flush()
(ws / "README.md").write_text("# v1\n")
(ws / "src").mkdir()
(ws / "src/app.py").write_text("print('one')\n")
first = repo.snapshot("first").event
(ws / "src/app.py").write_text("print('two')\n")
(ws / "data.bin").write_bytes(bytes(range(64)))
second = repo.snapshot("second", author=Author("agent-7", "agent")).event
(ws / "README.md").write_text("# unrecorded\n")
repo.rewind(first.id)                      # auto-saves README.md first
repo.restore(second.id, ["src/app.py"])    # HEAD stays at first
repo.close()
src = sqlite3.connect(ws / ".strata" / "ledger.db")
dest = sqlite3.connect(sys.argv[3])
src.backup(dest)
dest.execute("PRAGMA journal_mode=DELETE")
dest.execute("VACUUM")
dest.close(); src.close()
"""


def generate_v1_fixture(dest: Path) -> None:
    """Write ``dest`` with the format-1 code of commit fe76319 (git and that commit needed)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "v1.tar"
        subprocess.run(
            ["git", "archive", "-o", str(archive), V1_COMMIT, "src"], cwd=root, check=True
        )
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / "v1", filter="data")
        old_src = Path(tmp) / "v1" / "src"
        env = {**os.environ, "PYTHONPATH": str(old_src)}
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-c",
                GENERATOR,
                str(old_src),
                str(Path(tmp) / "ws"),
                str(dest),
                str(NOW_MS),
            ],
            env=env,
            check=True,
        )


@pytest.mark.skipif(
    not os.environ.get("STRATA_REGENERATE_V1"), reason="set STRATA_REGENERATE_V1=1 to rewrite"
)
def test_regenerate_the_v1_fixture() -> None:
    generate_v1_fixture(FIXTURE)
    rows, head = v1_rows(FIXTURE)
    assert [r["action_type"] for r in rows] == [
        "snapshot",
        "snapshot",
        "auto_save",
        "rewind",
        "restore",
    ]
    assert head == rows[0]["id"]


@pytest.fixture
def v1_repo(ws: Path, make_repo: MakeRepo) -> Path:
    """A workspace whose ledger is the shipped format-1 fixture."""
    make_repo(ws).close()
    db = ws / ".strata" / "ledger.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(FIXTURE, db)
    assert ledger_format(db) == 1
    return ws


def test_the_fixture_is_a_format_1_ledger() -> None:
    rows, head = v1_rows(FIXTURE)
    assert [r["action_type"] for r in rows] == [
        "snapshot",
        "snapshot",
        "auto_save",
        "rewind",
        "restore",
    ]
    assert head == rows[0]["id"], "the rewind moved HEAD back to the first snapshot"
    con = sqlite3.connect(FIXTURE)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert tables == {"meta", "events", "event_files", "refs"}


def test_the_v1_fixture_migrates_on_open(v1_repo: Path, make_repo: MakeRepo) -> None:
    rows, head = v1_rows(FIXTURE)
    repo = make_repo(v1_repo, init=False)
    assert_migrated_like(repo, rows, head)
    # the old tables are kept, unchanged
    kept, kept_head = v1_rows(repo.layout.ledger)
    assert (kept, kept_head) == (rows, head)

    # the ledger and every event are sound; only the snapshot objects are not shipped
    problems = repo.check()
    snapshots = {r["snapshot_ref"] for r in rows if r["snapshot_ref"]}
    assert problems
    for p in problems:
        assert " is missing" in p and any(s in p for s in snapshots), p

    first, second, auto, rewind, restore = reversed(repo.history())
    assert (first.author.name, second.author.kind) == ("v1-user", "agent")
    assert auto.parent_event_id == second.id
    assert rewind.anchor_event_id == first.id and restore.anchor_event_id == second.id
    assert repo.view().branches == {"main": auto.id}
    assert repo.view().detached, "HEAD was rewound behind the tip"


def test_the_cli_migrates_the_v1_fixture(v1_repo: Path, run_cli: CliRunner) -> None:
    rows, head = v1_rows(FIXTURE)
    history = json.loads(run_cli("history", "--json", cwd=v1_repo)[1])
    assert [e["id"] for e in reversed(history)] == [r["id"] for r in rows]
    code, _, err = run_cli("ledger", "verify", cwd=v1_repo)
    assert code == 0, err
    status = json.loads(run_cli("branch", "list", "--json", cwd=v1_repo)[1])
    assert status["head"]["event_id"] == head


# -- a format-1 ledger over real objects ---------------------------------------------------


@pytest.fixture
def rewritten(ws: Path, make_repo: MakeRepo) -> tuple[Path, list[dict[str, Any]], str | None]:
    """A repository made now, its ledger rewritten as format 1 with the same events."""
    repo = make_repo(ws)
    (ws / "a.txt").write_text("one\n")
    (ws / "bin").write_bytes(b"\0\1")
    first = repo.snapshot("first").event
    (ws / "a.txt").write_text("two\n")
    second = repo.snapshot("second").event
    assert first is not None and second is not None
    (ws / "a.txt").write_text("unrecorded\n")
    repo.rewind(first.id)
    repo.restore(second.id, ["a.txt"])
    events = list(reversed(repo.history()))
    head = repo.view().head_event
    db = repo.layout.ledger
    repo.close()
    write_v1_ledger(db, events, head)
    assert ledger_format(db) == 1
    rows, v1_head = v1_rows(db)
    assert v1_head == head == first.id
    return ws, rows, head


def test_a_v1_ledger_migrates_with_the_same_events_and_head(
    rewritten: tuple[Path, list[dict[str, Any]], str | None], make_repo: MakeRepo
) -> None:
    ws, rows, head = rewritten
    repo = make_repo(ws, init=False)
    assert_migrated_like(repo, rows, head)
    assert repo.check() == []
    kept, kept_head = v1_rows(repo.layout.ledger)
    assert (kept, kept_head) == (rows, head), "the old table is kept as v1_events"
    con = sqlite3.connect(repo.layout.ledger)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert {"v1_events", "v1_refs", "records", "events", "event_files", "meta"} <= tables

    # the migrated history is usable: refs resolve and files come back
    assert repo.resolve("HEAD").event and repo.resolve("HEAD").event.id == head
    assert repo.show(rows[1]["id"], "a.txt") == b"two\n"
    assert repo.show(rows[2]["id"], "a.txt") == b"unrecorded\n"


def test_migration_happens_once(
    rewritten: tuple[Path, list[dict[str, Any]], str | None], make_repo: MakeRepo
) -> None:
    ws, rows, head = rewritten
    first = make_repo(ws, init=False)
    chain = first.ledger.chain_head()
    count = first.ledger.driver.count()
    first.close()
    again = make_repo(ws, init=False)
    assert again.ledger.chain_head() == chain and again.ledger.driver.count() == count
    assert_migrated_like(again, rows, head)


def test_work_continues_after_migration(
    rewritten: tuple[Path, list[dict[str, Any]], str | None], make_repo: MakeRepo
) -> None:
    ws, _, head = rewritten
    repo = make_repo(ws, init=False)
    (ws / "a.txt").write_text("after migration\n")
    new = repo.snapshot("after").event
    assert new is not None and new.parent_event_id == head
    assert new.branch != "main", "HEAD was behind the tip, so a branch starts"
    assert repo.resolve("HEAD~1").event and repo.resolve("HEAD~1").event.id == head
    repo.bookmark("add", "migrated")
    repo.undo()
    repo.undo()
    assert repo.view().head_event == head
    assert repo.check() == []


def test_a_newer_format_is_refused(ws: Path, make_repo: MakeRepo) -> None:
    from strata.errors import UnsupportedFormat

    repo = make_repo(ws)
    db = repo.layout.ledger
    repo.close()
    con = sqlite3.connect(db)
    try:
        con.execute("UPDATE meta SET value = '3' WHERE key = 'format'")
        con.commit()
    finally:
        con.close()
    with pytest.raises(UnsupportedFormat):
        Repository.open(ws)
