"""What the SQL ledger drivers (SQLite, PostgreSQL) share: the event index's rows and queries.

Both keep the records in a ``records`` table and index the events in
``events`` (one row per event, :func:`event_row`) and ``event_files``. The
queries differ only in their placeholder (``?`` for SQLite, ``%s`` for
psycopg) and the schema prefix: each function here takes the placeholder
``mark``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from strata.ledger.driver import EventFilter, EventKeys, index_agrees
from strata.ledger.records import Record

#: the columns of the ``events`` table, in order
EVENT_COLUMNS = "seq, id, ts, branch, operation_id, author, author_kind, action_type, snapshot_ref"


def event_row(k: EventKeys) -> tuple[Any, ...]:
    """One row of the ``events`` index table (:data:`EVENT_COLUMNS`)."""
    return (
        k.seq,
        k.id,
        k.ts,
        k.branch,
        k.operation_id,
        k.author,
        k.author_kind,
        k.action_type,
        k.snapshot_ref,
    )


def scan_clauses(
    mark: str, *, start: int, stop: int | None, kind: str | None
) -> tuple[list[str], list[Any]]:
    """The ``WHERE`` clauses and arguments of a scan of ``records``."""
    clauses: list[str] = [f"seq >= {mark}"]
    args: list[Any] = [start]
    if stop is not None:
        clauses.append(f"seq < {mark}")
        args.append(stop)
    if kind is not None:
        clauses.append(f"kind = {mark}")
        args.append(kind)
    return clauses, args


def filter_clauses(mark: str, where: EventFilter) -> tuple[list[str], list[Any]]:
    """The ``WHERE`` clauses and arguments of ``where``'s equality filters (``e``: events)."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("e.branch", where.branch),
        ("e.operation_id", where.operation_id),
        ("e.author", where.author),
        ("e.author_kind", where.author_kind),
        ("e.action_type", where.action_type),
    ):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            args.append(value)
    return clauses, args


def prefix_query(column: str, table: str, mark: str) -> str:
    """The distinct values of ``column`` that start with a prefix (args: prefix_args)."""
    return (
        f"SELECT DISTINCT {column} FROM {table} WHERE {column} >= {mark} AND {column} < {mark} "
        f"ORDER BY {column} LIMIT {mark}"
    )


def prefix_args(prefix: str, limit: int) -> tuple[str, str, int]:
    """The arguments of :func:`prefix_query`."""
    return prefix, prefix + "\uffff", limit


def index_problems(
    events: Iterable[Record],
    indexed: Mapping[int, Sequence[Any]],
    files: Iterable[tuple[int, str]],
) -> list[str]:
    """Where the event index (``indexed`` rows by seq, ``files`` rows) disagrees with ``events``."""
    rows = {seq: tuple(row) for seq, row in indexed.items()}
    named: dict[int, list[str]] = {}
    for seq, path in files:
        named.setdefault(seq, []).append(path)
    problems: list[str] = []
    for record in events:
        k = EventKeys.of(record)
        row = rows.pop(k.seq, None)
        if row != event_row(k) or not index_agrees(named.pop(k.seq, []), k.files):
            problems.append(f"index: event record {k.seq} is indexed wrongly")
    for seq in sorted(rows):
        problems.append(f"index: names record {seq}, which is not an event")
    return problems
