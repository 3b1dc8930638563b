"""``strata undo`` of a run: put back what the command changed, in one step.

A finished run is several operations: its ``before`` snapshot (when the
workspace held unrecorded work), the annotations of that snapshot, its
``after`` snapshot and the operation of its ``run`` event. Undoing them one
by one would first reverse annotations (nothing visible), then move HEAD
without the files. What a user means by undoing a run is undoing what the
command did: this module restores exactly the paths the run changed to their
``before`` state, moves HEAD back to the ``before`` event, and marks every
operation of the run after its ``before`` snapshot as undone, so the next
``strata undo`` reaches what came before the run. ``strata redo`` puts the
files back as they were before the undo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.core import OperationRecord, Point
from strata.core.restore import changed_paths, restore_into
from strata.ids import ObjectId
from strata.ledger.driver import EventFilter
from strata.ledger.events import Event, EventType

if TYPE_CHECKING:
    from strata.core import Core, Transaction


def is_finished_run(op: OperationRecord) -> bool:
    """True for the operation that closes a run (its ``run`` event)."""
    return op.command == EventType.RUN and bool(op.details.get("run_id"))


def undo_run(tx: Transaction, op: OperationRecord) -> bool:
    """Reverse the run whose ``run`` operation is ``op`` within ``tx``; False if it is none.

    False too when the run changed no file (no ``after`` state event was
    recorded): the caller then undoes ``op`` as any other operation.
    """
    if not is_finished_run(op):
        return False
    core = tx.core
    run_id = str(op.details["run_id"])
    taken: dict[str, Event] = {}
    for record in core.ledger.driver.find_events(
        EventFilter(operation_id=run_id, action_type=EventType.WORKSPACE_SNAPSHOT_TAKEN),
        limit=None,
    ):
        event = Event.from_json(record.body, seq=record.seq)
        taken.setdefault(str(event.data.get("label")), event)
    before_mark = taken.get("before")
    after_mark = taken.get("after") or taken.get("after_failure")
    if before_mark is None or after_mark is None:
        return False
    assert before_mark.anchor_event_id is not None and after_mark.anchor_event_id is not None
    before = core.event(before_mark.anchor_event_id)
    after = core.event(after_mark.anchor_event_id)
    if before.id == after.id:
        return False  # the command changed no file
    ops = [OperationRecord.from_json(o) for o in core.ledger.operations()]
    recorded_after = next((o for o in ops if after.id in o.events), None)
    if recorded_after is None:
        return False
    # the steps of a live capture (``run --watch``) are snapshots of their own operations,
    # recorded after the 'before' mark; the 'after' snapshot may be the last of them.
    # HEAD goes back to before the first, and they are undone with the run.
    steps = live_steps(core, ops, before_mark.seq, recorded_after.seq)
    first = min([recorded_after, *steps], key=lambda o: o.seq)
    before_tree, after_tree = core.tree_of(before), core.tree_of(after)
    changed = changed_paths(core, before_tree, after_tree)
    if not changed:
        return False
    core.guard_published("undo a run")
    # every operation of the run from its first live step (or its 'after' snapshot) on,
    # and the annotations
    also = [recorded_after.id] + [s.id for s in steps if s.id != recorded_after.id]
    also += [o.id for o in ops if o.details.get("run_id") == run_id and o.id != op.id]
    restore_into(
        tx,
        Point(ObjectId(before_tree), before.snapshot_ref, before, "before"),
        f"the state before run {run_id}",
        paths=changed,
        event_type=EventType.UNDO,
        after_view=first.view_before,
        details={"undid": op.id, "undid_also": also, "run_id": run_id},
    )
    return True


def live_steps(
    core: Core, ops: list[OperationRecord], since_seq: int, until_seq: int
) -> list[OperationRecord]:
    """The operations recorded in ``(since_seq, until_seq]`` that took a live-capture step."""
    found = []
    for o in ops:
        if not since_seq < o.seq <= until_seq:
            continue
        for event_id in o.events:
            event = core.event(event_id)
            if event.action_type == EventType.SNAPSHOT and "live_capture" in event.data:
                found.append(o)
                break
    return found
