"""Which symlinks of a tree lead outside the workspace, resolved through the tree's own symlinks.

A symlink's target is not read as text: ``y -> x/..`` stays inside the
workspace to a lexical reading, but when ``x`` is itself a symlink to ``..``
the kernel follows ``x`` first and ``y`` lands above the workspace root. So
each target is walked one name at a time, as the kernel walks it: a ``..``
pops a folder, a name that is a symlink *in the tree* is replaced by its own
target (relative to that symlink's folder), anything else is a folder or
file and is pushed. The walk never touches the disk: it looks only at the
tree being published or restored.

A walk that needs more than :data:`MAX_HOPS` symlinks is a loop (the kernel
gives up after 40 too, with ``ELOOP``): it reaches nothing, so it is not
reported as leaving the workspace.
"""

from __future__ import annotations

from strata.diff.tree import diff_trees
from strata.ids import ObjectId
from strata.store.objects import ObjectStore
from strata.store.tree import walk_tree

__all__ = ["MAX_HOPS", "escaping_symlinks", "leaves_tree"]

#: symlinks followed in one resolution before it counts as a loop (Linux's MAXSYMLINKS)
MAX_HOPS = 40


class _Loop(Exception):
    pass


def leaves_tree(links: dict[str, str], path: str) -> bool:
    """Whether the symlink at ``path`` (a key of ``links``: path → target) leads outside.

    Absolute targets leave; relative ones are resolved through ``links``.
    """
    hops = [MAX_HOPS]

    def walk(folder: list[str], target: str) -> list[str] | None:
        """The folder names ``target`` reaches from ``folder``; None when it leaves the root."""
        if target.startswith("/"):
            return None
        here = list(folder)
        for name in target.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                if not here:
                    return None
                here.pop()
                continue
            candidate = "/".join([*here, name])
            link = links.get(candidate)
            if link is None:
                here.append(name)
                continue
            hops[0] -= 1
            if hops[0] < 0:
                raise _Loop
            reached = walk(here, link)
            if reached is None:
                return None
            here = reached
        return here

    try:
        return walk(path.split("/")[:-1], links[path]) is None
    except _Loop:
        return False


def _links(store: ObjectStore, tree: ObjectId) -> dict[str, str]:
    return {
        path: store.get(entry.oid).decode("utf-8", "surrogateescape")
        for path, entry in walk_tree(store, tree)
        if entry.kind == "symlink"
    }


def escaping_symlinks(store: ObjectStore, before: ObjectId, after: ObjectId) -> list[str]:
    """Symlinks of ``after`` leading outside that did not already, identically, in ``before``.

    A symlink the workspace already had (same path, same target, already
    leading outside) is the user's own and is not reported; one that is new,
    changed, or whose meaning changed because another symlink on its way
    changed, is. Sorted paths.
    """
    changes = diff_trees(store, before, after)
    if not any("symlink" in (c.old and c.old.kind, c.new and c.new.kind) for c in changes):
        return []  # no symlink changed: every resolution is what it was
    new_links = _links(store, after)
    if not new_links:
        return []
    old_links = _links(store, before)
    bad = []
    for path, target in new_links.items():
        if not leaves_tree(new_links, path):
            continue
        if old_links.get(path) == target and leaves_tree(old_links, path):
            continue
        bad.append(path)
    return sorted(bad)
