"""Semantic blocks of a diff and of each state event, computed lazily and cached.

Nothing here runs when a snapshot is taken: an event's ``diff_mode`` and
``semantic_blocks`` are computed on first read (``strata diff --format``,
``strata history --semantic-block``, :meth:`Repository.semantic_diff`) from the
event's tree and its parent's, and kept in ``REPO/semantic/cache.db`` by the
pair of blobs and the handler that read them: a cache, rebuilt at will
(deleting it loses nothing), never part of the hash-chained ledger.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.semantic.base import Block, HandlerResult
from strata.semantic.registry import MAX_BINARY_BYTES, analyze, handler_for

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.results import DiffResult
    from strata.diff.tree import Change
    from strata.ledger.events import Event

__all__ = [
    "EventSemantics",
    "FileSemantics",
    "SemanticCache",
    "block_history",
    "event_diff_mode",
    "event_semantics",
    "file_semantics",
]

#: bumped when a handler's output changes, so cached results are read again
CACHE_VERSION = 1
_MODES = ("ast", "schema", "binary")


@dataclass(frozen=True)
class FileSemantics:
    """One changed file's semantic result."""

    path: str
    old_path: str | None
    status: str
    result: HandlerResult

    def to_json(self) -> dict[str, Any]:
        """The file as ``--json`` prints it."""
        return {
            "path": self.path,
            "old_path": self.old_path,
            "status": self.status,
            **self.result.to_json(),
        }


@dataclass(frozen=True)
class EventSemantics:
    """A state event's ``diff_mode`` and the semantic blocks of its changed files."""

    event_id: str
    diff_mode: str
    files: tuple[FileSemantics, ...]

    @property
    def semantic_blocks(self) -> list[Block]:
        """Every file's blocks, in path order."""
        return [b for f in self.files for b in f.result.semantic_blocks]

    def to_json(self) -> dict[str, Any]:
        """The event's semantics as ``--json`` prints them."""
        return {
            "event_id": self.event_id,
            "diff_mode": self.diff_mode,
            "semantic_blocks": [b.to_json() for b in self.semantic_blocks],
            "files": [f.to_json() for f in self.files],
        }


class SemanticCache:
    """Handler results by ``(path, old blob, new blob)``, in a SQLite file (or nowhere)."""

    def __init__(self, path: Path | None) -> None:
        self._db: sqlite3.Connection | None = None
        if path is None:
            return
        try:
            path.parent.mkdir(exist_ok=True)
            db = sqlite3.connect(path, timeout=0.5, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, body TEXT NOT NULL)"
            )
            self._db = db
        except (OSError, sqlite3.Error):  # a read-only repository: computed every time
            self._db = None

    def close(self) -> None:
        """Close the file."""
        if self._db is not None:
            self._db.close()
            self._db = None

    @staticmethod
    def key(path: str, old: str | None, new: str | None, handler: str) -> str:
        """The key of one file's change."""
        return f"{CACHE_VERSION}\0{handler}\0{path}\0{old or ''}\0{new or ''}"

    def get(self, key: str) -> HandlerResult | None:
        """The cached result, if any (a damaged row counts as none)."""
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT body FROM results WHERE key = ?", (key,)).fetchone()
            return HandlerResult.from_json(json.loads(row[0])) if row else None
        except (sqlite3.Error, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, result: HandlerResult) -> None:
        """Keep ``result`` (a busy or read-only file keeps nothing)."""
        if self._db is None:
            return
        with contextlib.suppress(sqlite3.Error):
            self._db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?)",
                (key, json.dumps(result.to_json(), sort_keys=True)),
            )


def open_cache(core: Core) -> SemanticCache:
    """The repository's cache of handler results."""
    return SemanticCache(core.layout.repo / "semantic" / "cache.db")


def _side(core: Core, entry: Any, store: Any) -> bytes | None:
    if entry is None or entry.kind == "dir":
        return None
    if entry.kind == "symlink":
        return bytes(store.get(entry.oid))
    if entry.size > MAX_BINARY_BYTES:
        raise _TooBig(entry.size)
    return bytes(store.get(entry.oid))


