"""Review, publish and discard the Draft.

Publish, in order (the repository's write lock held throughout):

1. record the Draft as a draft revision; with ``expect``, refuse unless its
   snapshot is the reviewed one;
2. auto-save Published, then take a ``publish`` checkpoint of it;
3. compute the tree to publish: the Draft's when Published has not moved
   since the Draft's base, else a three-way merge of the trees (base,
   Published, Draft): different paths combine, same-file edits merge line by
   line with ``merge3``; a true conflict refuses with every conflicting path
   and nothing written (:func:`proposed_tree`, which a preflight uses too:
   given the tree a preflight verified, publish refuses any other);
4. refuse symlinks the Draft adds whose target leaves the workspace (unless
   allowed);
5. write the journal (the restore plan and the whole ``publish`` operation,
   marked ``ends_draft``), apply it through
   :class:`~strata.store.fsops.WorkspaceWriter`, commit the operation, end the
   Draft, remove the journal.

A crash before the journal is written leaves Published untouched; after it,
the next command replays the journal (:meth:`strata.core.Core.writing`), commits
the operation and ends the Draft: Published is fully old or fully new.
The ``publish`` operation records the tree before and after, so ``strata
undo`` puts the checkpoint's files back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.core.lease import active_leases, holders
from strata.diff.tree import diff_trees
from strata.errors import (
    DraftChanged,
    ExternalSymlink,
    NothingToPublish,
    PreflightFailed,
    UsageError,
    WorkspaceBusy,
)
from strata.ids import ObjectId, SnapshotId
from strata.ledger.events import Author, Event, EventType
from strata.merge.three_way import MERGE_POLICY, merge_trees
from strata.merge.trees import build_tree, flatten_tree
from strata.sandbox.paths import display_path
from strata.workbench.state import OpenDraft, end_draft

if TYPE_CHECKING:
    from pathlib import Path

    from strata.core import Core, DiffResult
    from strata.store.objects import ObjectStore
    from strata.workbench.checkpoints import Checkpoint

#: the shortest snapshot id prefix ``publish --expect`` accepts (4 letters collide early)
EXPECT_MIN = 8


@dataclass
class ReviewResult:
    """The Draft's change set against its base."""

    draft_event: Event
    base_event: Event
    diff: DiffResult
    #: files the Draft's ignore rules now hide but that its base tracks: kept, never deleted
    ignored_paths: list[str] = field(default_factory=list)
    #: what the Draft's scan could not record (a FIFO, an unreadable folder): never silent
    warnings: list[str] = field(default_factory=list)
    #: office files' summary lines by path (see :mod:`strata.workbench.summaries`)
    summaries: dict[str, list[str]] = field(default_factory=dict)

    @property
    def draft_snapshot_id(self) -> SnapshotId:
        """The reviewed snapshot (give it to ``publish --expect``)."""
        assert self.draft_event.snapshot_ref is not None
        return self.draft_event.snapshot_ref

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata review --json`` prints."""
        return {
            "draft_snapshot_id": self.draft_snapshot_id,
            "draft_event_id": self.draft_event.id,
            "base_event_id": self.base_event.id,
            **self.diff.to_json(),
            "ignored_paths": [display_path(p) for p in self.ignored_paths],
            "warnings": self.warnings,
            "file_summaries": self.summaries,
        }


@dataclass
class PublishResult:
    """What a publish did."""

    event: Event
    checkpoint: Checkpoint
    files_changed: int
    merged_paths: list[str]
    skipped_paths: list[str]
    draft_snapshot_id: SnapshotId
    #: the passed preflight the publish event carries (``publish --preflight``), or None
    preflight: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata publish --json`` prints."""
        return {
            "event_id": self.event.id,
            "checkpoint_id": self.checkpoint.id,
            "files_changed": self.files_changed,
            "merged_paths": self.merged_paths,
            "skipped_paths": self.skipped_paths,
            "draft_snapshot_id": self.draft_snapshot_id,
            "preflight": self.preflight,
        }


def review(draft: OpenDraft, *, author: Author | None = None) -> ReviewResult:
    """Record the Draft, then diff its base against it."""
    core = draft.core
    with core.writing():
        scan = draft.workspace.scan()
        # a scan that met trouble is left to record(), which repairs our own folders first
        draft.record("review", author=author, scanned=None if scan.warnings else scan)
        tip = draft.tip()
        base = draft.base
        base_tree = core.tree_of(base)
        shown, hidden = keep_ignored(core.objects, draft.path, base_tree, core.tree_of(tip))
        diff = core.diff_trees(base_tree, shown)
        from strata.workbench.summaries import summaries_for

        summaries = summaries_for(diff, draft.revisions())
        return ReviewResult(tip, base, diff, hidden, list(scan.warnings), summaries)


