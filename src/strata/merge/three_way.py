"""The three-way merge of trees: what publishing a Draft onto a moved Published writes.

Different paths combine; same-file edits merge line by line with ``merge3``;
permission bits merge on their own; a true conflict raises
:class:`~strata.errors.MergeConflict` with every conflicting path, and nothing
is written but the merged blobs.
"""

from __future__ import annotations

from strata.errors import MergeConflict
from strata.ids import ObjectId
from strata.merge.trees import build_tree, flatten_tree
from strata.store.objects import ObjectStore
from strata.store.tree import TreeEntry

#: the line merge a three-way tree merge uses (recorded with a publish that merged)
MERGE_POLICY = "merge3"


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
    b_leaves, b_dirs = flatten_tree(store, base)
    l_leaves, l_dirs = flatten_tree(store, left)
    r_leaves, r_dirs = flatten_tree(store, right)
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
            mode = _merge_mode(b_dirs.get(path), l_dirs.get(path), r_dirs.get(path))
            if mode is None:
                conflicts.append(path)
                continue
            dirs[path] = mode
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
    return build_tree(store, result, dirs), merged


def _merge_file(
    store: ObjectStore, base: TreeEntry | None, left: TreeEntry | None, right: TreeEntry | None
) -> TreeEntry | None:
    """A line merge of two edits of one file, or None when they conflict."""
    import merge3

    if base is None or left is None or right is None:
        return None  # added twice differently, or edited on one side and deleted on the other
    if not (base.kind == left.kind == right.kind == "file"):
        return None
    from strata.diff.patch import BIG_FILE_BYTES

    if max(base.size, left.size, right.size) > BIG_FILE_BYTES:
        return None  # too big to merge line by line in memory: compared as binary
    datas = [store.get(e.oid) for e in (base, left, right)]
    if any(b"\0" in d for d in datas):
        return None  # binary (git looks at 8000 bytes; any NUL anywhere is enough here)
    lines = [d.splitlines(keepends=True) for d in datas]
    m = merge3.Merge3(lines[0], lines[1], lines[2])
    if any(region[0] == "conflict" for region in m.merge_regions()):
        return None
    mode = _merge_mode(base.mode, left.mode, right.mode)
    if mode is None:
        return None  # both sides changed the permissions, differently
    data = b"".join(m.merge_lines())
    oid = store.put(data)
    return TreeEntry(left.name, "file", mode, len(data), oid)


def _merge_mode(base: int | None, left: int | None, right: int | None) -> int | None:
    """The merged permission bits of a path both sides keep; None when they conflict.

    A side that did not change the mode takes the other side's: a ``chmod``
    made in the Draft or in Published meanwhile survives the merge.
    """
    if left is None or right is None:
        return right if left is None else left  # added on one side only
    if right in (base, left):
        return left
    if left == base:
        return right
    return None
