"""The PostgreSQL ledger driver: one ledger shared by several workspaces and machines.

Tables, in the schema ``strata`` of the database the ledger URL names::

    meta(key, value)                 format, driver
    records(seq PRIMARY KEY, kind, lane, line)  the canonical JSON of each record, append-only
    refs(name PRIMARY KEY, value, seq)  where each branch, bookmark and workspace HEAD
                                     points now (derived from the ref and bookmark records)
    events(seq PRIMARY KEY, id UNIQUE, ts, branch, operation_id,
           author, author_kind, action_type, snapshot_ref)   the event index (derived)
    event_files(seq, path)           the changed-path index (derived)

The same tables as the SQLite driver's, so the two hold the same chain and a
ledger converts between them losslessly. Text columns use the ``"C"``
collation: prefix and folder ranges compare bytes, whatever the database's
locale.

Writers, per branch: records are chained per branch (each record's ``lane``,
see :mod:`strata.ledger.records`). A command that writes holds
:meth:`PostgresDriver.admission` for its workspace's branch, a session-level
advisory lock keyed by the branch name, from reading the view to appending:
writers of one branch queue, writers of different branches go on side by
side. :meth:`PostgresDriver.append_lane` accepts a proposal only when its
first record follows its lane's newest record and every ref it moves still
points where the proposal saw it (compare and swap on ``refs``); otherwise it
refuses it with :class:`LedgerConflict`, naming the events the proposal
missed. Accepted records get the next ``seq`` under the transaction-level
advisory lock :data:`APPEND_LOCK`, held from the check to the commit, so that
``seq`` order is commit order for readers paging by ``seq``; the append is two
round trips (pipeline mode: the lock and the check's one query, then the
inserts and the commit), so the lock is held for little more than the
commit's WAL flush. Never a table lock:
readers and ``pg_dump`` go on. Records without a lane (a converted ledger's)
are appended in the one chain by :meth:`PostgresDriver.append`.

Reads are paged by ``seq`` (keyset pagination): a scan of millions of records
holds one page in memory, and another query may run between two pages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from strata.errors import CorruptRepository, RepositoryError, UnsupportedFormat
from strata.ledger.driver import (
    EventFilter,
    EventKeys,
    LedgerConflict,
    indexed_paths,
    parent_row,
    path_matches,
    path_range,
)
from strata.ledger.drivers import sqlindex
from strata.ledger.records import Record, canonical

FORMAT = 3
#: the advisory lock an append holds for its transaction (``pg_advisory_xact_lock``)
APPEND_LOCK = 0x5354524154410001
#: the advisory lock a writing command holds for its session (``pg_advisory_lock``) when
#: the ledger has lanes no more (the key of a branch's lock: :func:`admission_key`)
ADMISSION_LOCK = 0x5354524154410002
IDLE = TransactionStatus.IDLE
#: records read per round trip
PAGE = 500
#: a path filter matching at most this many index rows collects them first; one matching
#: more (a big folder) walks the events newest first (see ``find_events``)
FEW_PATH_ROWS = 2000
#: the newest record of a lane (``%s``), or for a lane with none yet the newest without one
_LANE_HEAD = (
    "COALESCE((SELECT line FROM strata.records WHERE lane = %s ORDER BY seq DESC LIMIT 1), "
    "(SELECT line FROM strata.records WHERE lane IS NULL ORDER BY seq DESC LIMIT 1))"
)
#: what an append checks, in one query: its lane's head, the last ``seq``, and where the
#: refs it moves (``%s``, a list of names) point (``{name: value}``)
_APPEND_READ = (
    f"SELECT {_LANE_HEAD}, (SELECT MAX(seq) FROM strata.records), "
    "(SELECT json_object_agg(name, value) FROM strata.refs WHERE name = ANY(%s::text[]))"
)
#: seconds to wait for the server when connecting
CONNECT_TIMEOUT = 10

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS strata;
CREATE TABLE IF NOT EXISTS strata.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS strata.records (
    seq BIGINT PRIMARY KEY,
    kind TEXT COLLATE "C" NOT NULL,
    line BYTEA NOT NULL
);
ALTER TABLE strata.records ADD COLUMN IF NOT EXISTS lane TEXT COLLATE "C";
CREATE INDEX IF NOT EXISTS records_kind ON strata.records(kind, seq);
CREATE INDEX IF NOT EXISTS records_lane ON strata.records(lane, seq) WHERE lane IS NOT NULL;
CREATE TABLE IF NOT EXISTS strata.refs (
    name TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL,
    seq BIGINT NOT NULL
);
CREATE OR REPLACE FUNCTION strata.append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'ledger records are append-only'; END $$;
DROP TRIGGER IF EXISTS records_no_change ON strata.records;
CREATE TRIGGER records_no_change BEFORE UPDATE OR DELETE OR TRUNCATE ON strata.records
FOR EACH STATEMENT EXECUTE FUNCTION strata.append_only();
CREATE TABLE IF NOT EXISTS strata.events (
    seq BIGINT PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL UNIQUE,
    ts TEXT COLLATE "C" NOT NULL,
    branch TEXT COLLATE "C" NOT NULL,
    operation_id TEXT COLLATE "C" NOT NULL,
    author TEXT COLLATE "C" NOT NULL,
    author_kind TEXT COLLATE "C" NOT NULL,
    action_type TEXT COLLATE "C" NOT NULL,
    snapshot_ref TEXT COLLATE "C"
);
CREATE INDEX IF NOT EXISTS events_ts ON strata.events(ts);
CREATE INDEX IF NOT EXISTS events_branch ON strata.events(branch, seq);
CREATE INDEX IF NOT EXISTS events_operation ON strata.events(operation_id, seq);
CREATE INDEX IF NOT EXISTS events_author ON strata.events(author, seq);
CREATE INDEX IF NOT EXISTS events_author_kind ON strata.events(author_kind, seq);
CREATE INDEX IF NOT EXISTS events_action ON strata.events(action_type, seq);
CREATE INDEX IF NOT EXISTS events_snapshot ON strata.events(snapshot_ref, seq);
CREATE TABLE IF NOT EXISTS strata.event_files (seq BIGINT NOT NULL, path TEXT COLLATE "C" NOT NULL);
CREATE INDEX IF NOT EXISTS event_files_path ON strata.event_files(path, seq);
CREATE INDEX IF NOT EXISTS event_files_seq ON strata.event_files(seq, path);
"""


