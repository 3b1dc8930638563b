"""Stored trees as flat maps of paths, and back: what a merge works on.

:func:`flatten_tree` lists a tree's files and symlinks by path (and its
folders with their mode); :func:`build_tree` writes such maps back as trees.
"""

from __future__ import annotations

from strata.ids import ObjectId
from strata.store.objects import ObjectStore
from strata.store.tree import Nested, TreeEntry, read_tree, unnest, write_tree


def flatten_tree(store: ObjectStore, oid: ObjectId) -> tuple[dict[str, TreeEntry], dict[str, int]]:
    """(files and symlinks by path, folders by path with their mode) of the tree ``oid``."""
    leaves: dict[str, TreeEntry] = {}
    dirs: dict[str, int] = {}

    def walk(tree: ObjectId, prefix: str) -> Nested[None]:
        for e in read_tree(store, tree):
            path = prefix + e.name
            if e.kind == "dir":
                dirs[path] = e.mode
                yield walk(e.oid, path + "/")
            else:
                leaves[path] = e

    unnest(walk(oid, ""))  # any depth: no recursion
    return leaves, dirs


def build_tree(store: ObjectStore, leaves: dict[str, TreeEntry], dirs: dict[str, int]) -> ObjectId:
    """Write the tree of ``leaves`` (by path) and ``dirs`` (by path, with their mode).

    Every folder above a leaf must be in ``dirs``. Returns the root tree.
    """
    children: dict[str, list[TreeEntry]] = {"": []}
    for d in dirs:
        children.setdefault(d, [])
    for path, entry in leaves.items():
        children.setdefault(path.rpartition("/")[0], []).append(entry)

    subdirs: dict[str, list[str]] = {}
    for d in dirs:
        subdirs.setdefault(d.rpartition("/")[0], []).append(d)

    def build(folder: str) -> Nested[ObjectId]:
        entries = list(children.get(folder, []))
        for d in subdirs.get(folder, []):
            sub = yield build(d)
            entries.append(TreeEntry(d.rpartition("/")[2], "dir", dirs[d], 0, sub))
        return write_tree(store, entries)

    return unnest(build(""))
