"""Moving Published's files to a point of history, and finishing interrupted moves.

:func:`restore_into` is the journaled move every command that writes
Published uses (rewind, restore, branch switch, undo, redo, rollback,
checkpoint restore): it auto-saves unrecorded work in the same operation,
plans the writes against what the scan saw, records an annotation event
and applies the plan through the transaction's journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strata.core.results import Point, RewindResult
from strata.ids import ObjectId
from strata.ledger.events import EventType
from strata.ledger.ledger import Operation, View, moved
from strata.sandbox.paths import display_path
from strata.store.materialize import Journal, actions_from_record

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.transaction import Transaction


def branch_at(view: View, event_id: str) -> str:
    """The branch HEAD should name when it moves to ``event_id``."""
    if view.branches.get(view.head_branch) == event_id:
        return view.head_branch
    tips = sorted(name for name, tip in view.branches.items() if tip == event_id)
    return tips[0] if tips else view.head_branch


def restore_into(
    tx: Transaction,
    target: Point,
    ref: str,
    *,
    paths: list[str] | None,
    event_type: str,
    new_branch: str | None = None,
    after_view: View | None = None,
    details: dict[str, Any] | None = None,
) -> RewindResult:
    """Move Published (all of it, or ``paths``) to ``target`` within ``tx``.

    Unrecorded work is auto-saved first, in the same operation. HEAD moves to
    the target (on ``new_branch`` if given) unless ``paths`` are given;
    ``after_view`` sets the whole view instead (undo, redo, rollback).
    """
    core = tx.core
    before_head = tx.head()
    quiet = event_type in (EventType.UNDO, EventType.REDO)
    auto, scan = tx.auto_save(event_type.replace("_", " ") + ("" if quiet else f" to {ref}"))
    current = scan.tree  # every path as just captured, with its stat for the no-loss checks
    if target.event is not None and target.event.action_type == EventType.DRAFT_REVISION:
        _refuse_external_symlinks(core, current, target.tree, event_type, paths)
    actions = core.workspace.plan(scan, target.tree, paths=paths or None)
    # what the scan could not read is never deleted or overwritten: it may hold unrecorded work
    # (a chmod loses nothing: a folder's mode is put back, a file's is stat-checked)
    unreadable = [a.path for a in actions if a.op != "chmod" and _touches(a.path, scan.errors)]
    actions = [a for a in actions if a.op == "chmod" or not _touches(a.path, scan.errors)]
    anchor = target.event.id if target.event else None
    if after_view is not None:
        tx.set_view(after_view)
    elif paths is None and anchor is not None:
        head_branch = new_branch or branch_at(tx.before, anchor)
        tx.set_view(moved(tx.view, head_branch=head_branch, head_event=anchor))
    tx.details.update(
        {
            **(details or {}),
            "tree_before": current,
            "tree_after": target.tree if paths is None else None,
            **(
                {"restore": {"event": anchor, "paths": [display_path(p) for p in paths]}}
                if paths
                else {}
            ),
        }
    )
    # the annotation points at where HEAD goes (or at the auto-save when an undo empties
    # the view: with no state event left, the operation record alone tells what happened)
    anchor_id = anchor or (auto.id if auto else None)
    event = None
    if anchor_id is not None:
        event = tx.annotate(
            event_type,
            anchor=anchor_id,
            rationale=f"{event_type.replace('_', ' ')} to {ref}",
            files=sorted(
                {display_path(a.path) for a in actions if a.op in ("write", "symlink", "remove")}
            ),
            data={
                "target_event_id": anchor,
                "target_snapshot_id": target.snapshot_id,
                "from_event_id": before_head.id if before_head else None,
                "auto_save_event_id": auto.id if auto else None,
                **({"paths": [display_path(p) for p in paths]} if paths else {}),
            },
            branch=tx.view.head_branch,
        )
    report = tx.apply(actions)
    report.skipped.extend(unreadable)
    skipped = [display_path(p) for p in report.skipped]
    if event is not None:
        tx.update_data(event.id, skipped_paths=skipped)
    restored = [display_path(p) for p in report.restored_paths]
    return RewindResult(event, target, auto, restored, skipped)


def _touches(path: str, unreadable: dict[str, str]) -> bool:
    """True when ``path`` is, holds or lies inside a path the scan could not read."""
    return any(
        u == "." or path == u or path.startswith(u + "/") or u.startswith(path + "/")
        for u in unreadable
    )


def _refuse_external_symlinks(
    core: Core, current: ObjectId, tree: ObjectId, event_type: str, paths: list[str] | None
) -> None:
    """A Draft revision reaches Published only through publish's symlink check."""
    from strata.diff.symlinks import escaping_symlinks
    from strata.errors import ExternalSymlink

    bad = escaping_symlinks(core.objects, current, tree)
    if paths:
        bad = [p for p in bad if any(p == q or p.startswith(q.rstrip("/") + "/") for q in paths)]
    if bad:
        command = "rewind" if event_type == EventType.REWIND else event_type.replace("_", " ")
        raise ExternalSymlink([display_path(p) for p in bad], command=command)


def recover(core: Core) -> None:
    """Finish every journal an interrupted command left (the write lock is held)."""
    for path, record in Journal.pending(core.layout.journal):
        actions = actions_from_record(record)
        report = core.workspace.apply(actions, recovering=True)
        op = Operation.from_json(record["operation"])
        committed = bool(op.events) and core.ledger.driver.seek_event(op.events[0]["id"])
        if not committed and (op.events or op.after != op.before or op.details):
            for body in op.events:
                body.setdefault("data", {}).update(
                    recovered=True, skipped_paths=[display_path(p) for p in report.skipped]
                )
            core.ledger.commit(op)
        if record.get("ends_draft"):  # an interrupted publish: its Draft ends with it
            from strata.atomic import fsync_dir

            state = core.layout.draft_state
            if state.exists():
                state.unlink()
                fsync_dir(state.parent)
        path.unlink(missing_ok=True)
