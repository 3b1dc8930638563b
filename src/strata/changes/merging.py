"""``strata merge A B``: a three-way merge at the lowest common ancestor, recorded.

The merge is planned from three trees (the base, ours = A, theirs = B): a
path changed on one side takes that side; changed alike on both, either; changed
differently, :func:`strata.merge.semantic.merge_file` merges its content by
the policy, and what it cannot merge is a conflict. A file renamed on one side
and edited on the other is merged at its new name. Mode changes and binary
content are never merged silently: both sides changing them differently is a
conflict. A conflict is settled only by a resolution (a choice per hunk, or
per file, and a one-line rationale per file), kept as the ``merge_resolution``
artifact the merge event links.

A merge is recorded only when no conflict is left: one ``merge`` state event
on A's branch whose parent is A, with ``data`` ``{left, right, base, policy,
conflicts}`` and its snapshot, and Published moved to the merged tree in the
same journaled operation, so ``strata undo`` reverts it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.diff.tree import diff_trees
from strata.errors import UsageError
from strata.ledger.events import Event, EventType
from strata.merge.semantic import Conflict, FileMerge, Hunk, merge_file, text_hunks
from strata.sandbox.paths import display_path
from strata.store.tree import EMPTY_TREE, TreeEntry, walk_tree, write_tree

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.ids import ObjectId
    from strata.ledger.events import Author
    from strata.ledger.ledger import View

__all__ = ["MergePlan", "MergeResult", "lowest_common_ancestor", "merge", "plan_merge"]

POLICIES = ("text", "semantic")
CHOICES = ("ours", "theirs", "both")


@dataclass
class MergePlan:
    """The merged leaves (path -> entry or None) and what is left in conflict."""

    base: Event | None
    ours: Event
    theirs: Event
    policy: str
    leaves: dict[str, TreeEntry]
    conflicts: list[Conflict] = field(default_factory=list)
    sides: dict[str, tuple[bytes | None, bytes | None, bytes | None]] = field(default_factory=dict)
    entries: dict[str, tuple[TreeEntry | None, TreeEntry | None]] = field(default_factory=dict)

    @property
    def conflicted_paths(self) -> list[str]:
        """The paths with a conflict, in order."""
        return sorted({c.path for c in self.conflicts})

    def hunks(self, path: str) -> list[Hunk] | None:
        """The text hunks a reviewer picks from (``None``: a whole-file choice)."""
        base, ours, theirs = self.sides.get(path, (None, None, None))
        kinds = {c.kind for c in self.conflicts if c.path == path}
        if ours is None or theirs is None or kinds & {"binary", "mode", "delete", "kind"}:
            return None
        parts = text_hunks(base or b"", ours, theirs)
        return [p for p in parts if isinstance(p, Hunk)]


@dataclass
class MergeResult:
    """What ``merge`` did: the event when recorded, else the conflicts left.

    ``branch`` is where the result landed; on a fast-forward ``event`` is
    ``right``'s own event (the branch moved to it, nothing was recorded).
    """

    plan: MergePlan
    event: Event | None = None
    merged_paths: list[str] = field(default_factory=list)
    branch: str = ""
    fast_forward: bool = False

    def to_json(self) -> dict[str, Any]:
        """What ``strata merge --json`` prints."""
        p = self.plan
        return {
            "merged": self.event is not None,
            "event_id": self.event.id if self.event else None,
            "branch": self.branch,
            "fast_forward": self.fast_forward,
            "left": p.ours.id,
            "right": p.theirs.id,
            "base": p.base.id if p.base else None,
            "policy": p.policy,
            "conflicts": [{**c.to_json(), "path": display_path(c.path)} for c in p.conflicts],
            "merged_paths": [display_path(x) for x in self.merged_paths],
        }


def _parents(event: Event) -> list[str]:
    found = [event.parent_event_id] if event.parent_event_id else []
    right = event.data.get("right") if event.action_type == EventType.MERGE else None
    return found + ([str(right)] if right else [])


def lowest_common_ancestor(core: Core, a: Event, b: Event) -> Event | None:
    """The nearest state event both ``a`` and ``b`` descend from (merges: both parents)."""
    seen: set[str] = set()
    queue: deque[str] = deque([a.id])
    while queue:
        eid = queue.popleft()
        if eid in seen:
            continue
        seen.add(eid)
        queue.extend(_parents(core.event(eid)))
    queue = deque([b.id])
    visited: set[str] = set()
    while queue:
        eid = queue.popleft()
        if eid in seen:
            return core.event(eid)
        if eid in visited:
            continue
        visited.add(eid)
        queue.extend(_parents(core.event(eid)))
    return None


def _leaves(core: Core, tree: ObjectId) -> dict[str, TreeEntry]:
    if tree == EMPTY_TREE:
        return {}
    return {p: e for p, e in walk_tree(core.objects, tree) if e.kind != "dir"}


def _data(core: Core, entry: TreeEntry | None) -> bytes | None:
    return None if entry is None else bytes(core.objects.get(entry.oid))


def _renames(base: dict[str, TreeEntry], side: dict[str, TreeEntry]) -> dict[str, str]:
    """Paths of ``base`` gone from ``side`` whose blob reappears under a new path there."""
    new_by_oid: dict[str, str] = {}
    for p, e in side.items():
        if p not in base:
            new_by_oid.setdefault(e.oid, p)
    return {p: new_by_oid[e.oid] for p, e in base.items() if p not in side and e.oid in new_by_oid}


def plan_merge(
    core: Core, base: Event | None, ours: Event, theirs: Event, policy: str
) -> MergePlan:
    """Merge the three trees; the leaves of the result and the conflicts."""
    if policy not in POLICIES:
        raise UsageError(f"--policy {policy!r}: use text or semantic")
    b = _leaves(core, core.tree_of(base)) if base else {}
    o = _leaves(core, core.tree_of(ours))
    t = _leaves(core, core.tree_of(theirs))
    plan = MergePlan(base, ours, theirs, policy, dict(o))
    # a file renamed on one side and edited on the other: the edit follows the rename
    moved_o, moved_t = _renames(b, o), _renames(b, t)
    for old, new in moved_o.items():
        if old in t and t[old].oid != b[old].oid and new not in t:
            t = {**t, new: t[old]}
            del t[old]
            b = {**b, new: b[old]}
    for old, new in moved_t.items():
        if old in o and o[old].oid != b[old].oid and new not in o:
            o = {**o, new: o[old]}
            del o[old]
            b = {**b, new: b[old]}
            plan.leaves = dict(o)
    for path in sorted(set(b) | set(o) | set(t)):
        be, oe, te = b.get(path), o.get(path), t.get(path)
        if _same(oe, te) or _same(te, be):
            continue  # ours stands
        if _same(oe, be):
            _take(plan, path, te)
            continue
        # both sides changed the path, differently
        if oe is not None and te is not None and oe.kind != te.kind:
            plan.conflicts.append(
                Conflict(path, "kind", "", f"{oe.kind} on ours, {te.kind} on theirs")
            )
            plan.entries[path] = (oe, te)
            continue
        mode = _mode(be, oe, te)
        if mode is None:
            plan.conflicts.append(
                Conflict(path, "mode", "", "the mode changed differently on each side")
            )
            plan.entries[path] = (oe, te)
            continue
        if oe is not None and te is not None and oe.oid == te.oid:
            _take(plan, path, TreeEntry(oe.name, oe.kind, mode, oe.size, oe.oid))
            continue
        sides = (_data(core, be), _data(core, oe), _data(core, te))
        plan.sides[path] = sides
        plan.entries[path] = (oe, te)
        result: FileMerge = merge_file(path, *sides, policy=policy)
        if result.merged is None:
            plan.conflicts.extend(result.conflicts)
            continue
        _put(core, plan, path, result.merged, oe or te, mode)
    return plan


def _same(x: TreeEntry | None, y: TreeEntry | None) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return x.oid == y.oid and x.kind == y.kind and x.mode == y.mode


def _mode(be: TreeEntry | None, oe: TreeEntry | None, te: TreeEntry | None) -> int | None:
    """The merged mode, or ``None`` when the two sides changed it differently."""
    base = be.mode if be else None
    om, tm = (oe.mode if oe else None), (te.mode if te else None)
    if om == tm or tm is None or tm == base:
        return om if om is not None else (tm or 0o644)
    if om is None or om == base:
        return tm
    return None


def _take(plan: MergePlan, path: str, entry: TreeEntry | None) -> None:
    if entry is None:
        plan.leaves.pop(path, None)
    else:
        plan.leaves[path] = entry


def _put(
    core: Core, plan: MergePlan, path: str, data: bytes, like: TreeEntry | None, mode: int
) -> None:
    oid = core.objects.put(data)
    name = path.rsplit("/", 1)[-1]
    plan.leaves[path] = TreeEntry(name, "file" if like is None else like.kind, mode, len(data), oid)


def resolve(core: Core, plan: MergePlan, resolutions: dict[str, dict[str, Any]]) -> list[str]:
    """Apply each file's resolution to ``plan``; the paths still in conflict."""
    left = []
    for path in plan.conflicted_paths:
        res = resolutions.get(path)
        if not res or not str(res.get("rationale", "")).strip():
            left.append(path)
            continue
        choices = list(res.get("choices") or [])
        oe, te = plan.entries.get(path, (None, None))
        hunks = plan.hunks(path)
        if hunks is None:
            if choices != ["ours"] and choices != ["theirs"]:
                left.append(path)
                continue
            _take(plan, path, oe if choices == ["ours"] else te)
            continue
        if len(choices) != len(hunks):
            left.append(path)
            continue
        base, ours, theirs = plan.sides[path]
        parts = text_hunks(base or b"", ours or b"", theirs or b"")
        out: list[str] = []
        i = 0
        for part in parts:
            if not isinstance(part, Hunk):
                out.extend(part)
                continue
            choice = choices[i]
            i += 1
            if choice == "ours":
                out.extend(part.ours)
            elif choice == "theirs":
                out.extend(part.theirs)
            elif choice == "both":
                out.extend(part.ours + part.theirs)
            elif isinstance(choice, dict) and "edit" in choice:
                text = str(choice["edit"])
                out.append(text if not text or text.endswith("\n") else text + "\n")
            else:
                raise UsageError(f"{display_path(path)}: unknown choice {choice!r}")
        mode = _mode(None, oe, te) or 0o644
        _put(core, plan, path, "".join(out).encode(), oe or te, mode)
    plan.conflicts = [c for c in plan.conflicts if c.path in left]
    return left


