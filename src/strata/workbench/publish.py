"""Review, publish and discard the Draft.

Publish, in order (the repository's write lock held throughout):

1. record the Draft as a draft revision; with ``expect``, refuse unless its
   snapshot is the reviewed one;
2. auto-save Published, then take a ``publish`` checkpoint of it;
3. compute the tree to publish: the Draft's when Published has not moved
   since the Draft's base, else a three-way merge of the trees (base,
   Published, Draft): different paths combine, same-file edits merge line by
   line with ``merge3``; a true conflict refuses with every conflicting path
   and nothing written;
4. refuse symlinks the Draft adds whose target leaves the workspace (unless
   allowed);
5. write the journal (the restore plan and the whole ``publish`` operation,
   marked ``ends_draft``), apply it through
   :class:`~strata.store.fsops.WorkspaceWriter`, commit the operation, end the
   Draft, remove the journal.

A crash before the journal is written leaves Published untouched; after it,
the next command replays the journal (:meth:`Repository._recover`), commits
the operation and ends the Draft: Published is fully old or fully new.
The ``publish`` operation records the tree before and after, so ``strata
undo`` puts the checkpoint's files back.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.errors import DraftChanged, ExternalSymlink, MergeConflict
from strata.ids import EventId, ObjectId, SnapshotId
from strata.ledger.events import Author, Event
from strata.ledger.ledger import moved
from strata.store.tree import TreeEntry, read_tree, write_tree

if TYPE_CHECKING:
    from strata.repo import DiffResult, Repository
    from strata.store.objects import ObjectStore
    from strata.workbench.checkpoints import Checkpoint
    from strata.workbench.draft import Draft

MERGE_POLICY = "merge3"


@dataclass
class ReviewResult:
    """The Draft's change set against its base."""

    draft_event: Event
    base_event: Event
    diff: DiffResult

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

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata publish --json`` prints."""
        return {
            "event_id": self.event.id,
            "checkpoint_id": self.checkpoint.id,
            "files_changed": self.files_changed,
            "merged_paths": self.merged_paths,
            "skipped_paths": self.skipped_paths,
            "draft_snapshot_id": self.draft_snapshot_id,
        }


def review(draft: Draft, *, author: Author | None = None) -> ReviewResult:
    """Record the Draft, then diff its base against it."""
    repo = draft.repo
    with repo._writing():
        draft._record("review", author=author)
        tip = draft.tip()
        base = draft.base
        diff = repo._diff_trees(repo._tree_of(base), repo._tree_of(tip), repo.objects)
        return ReviewResult(tip, base, diff)


def _refuse_while_running(repo: Repository, command: str) -> None:
    """Publish and discard wait for every run: one writing Published, or an agent in the Draft."""
    from strata.errors import WorkspaceBusy
    from strata.runs.lease import active_leases

    held = active_leases(repo.layout.runs)
    if held:
        raise WorkspaceBusy(
            command,
            [str(h.get("run_id")) for h in held],
            hint=f"wait for the run to finish (or stop it), then {command} again",
        )


def discard(draft: Draft, *, author: Author | None = None) -> Event:
    """Record the Draft (nothing in it is lost), then end it; Published is not touched."""
    from strata.workbench.draft import end_draft

    repo = draft.repo
    with repo._writing():
        _refuse_while_running(repo, "discard")
        draft._record("before discard", author=author)
        tip = draft.tip()
        op = repo._begin("discard", author, draft=draft.id)
        event = repo._new_event(
            "discard",
            author=author,
            rationale=f"discarded Draft {draft.id}",
            branch=draft.branch,
            anchor=EventId(tip.id),
            data={"draft_id": draft.id, "draft_event_id": tip.id, "branch": draft.branch},
            operation_id=op.id,
        )
        op.add_event(event.to_json())
        repo._commit(op)
        end_draft(repo.layout.draft_state)
        return repo._event(event.id)


def publish(
    draft: Draft,
    message: str = "",
    *,
    expect: str | None = None,
    allow_external_symlinks: bool = False,
    author: Author | None = None,
) -> PublishResult:
    """Publish exactly the Draft's current snapshot into Published (see the module docs)."""
    from strata.repo import SYSTEM
    from strata.store.materialize import Journal, apply_actions, journal_record, plan_restore
    from strata.workbench.checkpoints import create_checkpoint
    from strata.workbench.draft import end_draft

    repo = draft.repo
    with repo._writing():
        _refuse_while_running(repo, "publish")
        draft._record("before publish", author=author)
        tip = draft.tip()
        assert tip.snapshot_ref is not None
        if expect is not None and not (len(expect) >= 6 and tip.snapshot_ref.startswith(expect)):
            raise DraftChanged(expect, tip.snapshot_ref)
        base_tree = repo._tree_of(draft.base)
        draft_tree = repo._tree_of(tip)
        _, scan = repo._snapshot("auto-save before publish", author=SYSTEM, action_type="auto_save")
        head = repo.head()
        assert head is not None
        published_tree = scan.tree
        target, merged = merge_trees(repo.objects, base_tree, published_tree, draft_tree)
        if not allow_external_symlinks:
            bad = external_symlinks(repo.objects, published_tree, target)
            if bad:
                raise ExternalSymlink(bad)
        checkpoint = create_checkpoint(
            repo, kind="publish", message=f"before publishing Draft {draft.id}"
        )
        head = repo.head()
        assert head is not None
        repo.objects.flush()
        snapshot_id = repo._write_snapshot(target, head)
        repo.objects.flush()
        diff = repo._diff_trees(published_tree, target, repo.objects)
        actions = plan_restore(repo.objects, published_tree, target, stat_of=scan.stat_of)
        op = repo._begin("publish", author, draft=draft.id)
        branch = repo._branch_for_new_state(op.before)
        event = repo._new_event(
            "publish",
            author=author,
            rationale=message or f"publish Draft {draft.id}",
            files=[f.path for f in diff.files],
            snapshot_ref=snapshot_id,
            parent=EventId(head.id),
            branch=branch,
            data={
                "checkpoint_id": checkpoint.id,
                "draft_id": draft.id,
                "draft_event_id": tip.id,
                "draft_snapshot_id": tip.snapshot_ref,
                "base_event_id": draft.base.id,
                "files_changed": diff.files_changed,
                "insertions": diff.insertions,
                "deletions": diff.deletions,
                "merged_paths": merged,
            },
            operation_id=op.id,
        )
        body = op.add_event(event.to_json())
        if head.id != draft.base.id:
            merge_event = repo._new_event(
                "merge",
                author=author,
                rationale=f"merged Draft {draft.id} with Published's newer changes",
                files=merged,
                branch=branch,
                anchor=EventId(event.id),
                data={
                    "left": head.id,
                    "right": tip.id,
                    "base": draft.base.id,
                    "policy": MERGE_POLICY,
                    "merged_paths": merged,
                },
                operation_id=op.id,
            )
            op.add_event(merge_event.to_json())
        op.after = moved(
            op.before,
            head_branch=branch,
            head_event=event.id,
            branches={**op.before.branches, branch: event.id},
        )
        op.details = {"tree_before": published_tree, "tree_after": target, "draft": draft.id}
        journal = Journal(repo.layout.journal, op.id)
        journal.write(journal_record(actions, operation=op.to_json(), ends_draft=draft.id))
        report = apply_actions(repo.objects, repo.root, actions)
        from strata.sandbox.paths import display_path

        skipped = [display_path(p) for p in report.skipped]
        body["data"]["skipped_paths"] = skipped
        repo._commit(op)
        end_draft(repo.layout.draft_state)
        journal.remove()
        return PublishResult(
            repo._event(event.id),
            checkpoint,
            diff.files_changed,
            merged,
            skipped,
            tip.snapshot_ref,
        )


