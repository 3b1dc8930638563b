"""Undo and redo: append the inverse of an operation; never erase.

Undo reverses the newest operation not yet undone: refs go back to its
``view_before`` and, when it moved files (``tree_before`` in its details), the
files too. Redo re-applies it: refs to its ``view_after``, files to its
``tree_after``. Every undo keeps the working tree it found as its own
``tree_before``, so the redo of an operation that moved only refs (a
snapshot) or only some paths brings back the files the undo found.

Auto-saves belong to the operation that needed them (one operation), so
undoing a rewind puts back the unrecorded files and HEAD where it was, and
the auto-saved work stays reachable from the undo's details.

A finished run is special: undoing it reverses what the command changed in
one step (:mod:`strata.runs.undo` registers as :attr:`Core.undo_handlers`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from strata.core.restore import changed_paths, restore_into
from strata.core.results import Point
from strata.core.results_ops import OperationRecord, RedoResult, UndoResult
from strata.errors import CorruptRepository, DraftOpen, UndoError
from strata.ids import ObjectId
from strata.ledger.events import Author, EventType
from strata.ledger.ledger import View
from strata.store.tree import EMPTY_TREE, graft

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.transaction import Transaction


def undo(core: Core, *, author: Author | None = None, step: bool = False) -> UndoResult:
    """Reverse the newest operation not yet undone, by appending its inverse.

    When that operation is a step of a group (an agent's prompt), the whole
    group is reversed (:func:`undo_group`); ``step`` reverses that one step.
    """
    with core.transaction("undo", author) as tx:
        target = OperationRecord.from_json(core.ledger.undo_target())
        guard_draft_undo(core, "undo", target)
        run_id = target.details.get("run_id")
        result = UndoResult(
            target.id, target.command, target.ts, tx.id, str(run_id) if run_id else None
        )
        if target.group and not step:
            # a group marked "undo": "handler" is reversed whole by the undo handler of its
            # newest step (a Workshop turn's chat operation names every step it was made of);
            # any other, by putting back what its agents changed
            if target.group.get("undo") == "handler":
                for handler in core.undo_handlers:
                    if handler(tx, target):
                        return dataclasses.replace(result, group=dict(target.group))
            return dataclasses.replace(result, group=undo_group(tx, target))
        for handler in core.undo_handlers:
            if handler(tx, target):
                return result
        if undo_agent_change(tx, target) or undo_paths_put_back(tx, target):
            return result
        tree = target.details.get("tree_before")
        if target.command in ("undo", "redo") and target.details.get("tree_after") is None:
            tree = None  # it moved only refs (its tree_before is what it found, not moved)
        apply_view(
            tx,
            target.view_before,
            tree,
            ref=f"the state before {target.command} {target.id}",
            undid=target.id,
        )
        return result


def redo(core: Core, *, author: Author | None = None) -> RedoResult:
    """Re-apply what the newest undo reversed: refs and files as they were before that undo."""
    with core.transaction("redo", author) as tx:
        undo_op = OperationRecord.from_json(core.ledger.redo_target())
        original_id = str(undo_op.details["undid"])
        refused = undo_op.details.get("redo_refused")
        if refused:  # an undo handler that cannot be redone by refs and files alone (Workshop)
            raise UndoError(f"cannot redo {original_id}: {refused}", hint=None)
        original = next(
            (
                OperationRecord.from_json(o)
                for o in core.ledger.operations()
                if o["id"] == original_id
            ),
            None,
        )
        if original is None:
            raise CorruptRepository(f"operation {original_id} is missing from the ledger")
        guard_draft_undo(core, "redo", original)
        restored = undo_op.details.get("restore")
        group = undo_op.details.get("group")
        if (original.command == EventType.SNAPSHOT or group) and isinstance(restored, dict):
            # the undo of an agent's change (or of a group of them) put back its paths: they
            # go back to what the undo found, whatever else is unrecorded around them
            _put_back(
                tx,
                str(undo_op.details["tree_before"]),
                restored["paths"],
                original.view_after,
                f"the state after {original.command} {original_id}",
                EventType.REDO,
                {
                    "redid": original_id,
                    "undo": undo_op.id,
                    **(
                        {"group": group, "redid_also": undo_op.details["undid_also"]}
                        if group
                        else {}
                    ),
                },
            )
            return RedoResult(original_id, original.command, tx.id)
        # the files the operation left; for one that moved only refs (or only some
        # paths), the files the undo found
        tree = original.details.get("tree_after")
        refs_only = tree is None
        tree = tree or undo_op.details.get("tree_before")
        run_id = original.details.get("run_id")
        what = f"run {run_id}" if run_id else f"{original.command} {original_id}"
        apply_view(
            tx,
            original.view_after,
            tree,
            refs_only=refs_only,
            ref=f"the state after {what}",
            redid=original_id,
            undo=undo_op.id,
        )
        return RedoResult(original_id, original.command, tx.id)


def undo_agent_change(tx: Transaction, op: OperationRecord) -> bool:
    """Undo an agent's snapshot as what the agent changed; False for any other operation.

    Undoing a person's snapshot only forgets it (HEAD goes back, the files stay:
    the work is theirs). An agent's snapshot records what its tool call did, and
    undoing it means undoing that call: the paths it changed go back to HEAD's
    before it, every other file stays as it is, HEAD goes back too. What was
    unrecorded is auto-saved first, so ``strata redo`` brings it all back.
    """
    core = tx.core
    if op.command != EventType.SNAPSHOT or len(op.events) != 1 or op.details:
        return False
    event = core.event(op.events[0])
    if event.author.kind != "agent" or event.snapshot_ref is None:
        return False
    before_id = op.view_before.head_event
    before = core.event(before_id) if before_id else None
    before_tree = core.tree_of(before) if before is not None else EMPTY_TREE
    paths = changed_paths(core, before_tree, core.tree_of(event))
    if not paths:
        return False
    restore_into(
        tx,
        Point(before_tree, before.snapshot_ref if before else None, before, "before"),
        f"the state before {event.author.name}'s change {event.id}",
        paths=paths,
        event_type=EventType.UNDO,
        after_view=op.view_before,
        details={"undid": op.id},
    )
    return True


def undo_group(tx: Transaction, newest: OperationRecord) -> dict[str, Any]:
    """Reverse every step of ``newest``'s group not yet undone, as one undo; the group.

    What the group's agents changed goes back: each path a step by an agent (or
    the system) changed is put back as it was before the first such step, every
    other file stays as it is (the person's own edits, recorded in the group or
    not, are kept on disk). HEAD goes back to where it was before the group's
    first step; unrecorded work is auto-saved first, so ``strata redo`` brings
    everything back.
    """
    core = tx.core
    group = dict(newest.group or {})
    steps = group_steps(core, str(group.get("id")))
    first = steps[-1]
    start = core.event(first.view_before.head_event) if first.view_before.head_event else None
    target = core.tree_of(start) if start is not None else EMPTY_TREE
    changed: set[str] = set()
    for op in steps:  # newest first: the oldest step's "before" of a path wins
        if op.author.kind == "human" or op.view_before.head_event == op.view_after.head_event:
            continue
        before = core.event(op.view_before.head_event) if op.view_before.head_event else None
        after = core.event(op.view_after.head_event) if op.view_after.head_event else None
        before_tree = core.tree_of(before) if before is not None else EMPTY_TREE
        after_tree = core.tree_of(after) if after is not None else EMPTY_TREE
        paths = changed_paths(core, before_tree, after_tree)
        changed.update(paths)
        target = graft(core.objects, target, before_tree, paths)
    details: dict[str, Any] = {
        "undid": newest.id,
        "undid_also": [op.id for op in steps if op.id != newest.id],
        "group": group.get("id"),
    }
    ref = f"the state before {group.get('kind', 'group')} {group.get('id')}"
    if not changed:
        apply_view(tx, first.view_before, None, ref=ref, **details)
        return group
    restore_into(
        tx,
        Point(target, start.snapshot_ref if start else None, start, "before"),
        ref,
        paths=sorted(changed),
        event_type=EventType.UNDO,
        after_view=first.view_before,
        details=details,
    )
    return group


def group_steps(core: Core, group_id: str) -> list[OperationRecord]:
    """The steps of group ``group_id`` that are not undone, newest first."""
    undone: set[str] = set()
    redone: set[str] = set()
    steps = []
    for raw in core.ledger.operations():  # newest first
        details = raw.get("details") or {}
        if raw["id"] in undone:
            continue  # a redo undone again
        if raw["command"] == "undo":
            if details["undid"] not in redone:
                undone.add(details["undid"])
                undone.update(details.get("undid_also", ()))
            continue
        if raw["command"] == "redo":
            redone.add(details["redid"])
            redone.update(details.get("redid_also", ()))
            continue
        if (raw.get("group") or {}).get("id") == group_id and not core.ledger.changes_nothing(raw):
            steps.append(OperationRecord.from_json(raw))
    return steps


def undo_paths_put_back(tx: Transaction, op: OperationRecord) -> bool:
    """Undo a redo that put back an agent's change's paths; False for any other operation.

    Those paths go back to what the redo found; every other file stays.
    """
    restored = op.details.get("restore")
    if op.command != "redo" or not isinstance(restored, dict) or not restored.get("paths"):
        return False
    _put_back(
        tx,
        str(op.details["tree_before"]),
        restored["paths"],
        op.view_before,
        f"the state before redo {op.id}",
        EventType.UNDO,
        {"undid": op.id},
    )
    return True


def _put_back(
    tx: Transaction,
    tree: str,
    paths: list[Any],
    view: View,
    ref: str,
    event_type: str,
    details: dict[str, Any],
) -> None:
    """Put ``paths`` back as ``tree`` has them (every other file stays) and set ``view``."""
    event = tx.core.event(view.head_event) if view.head_event else None
    restore_into(
        tx,
        Point(ObjectId(tree), None, event, event_type),
        ref,
        paths=[str(p) for p in paths],
        event_type=event_type,
        after_view=view,
        details=details,
    )


def guard_draft_undo(core: Core, command: str, op: OperationRecord) -> None:
    """While a Draft is open, refuse to undo or redo what moves Published (or the Draft)."""
    files = "tree_after" if op.command in ("undo", "redo") else "tree_before"
    moves = op.details.get(files) is not None
    moves = moves or op.view_before.head_event != op.view_after.head_event
    moves = moves or op.command in ("draft start", "draft revision")  # the open Draft's
    if moves and core.layout.draft_state.exists():
        raise DraftOpen(f"{command} '{op.command}'")


def apply_view(
    tx: Transaction,
    view: View,
    tree: str | None,
    *,
    refs_only: bool = False,
    ref: str = "",
    **details: object,
) -> None:
    """Set ``view``; bring the files to ``tree`` too when one is given (journaled).

    ``ref`` names where the files go, for the event's rationale (``undo to REF``).

    With ``refs_only`` (the redo of an operation that moved only refs), the
    files move only when they hold no unrecorded edit. The files found are
    kept as the operation's ``tree_before`` either way.
    """
    core = tx.core
    command = EventType.parse(tx.command)
    scan = core.workspace.scan()
    if (
        tree is None
        or core.layout.draft_state.exists()
        or (refs_only and scan.tree != tx.head_tree())
    ):
        tx.on_commit(scan.save_cache)
        tx.details.update(details, tree_before=scan.tree, tree_after=None)
        tx.set_view(view)
        return
    event = core.event(view.head_event) if view.head_event else None
    target = Point(ObjectId(tree), event.snapshot_ref if event else None, event, command)
    restore_into(
        tx,
        target,
        ref or command,
        paths=None,
        event_type=command,
        after_view=view,
        details=dict(details),
    )
