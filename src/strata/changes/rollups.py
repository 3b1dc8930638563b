"""Rollups (seed 004 §5.5, §7.1): an oversized operation summed up as one event.

An operation (the events sharing an ``operation_id``) is a candidate when it
holds at least ``min_events`` events (default 200), or when it has been idle
for ``idle_ms`` (default 10 minutes) and holds at least two state events.
Applying a rollup records one ``rollup`` annotation event anchored to the
operation's last state event, linking two stored artifacts: the composed
patch (from the tree before the operation's first state event to its last
one) and the ``rollup_index`` (every original event: id, type, files, snapshot).
Nothing is deleted or changed: the original events stay in the ledger, and
``rollup_revert`` (another annotation) withdraws a rollup. While a rollup
stands, ``strata history`` shows its operation as one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.errors import UsageError
from strata.ledger.events import Event, EventType
from strata.store.tree import EMPTY_TREE

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.ledger.events import Author

__all__ = ["Candidate", "active_rollups", "apply_rollup", "propose", "revert_rollup"]

DEFAULT_MIN_EVENTS = 200
DEFAULT_IDLE_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class Candidate:
    """An operation that may be rolled up: its events, oldest first."""

    operation_id: str
    events: tuple[Event, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The candidate as ``--json`` prints it."""
        return {
            "operation_id": self.operation_id,
            "event_count": len(self.events),
            "state_events": sum(1 for e in self.events if e.snapshot_ref),
            "first_ts": self.events[0].ts,
            "last_ts": self.events[-1].ts,
            "files": sorted({f for e in self.events for f in e.files}),
            "reason": self.reason,
        }


def active_rollups(events: list[Event]) -> dict[str, Event]:
    """Rolled-up operation id -> the standing ``rollup`` event (reverted ones left out)."""
    reverted = {
        str(e.data.get("rollup_event_id"))
        for e in events
        if e.action_type == EventType.ROLLUP_REVERT
    }
    found: dict[str, Event] = {}
    for e in events:  # newest first: the newest standing rollup of an operation wins
        if e.action_type == EventType.ROLLUP and e.id not in reverted:
            found.setdefault(str(e.data.get("rollup", {}).get("of_operation_id")), e)
    return found


def _operations(events: list[Event]) -> dict[str, list[Event]]:
    ops: dict[str, list[Event]] = {}
    for e in reversed(events):  # oldest first
        if e.operation_id and e.action_type not in (EventType.ROLLUP, EventType.ROLLUP_REVERT):
            ops.setdefault(e.operation_id, []).append(e)
    return ops


def _ms(ts: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def propose(
    events: list[Event],
    *,
    now_ms: int,
    min_events: int = DEFAULT_MIN_EVENTS,
    idle_ms: int = DEFAULT_IDLE_MS,
) -> list[Candidate]:
    """The operations worth rolling up, largest first (``events``: newest first)."""
    if min_events < 2:
        raise UsageError("--min-events must be at least 2")
    done = active_rollups(events)
    out = []
    for op, members in _operations(events).items():
        if op in done:
            continue
        states = sum(1 for e in members if e.snapshot_ref)
        if len(members) >= min_events:
            reason = f"{len(members)} events (at least {min_events})"
        elif states >= 2 and now_ms - _ms(members[-1].ts) >= idle_ms:
            reason = (
                f"idle for {(now_ms - _ms(members[-1].ts)) // 60000} min with {states} snapshots"
            )
        else:
            continue
        out.append(Candidate(op, tuple(members), reason))
    return sorted(out, key=lambda c: (-len(c.events), c.operation_id))


def apply_rollup(
    core: Core, operation_id: str, events: list[Event], *, author: Author | None = None
) -> Event:
    """Record the ``rollup`` of ``operation_id``: its composed patch and index, linked."""
    members = _operations(events).get(operation_id)
    if not members:
        raise UsageError(
            f"no operation {operation_id!r}", hint="'strata rollup propose' lists them"
        )
    if operation_id in active_rollups(events):
        raise UsageError(f"operation {operation_id} is already rolled up")
    states = [e for e in members if e.snapshot_ref]
    if not states:
        raise UsageError(f"operation {operation_id} recorded no snapshot: nothing to roll up")
    first, last = states[0], states[-1]
    parent = core.event(first.parent_event_id) if first.parent_event_id else None
    before = core.tree_of(parent) if parent and parent.snapshot_ref else EMPTY_TREE
    diff = core.diff_trees(before, core.tree_of(last))
    index = {
        "of_operation_id": operation_id,
        "events": [
            {
                "id": e.id,
                "action_type": e.action_type,
                "ts": e.ts,
                "files": list(e.files),
                "snapshot_ref": e.snapshot_ref,
            }
            for e in members
        ],
    }
    with core.transaction("rollup", author) as tx:
        patch_oid = core.objects.put(diff.patch())
        index_oid = core.objects.put(json.dumps(index, indent=2, sort_keys=True).encode())
        event = tx.annotate(
            EventType.ROLLUP,
            anchor=last.id,
            rationale=f"rollup of {len(members)} events of operation {operation_id}",
            files=[f.path for f in diff.files],
            data={
                "rollup": {
                    "of_operation_id": operation_id,
                    "event_count": len(members),
                    "rollup_index_artifact": index_oid,
                    "patch_artifact": patch_oid,
                    "first_event_id": members[0].id,
                    "last_event_id": members[-1].id,
                }
            },
            artifacts=(index_oid, patch_oid),
        )
    return core.event(event.id)


def revert_rollup(
    core: Core, rollup_id: str, events: list[Event], *, author: Author | None = None
) -> Event:
    """Withdraw a standing rollup (its operation is shown event by event again)."""
    standing = {e.id: e for e in active_rollups(events).values()}
    found = [e for eid, e in standing.items() if rollup_id and eid.startswith(rollup_id)]
    if len(found) != 1:
        raise UsageError(
            f"{rollup_id!r} names {'no' if not found else 'more than one'} standing rollup",
            hint="'strata history --action rollup' lists them",
        )
    target = found[0]
    with core.transaction("rollup revert", author) as tx:
        event = tx.annotate(
            EventType.ROLLUP_REVERT,
            anchor=target.anchor_event_id,
            rationale=f"rollup {target.id[:12]} withdrawn",
            data={"rollup_event_id": target.id},
        )
    return core.event(event.id)