def _write(core: Core, leaves: dict[str, TreeEntry]) -> ObjectId:
    """Store the tree holding ``leaves`` (folders made as needed); its id."""
    folders: dict[str, dict[str, TreeEntry]] = {"": {}}
    for path, entry in leaves.items():
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folders.setdefault("/".join(parts[:depth]), {})
        named = TreeEntry(parts[-1], entry.kind, entry.mode, entry.size, entry.oid)
        folders.setdefault("/".join(parts[:-1]), {})[parts[-1]] = named
    for folder in sorted(folders, key=lambda f: -f.count("/") if f else 1):
        if not folder:
            continue
        oid = write_tree(core.objects, folders[folder].values())
        parent, _, name = folder.rpartition("/")
        folders[parent][name] = TreeEntry(name, "dir", 0o755, 0, oid)
    return write_tree(core.objects, folders[""].values())


def _target(core: Core, view: View, ref: str, event: Event) -> tuple[str, bool]:
    """The branch a merge into ``ref`` lands on, and whether it is HEAD's (Published moves).

    A branch name is that branch; ``HEAD`` or HEAD's event is HEAD's branch (a
    new branch when HEAD is not its tip, as any state event there); any other
    point that is a branch's tip is that branch; a point that is nobody's tip
    starts a new branch named after the branch of its event.
    """
    if ref in view.branches and ref != "HEAD":
        return ref, ref == view.head_branch and not view.detached
    if ref == "HEAD" or event.id == view.head_event:
        return core.branch_for_new_state(view), True
    tips = sorted(name for name, tip in view.branches.items() if tip == event.id)
    if tips:
        return tips[0], False
    base = event.branch or "merge"
    n = 2
    while f"{base}-{n}" in view.branches:
        n += 1
    return f"{base}-{n}", False


