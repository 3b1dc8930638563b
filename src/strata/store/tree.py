"""Trees: the stored listing of one directory.

A tree object is UTF-8 text (names are encoded with the file system's encoding
and ``surrogateescape``, so any name round-trips)::

    strata-tree 1\\n
    <kind> <mode> <size> <object id> <name>\\0      one per entry, sorted by name bytes

``kind`` is ``f`` (regular file), ``l`` (symlink) or ``d`` (directory); ``mode``
is the permission bits in octal (``644``, ``755``, ``700``; symlinks ``777``);
``size`` the byte length of a file or link target (0 for a directory); the
object id names the content blob, the link-target blob or the subtree. An empty
directory is a tree with no entries.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from strata.errors import CorruptRepository
from strata.ids import ObjectId
from strata.store.objects import DiskObjectStore, ObjectStore, OverlayStore, hash_bytes

Kind = Literal["file", "symlink", "dir"]
T = TypeVar("T")
#: a function over a tree written as a generator that yields its calls to itself (see
#: :func:`unnest`): its depth is that of the tree, never limited by Python's recursion
Nested = Generator["Nested[Any]", Any, T]
TREE_MAGIC = b"strata-tree 1\n"
_KIND_CHAR: dict[str, bytes] = {"file": b"f", "symlink": b"l", "dir": b"d"}
_CHAR_KIND: dict[bytes, Kind] = {b"f": "file", b"l": "symlink", b"d": "dir"}


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry of a tree."""

    name: str
    kind: Kind
    mode: int
    size: int
    oid: ObjectId


def encode_tree(entries: Iterable[TreeEntry]) -> bytes:
    """Serialize entries (in any order) to tree bytes."""
    parts = [TREE_MAGIC]
    rows = sorted(((os.fsencode(e.name), e) for e in entries), key=lambda r: r[0])
    for raw, e in rows:
        parts.append(
            b"%s %o %d %s %s\0" % (_KIND_CHAR[e.kind], e.mode, e.size, e.oid.encode(), raw)
        )
    return b"".join(parts)


def encode_rows(rows: Iterable[tuple[str, int, int, str, str]]) -> bytes:
    """Serialize rows ``(kind char, mode, size, object id, name)`` already sorted by name bytes."""
    parts = [TREE_MAGIC]
    for kind, mode, size, child, name in rows:
        parts.append(
            b"%s %o %d %s %s\0" % (kind.encode(), mode, size, child.encode(), os.fsencode(name))
        )
    return b"".join(parts)


def decode_tree(data: bytes, oid: str = "?") -> list[TreeEntry]:
    """Parse tree bytes; CorruptRepository when they are not a tree."""
    if not data.startswith(TREE_MAGIC):
        raise CorruptRepository(f"object {oid} is not a tree")
    entries: list[TreeEntry] = []
    body = data[len(TREE_MAGIC) :]
    if not body:
        return entries
    if not body.endswith(b"\0"):
        raise CorruptRepository(f"tree {oid} is truncated")
    try:
        for row in body[:-1].split(b"\0"):
            kind, mode, size, child, name = row.split(b" ", 4)
            entries.append(
                TreeEntry(
                    os.fsdecode(name),
                    _CHAR_KIND[kind],
                    int(mode, 8),
                    int(size),
                    ObjectId(child.decode("ascii")),
                )
            )
    except (ValueError, KeyError):
        raise CorruptRepository(f"tree {oid} is malformed") from None
    return entries


def write_tree(store: ObjectStore, entries: Iterable[TreeEntry]) -> ObjectId:
    """Store a tree and return its id."""
    data = encode_tree(entries)
    return store.put(data, oid=hash_bytes(data))


EMPTY_TREE = hash_bytes(TREE_MAGIC)


#: decoded trees most recently read or written, per disk store: (store root, id) -> entries.
#: A tree id names its content, so an entry never goes stale; a long-lived process (the
#: watcher running commands) diffs the trees its last snapshot wrote without reading them.
TREE_CACHE_SIZE = 4096
_TREES: OrderedDict[tuple[str, str], tuple[TreeEntry, ...]] = OrderedDict()
_TREES_LOCK = threading.Lock()


def _cache_key(store: ObjectStore, oid: str) -> tuple[str, str] | None:
    """Where ``oid`` of ``store`` is kept in the tree cache (None: not cached)."""
    if isinstance(store, OverlayStore):
        if store.top.has(ObjectId(oid)):
            # only looked at, never stored (a status): kept apart from every disk store's
            # trees; a tree id names its content, so any overlay holding it has these entries
            return ("", oid)
        return _cache_key(store.base, oid)
    if isinstance(store, DiskObjectStore):
        return (str(store.root), oid)
    return None


def remember_tree(store: ObjectStore, oid: ObjectId, entries: Iterable[TreeEntry]) -> None:
    """Keep the decoded entries of a tree just written to ``store`` (see :func:`read_tree`)."""
    key = _cache_key(store, oid)
    if key is None or oid == EMPTY_TREE:
        return
    with _TREES_LOCK:
        _TREES[key] = tuple(entries)
        _TREES.move_to_end(key)
        while len(_TREES) > TREE_CACHE_SIZE:
            _TREES.popitem(last=False)