class LedgerUnreachable(RepositoryError):
    """The PostgreSQL server of a shared ledger cannot be reached (or went away)."""


class AppendOutOfOrder(LedgerConflict, CorruptRepository):
    """A record without a lane that does not follow the ledger's last record.

    Refused as every driver refuses an append out of order (a
    :class:`CorruptRepository`), and named as a conflict when the record
    follows an earlier one: another writer appended first.
    """


def admission_key(branch: str) -> int:
    """The advisory lock key of ``branch``'s admission queue (a signed 64-bit integer)."""
    digest = hashlib.blake2b(f"strata admission {branch}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def ref_key(record: Record) -> str | None:
    """The ``refs`` row a ref or bookmark record moves (``HEAD@<workspace>`` for a HEAD)."""
    body = record.body
    if record.kind == "bookmark":
        return "bookmark/" + str(body["name"])
    if record.kind != "ref":
        return None
    name = str(body["name"])
    if name == "HEAD" and body.get("workspace"):
        return f"HEAD@{body['workspace']}"
    return name


def _ref_value(value: Any) -> str | None:
    return None if value is None else canonical(value).decode()


def is_url(text: str) -> bool:
    """True when ``text`` names a PostgreSQL ledger (``postgresql://`` or ``postgres://``)."""
    return text.startswith(("postgresql://", "postgres://"))


def shown(url: str) -> str:
    """``url`` without its password, for messages."""
    head, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        return f"{head}{sep}{userinfo.split(':', 1)[0]}:***@{host}"
    return url


def _unreachable(url: str, exc: BaseException) -> LedgerUnreachable:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return LedgerUnreachable(
        f"the shared ledger {shown(url)} cannot be reached: {reason[:200]}",
        hint="nothing was written; run the command again once PostgreSQL is back",
    )


@dataclasses.dataclass
class _ReadAhead:
    """What a writer reads first once admitted, read with the admission lock."""

    #: ``strata.refs``'s rows (None: handed out)
    refs: list[tuple[str, str]] | None
    #: the branch admitted, and the hash of its newest record (None: handed out)
    lane: str
    head: str | None


class PostgresDriver:
    """Records and their event index in a PostgreSQL database."""

    name = "postgresql"

    def __init__(self, url: str, *, create: bool = False) -> None:
        self.url = url
        #: what :meth:`admission` read with its lock, until used or an append
        self._ahead: _ReadAhead | None = None
        self._db = self._connect()
        try:
            if create:
                with self._db.transaction():
                    self._db.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
                    self._db.execute(SCHEMA)
                    for key, value in (("format", str(FORMAT)), ("driver", "postgresql")):
                        self._db.execute(
                            "INSERT INTO strata.meta VALUES (%s, %s) ON CONFLICT DO NOTHING",
                            (key, value),
                        )
            try:
                row = self._db.execute(
                    "SELECT value FROM strata.meta WHERE key = 'format'"
                ).fetchone()
            except pg_errors.UndefinedTable:
                raise CorruptRepository(
                    f"the database {shown(url)} holds no Strata ledger"
                ) from None
        except psycopg.OperationalError as exc:
            self._db.close()
            raise _unreachable(url, exc) from None
        except BaseException:
            self._db.close()
            raise
        found = int(row[0]) if row else None
        if found == 2:  # before lanes: the same records, without the refs table
            try:
                self._upgrade()
            except psycopg.OperationalError as exc:
                self._db.close()
                raise _unreachable(url, exc) from None
            found = FORMAT
        if found != FORMAT:
            self._db.close()
            raise UnsupportedFormat("the ledger", found, FORMAT)

    def _upgrade(self) -> None:
        """Format 2 to 3: the ``lane`` column, the ``refs`` table filled from the records."""
        db = self._db
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
            row = db.execute("SELECT value FROM strata.meta WHERE key = 'format'").fetchone()
            if row and int(row[0]) == FORMAT:
                return  # another workspace upgraded it meanwhile
            db.execute(SCHEMA)
            db.execute("DELETE FROM strata.refs")
            current: dict[str, tuple[str | None, int]] = {}
            for record in self._paged(
                "SELECT seq, line FROM strata.records",
                ["kind IN ('ref', 'bookmark')"],
                [],
                seq="seq",
                reverse=False,
            ):
                key = ref_key(record)
                if key is not None:
                    current[key] = (_ref_value(record.body.get("new")), record.seq)
            with db.cursor() as cur:
                cur.executemany(
                    "INSERT INTO strata.refs VALUES (%s, %s, %s)",
                    [(k, v, q) for k, (v, q) in current.items() if v is not None],
                )
            db.execute("UPDATE strata.meta SET value = %s WHERE key = 'format'", (str(FORMAT),))

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            db = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
            # no prepared statements: a generic plan of a path range does not know how
            # narrow the range is and may walk every event
            db.prepare_threshold = None
            return db
        except psycopg.OperationalError as exc:
            raise _unreachable(self.url, exc) from None
        except psycopg.ProgrammingError as exc:  # a malformed URL
            raise RepositoryError(f"bad PostgreSQL ledger URL {shown(self.url)}: {exc}") from None

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        """The connection, opened again when the last one was lost (a server restart)."""
        if self._db.broken or self._db.closed:
            self._db = self._connect()
        return self._db

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def _run(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read; a connection found lost (a server restart) is opened again once."""
        for retry in (False, True):
            try:
                return self._conn.execute(sql, args).fetchall()
            except psycopg.OperationalError as exc:
                if retry or not self._db.broken:
                    raise _unreachable(self.url, exc) from None
        raise AssertionError("unreachable")

    # -- writing -----------------------------------------------------------------

    #: the ledger chains records per branch: :class:`~strata.ledger.ledger.Ledger` seals
    #: an operation in its branch's lane and appends it with :meth:`append_lane`
    lanes = True

    @contextlib.contextmanager
    def admission(self, branch: str) -> Iterator[None]:
        """Queue for ``branch``: its writers take turns, other branches' writers do not wait.

        What the writer reads first once admitted, the refs (the view) and
        ``branch``'s newest record (what its operation chains after), comes
        with the lock in the same round trip; each is handed out once by
        :meth:`refs` and :meth:`lane_head`, and dropped by any append.
        """
        key = admission_key(branch)
        for retry in (False, True):
            try:
                db = self._conn
                with db.pipeline():  # sent together; the results come at its end
                    db.execute("SELECT pg_advisory_lock(%s)", (key,))
                    refs = db.execute("SELECT name, value FROM strata.refs")
                    head = db.execute(f"SELECT {_LANE_HEAD}", (branch,))
                ref_rows, head_row = refs.fetchall(), head.fetchone()
                break
            except psycopg.OperationalError as exc:
                if retry or not self._db.broken:
                    raise _unreachable(self.url, exc) from None
        line = head_row[0] if head_row else None
        self._ahead = _ReadAhead(
            [(str(n), str(v)) for n, v in ref_rows],
            branch,
            Record.from_line(bytes(line)).hash if line is not None else "",
        )
        try:
            yield
        finally:
            self._ahead = None
            if not self._db.broken and not self._db.closed:
                with contextlib.suppress(psycopg.Error):
                    self._db.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def lane_head(self, lane: str) -> str:
        """The hash a new record of ``lane`` chains after (see :mod:`strata.ledger.records`)."""
        ahead = self._ahead
        if ahead is not None and ahead.lane == lane and ahead.head is not None:
            head, ahead.head = ahead.head, None
            return head
        rows = self._run(f"SELECT {_LANE_HEAD}", (lane,))
        return Record.from_line(bytes(rows[0][0])).hash if rows and rows[0][0] else ""

    def lane_heads(self) -> dict[str, str]:
        """The hash of each lane's newest record (``""``: of the newest record without one)."""
        lanes = self._run(
            "WITH RECURSIVE l AS (SELECT MIN(lane) AS lane FROM strata.records "
            "WHERE lane IS NOT NULL UNION ALL SELECT (SELECT MIN(lane) FROM strata.records "
            "WHERE lane > l.lane) FROM l WHERE l.lane IS NOT NULL) "
            "SELECT lane FROM l WHERE lane IS NOT NULL"
        )
        heads: dict[str, str] = {}
        unlaned = self._one(
            "SELECT line FROM strata.records WHERE lane IS NULL ORDER BY seq DESC LIMIT 1"
        )
        if unlaned is not None:
            heads[""] = unlaned.hash
        for (lane,) in lanes:
            found = self._one(
                "SELECT line FROM strata.records WHERE lane = %s ORDER BY seq DESC LIMIT 1",
                (lane,),
            )
            if found is not None:
                heads[str(lane)] = found.hash
        return heads

    def refs(self) -> dict[str, Any]:
        """Where every ref and bookmark points now: ``{name: value}`` (``HEAD@<workspace>``)."""
        import json

        ahead = self._ahead
        if ahead is not None and ahead.refs is not None:
            rows, ahead.refs = ahead.refs, None
        else:
            rows = [(str(n), str(v)) for n, v in self._run("SELECT name, value FROM strata.refs")]
        return {n: json.loads(v) for n, v in rows}

    def append_lane(self, records: Sequence[Record]) -> list[Record]:
        """Accept a proposal sealed in one lane; the records as stored (their ``seq`` given).

        Refused with :class:`LedgerConflict`, nothing written, when another
        proposal was accepted in the lane since this one was sealed, or moved
        a ref this one moves.
        """
        if not records:
            return []
        lane = records[0].lane
        if lane is None or any(r.lane != lane for r in records):
            raise CorruptRepository("append refused: a proposal's records are of one lane")
        moves = sorted({key for r in records if (key := ref_key(r)) and not key.startswith("HEAD")})
        self._ahead = None  # read before this append: stale after it
        db = self._conn
        try:
            try:
                # two round trips, each one batch of statements (pipeline mode; BEGIN and
                # COMMIT sent as statements: psycopg's transaction block waits on each): the
                # lock and what the checks read, then the writes and the commit. The append
                # lock is held from the first to the commit only.
                with db.pipeline():
                    db.execute("BEGIN")
                    db.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
                    row = db.execute(_APPEND_READ, (lane, moves)).fetchone()
                    assert row is not None
                    head = Record.from_line(bytes(row[0])).hash if row[0] is not None else ""
                    if records[0].prev != head:
                        raise LedgerConflict(
                            f"refused: another writer recorded on branch {lane} first; "
                            "nothing was written",
                            missed=self._missed_in_lane(lane, records[0].prev),
                            hint="run the command again: it starts from the branch as it is now",
                        )
                    current: dict[str, str | None] = {
                        str(n): str(v) for n, v in (row[2] or {}).items()
                    }
                    for record in records:
                        key = ref_key(record)
                        if key is None or key.startswith("HEAD"):
                            continue  # a HEAD is one workspace's, whose own write lock guards it
                        now = current.get(key)
                        if now != _ref_value(record.body.get("old")):
                            what = key.replace("/", " ", 1)
                            raise LedgerConflict(
                                f"refused: another writer moved {what} since this command read it; "
                                "nothing was written",
                                missed=self._missed_since(record),
                                hint="run the command again: it starts from the ledger as it "
                                "is now",
                            )
                        current[key] = _ref_value(record.body.get("new"))
                    last = int(row[1]) if row[1] is not None else 0
                    placed = [
                        dataclasses.replace(r, seq=last + 1 + i) for i, r in enumerate(records)
                    ]
                    self._insert(db, placed)
                    db.execute("COMMIT")
            except BaseException:
                # refused, or a write failed: nothing of it stays (a lost connection
                # took the transaction with it)
                if not db.broken and not db.closed and db.info.transaction_status != IDLE:
                    with contextlib.suppress(psycopg.Error):
                        db.execute("ROLLBACK")
                raise
        except pg_errors.UniqueViolation:
            raise CorruptRepository(
                "append refused: an event id in this batch is already in the ledger"
            ) from None
        except psycopg.OperationalError as exc:
            raise _unreachable(self.url, exc) from None
        return placed

    def _missed_in_lane(self, lane: str, prev: str) -> list[str]:
        """Ids of the events of ``lane`` after its record whose hash is ``prev``."""
        missed: list[str] = []
        for record in self._paged(
            "SELECT seq, line FROM strata.records", ["lane = %s"], [lane], seq="seq", reverse=True
        ):
            if record.hash == prev:
                break
            if record.kind == "event":
                missed.append(str(record.body.get("id")))
        return missed[::-1]

    def _missed_since(self, record: Record) -> list[str]:
        """Ids of the events on the branch a refused ref record moves, after its ``old`` tip."""
        name = str(record.body.get("name", ""))
        if not name.startswith("branch/"):
            return []
        old = record.body.get("old")
        rows = self._run(
            "SELECT id FROM strata.events WHERE branch = %s AND seq > "
            "COALESCE((SELECT seq FROM strata.events WHERE id = %s), 0) ORDER BY seq",
            (name.removeprefix("branch/"), old),
        )
        return [str(r[0]) for r in rows]

    def append(self, records: Sequence[Record]) -> None:
        """Append records in one chain, in one transaction, after every record already there.

        Records without a lane (a conversion copies a ledger's records so); an
        operation of a workspace is appended by :meth:`append_lane`.
        """
        if not records:
            return
        lines = [r.to_line() for r in records]  # before touching the server
        self._ahead = None
        db = self._conn
        try:
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
                row = db.execute("SELECT MAX(seq) FROM strata.records").fetchone()
                last = int(row[0]) if row and row[0] is not None else 0
                expected = last + 1
                if (
                    records[0].seq < expected
                    and last
                    and records[0].prev == self._hash_at(records[0].seq - 1)
                ):
                    raise AppendOutOfOrder(
                        f"append out of order: another writer appended {expected - records[0].seq}"
                        " record(s) to the shared ledger first; nothing was written",
                        hint="run the command again: it starts from the ledger as it is now",
                    )
                for offset, record in enumerate(records):
                    if record.seq != expected + offset:
                        raise CorruptRepository(
                            f"append out of order: record {record.seq} in place of "
                            f"{expected + offset}"
                        )
                self._insert(db, records, lines)
        except pg_errors.UniqueViolation:
            raise CorruptRepository(
                "append refused: an event id in this batch is already in the ledger"
            ) from None
        except psycopg.OperationalError as exc:
            raise _unreachable(self.url, exc) from None

    def _insert(
        self,
        db: psycopg.Connection[Any],
        records: Sequence[Record],
        lines: Sequence[bytes] | None = None,
    ) -> None:
        """Write records, their index rows and the refs they move (in the caller's transaction)."""
        keys = [EventKeys.of(r) for r in records if r.kind == "event"]
        moved: dict[str, tuple[str | None, int]] = {}
        for r in records:
            key = ref_key(r)
            if key is not None:
                moved[key] = (_ref_value(r.body.get("new")), r.seq)
        # one statement a table, each row's values in arrays: with the pipeline of
        # append_lane, the whole write is one round trip (COPY is not allowed in one)
        with db.cursor() as cur:
            cur.execute(
                "INSERT INTO strata.records (seq, kind, lane, line) "
                "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bytea[])",
                (
                    [r.seq for r in records],
                    [r.kind for r in records],
                    [r.lane for r in records],
                    [lines[n] if lines else r.to_line() for n, r in enumerate(records)],
                ),
            )
            if keys:
                rows = [sqlindex.event_row(k) for k in keys]
                cur.execute(
                    "INSERT INTO strata.events SELECT * FROM unnest(%s::bigint[], "
                    + ", ".join(["%s::text[]"] * 8)
                    + ")",
                    [list(column) for column in zip(*rows, strict=True)],
                )
                files = [(k.seq, p) for k in keys for p in indexed_paths(k.files)]
                if files:
                    cur.execute(
                        "INSERT INTO strata.event_files (seq, path) "
                        "SELECT * FROM unnest(%s::bigint[], %s::text[])",
                        ([f[0] for f in files], [f[1] for f in files]),
                    )
            gone = [k for k, (v, _) in moved.items() if v is None]
            if gone:
                cur.execute("DELETE FROM strata.refs WHERE name = ANY(%s::text[])", (gone,))
            kept = [(k, v, q) for k, (v, q) in moved.items() if v is not None]
            if kept:
                cur.execute(
                    "INSERT INTO strata.refs SELECT * FROM unnest(%s::text[], %s::text[], "
                    "%s::bigint[]) ON CONFLICT (name) "
                    "DO UPDATE SET value = EXCLUDED.value, seq = EXCLUDED.seq",
                    ([k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept]),
                )

    def _hash_at(self, seq: int) -> str | None:
        rows = self._conn.execute("SELECT line FROM strata.records WHERE seq = %s", (seq,))
        row = rows.fetchone()
        return Record.from_line(bytes(row[0])).hash if row else None

    # -- reading -----------------------------------------------------------------

    def _paged(
        self,
        sql: str,
        clauses: Sequence[str],
        args: Sequence[Any],
        *,
        seq: str,
        reverse: bool,
        limit: int | None = None,
        page: int = 0,
    ) -> Iterator[Record]:
        """Records of ``sql`` (selecting ``seq``, ``line``) in ``seq`` order, a page at a time."""
        after: int | None = None
        left = limit
        while left is None or left > 0:
            where = list(clauses)
            page_args = list(args)
            if after is not None:
                where.append(f"{seq} {'<' if reverse else '>'} %s")
                page_args.append(after)
            size = (page or PAGE) if left is None else min(PAGE, left)
            query = sql + (" WHERE " + " AND ".join(where) if where else "")
            query += f" ORDER BY {seq} {'DESC' if reverse else 'ASC'} LIMIT {size}"
            rows = self._run(query, page_args)
            for _, line in rows:
                yield Record.from_line(bytes(line))
            if len(rows) < size:
                return
            after = int(rows[-1][0])
            if left is not None:
                left -= len(rows)

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Record | None:
        rows = self._run(sql, args)
        return Record.from_line(bytes(rows[0][0])) if rows else None

    def last(self) -> Record | None:
        """The newest record."""
        return self._one("SELECT line FROM strata.records ORDER BY seq DESC LIMIT 1")

    def get(self, seq: int) -> Record:
        """The record at ``seq``."""
        found = self._one("SELECT line FROM strata.records WHERE seq = %s", (seq,))
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
        clauses, args = sqlindex.scan_clauses("%s", start=start, stop=stop, kind=kind)
        return self._paged(
            "SELECT seq, line FROM strata.records", clauses, args, seq="seq", reverse=reverse
        )

    def last_of_kind(self, kind: str) -> Record | None:
        """The newest record of one kind."""
        return self._one(
            "SELECT line FROM strata.records WHERE kind = %s ORDER BY seq DESC LIMIT 1", (kind,)
        )

    def seek_event(self, event_id: str) -> Record | None:
        """The event record with this id."""
        return self._one(
            "SELECT r.line FROM strata.events e JOIN strata.records r ON r.seq = e.seq "
            "WHERE e.id = %s",
            (event_id,),
        )

    def snapshot_of(self, event_id: str) -> str | None:
        """The ``snapshot_ref`` of the event with this full id, from the event index."""
        rows = self._run("SELECT snapshot_ref FROM strata.events WHERE id = %s", (event_id,))
        return str(rows[0][0]) if rows and rows[0][0] else None

    def seek_time(self, ts: str) -> int | None:
        """The seq of the first event at or after ``ts``."""
        rows = self._run("SELECT MIN(seq) FROM strata.events WHERE ts >= %s", (ts,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def event_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Event ids starting with ``prefix``."""
        rows = self._run(
            sqlindex.prefix_query("id", "strata.events", "%s"), sqlindex.prefix_args(prefix, limit)
        )
        return [str(r[0]) for r in rows]

    def snapshot_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Distinct snapshot ids starting with ``prefix``."""
        query = sqlindex.prefix_query("snapshot_ref", "strata.events", "%s")
        return [str(r[0]) for r in self._run(query, sqlindex.prefix_args(prefix, limit))]

    def newest_with_snapshot(self, snapshot_id: str) -> Record | None:
        """The newest event carrying this snapshot."""
        return self._one(
            "SELECT r.line FROM strata.events e JOIN strata.records r ON r.seq = e.seq "
            "WHERE e.snapshot_ref = %s ORDER BY e.seq DESC LIMIT 1",
            (snapshot_id,),
        )

    def find_events(
        self, where: EventFilter, *, limit: int | None = None, newest_first: bool = True
    ) -> Iterator[Record]:
        """Event records passing every filter."""
        clauses: list[str] = []
        args: list[Any] = []
        sql = "SELECT e.seq, r.line FROM strata.events e JOIN strata.records r ON r.seq = e.seq"
        path = where.path.strip("/") if where.path is not None else ""
        rows = "(path = %s OR (path >= %s AND path < %s) OR path = %s)"
        row_args = [*path_range(path), parent_row(path)] if path else []
        if path and self._rows_at_most(rows, row_args, FEW_PATH_ROWS):
            # a rare path (a file among a million events): the events naming it first,
            # from its index; walking the events newest first would read them all
            sql = (
                "WITH m AS MATERIALIZED (SELECT DISTINCT seq FROM strata.event_files "
                f"WHERE {rows}) "
                "SELECT e.seq, r.line FROM m JOIN strata.events e ON e.seq = m.seq "
                "JOIN strata.records r ON r.seq = e.seq"
            )
            args += row_args
        elif path:
            # a big folder: the events newest first, each looked up in the path index
            clauses.append(
                f"EXISTS (SELECT 1 FROM strata.event_files f WHERE f.seq = e.seq AND {rows})"
            )
            args += row_args
        more, equal = sqlindex.filter_clauses("%s", where)
        clauses += more
        args += equal
        if not path:
            return self._paged(sql, clauses, args, seq="e.seq", reverse=newest_first, limit=limit)
        # the candidates of a folder row (a big event's, or an empty folder) are checked
        found = (
            r
            for r in self._paged(
                sql,
                clauses,
                args,
                seq="e.seq",
                reverse=newest_first,
                page=min(PAGE, limit) if limit else PAGE,
            )
            if path_matches(r.body.get("files") or (), path)
        )
        return found if limit is None else itertools.islice(found, limit)

    def _rows_at_most(self, rows: str, args: Sequence[Any], most: int) -> bool:
        """Whether the path index holds at most ``most`` rows matching ``rows``."""
        found = self._run(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM strata.event_files WHERE {rows} "
            f"LIMIT {most + 1}) t",
            args,
        )
        return int(found[0][0]) <= most

    def count(self) -> int:
        """How many records there are."""
        return int(self._run("SELECT COUNT(*) FROM strata.records")[0][0])

    # -- the index ---------------------------------------------------------------

    def rebuild_index(self) -> None:
        """Drop and rebuild the event index from the records."""
        db = self._conn
        try:
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
                db.execute("DELETE FROM strata.events")
                db.execute("DELETE FROM strata.event_files")
                keys = [EventKeys.of(r) for r in self.scan(kind="event")]
                with db.cursor() as cur:
                    if keys:
                        cur.executemany(
                            "INSERT INTO strata.events VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            [sqlindex.event_row(k) for k in keys],
                        )
                    with cur.copy("COPY strata.event_files (seq, path) FROM STDIN") as copy:
                        for k in keys:
                            for p in indexed_paths(k.files):
                                copy.write_row((k.seq, p))
        except psycopg.OperationalError as exc:
            raise _unreachable(self.url, exc) from None

    def verify_index(self) -> list[str]:
        """Where the event index disagrees with the records."""
        indexed = {
            row[0]: tuple(row)
            for row in self._run(f"SELECT {sqlindex.EVENT_COLUMNS} FROM strata.events")
        }
        files = self._run("SELECT seq, path FROM strata.event_files")
        return sqlindex.index_problems(self.scan(kind="event"), indexed, [(s, p) for s, p in files])
