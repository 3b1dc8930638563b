"""The typed results of the core's operations; each has the attributes its ``--json`` shows.

The results of the operations a snapshot never returns are defined in
:mod:`strata.core.results_ops` and loaded on first use of one of their names
here (PEP 562): making a dataclass costs about half a millisecond.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from strata.diff.tree import Change
from strata.ids import ObjectId, SnapshotId
from strata.ledger.events import Event
from strata.store.objects import ObjectStore
from strata.store.tree import TreeEntry


@dataclass(frozen=True)
class Point:
    """A resolved ref: a state event (when there is one), its snapshot and tree."""

    tree: ObjectId
    snapshot_id: SnapshotId | None = None
    event: Event | None = None
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        """The point as JSON."""
        return {
            "event_id": self.event.id if self.event else None,
            "snapshot_id": self.snapshot_id,
            "tree": self.tree,
        }


@dataclass(frozen=True)
class FileDiff:
    """How one path differs between two points."""

    path: str
    status: str
    old_path: str | None
    insertions: int
    deletions: int
    binary: bool
    bytes_changed: int
    hash_before: str | None
    hash_after: str | None
    mode_before: int | None = None
    mode_after: int | None = None
    name: str = ""
    """The path as stored (a byte that is not UTF-8 kept as a surrogate escape; ``path``
    writes it as ``\\xNN``): ``os.fsencode(name)`` is the file's real name."""

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata diff --json`` prints for each file."""
        return {
            "path": self.path,
            "status": self.status,
            "old_path": self.old_path,
            "insertions": self.insertions,
            "deletions": self.deletions,
            "binary": self.binary,
            "bytes_changed": self.bytes_changed,
            "hash_before": self.hash_before,
            "hash_after": self.hash_after,
            "mode_before": _octal(self.mode_before),
            "mode_after": _octal(self.mode_after),
        }


def _octal(mode: int | None) -> str | None:
    return None if mode is None else f"{mode:o}"


@dataclass
class DiffResult:
    """The difference between two points."""

    store: ObjectStore
    changes: list[Change]
    files: list[FileDiff]

    @property
    def files_changed(self) -> int:
        """How many paths differ."""
        return len(self.files)

    @property
    def insertions(self) -> int:
        """Lines added over all text files."""
        return sum(f.insertions for f in self.files)

    @property
    def deletions(self) -> int:
        """Lines removed over all text files."""
        return sum(f.deletions for f in self.files)

    def patch(self, *, context: int = 3) -> bytes:
        """The change as a git-format patch that ``git apply`` accepts."""
        return b"".join(self.iter_patch(context=context))

    def iter_patch(self, *, context: int = 3, readable: bool = False) -> Iterator[bytes]:
        """The patch one file section at a time (each file's versions loaded only for it).

        Files over :data:`~strata.diff.patch.BIG_FILE_BYTES` are never loaded:
        git's ``Binary files … differ``. ``readable``: for a reader, see
        :func:`~strata.diff.patch.render_patch`.
        """
        from strata.diff.patch import BIG_FILE_BYTES, FileSide, render_big, render_patch

        def side(path: str, entry: TreeEntry | None, data: bool = True) -> FileSide | None:
            if entry is None:
                return None
            kind = "symlink" if entry.kind == "symlink" else "file"
            return FileSide(path, kind, entry.mode, self.store.get(entry.oid) if data else b"")

        for c in self.changes:
            if "dir" in (c.old.kind if c.old else "", c.new.kind if c.new else ""):
                continue  # git patches cannot carry folders (empty ones, or their modes)
            old_path = c.old_path or c.path
            big = [e for e in (c.old, c.new) if e and e.kind == "file" and e.size > BIG_FILE_BYTES]
            if not big:
                yield render_patch(
                    side(old_path, c.old), side(c.path, c.new), context=context, readable=readable
                )
                continue
            old, new = c.old, c.new
            if old is not None and new is not None and old.kind != new.kind:
                yield render_patch(side(old_path, old), None, context=context)
                old = None
                if new.kind != "file":
                    yield render_patch(None, side(c.path, new), context=context)
                    continue
            elif old is not None and old.kind != "file":
                yield render_patch(side(old_path, old), None, context=context)
                continue
            yield render_big(
                side(old_path, old, data=False),
                side(c.path, new, data=False),
                old_id=self._git_id(old),
                new_id=self._git_id(new),
            )

    def _git_id(self, entry: TreeEntry | None) -> str | None:
        from strata.diff.patch import git_blob_id_of_chunks
        from strata.store.objects import verified_chunks

        if entry is None:
            return None
        return git_blob_id_of_chunks(entry.size, verified_chunks(self.store, entry.oid))

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata diff --json`` prints."""
        return {
            "files": [f.to_json() for f in self.files],
            "files_changed": self.files_changed,
            "insertions": self.insertions,
            "deletions": self.deletions,
        }


class RecordedDiff(DiffResult):
    """The diff a snapshot recorded: its totals kept, its changes listed again when asked.

    A snapshot of 80,000 files keeps three numbers, not 80,000 :class:`FileDiff`
    objects; ``compute`` makes the whole :class:`DiffResult` on first use of
    :attr:`changes` or :attr:`files`.
    """

    def __init__(
        self,
        store: ObjectStore,
        compute: Callable[[], DiffResult],
        *,
        files_changed: int,
        insertions: int,
        deletions: int,
    ) -> None:
        self.store = store
        self._compute: Callable[[], DiffResult] | None = compute
        self._whole: DiffResult | None = None
        self._totals = (files_changed, insertions, deletions)

    def _result(self) -> DiffResult:
        if self._whole is None:
            assert self._compute is not None
            self._whole, self._compute = self._compute(), None
        return self._whole

    @property
    def changes(self) -> list[Change]:
        """Every change, listed on first use."""
        return self._result().changes

    @changes.setter
    def changes(self, value: list[Change]) -> None:
        self._result().changes = value

    @property
    def files(self) -> list[FileDiff]:
        """Every changed path's :class:`FileDiff`, made on first use."""
        return self._result().files

    @files.setter
    def files(self, value: list[FileDiff]) -> None:
        self._result().files = value

    @property
    def files_changed(self) -> int:
        """How many paths differ."""
        return self._totals[0]

    @property
    def insertions(self) -> int:
        """Lines added over all text files."""
        return self._totals[1]

    @property
    def deletions(self) -> int:
        """Lines removed over all text files."""
        return self._totals[2]


@dataclass
class SnapshotResult:
    """What ``snapshot`` recorded."""

    event: Event | None
    snapshot_id: SnapshotId | None
    diff: DiffResult | None
    warnings: list[str] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        """True when nothing changed since HEAD (no event was written)."""
        return self.event is None

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata snapshot --json`` prints."""
        if self.event is None:
            return {
                "unchanged": True,
                "event_id": None,
                "snapshot_id": self.snapshot_id,
                "files_changed": 0,
                "insertions": 0,
                "deletions": 0,
                "changed_paths": [],
                "warnings": self.warnings,
            }
        assert self.diff is not None
        return {
            "unchanged": False,
            "event_id": self.event.id,
            "snapshot_id": self.snapshot_id,
            "files_changed": self.diff.files_changed,
            "insertions": self.diff.insertions,
            "deletions": self.diff.deletions,
            "changed_paths": list(self.event.files),
            "warnings": self.warnings,
        }


@dataclass
class StatusResult:
    """The working tree against HEAD, and the branch HEAD is on.

    ``branch`` is HEAD's branch when HEAD is its tip; None when HEAD is
    detached (rewound to an earlier point), and then ``next_branch`` names the
    branch the next snapshot starts.
    """

    head: Event | None
    changes: list[FileDiff]
    warnings: list[str]
    pending_recovery: bool = False
    branch: str | None = None
    next_branch: str | None = None

    @property
    def detached(self) -> bool:
        """True when HEAD is not the tip of a branch (the next snapshot starts one)."""
        return self.branch is None

    @property
    def clean(self) -> bool:
        """True when the working tree equals HEAD."""
        return not self.changes

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata status --json`` prints."""
        return {
            "head_event_id": self.head.id if self.head else None,
            "head_snapshot_id": self.head.snapshot_ref if self.head else None,
            "branch": self.branch,
            "detached": self.detached,
            "next_branch": self.next_branch,
            "clean": self.clean,
            "changes": [
                {"path": c.path, "status": c.status, "old_path": c.old_path} for c in self.changes
            ],
            "warnings": self.warnings,
        }


def bytes_changed(a: bytes, b: bytes) -> int:
    """Length of the span that differs once the common prefix and suffix are removed."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # longest common prefix, by halving with C-speed slice compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, n - prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return max(len(a), len(b)) - prefix - lo
