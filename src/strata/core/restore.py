"""Moving Published's files to a point of history, and finishing interrupted moves.

:func:`restore_into` is the journaled move every command that writes
Published uses (rewind, restore, branch switch, undo, redo, rollback,
checkpoint restore): it auto-saves unrecorded work in the same operation,
plans the writes against what the scan saw, records an annotation event
and applies the plan through the transaction's journal.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# (their home is journals.py, below core.py; named here too, where callers know them)
from strata.core.journals import Recovery as Recovery
from strata.core.journals import check_before_writing as check_before_writing
from strata.core.journals import recover as recover
from strata.core.journals import unwritable_folders as unwritable_folders
from strata.core.results import Point
from strata.core.results_ops import RewindResult
from strata.diff.tree import diff_trees
from strata.errors import (
    StrataError,
)
from strata.ids import ObjectId
from strata.ledger.events import EventType
from strata.ledger.ledger import View, moved
from strata.sandbox.paths import display_path
from strata.store.tree import lookup
from strata.watch import served

if TYPE_CHECKING:
    from strata.core.core import Core, Transaction


def branch_at(view: View, event_id: str) -> str:
    """The branch HEAD should name when it moves to ``event_id``.

    A Draft's branch (``draft/<id>``) is never chosen from elsewhere: its tip
    may be the Draft's base on Published's line, and landing there would make
    Published's next snapshots extend a Draft's (perhaps ended) branch.
    """
    if view.branches.get(view.head_branch) == event_id:
        return view.head_branch
    tips = sorted(
        name
        for name, tip in view.branches.items()
        if tip == event_id and not name.startswith("draft/")
    )
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
    if event_type == EventType.ROLLBACK:
        # a rollback puts back what it can: a folder the failed command made unwritable
        # is left as it is (with everything below it) and reported, never the whole plan
        blocked = unwritable_folders(core.root, actions)
        unreadable += sorted(blocked)
        actions = [a for a in actions if a.path not in blocked]
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
    verified = check_before_writing(core.objects, core.root, actions)
    known: dict[str, tuple[os.stat_result, str]] = {}
    if any(a.op in ("write", "symlink", "remove") for a in actions):
        # every file written differs from the stat cache: a watcher, once the asker has its
        # answer, reads them so the next command's scan finds them known (first: it holds
        # the write lock, deleting the replaced files does not); the files taken back from
        # the trash with their bytes checked are not read again
        served.in_background(lambda: _refresh_stat_cache(core, known), only_served=True)
    report = tx.apply(actions, verified=verified)
    known.update(report.known)
    verified.clear()
    report.skipped.extend(unreadable)
    skipped = [display_path(p) for p in report.skipped]
    if event is not None:
        tx.update_data(event.id, skipped_paths=skipped)
    restored = [display_path(p) for p in report.restored_paths]
    return RewindResult(event, target, auto, restored, skipped)


def _refresh_stat_cache(core: Core, known: dict[str, tuple[os.stat_result, str]]) -> None:
    """Scan Published and keep its stat cache (objects made durable first), recording nothing.

    What a restore wrote is then known to the next scan (an auto-save before
    the next rewind) by its stat. Only a head start: the next command scans
    whatever it finds, so a failure here is passed over.
    """
    core.progress = None  # the command has answered: nobody watches a progress line now
    try:
        with core.writing():
            scan = core.workspace.scan(known=known)
            core.objects.flush()
            if scan.worth_saving:
                scan.save_cache()
    except (StrataError, OSError):
        pass


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


def changed_paths(core: Core, before: ObjectId, after: ObjectId) -> list[str]:
    """The paths that put ``after`` back to ``before``: each change, or its new or gone folder.

    What a rollback restores, and the undo of a run or of an agent's change.
    """

    def outermost(path: str) -> str:
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if any(lookup(core.objects, tree, prefix) is None for tree in (before, after)):
                return prefix  # a folder the run created or removed: restored as a whole
        return path

    paths: set[str] = set()
    for change in diff_trees(core.objects, before, after):
        paths.add(outermost(change.path))
        if change.old_path is not None:
            paths.add(outermost(change.old_path))
    return sorted(paths)
