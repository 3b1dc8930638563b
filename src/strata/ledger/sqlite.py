"""The SQLite ledger (format 1): an append-only table of events and a table of refs.

Events are only ever inserted. Their append order is ``seq``. The ``refs``
table holds named pointers (``HEAD``) that move; every move is in the same
transaction as the event that caused it. The database runs in WAL mode so
readers never wait for the writer.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from strata.errors import CorruptRepository, UnsupportedFormat
from strata.ids import EventId, SnapshotId
from strata.ledger.events import Author, AuthorKind, Event, dumps

FORMAT = 1

_SCHEMA = """
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

_COLUMNS = (
    "seq, id, ts, author_name, author_kind, action_type, rationale, files, "
    "snapshot_ref, parent_event_id, data"
)


def _row_to_event(row: tuple[Any, ...]) -> Event:
    seq, eid, ts, aname, akind, action, rationale, files, snap, parent, data = row
    kind: AuthorKind = akind
    return Event(
        id=EventId(eid),
        ts=ts,
        author=Author(aname, kind),
        action_type=action,
        rationale=rationale,
        files=tuple(json.loads(files)),
        snapshot_ref=SnapshotId(snap) if snap else None,
        parent_event_id=EventId(parent) if parent else None,
        data=json.loads(data),
        seq=seq,
    )


class SqliteLedger:
    """Events and refs in one SQLite database."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        if not create and not path.exists():
            raise CorruptRepository(
                f"the ledger {path} is missing", hint="run 'strata check' to list every problem"
            )
        self._db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if create:
            self._db.executescript(
                "BEGIN IMMEDIATE;"
                + _SCHEMA
                + f"INSERT OR IGNORE INTO meta(key, value) VALUES ('format', '{FORMAT}');COMMIT;"
            )
        row = self._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        found = int(row[0]) if row else None
        if found != FORMAT:
            raise UnsupportedFormat("the ledger", found, FORMAT)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def transaction(self) -> _Transaction:
        """A write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``)."""
        return _Transaction(self._db)

    # -- writing ---------------------------------------------------------------

    def append(self, event: Event, *, move: Mapping[str, str] | None = None) -> Event:
        """Append ``event`` and move refs (name -> event id) in the same transaction."""
        with self.transaction():
            cur = self._db.execute(
                f"INSERT INTO events({_COLUMNS}) VALUES (NULL,?,?,?,?,?,?,?,?,?,?)",
                (
                    event.id,
                    event.ts,
                    event.author.name,
                    event.author.kind,
                    event.action_type,
                    event.rationale,
                    dumps(list(event.files)),
                    event.snapshot_ref,
                    event.parent_event_id,
                    dumps(event.data),
                ),
            )
            seq = cur.lastrowid
            self._db.executemany(
                "INSERT INTO event_files(seq, path) VALUES (?, ?)",
                [(seq, p) for p in event.files],
            )
            for name, target in (move or {}).items():
                self._db.execute(
                    "INSERT INTO refs(name, event_id) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET event_id = excluded.event_id",
                    (name, target),
                )
        return self.get(event.id)

    # -- reading ---------------------------------------------------------------

    def get(self, event_id: str) -> Event:
        """The event with this full id; KeyError if none."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM events WHERE id = ?", (event_id,)
        ).fetchone()
        if row is None:
            raise KeyError(event_id)
        return _row_to_event(row)

    def has(self, event_id: str) -> bool:
        """True when an event with this full id exists."""
        return (
            self._db.execute("SELECT 1 FROM events WHERE id = ?", (event_id,)).fetchone()
            is not None
        )

    def ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Event ids starting with ``prefix``."""
        rows = self._db.execute(
            "SELECT id FROM events WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (prefix, prefix + "\uffff", limit),
        ).fetchall()
        return [r[0] for r in rows]

    def snapshot_refs_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Distinct snapshot ids starting with ``prefix``."""
        rows = self._db.execute(
            "SELECT DISTINCT snapshot_ref FROM events WHERE snapshot_ref >= ? AND snapshot_ref < ? "
            "ORDER BY snapshot_ref LIMIT ?",
            (prefix, prefix + "\uffff", limit),
        ).fetchall()
        return [r[0] for r in rows]

    def newest_with_snapshot(self, snapshot_id: str) -> Event | None:
        """The newest state event that carries this snapshot."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM events WHERE snapshot_ref = ? ORDER BY seq DESC LIMIT 1",
            (snapshot_id,),
        ).fetchone()
        return _row_to_event(row) if row else None

    def ref(self, name: str) -> EventId | None:
        """The event a ref points at, or None."""
        row = self._db.execute("SELECT event_id FROM refs WHERE name = ?", (name,)).fetchone()
        return EventId(row[0]) if row else None

    def refs(self) -> dict[str, str]:
        """Every ref."""
        return dict(self._db.execute("SELECT name, event_id FROM refs").fetchall())

    def scan(
        self,
        *,
        path: str | None = None,
        author: str | None = None,
        action: str | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> Iterator[Event]:
        """Events matching every given filter."""
        where: list[str] = []
        args: list[Any] = []
        if path is not None:
            where.append(
                "seq IN (SELECT seq FROM event_files WHERE path = ? OR (path > ? AND path < ?))"
            )
            args += [path, path + "/", path + "0"]  # "0" sorts right after "/"
        if author is not None:
            where.append("author_name = ?")
            args.append(author)
        if action is not None:
            where.append("action_type = ?")
            args.append(action)
        sql = f"SELECT {_COLUMNS} FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq " + ("DESC" if newest_first else "ASC")
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        for row in self._db.execute(sql, args):
            yield _row_to_event(row)

    def count(self) -> int:
        """How many events there are."""
        return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def integrity_problems(self) -> list[str]:
        """SQLite's own integrity check (empty when fine)."""
        rows = self._db.execute("PRAGMA integrity_check").fetchall()
        return [] if rows == [("ok",)] else [f"ledger: {r[0]}" for r in rows]


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")
