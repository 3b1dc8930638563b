"""Migrating ledgers written by older formats.

Format 1 (the first storage-engine release) kept an ``events`` table and a
``refs`` table with ``HEAD``. Format 2 keeps chained records. Migration runs
once, under the writer lock, in one SQLite transaction: every format-1 event
becomes one operation (its event record, the ref moves it implied, and the
operation record), all on branch ``main``; rewinds become annotation events
anchored at their target. The old table is kept as ``v1_events``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from strata.ledger.drivers.sqlite import FORMAT, SCHEMA, index_events
from strata.ledger.ledger import DEFAULT_BRANCH, View, seal_operation
from strata.ledger.records import Record


def ledger_format(path: Path) -> int | None:
    """The format version recorded in an SQLite ledger, or None when it has none."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    except sqlite3.DatabaseError:
        return None
    finally:
        db.close()
    return int(row[0]) if row else None


def migrate_v1(path: Path) -> int:
    """Rewrite a format-1 SQLite ledger as format 2 in place; return the events migrated."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute(
            "SELECT id, ts, author_name, author_kind, action_type, rationale, files, "
            "snapshot_ref, parent_event_id, data FROM events ORDER BY seq"
        ).fetchall()
        for statement in (
            "DROP TRIGGER IF EXISTS events_append_only_update",
            "DROP TRIGGER IF EXISTS events_append_only_delete",
            "DROP INDEX IF EXISTS events_ts",
            "DROP INDEX IF EXISTS events_author",
            "DROP INDEX IF EXISTS events_snapshot",
            "DROP INDEX IF EXISTS event_files_path",
            "ALTER TABLE events RENAME TO v1_events",
            "DROP TABLE event_files",
            "ALTER TABLE refs RENAME TO v1_refs",
        ):
            db.execute(statement)
        for statement in SCHEMA.strip().split(";\n"):
            if statement.strip():
                db.execute(statement)
        view = View()
        records: list[Record] = []
        for eid, ts, aname, akind, action, rationale, files, snap, parent, data in rows:
            details = json.loads(data)
            before = view
            body: dict[str, Any] = {
                "id": eid,
                "ts": ts,
                "author": {"name": aname, "kind": akind},
                "action_type": action,
                "branch": DEFAULT_BRANCH,
                "operation_id": eid,
                "action_scope": "project",
                "diff_mode": "unified",
                "rationale": rationale,
                "files": json.loads(files),
                "snapshot_ref": snap,
                "parent_event_id": parent,
            }
            if snap:
                branches = dict(view.branches)
                branches[DEFAULT_BRANCH] = eid
                view = View(DEFAULT_BRANCH, eid, branches, dict(view.bookmarks))
            else:
                target = details.get("target_event_id")
                body["anchor_event_id"] = target
                if action == "rewind" and target:
                    view = View(DEFAULT_BRANCH, target, dict(view.branches), dict(view.bookmarks))
            if details:
                body["data"] = details
            operation = {
                "id": eid,
                "command": action,
                "ts": ts,
                "author": {"name": aname, "kind": akind},
                "events": [eid],
                "view_before": before.to_json(),
                "view_after": view.to_json(),
                "details": {"migrated_from_format": 1},
            }
            last = records[-1] if records else None
            records += seal_operation([body], operation, before, view, last=last)
        db.executemany(
            "INSERT INTO records(seq, kind, line) VALUES (?, ?, ?)",
            [(r.seq, r.kind, r.to_line()) for r in records],
        )
        index_events(db, [r for r in records if r.kind == "event"])
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT),))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('driver', 'sqlite')")
        db.execute("COMMIT")
        return len(rows)
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()
