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

from typing import TYPE_CHECKING, Any

from strata.ids import ObjectId
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author, Event
from strata.ledger.ledger import View

if TYPE_CHECKING:
    from strata.repo import Repository


def is_finished_run(op: dict[str, Any]) -> bool:
    """True for the operation that closes a run (its ``run`` event)."""
    return op.get("command") == "run" and bool((op.get("details") or {}).get("run_id"))


def undo_run(repo: Repository, op: dict[str, Any], *, author: Author | None) -> bool:
    """Reverse the run whose ``run`` operation is ``op``; False when it changed no file.

    The write lock is held by the caller. When the run changed nothing (no
    ``after`` state event was recorded), nothing is done here and the caller
    undoes ``op`` as any other operation.
    """
    from strata.repo import Point
    from strata.runs.record import _rollback_paths

    run_id = str(op["details"]["run_id"])
    taken: dict[str, Event] = {}
    for record in repo.ledger.driver.find_events(
        EventFilter(operation_id=run_id, action_type="workspace_snapshot_taken"), limit=None
    ):
        event = Event.from_json(record.body, seq=record.seq)
        taken.setdefault(str(event.data.get("label")), event)
    before_mark = taken.get("before")
    after_mark = taken.get("after") or taken.get("after_failure")
    if before_mark is None or after_mark is None:
        return False
    assert before_mark.anchor_event_id is not None and after_mark.anchor_event_id is not None
    before = repo._event(before_mark.anchor_event_id)
    after = repo._event(after_mark.anchor_event_id)
    if before.id == after.id:
        return False  # the command changed no file
    ops = repo.ledger.operations()
    recorded_after = next((o for o in ops if after.id in o.get("events", ())), None)
    if recorded_after is None:
        return False
    before_tree, after_tree = repo._tree_of(before), repo._tree_of(after)
    changed = _rollback_paths(repo, before_tree, after_tree)
    if not changed:
        return False
    repo._guard_published("undo a run")
    # every operation of the run from its 'after' snapshot on, and the annotations
    also = [recorded_after["id"]] + [
        o["id"]
        for o in ops
        if (o.get("details") or {}).get("run_id") == run_id and o["id"] != op["id"]
    ]
    repo._restore(
        Point(ObjectId(before_tree), before.snapshot_ref, before, "before"),
        f"the state before run {run_id}",
        paths=changed,
        author=author,
        command="undo",
        after_view=View.from_json(recorded_after["view_before"]),
        details={"undid": op["id"], "undid_also": also, "run_id": run_id},
    )
    return True
