"""The SQLite ledger driver (the default).

Tables::

    meta(key, value)                 format, driver
    records(seq PRIMARY KEY, kind, line)      the canonical JSON of each record, append-only
    events(seq PRIMARY KEY, id UNIQUE, ts, branch, operation_id,
           author, author_kind, action_type, snapshot_ref)   the event index (derived)
    event_files(seq, path)           the changed-path index (derived)

``records`` is the truth; the index tables are derived and can be rebuilt.
WAL mode: readers never wait for the writer; ``synchronous=FULL``: a committed
append survives a power cut.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from strata.atomic import file_identity
from strata.errors import CorruptRepository, DiskFull, UnsupportedFormat
from strata.ledger.driver import (
    EventFilter,
    EventKeys,
    indexed_paths,
    parent_row,
    path_matches,
    path_range,
)
from strata.ledger.drivers import sqlindex
from strata.ledger.records import Record

FORMAT = 2
#: a record line of this many bytes or more is written into its row in place (see ``append``)
WRITTEN_IN_PLACE = 1 << 20

#: the tables of a format-2 ledger (also what a migration from format 1 creates)
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    line BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_kind ON records(kind, seq);
CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'ledger records are append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'ledger records are append-only'); END;
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ts TEXT NOT NULL,
    branch TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    author TEXT NOT NULL,
    author_kind TEXT NOT NULL,
    action_type TEXT NOT NULL,
    snapshot_ref TEXT
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_branch ON events(branch, seq);
CREATE INDEX IF NOT EXISTS events_operation ON events(operation_id, seq);
CREATE INDEX IF NOT EXISTS events_author ON events(author, seq);
CREATE INDEX IF NOT EXISTS events_author_kind ON events(author_kind, seq);
CREATE INDEX IF NOT EXISTS events_action ON events(action_type, seq);
CREATE INDEX IF NOT EXISTS events_snapshot ON events(snapshot_ref, seq);
CREATE TABLE IF NOT EXISTS event_files (seq INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS event_files_path ON event_files(path, seq);
"""


def _files(record: Record) -> list[str]:
    return [str(f) for f in record.body.get("files") or ()]


def index_events(db: sqlite3.Connection, records: Iterator[Record] | Sequence[Record]) -> None:
    """Add event records to the index tables (inside the caller's transaction)."""
    keys = [EventKeys.of(r) for r in records]
    db.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [sqlindex.event_row(k) for k in keys],
    )
    db.executemany(
        "INSERT INTO event_files VALUES (?, ?)",
        ((k.seq, p) for k in keys for p in indexed_paths(k.files)),
    )


#: connections kept open between the drivers of one process (see :func:`keep_connections`)
_kept: dict[str, list[tuple[tuple[int, int], sqlite3.Connection]]] = {}
_kept_lock = threading.Lock()
_keeping = False
#: at most this many idle connections are kept for one ledger
KEPT_PER_LEDGER = 2


def keep_connections(keep: bool = True) -> None:
    """Keep a closed driver's connection open for the next driver of the same file.

    For a long-lived process that opens the repository for each command (a
    watcher running the command line's commands): opening a connection,
    setting its pragmas and checking the format cost about 0.3 ms. A kept
    connection is handed out only while the file at the path is the one it
    was opened on (device and inode), and only idle: the reads its driver
    left half done (a generator of records never finished, which would
    keep its old view of the ledger) are closed before it is kept.
    ``keep=False`` closes the kept connections and keeps no more.
    """
    global _keeping
    _keeping = keep
    if not keep:
        with _kept_lock:
            kept = [db for found in _kept.values() for _, db in found]
            _kept.clear()
        for db in kept:
            db.close()


def _take_kept(path: Path, identity: tuple[int, int]) -> sqlite3.Connection | None:
    with _kept_lock:
        kept = _kept.get(str(path), [])
        found = None
        while kept and found is None:
            opened_on, db = kept.pop()
            if opened_on == identity:
                found = db
            else:  # the file was replaced (a new repository, a converted ledger)
                db.close()
        return found


def _keep(path: Path, identity: tuple[int, int], db: sqlite3.Connection) -> bool:
    """Keep ``db`` for the next driver of ``path``; False when it must be closed instead."""
    if file_identity(path) != identity:
        return False
    try:
        if db.in_transaction:
            return False
    except sqlite3.Error:  # closed
        return False
    with _kept_lock:
        kept = _kept.setdefault(str(path), [])
        if len(kept) >= KEPT_PER_LEDGER:
            return False
        kept.append((identity, db))
    return True


