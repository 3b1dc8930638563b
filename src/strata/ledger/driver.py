"""The ledger driver protocol: where chained records are kept and how they are found.

A driver stores :class:`~strata.ledger.records.Record` objects in append order
and keeps an index over the event records so that common questions do not
scan the whole ledger. Drivers know nothing about branches, bookmarks or
operations: :mod:`strata.ledger.ledger` builds those from records.

Two drivers implement it: SQLite (default) and JSONL (``events.jsonl`` plus an
``events.idx`` sidecar). One conformance suite (``tests/test_ledger_drivers.py``)
runs against both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strata.errors import RepositoryError
from strata.ledger.records import Record


class LedgerConflict(RepositoryError):
    """Another writer appended first: this operation was built on an older ledger.

    Met on a shared ledger (PostgreSQL): an append out of order, as every
    driver refuses one, but one a writer that skipped the driver's admission
    queue (or wrote to a branch other than the one it queued for) can meet on
    a healthy ledger; or an undo that would move back a branch another
    workspace moved since. ``missed``: the ids of the events accepted
    meanwhile that the refused proposal did not see.
    """

    def __init__(self, message: str, *, missed: Sequence[str] = (), hint: str = "") -> None:
        self.missed = tuple(missed)
        if self.missed:
            shown_ids = ", ".join(self.missed[:5]) + (" ..." if len(self.missed) > 5 else "")
            message += f" (missed {len(self.missed)} event(s): {shown_ids})"
        super().__init__(message, hint=hint or None)


@dataclass(frozen=True)
class EventFilter:
    """Indexed filters for :meth:`LedgerDriver.find_events`; None means any."""

    branch: str | None = None
    operation_id: str | None = None
    author: str | None = None
    author_kind: str | None = None
    action_type: str | None = None
    path: str | None = None  # a file, or a folder: matches everything below it


@dataclass(frozen=True)
class EventKeys:
    """The indexed fields of one event record."""

    seq: int
    id: str
    ts: str
    branch: str
    operation_id: str
    author: str
    author_kind: str
    action_type: str
    snapshot_ref: str | None
    files: tuple[str, ...]

    @classmethod
    def of(cls, record: Record) -> EventKeys:
        """The keys of an event record."""
        body: dict[str, Any] = record.body
        author = body.get("author")
        if not isinstance(author, dict):
            author = {}
        return cls(
            seq=record.seq,
            id=str(body.get("id", "")),
            ts=str(body.get("ts", "")),
            branch=str(body.get("branch") or ""),
            operation_id=str(body.get("operation_id") or ""),
            author=str(author.get("name", "")),
            author_kind=str(author.get("kind", "")),
            action_type=str(body.get("action_type", "")),
            snapshot_ref=body.get("snapshot_ref") or None,
            files=tuple(str(f) for f in body.get("files") or ()),
        )

    def matches(self, f: EventFilter) -> bool:
        """True when this event passes every filter of ``f``."""
        if f.branch is not None and self.branch != f.branch:
            return False
        if f.operation_id is not None and self.operation_id != f.operation_id:
            return False
        if f.author is not None and self.author != f.author:
            return False
        if f.author_kind is not None and self.author_kind != f.author_kind:
            return False
        if f.action_type is not None and self.action_type != f.action_type:
            return False
        return f.path is None or path_matches(self.files, f.path)


def path_matches(files: Sequence[str], path: str) -> bool:
    """The one path filter: ``path`` names a file or a folder and everything below it.

    Events list a folder (one created empty, say) with a trailing ``/``;
    ``emptydir`` and ``emptydir/`` both match it. Every driver filters by
    this rule (the SQLite driver in SQL: :func:`path_range`).
    """
    folder = path.strip("/")
    if not folder:
        return True
    return any(p.rstrip("/") == folder or p.startswith(folder + "/") for p in files)


#: an event naming more files than this is indexed by folder (:func:`indexed_paths`)
BIG_EVENT_FILES = 256


def parent_row(path: str) -> str:
    """The folder row (:func:`indexed_paths`) that a big event naming ``path`` has.

    ``"src/a/b.py"`` → ``"src/a/"``, ``"README"`` → ``"/"`` (the root), an empty
    folder ``"src/empty/"`` → ``"src/"``.
    """
    parent = path.strip("/").rpartition("/")[0]
    return parent + "/"


def indexed_paths(files: Sequence[str]) -> tuple[str, ...]:
    """The changed-path index rows of an event naming ``files``.

    Each file, up to :data:`BIG_EVENT_FILES`; past it (a snapshot that touched
    every file of a big workspace) the folders holding them, each once, as
    ``"folder/"`` (``"/"`` for the root): a 5,000-file event in 100 folders adds
    100 rows, not 5,000, so such events do not make the index, and every later
    commit into it, grow by thousands of rows each. A path filter looks up the
    path, everything below it and its parent's folder row, then checks the
    candidates' files (:func:`path_matches`): a folder row also stands for an
    empty folder an event created, and for the other files of its folder.
    """
    if len(files) <= BIG_EVENT_FILES:
        return tuple(files)
    return tuple(sorted({parent_row(f) for f in files}))


def index_agrees(rows: Sequence[str], files: Sequence[str]) -> bool:
    """Whether an event's index ``rows`` are right for its ``files``.

    Either form is right: a ledger written before big events were indexed by
    folder holds one row per file for them.
    """
    found = sorted(rows)
    return found == sorted(files) or found == sorted(indexed_paths(files))


def path_range(path: str) -> tuple[str, str, str]:
    """``(exact, low, high)``: a path matches when it is ``exact`` or ``low <= path < high``.

    The SQL form of :func:`path_matches` (``"0"`` sorts right after ``"/"``);
    with :func:`parent_row` it finds the candidates of a path filter, which are
    then checked with :func:`path_matches` (see :func:`indexed_paths`).
    """
    folder = path.strip("/")
    return folder, folder + "/", folder + "0"


class LedgerDriver(Protocol):
    """Append-only storage of chained records with an event index."""

    #: "sqlite" or "jsonl"
    name: str

    def append(self, records: Sequence[Record]) -> None:
        """Append records atomically (all or none); their ``seq`` must follow the last one."""

    def last(self) -> Record | None:
        """The newest record (its hash is the chain head), or None when empty."""

    def get(self, seq: int) -> Record:
        """The record at ``seq``; KeyError if there is none."""

    def scan(
        self,
        *,
        start: int = 1,
        stop: int | None = None,
        kind: str | None = None,
        reverse: bool = False,
    ) -> Iterator[Record]:
        """Records with ``start <= seq < stop`` (no upper bound when None), optionally one kind."""

    def last_of_kind(self, kind: str) -> Record | None:
        """The newest record of one kind."""

    def seek_event(self, event_id: str) -> Record | None:
        """The event record with this full id."""

    def snapshot_of(self, event_id: str) -> str | None:
        """The ``snapshot_ref`` of the event with this full id (None: no such event, or none).

        What ``seek_event(event_id).body["snapshot_ref"]`` says, without parsing
        the record where the index holds it (a first snapshot's event names
        every file: megabytes of JSON).
        """

    def seek_time(self, ts: str) -> int | None:
        """The ``seq`` of the first event whose ``ts`` is at or after ``ts``."""

    def event_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Event ids that start with ``prefix``, sorted."""

    def snapshot_ids_with_prefix(self, prefix: str, limit: int = 6) -> list[str]:
        """Distinct snapshot ids named by events that start with ``prefix``."""

    def newest_with_snapshot(self, snapshot_id: str) -> Record | None:
        """The newest event record that carries this snapshot."""

    def find_events(
        self, where: EventFilter, *, limit: int | None = None, newest_first: bool = True
    ) -> Iterator[Record]:
        """Event records passing every filter, through the index."""

    def count(self) -> int:
        """How many records there are."""

    def rebuild_index(self) -> None:
        """Rebuild the event index from the records."""

    def verify_index(self) -> list[str]:
        """Problems with the index (empty when it agrees with the records)."""

    def close(self) -> None:
        """Release files and connections."""