def keep_ignored(
    store: ObjectStore, folder: Path, base: ObjectId, tree: ObjectId
) -> tuple[ObjectId, list[str]]:
    """``tree`` with every file ``base`` tracks that is still in ``folder`` but not recorded.

    Such a file was hidden by the Draft's own ignore rules (or could not be
    read): its absence is not a deletion. A Draft cannot delete a tracked
    file by ignoring it; the base's version is kept (so a merge keeps
    Published's). Returns the tree and the paths kept.
    """
    # only what the Draft no longer has can be hidden: the diff descends where trees differ
    gone = [
        c.old_path or c.path if c.status == "renamed" else c.path
        for c in diff_trees(store, base, tree)
        if c.status in ("deleted", "renamed", "type_changed")
    ]
    if not any(os.path.lexists(folder / p) for p in gone):
        return tree, []
    b_leaves, _ = flatten_tree(store, base)
    leaves, dirs = flatten_tree(store, tree)
    hidden = [p for p in sorted(b_leaves.keys() - leaves.keys()) if os.path.lexists(folder / p)]
    hidden = [p for p in hidden if p not in dirs and not any(p.startswith(q + "/") for q in leaves)]
    if not hidden:
        return tree, []
    b_dirs = flatten_tree(store, base)[1]
    for p in hidden:
        leaves[p] = b_leaves[p]
        parts = p.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            dirs.setdefault(above, b_dirs.get(above, 0o755))
    return build_tree(store, leaves, dirs), hidden


def _refuse_while_running(core: Core, command: str) -> None:
    """Publish and discard wait for every run: one writing Published, or an agent in the Draft."""
    held = active_leases(core.layout.runs)
    if held:
        raise WorkspaceBusy(
            command,
            [str(h.get("run_id")) for h in held],
            pids=sorted({p for h in held for p in holders(h["path"])}),
            hint=f"wait for the run to finish (or stop it), then {command} again",
        )


def discard(draft: OpenDraft, *, author: Author | None = None) -> Event:
    """Record the Draft (nothing in it is lost), then end it; Published is not touched."""
    core = draft.core
    with core.writing():
        _refuse_while_running(core, "discard")
        draft.record("before discard", author=author)
        tip = draft.tip()
        with core.transaction("discard", author, draft=draft.id) as tx:
            event = tx.annotate(
                EventType.DISCARD,
                anchor=tip.id,
                rationale=f"discarded Draft {draft.id}",
                branch=draft.branch,
                data={"draft_id": draft.id, "draft_event_id": tip.id, "branch": draft.branch},
            )
        end_draft(core.layout.draft_state)
        return core.event(event.id)