# -- the three-way tree merge ------------------------------------------------------


def _flatten(store: ObjectStore, oid: ObjectId) -> tuple[dict[str, TreeEntry], dict[str, int]]:
    """(files and symlinks by path, folders by path with their mode)."""
    leaves: dict[str, TreeEntry] = {}
    dirs: dict[str, int] = {}

    def walk(tree: ObjectId, prefix: str) -> None:
        for e in read_tree(store, tree):
            path = prefix + e.name
            if e.kind == "dir":
                dirs[path] = e.mode
                walk(e.oid, path + "/")
            else:
                leaves[path] = e

    walk(oid, "")
    return leaves, dirs


def _key(e: TreeEntry | None) -> tuple[str, int, str] | None:
    return None if e is None else (e.kind, e.mode, e.oid)


def merge_trees(
    store: ObjectStore, base: ObjectId, left: ObjectId, right: ObjectId
) -> tuple[ObjectId, list[str]]:
    """Merge ``right`` (the Draft) into ``left`` (Published) from their common ``base``.

    Returns the merged tree and the paths merged line by line;
    :class:`MergeConflict` names every path that cannot be merged.
    """
    if left in (base, right):
        return right, []
    if right == base:
        return left, []
    b_leaves, b_dirs = _flatten(store, base)
    l_leaves, l_dirs = _flatten(store, left)
    r_leaves, r_dirs = _flatten(store, right)
    result: dict[str, TreeEntry] = {}
    merged: list[str] = []
    conflicts: list[str] = []
    for path in sorted(b_leaves.keys() | l_leaves.keys() | r_leaves.keys()):
        b, lt, rt = b_leaves.get(path), l_leaves.get(path), r_leaves.get(path)
        if _key(lt) == _key(rt) or _key(b) == _key(rt):
            chosen = lt
        elif _key(b) == _key(lt):
            chosen = rt
        else:
            chosen = _merge_file(store, b, lt, rt)
            if chosen is None:
                conflicts.append(path)
                continue
            merged.append(path)
        if chosen is not None:
            result[path] = chosen
    dirs: dict[str, int] = {}
    for path in sorted(b_dirs.keys() | l_dirs.keys() | r_dirs.keys()):
        inb, inl, inr = path in b_dirs, path in l_dirs, path in r_dirs
        keep = inl if (inl == inr or inb == inr) else inr
        if keep:
            dirs[path] = r_dirs.get(path, l_dirs.get(path, 0o755))
    for path in result:  # a file where the other side keeps a folder, or below a file
        parts = path.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in result:
                conflicts.append(above)
            dirs.setdefault(above, r_dirs.get(above, l_dirs.get(above, 0o755)))
        if path in dirs:
            conflicts.append(path)
    if conflicts:
        raise MergeConflict(sorted(set(conflicts)))
    return _build(store, result, dirs), merged


