"""The Repository facade: where the object store and the ledger meet.

Everything the CLI does goes through :class:`Repository`. The library reads
no environment variable, terminal or home configuration: the clock, the
random source and the author are arguments.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata._version import __version__
from strata.diff.tree import Change, diff_trees
from strata.errors import (
    AmbiguousRef,
    CorruptRepository,
    DraftOpen,
    PathNotFound,
    StrataError,
    UnknownRef,
    UsageError,
    WorkspaceBusy,
)
from strata.ids import (
    EVENT_PREFIX,
    HEX_PREFIX,
    EventId,
    ObjectId,
    SnapshotId,
    is_object_id,
    new_event_id,
    short,
)
from strata.layout import Layout, WriteLock, create_layout, find_layout, load_config
from strata.ledger.driver import EventFilter, LedgerDriver
from strata.ledger.events import Author, Event, dumps, format_ts
from strata.ledger.ledger import Bookmark, Ledger, Operation, View, check_ref_name, moved
from strata.sandbox.paths import display_path
from strata.store.ignore import IgnoreRules
from strata.store.objects import DiskObjectStore, ObjectStore, OverlayStore
from strata.store.scan import Scanner, ScanResult
from strata.store.statcache import StatCache
from strata.store.tree import EMPTY_TREE, TreeEntry, decode_tree, lookup, read_tree

if TYPE_CHECKING:
    from strata.runs.options import WorkspaceOptions
    from strata.runs.result import RunResult
    from strata.store.watch import Answer, ChangeMonitor
    from strata.workbench.checkpoints import Checkpoints
    from strata.workbench.draft import Draft

MANIFEST_FORMAT = 1
SYSTEM = Author("strata", "system")
_HEAD_RE = re.compile(r"(?P<base>.+?)~(?P<n>\d*)")


# -- results -------------------------------------------------------------------


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
        from strata.diff.patch import FileSide, render_patches

        def side(path: str | None, entry: TreeEntry | None) -> FileSide | None:
            if entry is None or path is None:
                return None
            kind = "symlink" if entry.kind == "symlink" else "file"
            return FileSide(path, kind, entry.mode, self.store.get(entry.oid))

        pairs = [
            (side(c.old_path or c.path, c.old), side(c.path, c.new))
            for c in self.changes
            if "dir" not in (c.old.kind if c.old else "", c.new.kind if c.new else "")
        ]  # git patches cannot carry folders (empty ones, or their modes)
        return render_patches(pairs, context=context)

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata diff --json`` prints."""
        return {
            "files": [f.to_json() for f in self.files],
            "files_changed": self.files_changed,
            "insertions": self.insertions,
            "deletions": self.deletions,
        }


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
            "changed_paths": [f.path for f in self.diff.files],
            "warnings": self.warnings,
        }


@dataclass
class RewindResult:
    """What ``rewind`` or ``restore`` did."""

    event: Event
    target: Point
    auto_save: Event | None
    restored_paths: list[str]
    skipped_paths: list[str]

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata rewind --json`` prints."""
        return {
            "event_id": self.event.id,
            "target_event_id": self.target.event.id if self.target.event else None,
            "target_snapshot_id": self.target.snapshot_id,
            "auto_save_event_id": self.auto_save.id if self.auto_save else None,
            "restored_paths": self.restored_paths,
            "skipped_paths": self.skipped_paths,
        }


@dataclass
class StatusResult:
    """The working tree against HEAD."""

    head: Event | None
    changes: list[FileDiff]
    warnings: list[str]
    pending_recovery: bool = False

    @property
    def clean(self) -> bool:
        """True when the working tree equals HEAD."""
        return not self.changes

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata status --json`` prints."""
        return {
            "head": self.head.id if self.head else None,
            "head_snapshot_id": self.head.snapshot_ref if self.head else None,
            "clean": self.clean,
            "changes": [
                {"path": c.path, "status": c.status, "old_path": c.old_path} for c in self.changes
            ],
            "warnings": self.warnings,
        }


# -- the facade ----------------------------------------------------------------