class _TooBig(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _one(core: Core, change: Change, store: Any, cache: SemanticCache) -> FileSemantics | None:
    old, new = change.old, change.new
    if "dir" in (old.kind if old else "", new.kind if new else ""):
        return None
    path = change.path
    handler = handler_for(path)
    key = cache.key(
        path, old.oid if old else None, new.oid if new else None, handler.name if handler else "-"
    )
    result = cache.get(key)
    if result is None:
        if "symlink" in (old.kind if old else "", new.kind if new else ""):
            result = HandlerResult(
                "unified",
                (Block("symlink", f"{path}::", "changed"),),
                "symlink changed",
                "a symlink: its target is compared as text",
            )
        else:
            try:
                before = _side(core, old, store)
                after = _side(core, new, store)
            except _TooBig as big:
                result = HandlerResult(
                    "binary",
                    (Block("file", f"{path}::", "changed"),),
                    f"{big.size:,} bytes: compared by hash only",
                    f"larger than {MAX_BINARY_BYTES:,} bytes",
                    handler="binary",
                )
            else:
                result = analyze(path, before, after)
        cache.put(key, result)
    return FileSemantics(path, change.old_path, change.status, result)


def file_semantics(core: Core, diff: DiffResult) -> list[FileSemantics]:
    """The semantic result of every changed file of ``diff`` (cached by blob pair)."""
    cache = open_cache(core)
    try:
        found = [_one(core, c, diff.store, cache) for c in diff.changes]
    finally:
        cache.close()
    return [f for f in found if f is not None]


def event_diff_mode(files: Iterable[FileSemantics]) -> str:
    """The event's mode: its files' most telling one (``ast``, ``schema``, ``binary``)."""
    modes = {f.result.diff_mode for f in files}
    for mode in _MODES:
        if mode in modes:
            return mode
    return "unified"


def _parent_tree(core: Core, event: Event) -> Any:
    from strata.store.tree import EMPTY_TREE

    if event.parent_event_id is None:
        return EMPTY_TREE
    parent = core.event(event.parent_event_id)
    return core.tree_of(parent) if parent.snapshot_ref else EMPTY_TREE


def event_semantics(core: Core, event: Event) -> EventSemantics:
    """A state event's ``diff_mode`` and ``semantic_blocks``, against its parent."""
    if event.snapshot_ref is None:
        return EventSemantics(event.id, "unified", ())
    diff = core.diff_trees(_parent_tree(core, event), core.tree_of(event), stats=False)
    files = tuple(file_semantics(core, diff))
    return EventSemantics(event.id, event_diff_mode(files), files)


def block_history(
    core: Core, block_id: str, events: Iterable[Event]
) -> Iterator[tuple[Event, list[Block]]]:
    """The state events (newest first, as given) that touched ``block_id``.

    ``block_id`` is ``path::name`` (``src/app.py::greet``); a block found as
    ``renamed`` or ``moved`` from an older id is followed under that id into
    older events, and so is a file renamed whole.
    """
    if "::" not in block_id:
        from strata.errors import UsageError

        raise UsageError(
            f"--semantic-block {block_id!r}: give PATH::NAME, e.g. 'src/app.py::greet'"
        )
    wanted = {block_id}
    for event in events:
        if event.snapshot_ref is None:
            continue
        paths = {w.split("::", 1)[0] for w in wanted}
        if event.files and not paths & set(event.files):
            continue
        semantics = event_semantics(core, event)
        hits: list[Block] = []
        older: set[str] = set()
        for f in semantics.files:
            if f.path not in paths:
                continue
            for block in f.result.semantic_blocks:
                if block.id in wanted or _inside(block.id, wanted):
                    hits.append(block)
                    if block.old_id:
                        older.add(block.old_id)
            if f.old_path and f.old_path != f.path:  # a file renamed whole
                older |= {f.old_path + "::" + w.split("::", 1)[1] for w in wanted}
        if hits:
            yield event, hits
        wanted |= older


def _inside(block_id: str, wanted: set[str]) -> bool:
    """A method of a wanted class, a key under a wanted pointer."""
    return any(block_id.startswith(w + ".") or block_id.startswith(w + "/") for w in wanted)