def _merge_file(
    store: ObjectStore, base: TreeEntry | None, left: TreeEntry | None, right: TreeEntry | None
) -> TreeEntry | None:
    """A line merge of two edits of one file, or None when they conflict."""
    import merge3

    if base is None or left is None or right is None:
        return None  # added twice differently, or edited on one side and deleted on the other
    if not (base.kind == left.kind == right.kind == "file"):
        return None
    datas = [store.get(e.oid) for e in (base, left, right)]
    if any(b"\0" in d for d in datas):
        return None
    lines = [d.splitlines(keepends=True) for d in datas]
    m = merge3.Merge3(lines[0], lines[1], lines[2])
    if any(region[0] == "conflict" for region in m.merge_regions()):
        return None
    data = b"".join(m.merge_lines())
    mode = right.mode if right.mode != base.mode else left.mode
    oid = store.put(data)
    return TreeEntry(left.name, "file", mode, len(data), oid)


def _build(store: ObjectStore, leaves: dict[str, TreeEntry], dirs: dict[str, int]) -> ObjectId:
    children: dict[str, list[TreeEntry]] = {"": []}
    for d in dirs:
        children.setdefault(d, [])
    for path, entry in leaves.items():
        children.setdefault(path.rpartition("/")[0], []).append(entry)

    subdirs: dict[str, list[str]] = {}
    for d in dirs:
        subdirs.setdefault(d.rpartition("/")[0], []).append(d)

    def build(folder: str) -> ObjectId:
        entries = list(children.get(folder, []))
        for d in subdirs.get(folder, []):
            entries.append(TreeEntry(d.rpartition("/")[2], "dir", dirs[d], 0, build(d)))
        return write_tree(store, entries)

    return build("")


def external_symlinks(store: ObjectStore, before: ObjectId, after: ObjectId) -> list[str]:
    """Symlinks new or changed in ``after`` whose target leaves the workspace."""
    from strata.diff.tree import diff_trees

    bad: list[str] = []
    for change in diff_trees(store, before, after):
        new = change.new
        if new is None or new.kind != "symlink":
            continue
        target = store.get(new.oid).decode("utf-8", "surrogateescape")
        folder = posixpath.dirname(change.path)
        resolved = posixpath.normpath(posixpath.join(folder, target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            bad.append(change.path)
    return bad