class Repository:
    """A workspace and its repository.

    Open one with :meth:`init`, :meth:`open` or :meth:`find`. ``clock`` returns
    milliseconds since the epoch; ``rng`` makes event ids; both are injectable
    so ledgers are byte-stable in tests.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        author: Author | None = None,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        progress: Callable[[int, int], None] | None = None,
        monitor: ChangeMonitor | None = None,
    ) -> None:
        self.layout = layout
        #: an in-process change monitor to ask instead of the watcher's socket
        self.monitor = monitor
        #: the newest scan (``folders_listed``, ``watcher``: how the watcher was used)
        self.last_scan: ScanResult | None = None
        #: called with (done, total) during long scans; the CLI draws a progress line
        self.progress = progress
        self.config = load_config(layout)
        self.root = layout.workspace
        self.author = author or Author("unknown", "human")
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._rng = rng or random.Random()
        self.objects: ObjectStore = DiskObjectStore(layout.objects)
        self._lock = WriteLock(layout.lock)
        self._last_ms = 0
        #: run-specific ignore patterns (``WorkspaceOptions.ignore``), set while a run records
        self.extra_ignore: tuple[str, ...] = ()
        self.ledger = Ledger(self._open_driver(), clock=self._now, rng=self._rng)
        if any(layout.journal.glob("*.json")):
            with self._writing():
                pass

    def _open_driver(self, *, writer: bool = False, kind: str | None = None) -> LedgerDriver:
        kind = kind or self.config.ledger_driver
        if kind == "jsonl":
            from strata.ledger.drivers.jsonl import JsonlDriver

            folder = self.layout.repo / "ledger"
            if not (folder / "ledger.json").exists():
                with self._lock:
                    if not (folder / "ledger.json").exists():
                        JsonlDriver(folder, create=True, writer=True).close()
            return JsonlDriver(folder, writer=writer)
        from strata.ledger.drivers.sqlite import SqliteDriver
        from strata.ledger.migrate import ledger_format, migrate_v1

        path = self.layout.ledger
        if not path.exists():
            with self._lock:
                return SqliteDriver(path, create=True)
        if ledger_format(path) == 1:
            with self._lock:
                if ledger_format(path) == 1:
                    migrate_v1(path)
        return SqliteDriver(path)

    # -- opening ---------------------------------------------------------------

    @classmethod
    def init(
        cls,
        path: Path | str,
        *,
        store: Path | str | None = None,
        ledger: str = "sqlite",
        **kwargs: Any,
    ) -> Repository:
        """Create (or reopen: init is idempotent) the repository of the workspace ``path``.

        ``ledger`` picks the ledger driver of a new repository: ``sqlite`` or ``jsonl``.
        """
        layout, _ = create_layout(Path(path), store=Path(store) if store else None, ledger=ledger)
        return cls(layout, **kwargs)

    @classmethod
    def open(cls, path: Path | str, **kwargs: Any) -> Repository:
        """Open the repository of the workspace that contains ``path``."""
        return cls(find_layout(Path(path)), **kwargs)

    find = open

    @classmethod
    def open_for_run(cls, path: Path | str, *, strategy: str = "auto", **kwargs: Any) -> Repository:
        """The repository a run in ``path`` records into.

        The workspace's own; else, in a git work tree, one kept inside ``.git``
        (made on first use) for the git backend; else ``NotARepository``.
        """
        from strata.runs.flow import open_for_run

        return open_for_run(Path(path), strategy=strategy, **kwargs)

    def close(self) -> None:
        """Release the ledger and the object store's open files."""
        self.ledger.close()
        if isinstance(self.objects, DiskObjectStore):
            self.objects.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------

    def writing(self) -> Any:
        """Hold the repository's write lock (for maintenance commands)."""
        return self._writing()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock; first finish whatever an interrupted command left."""
        with self._lock:
            outermost = self._lock._depth == 1
            if outermost and self.ledger.driver.name == "jsonl":
                # only the lock holder repairs a torn last line and catches the index up
                self.ledger.driver.close()
                self.ledger.driver = self._open_driver(writer=True)
            try:
                if outermost:
                    self._recover()
                yield
            finally:
                if outermost and self.ledger.driver.name == "jsonl":
                    # the lock is about to go: back to a reader, which never writes
                    self.ledger.driver.close()
                    self.ledger.driver = self._open_driver(writer=False)

    def _guard_published(self, command: str, *, force: bool = False) -> None:
        """Refuse to move Published while a Draft is open, or while a run holds the lease.

        ``force`` overrides the run lease only; a Draft must be published or
        discarded first.
        """
        if self.layout.draft_state.exists():
            raise DraftOpen(command)
        if not force:
            from strata.runs.lease import active_leases

            held = active_leases(self.layout.runs)
            if held:
                raise WorkspaceBusy(command, [str(h.get("run_id")) for h in held])

    def _now(self) -> int:
        now = max(self._clock(), self._last_ms)
        self._last_ms = now
        return now

    def _new_event(
        self,
        action_type: str,
        *,
        author: Author | None = None,
        rationale: str = "",
        files: list[str] | tuple[str, ...] = (),
        snapshot_ref: SnapshotId | None = None,
        parent: EventId | None = None,
        data: dict[str, Any] | None = None,
        branch: str = "main",
        anchor: EventId | None = None,
        operation_id: str = "",
        scope: str = "project",
    ) -> Event:
        ms = self._now()
        event_id = new_event_id(self._rng)
        while self.ledger.driver.seek_event(event_id):  # a reused STRATA_SEED must not collide
            event_id = new_event_id(self._rng)
        return Event(
            id=event_id,
            ts=format_ts(ms),
            author=author or self.author,
            action_type=action_type,
            rationale=rationale,
            files=tuple(files),
            snapshot_ref=snapshot_ref,
            parent_event_id=parent,
            data=data or {},
            branch=branch,
            anchor_event_id=anchor,
            operation_id=operation_id,
            action_scope=scope,
        )

    def _event(self, event_id: str) -> Event:
        record = self.ledger.driver.seek_event(event_id)
        if record is None:
            raise CorruptRepository(f"event {event_id} is named but not in the ledger")
        return Event.from_json(record.body, seq=record.seq)

    def _begin(self, command: str, author: Author | None, **details: Any) -> Operation:
        return self.ledger.begin(command, (author or self.author).to_json(), **details)

    def _commit(self, op: Operation) -> None:
        self.ledger.commit(op)

    def _rules(self) -> IgnoreRules:
        return IgnoreRules.root(defaults=self.config.ignore_defaults, extra=self.extra_ignore)

    def _changes_since(self, token: str) -> Answer | None:
        """Ask the running watcher which paths changed since ``token`` (None: no watcher)."""
        if self.monitor is not None:
            return self.monitor.query(token)
        if not (self.layout.watch / "watch.sock").exists():
            return None
        from strata.store.watch import ask

        return ask(self.layout.watch, token)

    def _scan(self, *, hash_only: bool = False) -> tuple[ScanResult, Scanner, StatCache]:
        cache = StatCache(self.layout.statcache)
        store: ObjectStore = OverlayStore(self.objects) if hash_only else self.objects
        answer = self._changes_since(cache.token)
        scanner = Scanner(
            self.root,
            store,
            rules=self._rules(),
            cache=cache,
            hash_only=hash_only,
            progress=self.progress,
            changed=answer.changed if answer is not None else None,
        )
        result = scanner.scan()
        cache.token = answer.token if answer is not None else ""
        result.folders_listed = scanner.folders_listed
        if answer is None:
            result.watcher = "no watcher"
        elif scanner.incremental:
            result.watcher = "incremental"
        else:
            result.watcher = answer.reason or "the ignore rules changed"
        self.last_scan = result
        if hash_only:
            assert isinstance(store, OverlayStore)
            store.sources.update(scanner.sources)
        return result, scanner, cache

    def manifest(self, snapshot_id: SnapshotId) -> dict[str, Any]:
        """The manifest of a snapshot."""
        import json

        try:
            data = json.loads(self.objects.get(ObjectId(snapshot_id)))
        except ValueError:
            raise CorruptRepository(f"snapshot {snapshot_id} is not a manifest") from None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise CorruptRepository(f"snapshot {snapshot_id} has an unknown manifest format")
        return data

    def _tree_of(self, event: Event) -> ObjectId:
        assert event.snapshot_ref is not None
        return ObjectId(self.manifest(event.snapshot_ref)["tree"])

    def head(self) -> Event | None:
        """The event HEAD points at (None before the first snapshot)."""
        eid = self.ledger.view().head_event
        return self._event(eid) if eid else None

    def view(self) -> View:
        """Where HEAD, every branch and every bookmark point."""
        return self.ledger.view()

    def _head_tree(self) -> ObjectId:
        head = self.head()
        return self._tree_of(head) if head else EMPTY_TREE

    def _write_snapshot(self, tree: ObjectId, base: Event | None, **extra: Any) -> SnapshotId:
        import platform

        manifest = {
            "format": MANIFEST_FORMAT,
            "tree": tree,
            "base_event_id": base.id if base else None,
            "created": format_ts(self._now()),
            "env": {
                "python": platform.python_version(),
                "os": f"{platform.system()} {platform.release()}",
                "strata": __version__,
            },
            "tools": {},
            **({"ignore_extra": list(self.extra_ignore)} if self.extra_ignore else {}),
            **extra,
        }
        data = dumps(manifest).encode()
        oid = self.objects.put(data)
        return SnapshotId(oid)

    # -- snapshot ----------------------------------------------------------------

    def snapshot(
        self,
        message: str = "",
        *,
        author: Author | None = None,
        action_type: str = "snapshot",
        data: dict[str, Any] | None = None,
        operation: str | None = None,
        scope: str = "project",
        bookmark: str | None = None,
    ) -> SnapshotResult:
        """Record the working tree; no event when nothing changed since HEAD.

        ``operation`` groups events of one semantic action under one id;
        ``scope`` is its ``action_scope``; ``bookmark`` names the result.
        """
        from strata.ledger.events import ACTION_SCOPES

        if scope not in ACTION_SCOPES:
            raise UsageError(f"unknown scope {scope!r}; use one of {', '.join(ACTION_SCOPES)}")
        if bookmark is not None:
            check_ref_name(bookmark, what="bookmark")
        with self._writing():
            if bookmark is not None and bookmark in self.view().bookmarks:
                raise UsageError(f"bookmark {bookmark!r} exists", hint="pick another name")
            result, _ = self._snapshot(
                message,
                author=author,
                action_type=action_type,
                data=data,
                operation=operation,
                scope=scope,
                bookmark=bookmark,
            )
            return result

    def _branch_for_new_state(self, view: View) -> str:
        """The branch the next state event goes on: HEAD's, or a new one if HEAD is not its tip."""
        if not view.detached:
            return view.head_branch
        if view.head_branch not in view.branches:
            return view.head_branch  # named by 'rewind --branch'
        base = (
            view.head_branch.rsplit("-", 1)[0]
            if view.head_branch[-1:].isdigit()
            else view.head_branch
        )
        n = 2
        while f"{base}-{n}" in view.branches:
            n += 1
        return f"{base}-{n}"

    def _snapshot(
        self,
        message: str,
        *,
        author: Author | None,
        action_type: str,
        data: dict[str, Any] | None = None,
        operation: str | None = None,
        scope: str = "project",
        bookmark: str | None = None,
    ) -> tuple[SnapshotResult, ScanResult]:
        scan, scanner, cache = self._scan()
        result = self._record_tree(
            scan.tree,
            message,
            author=author,
            action_type=action_type,
            data=data,
            operation=operation,
            scope=scope,
            bookmark=bookmark,
            lines=scanner.lines,
        )
        result.warnings = scan.warnings
        if result.event is not None or not scan.unchanged:
            cache.replace(scan.dirs, started_ns=scan.started_ns, inherited=scan.inherited)
            cache.save()
        return result, scan

    def _record_tree(
        self,
        tree: ObjectId,
        message: str,
        *,
        author: Author | None,
        action_type: str,
        data: dict[str, Any] | None = None,
        operation: str | None = None,
        scope: str = "project",
        bookmark: str | None = None,
        lines: dict[ObjectId, int | None] | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> SnapshotResult:
        """Record ``tree`` (already stored) as a state event; none when it is HEAD's tree."""
        head = self.head()
        head_tree = self._tree_of(head) if head else EMPTY_TREE
        if head is not None and tree == head_tree:
            self.objects.flush()  # the stat cache may only name durable blobs
            return SnapshotResult(None, head.snapshot_ref, None)
        diff = self._diff_trees(head_tree, tree, self.objects, lines=lines)
        snapshot_id = self._write_snapshot(tree, head, **(manifest or {}))
        self.objects.flush()  # blobs, trees and manifest are durable before the event
        op = self._begin(action_type, author)
        branch = self._branch_for_new_state(op.before)
        impacts = [
            {
                "path": f.path,
                "kind": "binary",
                "bytes_changed": f.bytes_changed,
                "hash_before": f.hash_before,
                "hash_after": f.hash_after,
                "summary": f"{f.status}, {f.bytes_changed} bytes changed",
            }
            for f in diff.files
            if f.binary
        ]
        event = self._new_event(
            action_type,
            author=author,
            rationale=message,
            files=[f.path for f in diff.files],
            snapshot_ref=snapshot_id,
            parent=head.id if head else None,
            data={
                "files_changed": diff.files_changed,
                "insertions": diff.insertions,
                "deletions": diff.deletions,
                **(data or {}),
            },
            branch=branch,
            operation_id=operation or op.id,
            scope=scope,
        )
        if impacts:
            event = Event(**{**event.__dict__, "artifact_impacts": tuple(impacts)})
        op.add_event(event.to_json())
        branches = {**op.before.branches, branch: event.id}
        bookmarks = dict(op.before.bookmarks)
        if bookmark is not None:
            bookmarks[bookmark] = Bookmark(event.id)
        op.after = View(branch, event.id, branches, bookmarks)
        self._commit(op)
        return SnapshotResult(self._event(event.id), snapshot_id, diff)

    # -- refs --------------------------------------------------------------------

    def resolve(self, ref: str) -> Point:
        """Resolve a ref: an event id, a snapshot id (or unique prefixes), HEAD, HEAD~N, REF~N."""
        ref = ref.strip()
        if not ref:
            raise UnknownRef(ref)
        m = _HEAD_RE.fullmatch(ref)
        if m:
            point = self.resolve(m.group("base"))
            steps = int(m.group("n") or "1")
            event = point.event
            for _ in range(steps):
                if event is None or event.parent_event_id is None:
                    raise UnknownRef(
                        ref, hint=f"{m.group('base')} has fewer than {steps} ancestors"
                    )
                event = self._event(event.parent_event_id)
            assert event is not None
            return self._point(event, ref)
        if ref in ("HEAD", "@"):
            head = self.head()
            if head is None:
                raise UnknownRef(ref, hint="nothing is recorded yet: run 'strata snapshot'")
            return self._point(head, ref)
        if ref.startswith("git:"):
            from strata.runs.git import resolve_git_ref

            return Point(resolve_git_ref(self, ref[4:]), None, None, ref)
        driver = self.ledger.driver
        if EVENT_PREFIX.fullmatch(ref):
            ids = driver.event_ids_with_prefix(ref)
            if len(ids) > 1:
                raise AmbiguousRef(ref, ids)
            if ids:
                event = self._event(ids[0])
                if event.snapshot_ref is None:
                    anchor = event.anchor_event_id or event.data.get("target_event_id")
                    if not anchor:
                        raise UnknownRef(
                            ref, hint=f"event {ids[0]} ({event.action_type}) records no files"
                        )
                    event = self._event(anchor)
                return self._point(event, ref)
        if HEX_PREFIX.fullmatch(ref):
            snaps = driver.snapshot_ids_with_prefix(ref)
            if len(snaps) > 1:
                raise AmbiguousRef(ref, snaps)
            if snaps:
                found = driver.newest_with_snapshot(snaps[0])
                assert found is not None
                return self._point(Event.from_json(found.body, seq=found.seq), ref)
        view = self.view()
        if ref in view.branches:
            return self._point(self._event(view.branches[ref]), ref)
        if ref in view.bookmarks:
            return self._point(self._event(view.bookmarks[ref].target), ref)
        raise UnknownRef(ref)

    def _point(self, event: Event, label: str) -> Point:
        assert event.snapshot_ref is not None
        return Point(self._tree_of(event), event.snapshot_ref, event, label)

    # -- history -----------------------------------------------------------------

    def history(
        self,
        *,
        path: str | None = None,
        author: str | None = None,
        limit: int | None = None,
        branch: str | None = None,
        operation: str | None = None,
        author_kind: str | None = None,
        action: str | None = None,
    ) -> list[Event]:
        """Events, newest first, filtered through the ledger's index."""
        if limit is not None and limit < 1:
            raise UsageError("--limit must be at least 1")
        where = EventFilter(
            branch=branch,
            operation_id=operation,
            author=author,
            author_kind=author_kind,
            action_type=action,
            path=path or None,
        )
        return [
            Event.from_json(r.body, seq=r.seq)
            for r in self.ledger.driver.find_events(where, limit=limit)
        ]

    # -- diff --------------------------------------------------------------------

    def diff(self, a: str, b: str | None = None, *, paths: list[str] | None = None) -> DiffResult:
        """Differences from ref ``a`` to ref ``b`` (the working tree when ``b`` is None)."""
        left = self.resolve(a)
        if b is None:
            scan, scanner, _ = self._scan(hash_only=True)
            store: ObjectStore = scanner.store
            right_tree = scan.tree
        else:
            store = self.objects
            right_tree = self.resolve(b).tree
        return self._diff_trees(left.tree, right_tree, store, paths=paths)

    def _diff_trees(
        self,
        a: ObjectId,
        b: ObjectId,
        store: ObjectStore,
        *,
        paths: list[str] | None = None,
        lines: dict[ObjectId, int | None] | None = None,
        stats: bool = True,
    ) -> DiffResult:
        changes = diff_trees(store, a, b, paths=paths)
        files = [self._file_diff(store, c, lines or {}, stats) for c in changes]
        return DiffResult(store, changes, files)

    def _file_diff(
        self, store: ObjectStore, c: Change, lines: dict[ObjectId, int | None], stats: bool
    ) -> FileDiff:
        old, new = c.old, c.new
        ins = dels = changed = 0
        binary = False
        is_dir = (old is not None and old.kind == "dir") or (new is not None and new.kind == "dir")
        if stats and not is_dir and (old is None or new is None or old.oid != new.oid):
            if old is None and new is not None and new.oid in lines:
                count = lines[new.oid]
                binary = count is None
                ins = count or 0
                changed = new.size
            else:
                from strata.diff.patch import line_stats

                before = store.get(old.oid) if old else None
                after = store.get(new.oid) if new else None
                st = line_stats(before, after)
                ins, dels, binary = st.insertions, st.deletions, st.binary
                changed = _bytes_changed(before or b"", after or b"")
        return FileDiff(
            path=display_path(c.path) + ("/" if is_dir else ""),
            status=c.status,
            old_path=display_path(c.old_path) if c.old_path else None,
            insertions=ins,
            deletions=dels,
            binary=binary,
            bytes_changed=changed,
            hash_before=old.oid if old else None,
            hash_after=new.oid if new else None,
            mode_before=old.mode if old else None,
            mode_after=new.mode if new else None,
        )

    # -- status ------------------------------------------------------------------

    def status(self) -> StatusResult:
        """The working tree against HEAD (stores nothing)."""
        scan, scanner, _ = self._scan(hash_only=True)
        head = self.head()
        head_tree = self._tree_of(head) if head else EMPTY_TREE
        diff = self._diff_trees(head_tree, scan.tree, scanner.store, stats=False)
        from strata.workbench.draft import draft_reminder

        reminder = draft_reminder(self, now_ms=self._clock())
        return StatusResult(head, diff.files, scan.warnings + ([reminder] if reminder else []))

    # -- rewind and restore --------------------------------------------------------

    def rewind(
        self,
        ref: str,
        *,
        author: Author | None = None,
        branch: str | None = None,
        force: bool = False,
    ) -> RewindResult:
        """Move HEAD and the files to ``ref``; unrecorded work is auto-saved first.

        Branch tips do not move. The next state event recorded from a point that
        is not its branch's tip starts a new branch: ``branch`` names it.
        ``force`` rewinds even while a run holds the workspace lease.
        """
        if branch is not None:
            check_ref_name(branch, what="branch")
        with self._writing():
            self._guard_published("rewind", force=force)
            target = self.resolve(ref)  # refs are resolved before the auto-save
            if branch is not None and branch in self.view().branches:
                raise UsageError(f"branch {branch!r} exists", hint="pick another name")
            return self._restore(target, ref, paths=None, author=author, new_branch=branch)

    def restore(
        self, ref: str, paths: list[str], *, author: Author | None = None, force: bool = False
    ) -> RewindResult:
        """Put ``paths`` back as they were at ``ref``; HEAD does not move.

        ``force`` restores even while a run holds the workspace lease.
        """
        if not paths:
            raise UsageError("name at least one path to restore (or use 'strata rewind')")
        with self._writing():
            self._guard_published("restore", force=force)
            target = self.resolve(ref)
            for p in paths:
                if (
                    p
                    and lookup(self.objects, target.tree, p) is None
                    and lookup(self.objects, self._head_tree(), p) is None
                ):
                    raise PathNotFound(p, ref)
            return self._restore(target, ref, paths=paths, author=author)

    @staticmethod
    def _branch_at(view: View, event_id: str) -> str:
        """The branch HEAD should name when it moves to ``event_id``."""
        if view.branches.get(view.head_branch) == event_id:
            return view.head_branch
        tips = sorted(name for name, tip in view.branches.items() if tip == event_id)
        return tips[0] if tips else view.head_branch

    def _restore(
        self,
        target: Point,
        ref: str,
        *,
        paths: list[str] | None,
        author: Author | None,
        new_branch: str | None = None,
        command: str | None = None,
        after_view: View | None = None,
        details: dict[str, Any] | None = None,
    ) -> RewindResult:
        before_head = self.head()
        action_type = command or ("rewind" if paths is None else "restore")
        auto, scan = self._snapshot(
            f"auto-save before {action_type}"
            + ("" if command in ("undo", "redo") else f" to {ref}"),
            author=SYSTEM,
            action_type="auto_save",
        )
        current = scan.tree  # every path as just captured, with its stat for the no-loss checks
        from strata.store.materialize import Journal, apply_actions, journal_record, plan_restore

        actions = plan_restore(
            self.objects, current, target.tree, stat_of=scan.stat_of, paths=paths or None
        )
        op = self._begin(action_type, author)
        anchor = target.event.id if target.event else None
        if after_view is not None:
            op.after = after_view
        elif paths is None and anchor is not None:
            head_branch = new_branch or self._branch_at(op.before, anchor)
            op.after = moved(op.before, head_branch=head_branch, head_event=anchor)
        op.details = {
            **(details or {}),
            "tree_before": current,
            "tree_after": target.tree if paths is None else None,
            **(
                {"restore": {"event": anchor, "paths": [display_path(p) for p in paths]}}
                if paths
                else {}
            ),
        }
        event = self._new_event(
            action_type,
            author=author,
            rationale=f"{action_type} to {ref}",
            files=sorted(
                {display_path(a.path) for a in actions if a.op in ("write", "symlink", "remove")}
            ),
            data={
                "target_event_id": anchor,
                "target_snapshot_id": target.snapshot_id,
                "from_event_id": before_head.id if before_head else None,
                "auto_save_event_id": auto.event.id if auto.event else None,
                **({"paths": [display_path(p) for p in paths]} if paths else {}),
            },
            branch=op.after.head_branch,
            anchor=EventId(anchor) if anchor else None,
            operation_id=op.id,
        )
        body = op.add_event(event.to_json())
        journal = Journal(self.layout.journal, op.id)
        journal.write(journal_record(actions, operation=op.to_json()))
        report = apply_actions(self.objects, self.root, actions)
        skipped = [display_path(p) for p in report.skipped]
        body["data"]["skipped_paths"] = skipped
        self._commit(op)
        journal.remove()
        restored = [display_path(p) for p in report.restored_paths]
        return RewindResult(self._event(event.id), target, auto.event, restored, skipped)

    def _recover(self) -> None:
        """Finish every journal an interrupted command left (lock held)."""
        from strata.store.materialize import Journal, actions_from_record, apply_actions

        for path, record in Journal.pending(self.layout.journal):
            actions = actions_from_record(record)
            report = apply_actions(self.objects, self.root, actions, recovering=True)
            op = Operation.from_json(record["operation"])
            if op.events and self.ledger.driver.seek_event(op.events[0]["id"]) is None:
                for body in op.events:
                    body.setdefault("data", {}).update(
                        recovered=True, skipped_paths=[display_path(p) for p in report.skipped]
                    )
                self._commit(op)
            if record.get("ends_draft"):  # an interrupted publish: its Draft ends with it
                from strata.workbench.draft import end_draft

                end_draft(self.layout.draft_state)
            path.unlink(missing_ok=True)
        if any(self.layout.runs.glob("*.lease")):
            from strata.runs.recovery import recover_runs

            recover_runs(self)

    # -- instrumented runs ------------------------------------------------------------

    def execute_run(
        self,
        target: Sequence[str] | Callable[[], Any],
        *,
        workspace: WorkspaceOptions | None = None,
        author: Author | None = None,
        label: str = "",
        cwd: Path | None = None,
        around: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> RunResult:
        """Run ``target`` (an argv list or a callable) between two snapshots of the workspace.

        See :mod:`strata.runs.flow`: snapshot ``before``, execute, snapshot
        ``after`` (``after_failure`` when it fails), diff, optional rollback.
        A callable's exception is kept in the result (``raise_error()``).
        """
        from strata.runs.flow import execute_run

        return execute_run(
            self, target, workspace=workspace, author=author, label=label, cwd=cwd, around=around
        )

    run_once = execute_run

    # -- the ledger itself ------------------------------------------------------------

    def convert_ledger(self, to: str) -> dict[str, Any]:
        """Copy every record to the ``to`` driver (same ids, same chain head) and switch to it.

        The old store is kept beside the new one (``ledger.db.old`` or
        ``ledger.old/``) until the next conversion.
        """
        from strata.layout import LEDGER_DRIVERS, set_ledger_driver

        if to not in LEDGER_DRIVERS:
            raise UsageError(
                f"unknown ledger driver {to!r}; use one of {', '.join(LEDGER_DRIVERS)}"
            )
        with self._writing():
            source = self.ledger.driver
            if source.name == to:
                raise UsageError(f"the ledger already uses the {to} driver")
            head = self.ledger.chain_head()
            target_path = self.layout.ledger if to == "sqlite" else self.layout.repo / "ledger"
            old_target = target_path.with_name(target_path.name + ".old")
            if target_path.exists():
                _remove(old_target)
                os.replace(target_path, old_target)
            target = self._open_driver(writer=True, kind=to)
            batch: list[Any] = []
            for record in source.scan():
                batch.append(record)
                if len(batch) >= 1000:
                    target.append(batch)
                    batch = []
            target.append(batch)
            last = target.last()
            if (last.hash if last else "") != head or target.count() != source.count():
                target.close()
                raise CorruptRepository(
                    "the converted ledger differs from the original; kept the original"
                )
            set_ledger_driver(self.layout, to)
            source.close()
            old_source = (
                self.layout.ledger if source.name == "sqlite" else self.layout.repo / "ledger"
            )
            backup = old_source.with_name(old_source.name + ".old")
            _remove(backup)
            os.replace(old_source, backup)
            for suffix in ("-wal", "-shm"):
                extra = old_source.with_name(old_source.name + suffix)
                if extra.exists():
                    os.replace(extra, backup.with_name(backup.name + suffix))
            self.ledger.driver = target
            self.config = load_config(self.layout)
            return {"driver": to, "records": target.count(), "head": head, "backup": str(backup)}

    # -- branches and bookmarks -----------------------------------------------------

    def _view_op(self, command: str, after: View, author: Author | None, **details: Any) -> View:
        """Commit an operation that only moves refs."""
        op = self._begin(command, author, **details)
        op.after = after
        self._commit(op)
        return after

    def branch_create(self, name: str, ref: str = "HEAD", *, author: Author | None = None) -> str:
        """Create branch ``name`` at ``ref``; return the event id it points at."""
        check_ref_name(name, what="branch")
        with self._writing():
            view = self.view()
            if name in view.branches:
                raise UsageError(f"branch {name!r} exists")
            point = self.resolve(ref)
            assert point.event is not None
            self._view_op(
                "branch create",
                moved(view, branches={**view.branches, name: point.event.id}),
                author,
                name=name,
            )
            return point.event.id

    def branch_delete(self, name: str, *, author: Author | None = None) -> str:
        """Remove the name ``name`` (its events stay); return where it pointed."""
        with self._writing():
            view = self.view()
            if name not in view.branches:
                raise UnknownRef(name, hint="see 'strata branch list'")
            if name == view.head_branch:
                raise UsageError(
                    f"branch {name!r} is HEAD's branch", hint="switch to another branch first"
                )
            branches = dict(view.branches)
            tip = branches.pop(name)
            self._view_op("branch delete", moved(view, branches=branches), author, name=name)
            return tip

    def branch_switch(
        self, name: str, *, author: Author | None = None, force: bool = False
    ) -> RewindResult:
        """Move HEAD to branch ``name`` and its files (unrecorded work is auto-saved first).

        ``force`` switches even while a run holds the workspace lease.
        """
        with self._writing():
            self._guard_published("switch branches", force=force)
            view = self.view()
            if name not in view.branches:
                raise UnknownRef(name, hint="see 'strata branch list'")
            target = self.resolve(name)
            after = moved(self.view(), head_branch=name, head_event=view.branches[name])
            return self._restore(
                target,
                name,
                paths=None,
                author=author,
                command="branch switch",
                after_view=after,
            )

    def bookmark(
        self,
        action: str,
        name: str,
        *,
        ref: str | None = None,
        new_name: str | None = None,
        author: Author | None = None,
    ) -> dict[str, Any]:
        """Change a bookmark: ``add``, ``move``, ``rename``, ``lock``, ``unlock`` or ``delete``."""
        with self._writing():
            view = self.view()
            marks = dict(view.bookmarks)
            current = marks.get(name)
            if action == "add":
                check_ref_name(name, what="bookmark")
                if current is not None:
                    raise UsageError(f"bookmark {name!r} exists", hint="use 'strata bookmark move'")
                point = self.resolve(ref or "HEAD")
                assert point.event is not None
                marks[name] = Bookmark(point.event.id)
            else:
                if current is None:
                    raise UnknownRef(name, hint="see 'strata bookmark list'")
                if current.locked and action in ("move", "rename", "delete"):
                    raise UsageError(
                        f"bookmark {name!r} is locked",
                        hint=f"run 'strata bookmark unlock {name}' first",
                    )
                if action == "move":
                    point = self.resolve(ref or "HEAD")
                    assert point.event is not None
                    marks[name] = Bookmark(point.event.id, current.locked)
                elif action == "rename":
                    assert new_name is not None
                    check_ref_name(new_name, what="bookmark")
                    if new_name in marks:
                        raise UsageError(f"bookmark {new_name!r} exists")
                    marks[new_name] = marks.pop(name)
                elif action in ("lock", "unlock"):
                    marks[name] = Bookmark(current.target, action == "lock")
                elif action == "delete":
                    del marks[name]
                else:
                    raise UsageError(f"unknown bookmark action {action!r}")
            self._view_op(f"bookmark {action}", moved(view, bookmarks=marks), author, name=name)
            shown = new_name if action == "rename" else name
            mark = marks.get(shown or name)
            return {
                "name": shown,
                "action": action,
                **(mark.to_json() if mark else {"deleted": True}),
            }

    # -- undo and redo -------------------------------------------------------------

    def undo(self, *, author: Author | None = None) -> dict[str, Any]:
        """Reverse the newest operation not yet undone, by appending its inverse."""
        with self._writing():
            target = self.ledger.undo_target()
            self._guard_draft_undo("undo", target)
            from strata.runs.undo import is_finished_run, undo_run

            if is_finished_run(target) and undo_run(self, target, author=author):
                return {"undid": target["id"], "command": target["command"], "ts": target["ts"]}
            view = View.from_json(target["view_before"])
            tree = (target.get("details") or {}).get("tree_before")
            self._apply_view("undo", view, tree, author, undid=target["id"])
            return {"undid": target["id"], "command": target["command"], "ts": target["ts"]}

    def redo(self, *, author: Author | None = None) -> dict[str, Any]:
        """Re-apply what the newest undo reversed."""
        with self._writing():
            undo_op = self.ledger.redo_target()
            original_id = undo_op["details"]["undid"]
            original = next(
                (op for op in self.ledger.operations() if op["id"] == original_id), None
            )
            if original is None:
                raise CorruptRepository(f"operation {original_id} is missing from the ledger")
            self._guard_draft_undo("redo", original)
            view = View.from_json(original["view_after"])
            details = original.get("details") or {}
            tree = details.get("tree_after")
            if tree is None and (details.get("restore") or undo_op["details"].get("run_id")):
                tree = undo_op["details"].get("tree_before")  # the files the undo replaced
            self._apply_view("redo", view, tree, author, redid=original_id, undo=undo_op["id"])
            return {"redid": original_id, "command": original["command"]}

    def _guard_draft_undo(self, command: str, op: dict[str, Any]) -> None:
        """While a Draft is open, refuse to undo or redo what moves Published (or the Draft)."""
        details = op.get("details") or {}
        before, after = View.from_json(op["view_before"]), View.from_json(op["view_after"])
        moves = details.get("tree_before") is not None or before.head_event != after.head_event
        moves = moves or op["command"] in ("draft start", "draft revision")  # the open Draft's
        if moves and self.layout.draft_state.exists():
            raise DraftOpen(f"{command} '{op['command']}'")

    # -- the Draft and checkpoints ---------------------------------------------------

    def draft(self, *, create: bool = True, author: Author | None = None) -> Draft:
        """The open Draft; when none is open, a new one (or :class:`NoDraft` if not ``create``)."""
        from strata.workbench.draft import current_draft, open_draft, start_draft

        found = open_draft(self)
        if found is not None:
            return found
        return start_draft(self, author=author) if create else current_draft(self)

    @property
    def checkpoints(self) -> Checkpoints:
        """The checkpoints of Published: list, create, restore."""
        from strata.workbench.checkpoints import Checkpoints

        return Checkpoints(self)

    def _apply_view(
        self, command: str, view: View, tree: str | None, author: Author | None, **details: Any
    ) -> None:
        if tree is None:
            self._view_op(command, view, author, **details)
            return
        event = self._event(view.head_event) if view.head_event else None
        target = Point(ObjectId(tree), event.snapshot_ref if event else None, event, command)
        self._restore(
            target,
            command,
            paths=None,
            author=author,
            command=command,
            after_view=view,
            details=details,
        )

    def operations(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The operation log, newest first."""
        return self.ledger.operations(limit=limit)

    # -- reading files -------------------------------------------------------------

    def show(self, ref: str, path: str) -> bytes:
        """The bytes of ``path`` as it was at ``ref`` (a symlink's target for a link)."""
        point = self.resolve(ref)
        entry = lookup(self.objects, point.tree, path.strip("/"))
        if entry is None:
            raise PathNotFound(path, ref)
        if entry.kind == "dir":
            names = [
                e.name + ("/" if e.kind == "dir" else "")
                for e in read_tree(self.objects, entry.oid)
            ]
            return "".join(n + "\n" for n in names).encode()
        return self.objects.get(entry.oid)

    def export(self, ref: str, target: Path | str) -> int:
        """Write the files of ``ref`` into an empty or new folder; return how many files."""
        point = self.resolve(ref)
        from strata.store.materialize import export_tree

        return export_tree(self.objects, point.tree, Path(target))

    def cat(self, oid: str) -> tuple[str, Any]:
        """An object by id or unique prefix.

        Returns ``("tree", entries)``, ``("snapshot", manifest)`` or ``("blob", bytes)``.
        """
        full = self._object_id(oid)
        data = self.objects.get(full)
        try:
            return "tree", decode_tree(data, full)
        except CorruptRepository:
            pass
        if data.startswith(b'{"') and b'"format":' in data:
            try:
                return "snapshot", self.manifest(SnapshotId(full))
            except CorruptRepository:
                pass
        return "blob", data

    def _object_id(self, text: str) -> ObjectId:
        if is_object_id(text):
            return ObjectId(text)
        if not HEX_PREFIX.fullmatch(text):
            point = self.resolve(text)
            return ObjectId(point.snapshot_id or point.tree)
        folder = self.layout.objects / text[:2]
        matches = [text[:2] + n for n in os.listdir(folder)] if folder.is_dir() else []
        matches = [m for m in matches if m.startswith(text) and is_object_id(m)]
        if len(matches) > 1:
            raise AmbiguousRef(text, matches)
        if not matches:
            raise UnknownRef(
                text, hint="give an object id (see 'strata cat' of a snapshot or tree)"
            )
        return ObjectId(matches[0])

    # -- check ---------------------------------------------------------------------

    def check(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Verify every object hash and every reference; return the problems found."""
        problems: list[str] = []
        broken = self.ledger.verify()
        if broken:
            problems.append(f"ledger: {broken}")
        problems += self.ledger.driver.verify_index()
        if isinstance(self.objects, DiskObjectStore):
            problems += self.objects.pack_problems()
        seen: set[str] = set()
        stored: set[str] = set()
        for oid in self.objects.ids():
            stored.add(oid)
            try:
                self.objects.get(oid)
            except StrataError as exc:
                problems.append(str(exc))
        if progress:
            progress(f"{len(stored)} objects verified")

        def need(oid: str, what: str) -> bool:
            if oid not in stored:
                problems.append(f"{what}: object {oid} is missing")
                return False
            return True

        def walk(tree: str, where: str) -> None:
            if tree in seen:
                return
            seen.add(tree)
            if not need(tree, f"tree of {where}"):
                return
            try:
                entries = read_tree(self.objects, ObjectId(tree))
            except StrataError as exc:
                problems.append(f"{where}: {exc}")
                return
            for e in entries:
                if e.name in ("", ".", "..") or "/" in e.name or "\0" in e.name:
                    problems.append(f"tree {tree}: invalid name {e.name!r}")
                if e.kind == "dir":
                    walk(e.oid, f"{where}/{e.name}")
                elif e.oid not in seen:
                    seen.add(e.oid)
                    need(e.oid, f"{where}/{e.name}")

        from strata.ledger.schemas import problems as schema_problems

        ids: set[str] = set()
        for record in self.ledger.driver.scan(kind="event"):
            found = schema_problems("ChangeEvent", record.body)
            for problem in found:
                problems.append(f"record {record.seq} (event): {problem}")
            ids.add(str(record.body.get("id", "")))
            try:
                event = Event.from_json(record.body, seq=record.seq)
            except (StrataError, KeyError, TypeError, ValueError) as exc:
                if not found:  # the schema problems already say what is wrong
                    problems.append(f"record {record.seq} (event): unreadable ({exc})")
                continue
            if event.anchor_event_id and event.anchor_event_id not in ids:
                problems.append(f"event {event.id}: anchor {event.anchor_event_id} is unknown")
            if event.parent_event_id and event.parent_event_id not in ids:
                problems.append(f"event {event.id}: parent {event.parent_event_id} is unknown")
            if event.snapshot_ref:
                if not need(event.snapshot_ref, f"snapshot of event {event.id}"):
                    continue
                try:
                    manifest = self.manifest(event.snapshot_ref)
                    tree = manifest["tree"]
                    for problem in schema_problems("Snapshot", manifest):
                        problems.append(f"snapshot {event.snapshot_ref}: {problem}")
                except StrataError as exc:
                    problems.append(f"event {event.id}: {exc}")
                    continue
                walk(tree, f"event {short(event.id)}")
        view = self.view()
        named = (
            [("HEAD", view.head_event)]
            + [(f"branch {n}", t) for n, t in view.branches.items()]
            + [(f"bookmark {n}", b.target) for n, b in view.bookmarks.items()]
        )
        for name, target in named:
            if target is not None and target not in ids:
                problems.append(f"{name} points at unknown event {target}")
        from strata.store.materialize import Journal

        for path, _ in Journal.pending(self.layout.journal):
            problems.append(f"an interrupted change is pending: {path.name}")
        return problems


def _remove(path: Path) -> None:
    """Delete a file or folder if it exists."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _bytes_changed(a: bytes, b: bytes) -> int:
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