def read_tree(store: ObjectStore, oid: ObjectId, *, cached: bool = True) -> list[TreeEntry]:
    """Load a tree from the store (the empty tree needs no stored object).

    Trees of a disk store recently read or written in this process come
    from memory; ``cached=False`` reads the stored object whatever (a check
    that it is there and sound).
    """
    if oid == EMPTY_TREE:
        return []
    key = _cache_key(store, oid) if cached else None
    if key is not None:
        with _TREES_LOCK:
            hit = _TREES.get(key)
            if hit is not None:
                _TREES.move_to_end(key)
                return list(hit)
    entries = decode_tree(store.get(oid), oid)
    if key is not None:
        remember_tree(store, oid, entries)
    return entries


def rows_to_entries(rows: Iterable[tuple[str, int, int, str, str]]) -> list[TreeEntry]:
    """Tree entries from rows ``(kind char, mode, size, object id, name)`` (as encode_rows)."""
    kinds = {"f": "file", "l": "symlink", "d": "dir"}
    return [
        TreeEntry(name, kinds[kind], mode, size, ObjectId(child))  # type: ignore[arg-type]
        for kind, mode, size, child, name in rows
    ]


def unnest(top: Nested[T]) -> T:
    """Run ``top``, a generator that yields generators as calls, with no Python recursion.

    A yielded generator runs to its end before its caller resumes, and the
    caller receives what it returned: ``tree = yield build(sub)`` is
    ``tree = build(sub)``. A tree of any depth (deeper than the interpreter's
    recursion limit, paths longer than PATH_MAX) is walked in constant
    stack.
    """
    stack: list[Nested[Any]] = [top]
    value: Any = None
    while True:
        try:
            call = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value  # type: ignore[no-any-return]
            value = done.value
            continue
        stack.append(call)
        value = None


def walk_tree(
    store: ObjectStore, oid: ObjectId, prefix: str = ""
) -> Iterator[tuple[str, TreeEntry]]:
    """Every entry below a tree, depth first, as (workspace path, entry); directories included.

    Iterative: a tree deeper than Python's recursion limit is walked all the same.
    """
    stack: list[tuple[Iterator[TreeEntry], str]] = [(iter(read_tree(store, oid)), prefix)]
    while stack:
        entries, base = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        path = f"{base}{entry.name}"
        yield path, entry
        if entry.kind == "dir":
            stack.append((iter(read_tree(store, entry.oid)), path + "/"))


def lookup(store: ObjectStore, root: ObjectId, path: str) -> TreeEntry | None:
    """The entry at ``path`` below ``root`` (``""`` is the root itself), or None."""
    if path == "":
        return TreeEntry("", "dir", 0o755, 0, root)
    current = root
    parts = path.split("/")
    for i, part in enumerate(parts):
        found = next((e for e in read_tree(store, current) if e.name == part), None)
        if found is None:
            return None
        if i == len(parts) - 1:
            return found
        if found.kind != "dir":
            return None
        current = found.oid
    return None


def graft(store: ObjectStore, base: ObjectId, source: ObjectId, paths: Iterable[str]) -> ObjectId:
    """``base`` with each of ``paths`` as ``source`` has it; the new root tree's id.

    A path that ``source`` lacks is removed; a folder path takes the whole
    folder. The folders on the way to a path are made as ``source`` has them
    (their mode), and a folder left empty by a removal goes too unless
    ``source`` keeps it. Only the folders above ``paths`` are read and written:
    how a snapshot records what one tool call changed and nothing else.
    """
    wanted: dict[str, list[str]] = {}
    whole: set[str] = set()
    for path in paths:
        head, _, rest = path.strip("/").partition("/")
        if not head:
            return source  # the root itself: everything
        if rest:
            wanted.setdefault(head, []).append(rest)
        else:
            whole.add(head)
    if not wanted and not whole:
        return base
    ours = {e.name: e for e in read_tree(store, base)}
    theirs = {e.name: e for e in read_tree(store, source)}
    for name in whole:
        taken = theirs.get(name)
        if taken is None:
            ours.pop(name, None)
        else:
            ours[name] = taken
    for name, below in wanted.items():
        if name in whole:
            continue
        mine, other = ours.get(name), theirs.get(name)
        mine_tree = mine.oid if mine is not None and mine.kind == "dir" else EMPTY_TREE
        other_tree = other.oid if other is not None and other.kind == "dir" else EMPTY_TREE
        grafted = graft(store, mine_tree, other_tree, below)
        if grafted == EMPTY_TREE and (other is None or other.kind != "dir"):
            if mine is not None and mine.kind == "dir":
                ours.pop(name)  # emptied, and gone from the source too
            continue
        like = other if other is not None and other.kind == "dir" else mine
        mode = like.mode if like is not None and like.kind == "dir" else 0o755
        ours[name] = TreeEntry(name, "dir", mode, 0, grafted)
    return write_tree(store, ours.values())