def merge(
    core: Core,
    left: str,
    right: str,
    *,
    policy: str = "text",
    message: str = "",
    resolutions: dict[str, dict[str, Any]] | None = None,
    no_ff: bool = False,
    author: Author | None = None,
) -> MergeResult:
    """Merge ``right`` into ``left``; record it when no conflict is left.

    The result lands on ``left``'s branch (see :func:`_target`). When that is
    HEAD's branch, unrecorded work is auto-saved first and Published moves to
    the result; otherwise only the branch moves. When ``left`` is an ancestor
    of ``right`` the branch fast-forwards to ``right`` (no event), unless
    ``no_ff`` asks for a ``merge`` event all the same.
    """
    if policy not in POLICIES:
        raise UsageError(f"--policy {policy!r}: use text or semantic")
    with core.transaction("merge", author) as tx:
        a = core.resolve(left).event
        b = core.resolve(right).event
        if a is None or b is None:
            raise UsageError("merge needs two recorded events: A and B")
        branch, current = _target(core, tx.view, left, a)
        if current:
            core.guard_published("merge")
            scan = tx.auto_save("merge")[1]
            ours = tx.head() or a
        else:
            scan, ours = None, a
        if b.id == ours.id:
            raise UsageError(f"{right!r} and {left!r} are the same point: nothing to merge")
        base = lowest_common_ancestor(core, ours, b)
        if base is not None and base.id == b.id:
            raise UsageError(f"{right!r} is already part of {left!r}: nothing to merge")
        fast_forward = base is not None and base.id == ours.id and not no_ff
        if fast_forward:
            plan = MergePlan(base, ours, b, policy, _leaves(core, core.tree_of(b)))
            tree = core.tree_of(b)
        else:
            plan = plan_merge(core, base, ours, b, policy)
        all_conflicts = [c.to_json() for c in plan.conflicts]
        left_over = resolve(core, plan, resolutions or {}) if plan.conflicts else []
        if left_over:
            return MergeResult(plan, branch=branch)
        if not fast_forward:
            tree = _write(core, plan.leaves)
        artifacts: tuple[str, ...] = ()
        sides = {
            "left": ours.id,
            "right": b.id,
            "base": base.id if base else None,
            "policy": policy,
            "conflicts": all_conflicts,
        }
        if all_conflicts:
            record = {
                **sides,
                "resolutions": {display_path(p): r for p, r in sorted((resolutions or {}).items())},
            }
            artifacts = (core.objects.put(json.dumps(record, indent=2, sort_keys=True).encode()),)
        before_tree = scan.tree if scan is not None else core.tree_of(ours)
        changed = [display_path(c.path) for c in diff_trees(core.objects, before_tree, tree)]
        if fast_forward:
            branches = {**tx.view.branches, branch: b.id}
            if current:
                tx.move(head_branch=branch, head_event=b.id, branches=branches)
            else:
                tx.move(branches=branches)
            event = b
        else:
            event = tx.state_event(
                EventType.MERGE,
                tree,
                message=message or f"merge {right} into {left}",
                files=changed,
                data={**sides, **({"merge_resolution": artifacts[0]} if artifacts else {})},
                parent=ours,
                branch=branch,
                move_head=current,
                artifacts=artifacts,
            )
        if scan is not None:
            actions = core.workspace.plan(scan, tree)
            from strata.core.restore import check_before_writing

            verified = check_before_writing(core.objects, core.root, actions)
            tx.details.update({"tree_before": scan.tree, "tree_after": tree})
            tx.apply(actions, verified=verified)
    recorded = b if fast_forward else core.event(event.id)
    return MergeResult(plan, recorded, changed, branch=branch, fast_forward=fast_forward)
