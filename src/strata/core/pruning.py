"""What ``strata gc`` removed: the snapshots its operations name, and the error for one.

An event whose snapshot gc pruned stays in the ledger; reading it raises
:class:`~strata.errors.SnapshotPruned`, which names the nearest kept event
(see :mod:`strata.core.storage` for what gc keeps). Below
:mod:`strata.core.core`: it reads the ledger and the object store it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from strata.errors import SnapshotPruned, StrataError
from strata.ids import ObjectId, short
from strata.ledger.events import Event
from strata.ledger.ledger import Ledger
from strata.store.objects import ObjectStore

#: the command of a gc operation (its ``details.pruned`` lists the snapshots it removed)
GC_COMMAND = "gc"


def state_events(ledger: Ledger) -> Iterator[Event]:
    """Every state event (one with a snapshot), in ledger order."""
    for record in ledger.driver.scan(kind="event"):
        if record.body.get("snapshot_ref"):
            try:
                yield Event.from_json(record.body, seq=record.seq)
            except (StrataError, KeyError, TypeError, ValueError):
                continue  # check reports it; gc keeps what it cannot read (see below)


def pruned_snapshots(ledger: Ledger) -> dict[str, str]:
    """Snapshot id -> when gc removed it (the ``gc`` operations' ``details.pruned``)."""
    found: dict[str, str] = {}
    for record in ledger.driver.scan(kind="operation"):
        body = record.body
        if body.get("command") != GC_COMMAND:
            continue
        for snapshot in (body.get("details") or {}).get("pruned") or ():
            found.setdefault(str(snapshot), str(body.get("ts", "")))
    return found


def pruned_error(ledger: Ledger, objects: ObjectStore, snapshot_id: str) -> SnapshotPruned | None:
    """The error for reading a snapshot gc removed (None: gc did not remove it)."""
    when = pruned_snapshots(ledger).get(snapshot_id)
    if when is None:
        return None
    pruned = pruned_snapshots(ledger)
    mine: Event | None = None
    events = list(state_events(ledger))
    for event in events:
        if event.snapshot_ref == snapshot_id:
            mine = event
            break
    nearest: Event | None = None
    if mine is not None:
        ts = ts_ms(mine.ts)
        candidates = [
            e
            for e in events
            if e.snapshot_ref not in pruned and objects.has(ObjectId(str(e.snapshot_ref)))
        ]
        same = [e for e in candidates if e.branch == mine.branch] or candidates
        if same:
            nearest = min(same, key=lambda e: (abs(ts_ms(e.ts) - ts), e.seq))
    return SnapshotPruned(
        snapshot_id,
        removed=when,
        event_id=mine.id if mine else None,
        nearest=f"{short(nearest.id)} ({nearest.ts})" if nearest else None,
    )


def ts_ms(text: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 UTC time (``...Z``); ValueError if not one."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