class SqliteDriver:
    """Records and their event index in one SQLite database."""

    name = "sqlite"

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        if not create and not path.exists():
            raise CorruptRepository(f"the ledger {path} is missing")
        self._closed = False
        #: the cursors of reads handed out as generators (closed with the driver)
        self._reading: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()
        self._identity = file_identity(path) if _keeping and not create else None
        kept = _take_kept(path, self._identity) if self._identity is not None else None
        if kept is not None:
            self._db = kept  # its pragmas are set and its format was checked
            return
        # used by one thread (the Ledger opens one driver per thread), but closed by
        # whichever thread closes the repository
        self._db = sqlite3.connect(
            path, isolation_level=None, timeout=60.0, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if create:
            self._db.executescript(
                "BEGIN IMMEDIATE;"
                + SCHEMA
                + f"INSERT OR IGNORE INTO meta VALUES ('format', '{FORMAT}');"
                + "INSERT OR IGNORE INTO meta VALUES ('driver', 'sqlite');COMMIT;"
            )
        row = self._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        found = int(row[0]) if row else None
        if found != FORMAT:
            raise UnsupportedFormat("the ledger", found, FORMAT)

    def close(self) -> None:
        """Close the database (or keep its connection: :func:`keep_connections`)."""
        if self._closed:
            return
        self._closed = True
        for cursor in list(self._reading):  # a read left half done holds an old view
            cursor.close()
        if self._identity is not None and _keep(self.path, self._identity, self._db):
            return
        self._db.close()

    # -- writing -----------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> None:
        """Append records in one transaction."""
        if not records:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT MAX(seq) FROM records").fetchone()
            expected = (row[0] or 0) + 1
            for offset, record in enumerate(records):
                if record.seq != expected + offset:
                    raise CorruptRepository(
                        f"append out of order: record {record.seq} in place of {expected + offset}"
                    )
            small: list[tuple[int, str, bytes]] = []
            for record in records:
                size = record.line_length()
                if size < WRITTEN_IN_PLACE:
                    small.append((record.seq, record.kind, record.to_line()))
                    continue
                # a big line (a first snapshot's event) is written into its row piece by
                # piece: bound as a value, SQLite would hold two more copies of it
                db.execute(
                    "INSERT INTO records(seq, kind, line) VALUES (?, ?, zeroblob(?))",
                    (record.seq, record.kind, size),
                )
                with db.blobopen("records", "line", record.seq) as blob:
                    chunk = bytearray()  # small pieces (a path each) are written 64 KiB at a time
                    for piece in record.line_pieces():
                        if len(piece) >= 1 << 16:
                            blob.write(chunk)
                            chunk.clear()
                            blob.write(piece)
                        else:
                            chunk += piece
                            if len(chunk) >= 1 << 16:
                                blob.write(chunk)
                                chunk.clear()
                    blob.write(chunk)
            db.executemany("INSERT INTO records(seq, kind, line) VALUES (?, ?, ?)", small)
            try:
                self._index(r for r in records if r.kind == "event")
            except sqlite3.IntegrityError:
                raise CorruptRepository(
                    "append refused: an event id in this batch is already in the ledger"
                ) from None
            db.execute("COMMIT")
        except BaseException as exc:
            _abort(db, exc, self.path)
            raise

    def _index(self, records: Iterator[Record] | Sequence[Record]) -> None:
        index_events(self._db, records)

    # -- reading -----------------------------------------------------------------

    def _records(self, sql: str, args: Sequence[Any] = ()) -> Iterator[Record]:
        cursor = self._db.execute(sql, args)
        self._reading.add(cursor)
        for (line,) in cursor:
            yield Record.from_line(bytes(line))

    def last(self) -> Record | None:
        """The newest record."""
        return next(self._records("SELECT line FROM records ORDER BY seq DESC LIMIT 1"), None)

    def get(self, seq: int) -> Record:
        """The record at ``seq``."""
        found = next(self._records("SELECT line FROM records WHERE seq = ?", (seq,)), None)
        if found is None:
            raise KeyError(seq)
        return found

    def scan(
        self,
        *,
        start: int = 1,
        stop: int | None = None,
        kind: str | None = None,
        reverse: bool = False,
    ) -> Iterator[Record]:
        """Records in a seq range, optionally of one kind."""
        clauses, args = sqlindex.scan_clauses("?", start=start, stop=stop, kind=kind)
        sql = "SELECT line FROM records WHERE " + " AND ".join(clauses)
        return self._records(sql + " ORDER BY seq " + ("DESC" if reverse else "ASC"), args)

    def last_of_kind(self, kind: str) -> Record | None:
        """The newest record of one kind."""
        return next(
            self._records(
                "SELECT line FROM records WHERE kind = ? ORDER BY seq DESC LIMIT 1", (kind,)
            ),
            None,
        )

    def seek_event(self, event_id: str) -> Record | None:
        """The event record with this id."""
        return next(
            self._records(
                "SELECT r.line FROM events e JOIN records r ON r.seq = e.seq WHERE e.id = ?",
                (event_id,),
            ),
            None,
        )

    def snapshot_of(self, event_id: str) -> str | None:
        """The ``snapshot_ref`` of the event with this full id, from the event index."""
        row = self._db.execute(
            "SELECT snapshot_ref FROM events WHERE id = ?", (event_id,)
        ).fetchone()
        return str(row[0]) if row and row[0] else None

    def seek_time(self, ts: str) -> int | None:
        """The seq of the first event at or after ``ts``."""
        row = self._db.execute("SELECT MIN(seq) FROM events WHERE ts >= ?", (ts,)).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def event_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Event ids starting with ``prefix``."""
        rows = self._db.execute(
            sqlindex.prefix_query("id", "events", "?"), sqlindex.prefix_args(prefix, limit)
        )
        return [r[0] for r in rows]

    def snapshot_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Distinct snapshot ids starting with ``prefix``."""
        query = sqlindex.prefix_query("snapshot_ref", "events", "?")
        return [r[0] for r in self._db.execute(query, sqlindex.prefix_args(prefix, limit))]

    def newest_with_snapshot(self, snapshot_id: str) -> Record | None:
        """The newest event carrying this snapshot."""
        return next(
            self._records(
                "SELECT r.line FROM events e JOIN records r ON r.seq = e.seq "
                "WHERE e.snapshot_ref = ? ORDER BY e.seq DESC LIMIT 1",
                (snapshot_id,),
            ),
            None,
        )

    def find_events(
        self, where: EventFilter, *, limit: int | None = None, newest_first: bool = True
    ) -> Iterator[Record]:
        """Event records passing every filter."""
        clauses, args = sqlindex.filter_clauses("?", where)
        path = where.path
        if path is not None:
            # candidates: the path, everything below it, and its folder's row of a big
            # event (indexed_paths); their files are checked below
            clauses.append(
                "e.seq IN (SELECT seq FROM event_files "
                "WHERE path = ? OR (path >= ? AND path < ?) OR path = ?)"
            )
            args += [*path_range(path), parent_row(path)]
        sql = "SELECT r.line FROM events e JOIN records r ON r.seq = e.seq"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY e.seq " + ("DESC" if newest_first else "ASC")
        if path is None or not path.strip("/"):
            if limit is not None:
                sql += " LIMIT ?"
                args.append(limit)
            return self._records(sql, args)
        found = (r for r in self._records(sql, args) if path_matches(_files(r), path))
        return found if limit is None else itertools.islice(found, limit)

    def count(self) -> int:
        """How many records there are."""
        return int(self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    # -- the index ---------------------------------------------------------------

    def rebuild_index(self) -> None:
        """Drop and rebuild the event index from the records."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM events")
            db.execute("DELETE FROM event_files")
            self._index(list(self.scan(kind="event")))
            db.execute("COMMIT")
        except BaseException as exc:
            _abort(db, exc, self.path)
            raise

    def verify_index(self) -> list[str]:
        """Where the event index disagrees with the records."""
        problems = [
            f"ledger: {r[0]}"
            for r in self._db.execute("PRAGMA integrity_check").fetchall()
            if r != ("ok",)
        ]
        indexed = {
            row[0]: row for row in self._db.execute(f"SELECT {sqlindex.EVENT_COLUMNS} FROM events")
        }
        files = self._db.execute("SELECT seq, path FROM event_files")
        return problems + sqlindex.index_problems(self.scan(kind="event"), indexed, files)


def _abort(db: sqlite3.Connection, exc: BaseException, path: Path) -> None:
    """Undo a failed write transaction; a full disk becomes :class:`DiskFull`.

    SQLite ends the transaction itself on some errors (a full disk, an I/O
    error): only one still open is rolled back, and a failing rollback never
    hides the error that caused it.
    """
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        raise DiskFull(str(path)) from exc
