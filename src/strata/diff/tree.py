"""Comparing two trees: which paths were added, modified, deleted, renamed….

The walk descends only into folders whose tree ids differ, so its cost grows
with what changed, not with the size of the workspace. Renames are found by
content hash: a deleted file and an added file with the same blob are one
rename.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from strata.ids import ObjectId
from strata.store.objects import ObjectStore
from strata.store.tree import EMPTY_TREE, TreeEntry, read_tree, walk_tree

Status = Literal["added", "modified", "deleted", "renamed", "type_changed", "mode_changed"]


@dataclass(frozen=True)
class Change:
    """One changed path between two trees.

    Files and symlinks; folders only where nothing else shows them: an empty
    folder added or removed, and a folder whose permission bits changed.
    """

    path: str
    status: Status
    old: TreeEntry | None
    new: TreeEntry | None
    old_path: str | None = None


def _leaves(store: ObjectStore, entry: TreeEntry, path: str) -> Iterator[tuple[str, TreeEntry]]:
    """Files and symlinks below ``entry``, and folders that hold nothing (recorded too)."""
    if entry.kind != "dir":
        yield path, entry
        return
    if entry.oid == EMPTY_TREE:
        yield path, entry
        return
    for sub, child in walk_tree(store, entry.oid, path + "/"):
        if child.kind != "dir" or child.oid == EMPTY_TREE:
            yield sub, child


@dataclass(frozen=True)
class _Descend:
    """What :func:`_level` yields for a folder to compare next (before its later siblings)."""

    a: ObjectId
    b: ObjectId
    prefix: str


def _walk(
    store: ObjectStore, a: ObjectId | None, b: ObjectId | None, prefix: str
) -> Iterator[tuple[str, TreeEntry | None, TreeEntry | None]]:
    """Every changed path from ``a`` to ``b``, depth first (a stack, not recursion)."""
    stack = [_level(store, a, b, prefix)]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif isinstance(item, _Descend):
            stack.append(_level(store, item.a, item.b, item.prefix))
        else:
            yield item


def _level(
    store: ObjectStore, a: ObjectId | None, b: ObjectId | None, prefix: str
) -> Iterator[tuple[str, TreeEntry | None, TreeEntry | None] | _Descend]:
    left = {e.name: e for e in read_tree(store, a)} if a else {}
    right = {e.name: e for e in read_tree(store, b)} if b else {}
    for name in sorted(left.keys() | right.keys()):
        old, new = left.get(name), right.get(name)
        path = prefix + name
        if old is not None and new is not None and old.oid == new.oid and old.kind == new.kind:
            if old.mode != new.mode:
                yield path, old, new
            continue
        if old is not None and new is not None and old.kind == "dir" and new.kind == "dir":
            if old.mode != new.mode:
                yield path, old, new
            if old.oid != new.oid:
                yield _Descend(old.oid, new.oid, path + "/")
            continue
        if old is not None and old.kind == "dir":
            for sub, leaf in _leaves(store, old, path):
                yield sub, leaf, None
            old = None
        if new is not None and new.kind == "dir":
            if old is not None:
                yield path, old, None
            for sub, leaf in _leaves(store, new, path):
                yield sub, None, leaf
            continue
        if old is not None or new is not None:
            yield path, old, new


def added_leaves(store: ObjectStore, tree: ObjectId, prefix: str = "") -> Iterator[Change]:
    """The changes from the empty tree to ``tree``, one at a time, in :func:`diff_trees` order.

    Every file, symlink and empty folder is ``added``. Nothing is kept but the
    folders on the way down: a first snapshot of any size costs the memory of
    its deepest path, not of its every file. Siblings are visited by name, a
    folder's as ``name/`` (its paths sort there among its siblings' paths).
    The folders on the way are a stack, not recursion: any depth is walked.
    """
    if tree == EMPTY_TREE:
        return
    stack = [(_added_items(store, tree), prefix)]
    while stack:
        items, base = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        key, entry = item
        if key.endswith("/"):
            stack.append((_added_items(store, entry.oid), base + key))
        else:
            yield Change(base + key, "added", None, entry)


def _added_items(store: ObjectStore, tree: ObjectId) -> Iterator[tuple[str, TreeEntry]]:
    """A tree's entries by sort key (a non-empty folder's name with a "/")."""
    items = [
        (e.name + "/" if e.kind == "dir" and e.oid != EMPTY_TREE else e.name, e)
        for e in read_tree(store, tree, cached=False)  # each is read once: not kept
    ]
    items.sort(key=lambda item: item[0])
    return iter(items)


def diff_trees(
    store: ObjectStore, a: ObjectId, b: ObjectId, *, paths: list[str] | None = None
) -> list[Change]:
    """Changes from tree ``a`` to tree ``b``, sorted by path; restricted to ``paths`` if given."""
    if a == b:
        return []
    if a == EMPTY_TREE and not paths:
        return list(added_leaves(store, b))
    raw = list(_walk(store, a, b, ""))
    if paths:
        raw = [r for r in raw if any(_under(r[0], p) for p in paths)]
    added: dict[ObjectId, list[int]] = {}
    changes: list[Change | None] = []
    for path, old, new in raw:
        if old is None and new is not None:
            added.setdefault(new.oid, []).append(len(changes))
            changes.append(Change(path, "added", None, new))
        elif new is None and old is not None:
            changes.append(Change(path, "deleted", old, None))
        elif old is not None and new is not None:
            if old.kind != new.kind:
                status: Status = "type_changed"
            elif old.oid == new.oid:
                status = "mode_changed"
            else:
                status = "modified"
            changes.append(Change(path, status, old, new))
    # renames: pair each deleted file with an added file of the same content
    for i, change in enumerate(changes):
        if change is None or change.status != "deleted" or change.old is None:
            continue
        if change.old.kind != "file":
            continue
        slots = added.get(change.old.oid)
        while slots:
            j = slots.pop(0)
            target = changes[j]
            if target is None or target.new is None or target.new.kind != "file":
                continue
            changes[j] = Change(target.path, "renamed", change.old, target.new, change.path)
            changes[i] = None
            break
    return sorted((c for c in changes if c is not None), key=lambda c: c.path)


def _under(path: str, prefix: str) -> bool:
    return prefix in ("", ".") or path == prefix or path.startswith(prefix.rstrip("/") + "/")