def publish(
    draft: OpenDraft,
    message: str = "",
    *,
    expect: str | None = None,
    allow_external_symlinks: bool = False,
    author: Author | None = None,
    preflight: Mapping[str, Any] | None = None,
    verified_tree: ObjectId | None = None,
) -> PublishResult:
    """Publish exactly the Draft's current snapshot into Published (see the module docs).

    One operation: the auto-save of Published, the ``publish`` checkpoint, the
    ``publish`` state event (and a ``merge`` event when Published moved
    meanwhile) and the journaled writes. Undoing it puts Published back.

    ``preflight`` is the ``{"ok": …, "report_artifact": …}`` of a passed
    preflight (:mod:`strata.replay.preflight`): the publish event carries it
    and links the report. ``verified_tree`` is the tree that preflight
    verified: when the tree to publish is another one (the Draft or Published
    changed meanwhile), :class:`PreflightFailed` refuses with nothing written.
    """
    from strata.workbench.checkpoints import Checkpoint, record_checkpoint

    if expect is not None and len(expect) < EXPECT_MIN:
        raise UsageError(
            f"--expect needs at least {EXPECT_MIN} characters of the snapshot id, got {expect!r}",
            hint="copy draft_snapshot_id from 'strata review --json'",
        )
    if expect is not None and not all(c in "0123456789abcdef" for c in expect):
        raise UsageError(
            f"--expect takes the Draft's snapshot id (hex digits), not {expect!r}",
            hint="copy draft_snapshot_id from 'strata review --json'",
        )
    core = draft.core
    with core.writing():
        _refuse_while_running(core, "publish")
        with core.transaction("publish", author, draft=draft.id) as tx:
            # the Draft's last edits are a revision of this operation: one undo reverses all
            tip = draft.record("before publish", author=author, tx=tx) or draft.tip()
            assert tip.snapshot_ref is not None
            if expect is not None and not tip.snapshot_ref.startswith(expect):
                raise DraftChanged(expect, tip.snapshot_ref)
            _, scan = tx.auto_save("publish")
            published_tree = scan.tree
            target, merged = proposed_tree(draft, tip, published_tree)
            if target == published_tree:
                raise NothingToPublish(draft.id)  # the whole transaction is dropped
            if verified_tree is not None and target != verified_tree:
                raise PreflightFailed(
                    "Published or the Draft changed while the preflight ran, so what it "
                    "verified is not what would be published; nothing was published",
                    report=(preflight or {}).get("report_artifact"),
                    hint="run 'strata publish --preflight' again",
                )
            if not allow_external_symlinks:
                bad = external_symlinks(core.objects, published_tree, target)
                if bad:
                    raise ExternalSymlink(bad)
            mark = record_checkpoint(
                tx, kind="publish", message=f"before publishing Draft {draft.id}", author=author
            )
            head = tx.head()
            assert head is not None
            diff = core.diff_trees(published_tree, target)
            event = tx.state_event(
                EventType.PUBLISH,
                target,
                message=message or f"publish Draft {draft.id}",
                files=[f.path for f in diff.files],
                parent=head,
                data={
                    "checkpoint_id": mark.id,
                    "draft_id": draft.id,
                    "draft_event_id": tip.id,
                    "draft_snapshot_id": tip.snapshot_ref,
                    "base_event_id": draft.base.id,
                    "files_changed": diff.files_changed,
                    "insertions": diff.insertions,
                    "deletions": diff.deletions,
                    "merged_paths": merged,
                },
                preflight=dict(preflight) if preflight is not None else None,
                artifacts=_report_of(preflight),
            )
            if head.id != draft.base.id:
                tx.annotate(
                    EventType.MERGE,
                    anchor=event.id,
                    rationale=f"merged Draft {draft.id} with Published's newer changes",
                    files=merged,
                    branch=event.branch,
                    data={
                        "left": head.id,
                        "right": tip.id,
                        "base": draft.base.id,
                        "policy": MERGE_POLICY,
                        "merged_paths": merged,
                    },
                )
            for hook in core.publish_hooks:  # the Workshop's checkpoint cards
                hook(tx, event)
            tx.details.update(tree_before=published_tree, tree_after=target, draft=draft.id)
            tx.journal_extra(ends_draft=draft.id)
            report = tx.apply(core.workspace.plan(scan, target))
            skipped = [display_path(p) for p in report.skipped]
            tx.update_data(event.id, skipped_paths=skipped)
            tx.on_commit(lambda: end_draft(core.layout.draft_state))
        checkpoint = Checkpoint.from_event(core.event(mark.id))
        return PublishResult(
            core.event(event.id),
            checkpoint,
            diff.files_changed,
            merged,
            skipped,
            tip.snapshot_ref,
            dict(preflight) if preflight is not None else None,
        )


def _report_of(preflight: Mapping[str, Any] | None) -> tuple[str, ...]:
    report = (preflight or {}).get("report_artifact")
    return (str(report),) if report else ()


def proposed_tree(draft: OpenDraft, tip: Event, published: ObjectId) -> tuple[ObjectId, list[str]]:
    """The tree publishing the Draft at ``tip`` onto Published's tree ``published`` writes.

    The Draft's tree (files its own ignore rules hide kept, see
    :func:`keep_ignored`) merged onto ``published`` from the Draft's base
    (:func:`strata.merge.three_way.merge_trees`); also the paths merged line by line.
    :class:`MergeConflict` names every path that cannot be merged.
    """
    core = draft.core
    base_tree = core.tree_of(draft.base)
    draft_tree, _ = keep_ignored(core.objects, draft.path, base_tree, core.tree_of(tip))
    return merge_trees(core.objects, base_tree, published, draft_tree)


def external_symlinks(store: ObjectStore, before: ObjectId, after: ObjectId) -> list[str]:
    """Symlinks new or changed in ``after`` whose target leaves the workspace.

    Resolved through ``after``'s own symlinks (see :mod:`strata.diff.symlinks`).
    """
    from strata.diff.symlinks import escaping_symlinks

    return [display_path(p) for p in escaping_symlinks(store, before, after)]
