"""The core of a repository: where the object store and the ledger meet.

:class:`Core` owns the open stores, the write lock, the clock and the random
source. Every writing command goes through :meth:`Core.transaction`, which
takes the write lock, finishes whatever an interrupted command left, and
commits in the one safe order (objects, then the ledger, then the journal is
dropped). Readers use :meth:`resolve`, :meth:`event`, :meth:`head`,
:meth:`view`, :meth:`tree_of` and :meth:`diff_trees`; they never take the lock.
A Core may be shared by threads: each reads through its own ledger driver,
and writers take turns on :attr:`Core.mutex` and the write lock.

Feature packages (``runs/``, ``workbench/``) are clients of this class and of
the other public names of :mod:`strata.core`; they never reach into private
members. The library reads no environment variable: the clock, the random
source and the author are arguments.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import platform
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata._version import __version__
from strata.core.journals import journals_left, recover
from strata.core.pruning import pruned_error
from strata.core.refs import resolve_ref
from strata.core.results import (
    DiffResult,
    FileDiff,
    Point,
    RecordedDiff,
    SnapshotResult,
    bytes_changed,
)
from strata.core.workspace import Workspace
from strata.diff.tree import Change, added_leaves, diff_trees
from strata.errors import (
    CorruptRepository,
    DiskFull,
    DraftOpen,
    JournalError,
    ObjectMissing,
    RepositoryError,
    RepositoryLocked,
    StrataError,
    UnsupportedFormat,
    UsageError,
    WorkspaceBusy,
)
from strata.ids import EventId, ObjectId, SnapshotId, new_event_id
from strata.layout import Layout, WriteLock, load_config
from strata.ledger.driver import LedgerDriver
from strata.ledger.events import ACTION_SCOPES, Author, Event, EventType, dumps, format_ts
from strata.ledger.ledger import Bookmark, Ledger, Operation, View, moved
from strata.sandbox.paths import display_path
from strata.store.ignore import IgnoreRules
from strata.store.objects import DiskObjectStore, ObjectStore
from strata.store.tree import EMPTY_TREE, TreeEntry
from strata.watch import served

if TYPE_CHECKING:
    from strata.core.groups import Group
    from strata.core.results_ops import OperationRecord
    from strata.core.workspace import Scan
    from strata.store.large import LargeFiles
    from strata.store.materialize import Action, Journal, RestoreReport
    from strata.store.sealing import TraceCipher
    from strata.watch.monitor import Answer, ChangeMonitor

MANIFEST_FORMAT = 1
#: the Draft's files, below ``Layout.draft`` (kept between Drafts)
DRAFT_FILES = "files"
#: the author of what Strata records on its own (auto-saves)
SYSTEM = Author("strata", "system")
#: the rationale of the event that records, before an agent's call, what changed without it
OUTSIDE_AGENT = "changes made outside the agent"


class Core:
    """An open repository: stores, ledger, lock, clock and random source.

    ``clock`` returns milliseconds since the epoch; ``rng`` makes event ids;
    both are injectable so ledgers are byte-stable in tests.
    """

    def __init__(
        self,
        layout: Layout,
        *,
        author: Author | None = None,
        person: Author | None = None,
        secrets: Sequence[str] = (),
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        progress: Callable[[int, int], None] | None = None,
        monitor: ChangeMonitor | None = None,
        ref_schemes: dict[str, Callable[[Core, str], ObjectId]] | None = None,
        recoverers: tuple[Callable[[Core], object], ...] = (),
        group_finishers: dict[str, Callable[[Core, dict[str, Any]], object]] | None = None,
        undo_handlers: tuple[Callable[[Transaction, OperationRecord], bool], ...] = (),
        publish_hooks: tuple[Callable[[Transaction, Event], None], ...] = (),
        upkeepers: tuple[Callable[[Core], object], ...] = (),
    ) -> None:
        self.layout = layout
        #: called with the write lock held when a command's writing ends (the storage
        #: budget, the store's repacking); a failure there never fails the command
        self.upkeepers = upkeepers
        #: ``SCHEME:VALUE`` refs a feature package resolves (``git`` → a commit's tree)
        self.ref_schemes = dict(ref_schemes or {})
        #: called with the write lock held after interrupted journals are finished
        #: (a feature's own clean-up: runs whose strata was killed)
        self.recoverers = recoverers
        #: by a group lease's ``kind``: what records the rest of a group whose process died,
        #: before the core closes it (:func:`strata.core.groups.recover_groups`)
        self.group_finishers = dict(group_finishers or {})
        #: asked first by undo: a handler that returns True has reversed the operation itself
        #: (a finished run is undone as one step)
        self.undo_handlers = undo_handlers
        #: called inside every publish's transaction with its ``publish`` event (the
        #: Workshop adds its checkpoint card to each conversation that edited the Draft)
        self.publish_hooks = publish_hooks
        #: an in-process change monitor to ask instead of the watcher's socket
        self.monitor = monitor
        #: called with (done, total) during long scans; the CLI draws a progress line
        self.progress = progress
        self.config = load_config(layout)
        self.root = layout.workspace
        self.author = author or Author("unknown", "human")
        #: the group every transaction opened meanwhile joins (see :meth:`grouped`)
        self.group: Group | None = None
        #: the person whose workspace this is: the author of what changed outside an
        #: agent's call, recorded before it (the default author, when that is a person)
        self.person = person or (
            self.author if self.author.kind == "human" else Author("unknown", "human")
        )
        self.clock: Callable[[], int] = clock or (lambda: time.time_ns() // 1_000_000)
        self.rng = rng or random.Random()
        self.objects: ObjectStore = DiskObjectStore(layout.objects)
        if isinstance(self.objects, DiskObjectStore):
            # what a trace Recorder writing here encrypts with, read when one starts
            self.objects.trace_cipher = lambda: self.trace_cipher
        self.lock = WriteLock(layout.lock)
        #: held by the thread that writes (with the write lock): writers of one process
        #: take turns; readers never take it
        self.mutex = threading.RLock()
        self._last_ms = 0
        #: run-specific ignore patterns (``WorkspaceOptions.ignore``), set while a run records
        self.extra_ignore: tuple[str, ...] = ()
        #: each thread reads through its own driver, opened on its first use
        self.ledger = Ledger(
            self.open_driver(),
            opener=self.open_driver,
            clock=self.now_ms,
            rng=self.rng,
            secrets=tuple(secrets),
        )
        # on a shared ledger each workspace keeps its own HEAD, named by machine and folder
        self.ledger.workspace = f"{platform.node()}:{layout.repo}"
        #: Published: the workspace's real files
        self.workspace = Workspace(
            self.root,
            objects=self.objects,
            cache_path=layout.statcache,
            rules=self.rules,
            changes=self.changes_since,
            large=self.large_files,
            progress=lambda done, total: self.progress(done, total) if self.progress else None,
            trash=layout.trash,
        )
        #: the folders this core scans, by the name the watcher knows them by (``""``:
        #: Published); a feature adds its own (the Draft's) on first use
        self.workspaces: dict[str, Workspace] = {"": self.workspace}
        #: why the journal an interrupted command left could not be finished on open
        #: (None: there was none, or it finished). Readers go on; writers raise it again
        #: until 'strata recover' finishes or abandons the journal.
        self.recovery_error: StrataError | None = None
        #: the groups closed as interrupted since it was opened (strata.core.groups.close_group)
        self.closed_groups: list[dict[str, Any]] = []
        if journals_left(layout):
            try:
                with self.writing():
                    pass
            except (JournalError, DiskFull, RepositoryLocked) as exc:
                self.recovery_error = exc

    # -- opening and closing -------------------------------------------------------

    def open_driver(
        self, *, writer: bool = False, kind: str | None = None, url: str | None = None
    ) -> LedgerDriver:
        """Open the ledger driver of the configured kind (or ``kind``; ``url``: PostgreSQL's)."""
        configured = kind is None  # another kind: a ledger convert makes a new one
        kind = kind or self.config.ledger_driver
        if kind == "postgresql":
            return self._open_shared_ledger(url or self.config.ledger_url or "", configured)
        if kind == "jsonl":
            from strata.ledger.drivers.jsonl import JsonlDriver

            folder = self.layout.repo / "ledger"
            if not (folder / "ledger.json").exists():
                if configured:
                    self._refuse_a_lost_ledger(folder / "ledger.json")
                with self.lock:
                    if not (folder / "ledger.json").exists():
                        JsonlDriver(folder, create=True, writer=True).close()
            # every operation's batch ends with its operation record: the end marker
            return JsonlDriver(folder, writer=writer, batch_end="operation")
        from strata.ledger.drivers.sqlite import SqliteDriver
        from strata.ledger.migrate import ledger_format, migrate_v1

        path = self.layout.ledger
        if not path.exists():
            if configured:
                self._refuse_a_lost_ledger(path)
            with self.lock:
                return SqliteDriver(path, create=True)
        try:
            if path.stat().st_size == 0:
                raise sqlite3.DatabaseError("the file is empty")
            try:
                driver = SqliteDriver(path)  # it reads the format: no connection only for that
            except UnsupportedFormat:
                if ledger_format(path) != 1:
                    raise
                with self.lock:
                    if ledger_format(path) == 1:
                        migrate_v1(path)
                driver = SqliteDriver(path)
            driver.last()
        except sqlite3.DatabaseError as exc:
            if disk_full(exc, path.parent):
                raise DiskFull(str(path)) from None
            if isinstance(exc, sqlite3.OperationalError):
                raise
            raise damaged_ledger(path, exc) from None
        return driver

    def _open_shared_ledger(self, url: str, configured: bool) -> LedgerDriver:
        """The PostgreSQL ledger at ``url``; made there for a new repository or a convert."""
        try:
            from strata.ledger.drivers.postgresql import PostgresDriver, shown
        except ImportError:
            raise RepositoryError(
                "this repository's ledger is on PostgreSQL, and psycopg is not installed",
                hint="pip install 'strata-workspace[postgresql]'",
            ) from None
        try:
            return PostgresDriver(url)
        except CorruptRepository:
            if configured:  # no ledger there yet: only a new repository makes one
                self._refuse_a_lost_ledger(Path(shown(url)))
            return PostgresDriver(url, create=True)

    def _refuse_a_lost_ledger(self, path: Path) -> None:
        """A ledger is made only for a new repository: objects without one mean it was lost.

        Starting a new chain there would hide every recorded event for good.
        """
        try:
            stored = any(os.scandir(self.layout.objects))
        except OSError:
            stored = False
        if stored:
            raise CorruptRepository(
                f"the ledger {path} is missing, but the repository holds objects",
                hint="restore it from a backup; Strata will not start a new history over "
                "the old one",
            )

    @functools.cached_property
    def trace_cipher(self) -> TraceCipher | None:
        """Encrypts the traces recorded here, opens them for a replay (``[traces]``).

        Read on first use: a mistake in the table stops the commands that record
        or replay traces, never a snapshot.
        """
        from strata.store.sealing import trace_cipher

        return trace_cipher(
            self.config.raw, repository=self.layout.repo, workspace=self.layout.workspace
        )

    def close(self) -> None:
        """Release the ledger and the object store's open files."""
        self.ledger.close()
        if isinstance(self.objects, DiskObjectStore):
            self.objects.close()

    # -- time and ids ----------------------------------------------------------------

    def now_ms(self) -> int:
        """Milliseconds since the epoch, never going backwards within this object."""
        now = max(self.clock(), self._last_ms)
        self._last_ms = now
        return now

    def new_event_id(self) -> EventId:
        """A fresh event id that no event in the ledger has."""
        event_id = new_event_id(self.rng)
        while self.ledger.driver.seek_event(event_id):  # a reused STRATA_SEED must not collide
            event_id = new_event_id(self.rng)
        return event_id

    # -- writing -----------------------------------------------------------------------

    @contextmanager
    def writing(self, *, finish_journals: bool = True) -> Iterator[None]:
        """Hold the write lock; first finish whatever an interrupted command left.

        A full disk (``ENOSPC``, ``EDQUOT``, SQLite's "disk is full") inside the
        block is raised as :class:`~strata.errors.DiskFull`.
        """
        with self.mutex, self.lock, _disk_full_as_error(), contextlib.ExitStack() as shared:
            outermost = self.lock.depth == 1
            if outermost and self.ledger.shared:
                # a shared ledger: the writers on this workspace's branch, from every
                # workspace, take turns; writers on other branches go on
                branch = self.ledger.view().head_branch
                shared.enter_context(self.ledger.driver.admission(branch))  # type: ignore[attr-defined]
            jsonl = outermost and self.ledger.driver.name == "jsonl"
            if jsonl:
                # only the lock holder repairs a torn last line and catches the index up
                self.ledger.driver.close()
                self.ledger.driver = self.open_driver(writer=True)
            try:
                if outermost and finish_journals:
                    if journals_left(self.layout):
                        recover(self)
                    self.recover_leftovers()
                yield
                if outermost:
                    self._upkeep()
            finally:
                if jsonl:
                    # the lock is about to go: back to a reader, which never writes
                    self.ledger.driver.close()
                    self.ledger.driver = self.open_driver(writer=False)

    def recover_leftovers(self) -> None:
        """Record what killed processes left: the features' recoverers, then open groups.

        Called with the write lock held, once the journals are finished. The
        features' recoverers come first (a run killed inside a group is recorded
        in it), then :func:`~strata.core.groups.recover_groups` finishes and
        closes every group whose process died.
        """
        for recoverer in self.recoverers:
            recoverer(self)
        if self.layout.groups.is_dir() or self.layout.workshop.is_dir():
            from strata.core.groups import recover_groups

            recover_groups(self)

    def _upkeep(self) -> None:
        """Run the upkeepers, the write lock still held (what was written is recorded).

        A store that cannot be pruned or repacked now (damage ``strata check``
        reports, a full disk) is left for next time.
        """
        for upkeeper in self.upkeepers:
            with contextlib.suppress(StrataError, OSError):
                upkeeper(self)

    def new_group(self, kind: str, title: str, author: Author, **data: Any) -> Group:
        """A new group (nothing is recorded until an operation joins it)."""
        from strata.core.groups import Group

        return Group(self.ledger.new_id(), kind, title[:200], author, dict(data))

    @contextmanager
    def grouped(self, group: Group | None) -> Iterator[None]:
        """Make every operation recorded inside the block a step of ``group``."""
        before, self.group = self.group, group
        try:
            yield
        finally:
            self.group = before

    def transaction(
        self, command: str, author: Author | None = None, **details: Any
    ) -> Transaction:
        """Open a unit of work (a context manager): see :class:`Transaction`."""
        return Transaction(self, command, author or self.author, details)

    def guard_published(self, command: str, *, force: bool = False) -> None:
        """Refuse to move Published while a Draft is open, or while a run holds the lease.

        ``force`` overrides the run lease only; a Draft must be published or
        discarded first.
        """
        if self.layout.draft_state.exists():
            raise DraftOpen(command)
        if not force:
            from strata.core.lease import active_leases, holders

            held = active_leases(self.layout.runs)
            if held:
                raise WorkspaceBusy(
                    command,
                    [str(h.get("run_id")) for h in held],
                    pids=sorted({p for h in held for p in holders(h["path"])}),
                )

    def write_snapshot(self, tree: ObjectId, base: Event | None, **extra: Any) -> SnapshotId:
        """Store a snapshot manifest of ``tree`` (not yet durable: a transaction flushes it)."""
        import platform

        manifest = {
            "format": MANIFEST_FORMAT,
            "tree": tree,
            "base_event_id": base.id if base else None,
            "created": format_ts(self.now_ms()),
            "env": {
                "python": platform.python_version(),
                "os": f"{platform.system()} {platform.release()}",
                "strata": __version__,
            },
            "tools": {},
            **({"ignore_extra": list(self.extra_ignore)} if self.extra_ignore else {}),
            **extra,
        }
        return SnapshotId(self.objects.put(dumps(manifest).encode()))

    # -- the workspace -----------------------------------------------------------------

    def rules(self) -> IgnoreRules:
        """The ignore rules at the workspace's root (config defaults and a run's extras).

        A repository kept in a git work tree's ``.git`` (the git backend) has
        one rule, git's: its ignore files only. Strata's defaults (``.venv``,
        ``node_modules``, ``__pycache__``) would hide files git tracks, so a
        clean tree would show them deleted.
        """
        defaults = () if self.layout.git_backed else self.config.ignore_defaults
        return IgnoreRules.root(defaults=defaults, extra=self.extra_ignore)

    def large_files(self) -> LargeFiles:
        """The large-file guard (``[snapshot] max_file_size``, ``large_files``).

        A bad setting is a :class:`~strata.errors.RepositoryError` naming it.
        """
        from strata.layout import bad_config, misspelt_problem, parse_size
        from strata.store.large import large_files

        if (near := misspelt_problem(self.config.raw, "snapshot")) is not None:
            raise bad_config(self.layout, near)  # the guard's limit would not be the one meant
        try:
            return large_files(self.config.raw.get("snapshot"), parse_size)
        except ValueError as exc:
            raise bad_config(self.layout, str(exc)) from None

    def changes_since(self, token: str, *, root: str = "") -> Answer | None:
        """Ask the running watcher which paths changed since ``token`` (None: no watcher).

        ``root`` names the folder asked about: ``""`` Published, ``"draft"`` the Draft's
        (see :func:`watched_folders`).
        """
        monitor = self.monitor or _in_process_monitor(self.layout.watch)
        if monitor is not None:
            return monitor.query(token, root=root)
        if served.silent_watcher or not (self.layout.watch / "watch.sock").exists():
            return None  # (silent: it did not answer this process in time; not again)
        from strata.watch.monitor import ask

        return ask(self.layout.watch, token, root=root)

    # -- reading -----------------------------------------------------------------------

    def event(self, event_id: str) -> Event:
        """The event with this full id; :class:`CorruptRepository` if the ledger lacks it."""
        record = self.ledger.driver.seek_event(event_id)
        if record is None:
            raise CorruptRepository(f"event {event_id} is named but not in the ledger")
        return Event.from_json(record.body, seq=record.seq)

    def head(self) -> Event | None:
        """The event HEAD points at (None before the first snapshot)."""
        eid = self.ledger.view().head_event
        return self.event(eid) if eid else None

    def view(self) -> View:
        """Where HEAD, every branch and every bookmark point."""
        return self.ledger.view()

    def manifest(self, snapshot_id: SnapshotId) -> dict[str, Any]:
        """The manifest of a snapshot."""
        try:
            data = json.loads(self.objects.get(ObjectId(snapshot_id)))
        except ObjectMissing:
            pruned = pruned_error(self.ledger, self.objects, snapshot_id)
            if pruned is not None:
                raise pruned from None
            raise
        except ValueError:
            raise CorruptRepository(f"snapshot {snapshot_id} is not a manifest") from None
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise CorruptRepository(f"snapshot {snapshot_id} has an unknown manifest format")
        return data

    def tree_of(self, event: Event) -> ObjectId:
        """The tree of a state event's snapshot."""
        if event.snapshot_ref is None:
            raise CorruptRepository(f"event {event.id} ({event.action_type}) records no files")
        return ObjectId(self.manifest(event.snapshot_ref)["tree"])

    def head_tree(self) -> ObjectId:
        """HEAD's tree (the empty tree before the first snapshot)."""
        head = self.head()
        return self.tree_of(head) if head else EMPTY_TREE

    def point(self, event: Event, label: str = "") -> Point:
        """The point of a state event."""
        return Point(self.tree_of(event), event.snapshot_ref, event, label)

    def resolve(self, ref: str) -> Point:
        """Resolve a ref: ids or unique prefixes, run ids, names, ``HEAD~N``, ``git:<commit>``."""
        return resolve_ref(self, ref)

    def diff_trees(
        self,
        a: ObjectId,
        b: ObjectId,
        store: ObjectStore | None = None,
        *,
        paths: list[str] | None = None,
        lines: dict[ObjectId, int | None] | None = None,
        stats: bool = True,
    ) -> DiffResult:
        """How tree ``b`` differs from tree ``a`` (``lines``: known line counts of new blobs)."""
        store = store or self.objects
        changes = diff_trees(store, a, b, paths=paths)
        files = [_file_diff(store, c, lines or {}, stats) for c in changes]
        return DiffResult(store, changes, files)

    def recorded_diff(
        self, a: ObjectId, b: ObjectId, *, lines: dict[ObjectId, int | None] | None = None
    ) -> tuple[RecordedDiff, list[str], list[dict[str, Any]]]:
        """What a state event records of the change from tree ``a`` to tree ``b``.

        The diff's totals, the changed paths (as :attr:`FileDiff.path` shows
        them) and an artifact impact for each binary file. The changes are
        looked at one at a time and dropped: from the empty tree (a first
        snapshot) they are never all in memory. The diff lists them again
        only if its :attr:`~DiffResult.files` are asked for.
        """
        store = self.objects
        known = lines or {}
        changes = added_leaves(store, b) if a == EMPTY_TREE else iter(diff_trees(store, a, b))
        paths: list[str] = []
        impacts: list[dict[str, Any]] = []
        insertions = deletions = 0
        for change in changes:
            new = change.new
            if change.old is None and new is not None and new.kind == "file" and new.oid in known:
                # an added file the scan read (a first snapshot's every file): what
                # _file_diff would say, without building it
                count = known[new.oid]
                path = display_path(change.path)
                paths.append(path)
                if count is not None:
                    insertions += count
                    continue
                impacts.append(
                    {
                        "path": path,
                        "kind": "binary",
                        "bytes_changed": new.size,
                        "hash_before": None,
                        "hash_after": new.oid,
                        "summary": f"added, {new.size} bytes changed",
                    }
                )
                continue
            f = _file_diff(store, change, known, True)
            paths.append(f.path)
            insertions += f.insertions
            deletions += f.deletions
            if f.binary:
                impacts.append(
                    {
                        "path": f.path,
                        "kind": "binary",
                        "bytes_changed": f.bytes_changed,
                        "hash_before": f.hash_before,
                        "hash_after": f.hash_after,
                        "summary": f"{f.status}, {f.bytes_changed} bytes changed",
                    }
                )
        diff = RecordedDiff(
            store,
            lambda: self.diff_trees(a, b, lines=lines),
            files_changed=len(paths),
            insertions=insertions,
            deletions=deletions,
        )
        return diff, paths, impacts

    @staticmethod
    def branch_for_new_state(view: View) -> str:
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


class Transaction:
    """The one unit of work: every command that changes a repository is one.

    ::

        with core.transaction("rewind", author) as tx:
            auto, scan = tx.auto_save()             # unrecorded work, recorded in this operation
            tx.annotate("rewind", anchor=..., data=...)
            tx.move(head_event=...)                 # where HEAD, branches, bookmarks point after
            tx.apply(actions)                       # journaled: a crash is finished on next open
        # committed here: objects flushed, then the ledger, then the journal removed

    A transaction holds the write lock from start to end and, on entry, finishes
    whatever an interrupted command left (:meth:`Core.writing`). Its events, ref
    moves and details become one ledger *operation*, appended atomically at
    commit; an exception inside the ``with`` block commits nothing (a journal
    already written is finished by the next writer, so files and ledger agree).

    The order that keeps a crash harmless is fixed here, not left to callers:
    objects (blobs, trees, manifests) are durable before the ledger names them;
    the journal is durable before the first file is written; the journal goes only
    after the ledger holds the operation and the callbacks registered with
    :meth:`Transaction.on_commit` have run (saving a stat cache, which may name
    only durable blobs, and which a watcher running the command defers until the
    asker has its answer: a lost save costs a rescan, nothing more; ending the
    Draft a publish applied).
    """

    def __init__(self, core: Core, command: str, author: Author, details: dict[str, Any]) -> None:
        self.core = core
        self.command = command
        self.author = author
        self._details = details
        self._lock: AbstractContextManager[None] | None = None
        self._op: Operation | None = None
        self._journal: Journal | None = None
        self._journal_extra: dict[str, Any] = {}
        self._on_commit: list[Callable[[], object]] = []
        #: what :meth:`record` returned: their events get a sequence number at commit
        self._recorded: list[SnapshotResult] = []
        self._state = "new"

    # -- life cycle --------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        self._lock = self.core.writing()
        self._lock.__enter__()
        try:
            group = self.core.group.to_json() if self.core.group is not None else None
            self._op = self.core.ledger.begin(
                self.command, self.author.to_json(), group=group, **self._details
            )
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self._state = "open"
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._lock is not None
        try:
            if exc_type is None and self._state in ("open", "applied"):
                self.commit()
        finally:
            if self._state != "committed":
                self._state = "aborted"
            self._lock.__exit__(None, None, None)

    @property
    def op(self) -> Operation:
        """The operation being built (its ``before`` and ``after`` views, its events)."""
        if self._op is None:
            raise RuntimeError("a transaction is used only inside its 'with' block")
        return self._op

    @property
    def id(self) -> str:
        """The operation's id (the ``operation_id`` of its events unless they name another)."""
        return self.op.id

    @property
    def before(self) -> View:
        """Where every ref pointed when the transaction began."""
        return self.op.before

    @property
    def view(self) -> View:
        """Where every ref points once the transaction commits (as built so far)."""
        return self.op.after

    @property
    def details(self) -> dict[str, Any]:
        """The operation's details (``tree_before``/``tree_after`` make it undoable with files)."""
        return self.op.details

    def head(self) -> Event | None:
        """The event HEAD points at in :attr:`view` (an event of this transaction included)."""
        eid = self.view.head_event
        if eid is None:
            return None
        return self._pending(eid) or self.core.event(eid)

    def head_tree(self) -> ObjectId:
        """The tree of :meth:`head` (the empty tree before the first snapshot)."""
        head = self.head()
        return self.core.tree_of(head) if head is not None else EMPTY_TREE

    def _head_snapshot_if(self, tree: ObjectId) -> SnapshotId | None:
        """HEAD's snapshot when its tree is ``tree`` (HEAD recorded before this transaction).

        Asks the ledger's index for the snapshot id rather than reading HEAD's
        event (a no-op snapshot after a first one would parse every path it named).
        """
        eid = self.view.head_event
        if eid is None or any(body["id"] == eid for body in self.op.events):
            return None
        ref = self.core.ledger.driver.snapshot_of(eid)
        if ref is None or self.core.manifest(SnapshotId(ref))["tree"] != tree:
            return None
        return SnapshotId(ref)

    def _pending(self, event_id: str) -> Event | None:
        for body in self.op.events:
            if body["id"] == event_id:
                return Event.from_json(body)
        return None

    def _check_open(self) -> None:
        if self._state == "applied":
            raise RuntimeError("nothing may be added to a transaction after apply()")
        if self._state != "open":
            raise RuntimeError(f"the transaction is {self._state}")

    # -- building ----------------------------------------------------------------------

    def move(self, **changes: Any) -> View:
        """Set where refs point after the commit (``head_branch``, ``head_event``, ...)."""
        self._check_open()
        self.op.after = moved(self.op.after, **changes)
        return self.op.after

    def set_view(self, view: View) -> None:
        """Set the whole view the operation leaves (undo and redo)."""
        self._check_open()
        self.op.after = view

    def _event(
        self,
        event_type: str,
        *,
        author: Author | None,
        rationale: str,
        files: list[str] | tuple[str, ...],
        data: dict[str, Any] | None,
        branch: str,
        operation_id: str | None,
        snapshot_ref: SnapshotId | None = None,
        parent: EventId | None = None,
        anchor: EventId | None = None,
        scope: str = "project",
        artifacts: tuple[str, ...] = (),
        preflight: dict[str, Any] | None = None,
    ) -> Event:
        if scope not in ACTION_SCOPES:
            raise UsageError(f"unknown scope {scope!r}; use one of {', '.join(ACTION_SCOPES)}")
        event = Event(
            id=self.core.new_event_id(),
            ts=format_ts(self.core.now_ms()),
            author=author or self.author,
            action_type=EventType.parse(event_type),
            rationale=rationale,
            files=tuple(files),
            snapshot_ref=snapshot_ref,
            parent_event_id=parent,
            data=data or {},
            branch=branch,
            anchor_event_id=anchor,
            operation_id=operation_id or (self.op.group or {}).get("id") or self.op.id,
            action_scope=scope,
            artifacts=tuple(artifacts),
            preflight=preflight,
        )
        self.op.add_event(event.to_json())
        return event

    def state_event(
        self,
        event_type: str,
        tree: ObjectId,
        *,
        message: str = "",
        author: Author | None = None,
        files: list[str] | tuple[str, ...] = (),
        data: dict[str, Any] | None = None,
        parent: Event | None = None,
        branch: str | None = None,
        move_head: bool = True,
        manifest: dict[str, Any] | None = None,
        operation_id: str | None = None,
        scope: str = "project",
        artifact_impacts: tuple[dict[str, Any], ...] = (),
        artifacts: tuple[str, ...] = (),
        preflight: dict[str, Any] | None = None,
    ) -> Event:
        """Record ``tree`` (already stored) as a state event on ``branch``.

        ``parent`` defaults to HEAD (as :attr:`view` has it), ``branch`` to the
        branch the next state event belongs on (a new one when HEAD is not its
        tip). The branch's tip moves to the event; HEAD too unless ``move_head``
        is false (a Draft revision moves only the Draft's branch).
        ``artifacts`` are ids of stored objects the event links (traces of the
        model and tool calls that made the step): gc keeps them with the ledger.
        ``preflight`` is the ``{"ok": …, "report_artifact": …}`` of the preflight
        the state passed (a publish made with ``--preflight``).
        """
        self._check_open()
        view = self.view
        if parent is None and move_head:
            parent = self.head()
        branch = branch or self.core.branch_for_new_state(view)
        snapshot_id = self.core.write_snapshot(tree, parent, **(manifest or {}))
        event = self._event(
            event_type,
            author=author,
            rationale=message,
            files=files,
            data=data,
            branch=branch,
            operation_id=operation_id,
            snapshot_ref=snapshot_id,
            parent=parent.id if parent else None,
            scope=scope,
            artifacts=artifacts,
            preflight=preflight,
        )
        if artifact_impacts:
            self.op.events[-1]["artifact_impacts"] = [dict(i) for i in artifact_impacts]
        branches = {**view.branches, branch: event.id}
        if move_head:
            self.op.after = moved(view, head_branch=branch, head_event=event.id, branches=branches)
        else:
            self.op.after = moved(view, branches=branches)
        return event

    def annotate(
        self,
        event_type: str,
        *,
        anchor: str | None,
        data: dict[str, Any] | None = None,
        rationale: str = "",
        files: list[str] | tuple[str, ...] = (),
        author: Author | None = None,
        operation_id: str | None = None,
        branch: str | None = None,
        artifacts: tuple[str, ...] = (),
        preflight: dict[str, Any] | None = None,
    ) -> Event:
        """Append an annotation event pointing at the state event ``anchor``.

        ``artifacts`` are ids of stored objects the event links (a report, a
        trace); ``preflight`` is the ``{"ok": …, "report_artifact": …}`` of a
        preflight check.
        """
        self._check_open()
        return self._event(
            event_type,
            author=author,
            rationale=rationale,
            files=files,
            data=data,
            branch=branch or self.view.head_branch,
            operation_id=operation_id,
            anchor=EventId(anchor) if anchor else None,
            artifacts=artifacts,
            preflight=preflight,
        )

    def update_data(self, event_id: str, **data: Any) -> None:
        """Add to the ``data`` of an event of this transaction (allowed after :meth:`apply`)."""
        for body in self.op.events:
            if body["id"] == event_id:
                body.setdefault("data", {}).update(data)
                return
        raise KeyError(event_id)

    def record(
        self,
        tree: ObjectId,
        message: str = "",
        *,
        event_type: str = EventType.SNAPSHOT,
        author: Author | None = None,
        data: dict[str, Any] | None = None,
        operation_id: str | None = None,
        scope: str = "project",
        lines: dict[ObjectId, int | None] | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> SnapshotResult:
        """Record ``tree`` as a state event after HEAD, with its diff; none when it is HEAD's."""
        unchanged = self._head_snapshot_if(tree)
        if unchanged is not None:
            return SnapshotResult(None, unchanged, None)
        head = self.head()
        head_tree = self.core.tree_of(head) if head else EMPTY_TREE
        if head is not None and tree == head_tree:
            return SnapshotResult(None, head.snapshot_ref, None)
        diff, paths, impacts = self.core.recorded_diff(head_tree, tree, lines=lines)
        event = self.state_event(
            event_type,
            tree,
            message=message,
            author=author,
            files=paths,
            data={
                "files_changed": diff.files_changed,
                "insertions": diff.insertions,
                "deletions": diff.deletions,
                **(data or {}),
            },
            parent=head,
            manifest=manifest,
            operation_id=operation_id,
            scope=scope,
        )
        if impacts:  # the body takes the dicts as they are (no copy of each)
            self.op.events[-1]["artifact_impacts"] = impacts
        result = SnapshotResult(event, event.snapshot_ref, diff)
        self._recorded.append(result)
        return result

    def snapshot(
        self,
        message: str = "",
        *,
        workspace: Workspace | None = None,
        event_type: str = EventType.SNAPSHOT,
        author: Author | None = None,
        data: dict[str, Any] | None = None,
        operation_id: str | None = None,
        scope: str = "project",
        paths: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        first: bool = False,
    ) -> tuple[SnapshotResult, Scan]:
        """Scan Published (or ``workspace``) and record it; the stat cache is kept at commit.

        With ``paths`` (workspace paths, files or folders), only those paths are
        recorded as they are on disk; every other path stays as HEAD has it, its
        changes still unrecorded (what one agent's tool call changed, while
        others work beside it). ``exclude`` (workspace paths) is the other
        way round: every change is recorded but those below these paths (files
        another tool call is writing). ``first`` (a new repository's first
        snapshot) records nothing for an empty folder.
        """
        ws = workspace or self.core.workspace
        scan = ws.scan()
        tree = scan.tree
        if first and tree == EMPTY_TREE and self.head() is None:
            if scan.worth_saving:
                self.on_commit(lambda: served.when_replied(scan.save_cache))
            return SnapshotResult(None, None, None), scan
        if paths is not None or exclude:
            from strata.diff.tree import diff_trees
            from strata.store.tree import graft

            head = self.head()
            head_tree = self.core.tree_of(head) if head else EMPTY_TREE
            if paths is None:
                paths = [
                    p
                    for change in diff_trees(self.core.objects, head_tree, tree)
                    for p in (change.path, change.old_path)
                    if p is not None and not any(p == x or p.startswith(x + "/") for x in exclude)
                ]
            tree = graft(self.core.objects, head_tree, tree, paths)
        result = self.record(
            tree,
            message,
            event_type=event_type,
            author=author,
            data=data,
            operation_id=operation_id,
            scope=scope,
            lines=scan.lines,
        )
        result.warnings = scan.warnings
        if result.event is not None or scan.worth_saving:
            # a watcher running this command saves it once the asker has its answer
            self.on_commit(lambda: served.when_replied(scan.save_cache))
        return result, scan

    def auto_save(self, reason: str) -> tuple[Event | None, Scan]:
        """Record Published's unrecorded work as an ``auto_save`` event of this operation.

        Undoing the operation puts those files back and HEAD where it was:
        the auto-save belongs to the operation that needed it. An empty
        workspace with nothing recorded has nothing to lose: no event.
        """
        scan = self.core.workspace.scan()
        event = None
        if self.head() is not None or scan.tree != EMPTY_TREE:  # else nothing to lose
            event = self.record(
                scan.tree,
                f"auto-save before {reason}",
                event_type=EventType.AUTO_SAVE,
                author=SYSTEM,
                lines=scan.lines,
            ).event
        if event is not None or scan.worth_saving:
            # a watcher running this command saves it once the asker has its answer
            self.on_commit(lambda: served.when_replied(scan.save_cache))
        return event, scan

    def bookmark(self, name: str, event_id: str, *, locked: bool = False) -> None:
        """Point bookmark ``name`` at ``event_id`` when the transaction commits."""
        self.move(bookmarks={**self.view.bookmarks, name: Bookmark(event_id, locked)})

    # -- files ---------------------------------------------------------------------------

    def journal_extra(self, **extra: Any) -> None:
        """Keep ``extra`` in the journal (read back when an interrupted apply is finished)."""
        self._journal_extra.update(extra)

    def apply(
        self,
        actions: list[Action],
        *,
        workspace: Workspace | None = None,
        verified: Mapping[str, bytes] | None = None,
    ) -> RestoreReport:
        """Write files: journal first (with the whole operation), then each action.

        After this, events may still get ``data`` (:meth:`update_data`) but no
        new events or ref moves: the journal holds the operation a crash will
        commit. A path changed since the scan is skipped and reported.
        ``verified``: objects already read and checked (see ``apply_actions``).
        """
        self._check_open()
        # an undo another workspace overtook on a shared ledger is refused before any write
        self.core.ledger.settle_reversal(self.op)
        ws = workspace or self.core.workspace
        self.core.objects.flush()  # the journal names objects: they are durable first
        from strata.store.materialize import Journal, journal_record  # (not for a snapshot)

        journal = Journal(self.core.layout.journal, self.op.id)
        journal.write(journal_record(actions, operation=self.op.to_json(), **self._journal_extra))
        self._journal = journal
        self._state = "applied"
        return ws.apply(actions, verified=verified)

    def on_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the operation is committed (before its journal goes).

        A crash before the journal is removed finishes the journal again on the
        next open, so what a callback does must be safe to do twice or to find
        done (the recovery does the same for a journal's ``ends_draft``).
        """
        self._on_commit.append(callback)

    # -- committing ------------------------------------------------------------------------

    def _number_recorded(self) -> None:
        """Give the events :meth:`record` returned their sequence numbers, as the ledger has them.

        Made from the bodies just appended, not read back: the caller gets the
        event as committed (its artifact impacts and ``data`` included).
        """
        index = {body["id"]: i for i, body in enumerate(self.op.events)}
        for result in self._recorded:
            if result.event is None or result.event.id not in index:
                continue
            i = index[result.event.id]
            result.event = Event.from_json(self.op.events[i], seq=self.op.first_seq + i)

    def commit(self) -> None:
        """Flush objects, append the operation, run the callbacks, then drop the journal.

        An operation that recorded nothing (no event, no ref move, no details)
        writes no ledger record.
        """
        if self._state not in ("open", "applied"):
            raise RuntimeError(f"the transaction is {self._state}")
        op = self.op
        self.core.objects.flush()
        if op.events or op.after != op.before or op.details:
            self.core.ledger.commit(op)
            self._number_recorded()
        self._state = "committed"
        for callback in self._on_commit:
            callback()
        if self._journal is not None:
            self._journal.remove()


def _file_diff(
    store: ObjectStore, c: Change, lines: dict[ObjectId, int | None], stats: bool
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
            from strata.diff.patch import BIG_FILE_BYTES, line_stats

            if max(old.size if old else 0, new.size if new else 0) > BIG_FILE_BYTES:
                # too big to load: compared as binary, from streams (memory stays flat)
                binary = True
                changed = _streamed_bytes_changed(store, old, new)
            else:
                before = store.get(old.oid) if old else None
                after = store.get(new.oid) if new else None
                st = line_stats(before, after)
                ins, dels, binary = st.insertions, st.deletions, st.binary
                if binary:
                    changed = bytes_changed(before or b"", after or b"")
                else:
                    from strata.diff.patch import text_bytes_changed

                    changed = text_bytes_changed(before or b"", after or b"")
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
        name=c.path,
    )


def _streamed_bytes_changed(
    store: ObjectStore, old: TreeEntry | None, new: TreeEntry | None
) -> int:
    """Bytes changed between two big versions: all of them past their common prefix.

    Read as two streams of chunks; an upper bound of :func:`bytes_changed`
    (a common suffix is not looked for: compressed objects read forwards only).
    """
    if old is None or new is None:
        only = old or new
        return only.size if only is not None else 0
    if old.kind != "file" or new.kind != "file":
        return max(old.size, new.size)
    from strata.store.objects import verified_chunks

    prefix = 0
    a_chunks, b_chunks = verified_chunks(store, old.oid), verified_chunks(store, new.oid)
    a = b = b""
    while True:
        if not a:
            a = next(a_chunks, b"")
        if not b:
            b = next(b_chunks, b"")
        n = min(len(a), len(b))
        if n == 0:
            break
        if a[:n] != b[:n]:
            prefix += _first_diff(a, b, n)
            break
        prefix += n
        a, b = a[n:], b[n:]
    return max(old.size, new.size) - prefix


def _first_diff(a: bytes, b: bytes, n: int) -> int:
    """The first index below ``n`` where ``a`` and ``b`` differ (they do), by halving."""
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def damaged_ledger(path: Path, exc: BaseException) -> CorruptRepository:
    """The error for a SQLite ledger that cannot be read."""
    return CorruptRepository(
        f"the ledger {path} is damaged ({exc})",
        hint="the objects are intact: restore ledger.db from a backup, "
        "or move it aside and record again",
    )


@contextmanager
def _disk_full_as_error() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(exc.filename) from exc
        raise
    except sqlite3.OperationalError as exc:
        if disk_full(exc, None):
            raise DiskFull() from exc
        raise


def disk_full(exc: sqlite3.Error, folder: Path | None) -> bool:
    """Whether SQLite failed for want of space.

    SQLite says "disk I/O error" when it cannot make its ``-shm`` file, so the
    free space of ``folder`` is looked at too.
    """
    if "disk is full" in str(exc):
        return True
    if folder is None or "disk I/O error" not in str(exc):
        return False
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20


#: change monitors running in this process, by their folder (``REPO/watch``, resolved)
_MONITORS: dict[Path, ChangeMonitor] = {}
_MONITORS_LOCK = threading.Lock()


@contextmanager
def monitor_in_process(monitor: ChangeMonitor) -> Iterator[None]:
    """While inside, every Core of ``monitor``'s repository opened in this process asks it directly.

    For a watcher that runs commands itself: their scans ask the monitor
    without a round trip through its own socket (same cookie, same answer).
    """
    with _MONITORS_LOCK:
        _MONITORS[monitor.folder] = monitor
    try:
        yield
    finally:
        with _MONITORS_LOCK:
            if _MONITORS.get(monitor.folder) is monitor:
                del _MONITORS[monitor.folder]


def _in_process_monitor(folder: Path) -> ChangeMonitor | None:
    if not _MONITORS:
        return None
    with _MONITORS_LOCK:
        found = _MONITORS.get(folder) or _MONITORS.get(Path(os.path.realpath(folder)))
    return found if found is not None and found.alive else None


def watched_folders(layout: Layout) -> dict[str, Path]:
    """The folders a watcher watches besides the workspace, by the name scans ask with.

    The Draft's folder (``"draft"``), watched once it exists: pass these as
    ``ChangeMonitor(..., others=watched_folders(layout))``.
    """
    return {"draft": layout.draft / DRAFT_FILES}


def open_core(path: Path, **kwargs: Any) -> Core:
    """Open the core of the workspace that contains ``path``."""
    from strata.layout import find_layout

    return Core(find_layout(path), **kwargs)
