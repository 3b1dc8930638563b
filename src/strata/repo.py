"""The Repository facade: everything the CLI does, as a Python API.

:class:`Repository` is a :class:`strata.core.Core` (the open stores, the
write lock, the clock, :meth:`~strata.core.Core.transaction`) with the
user-level operations on top: each method here validates its arguments and
hands over to one function of :mod:`strata.core` or of a feature package
(``runs/``, ``workbench/``, ``replay/``). It also plugs the feature packages into the core:
``git:<commit>`` refs, the recovery of killed runs and the one-step undo of a
run. The library reads no environment variable, terminal or home
configuration: the clock, the random source and the author are arguments.

A Repository may be shared by threads. Each thread reads the ledger through
its own driver (its own SQLite connection or JSONL reader), so a read sees
the ledger before or after an operation, never part of one, and never waits
for a writer. Writes take turns: a transaction holds ``Core.mutex`` and the
write lock (held by one thread at a time, and by one process at a time) from
start to commit. :class:`strata.aio.AsyncRepository` runs these methods in
worker threads for asyncio code.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core import (
    SYSTEM,
    Core,
    DiffResult,
    FileDiff,
    Point,
    SnapshotResult,
    StatusResult,
    later,
)
from strata.core import check as _check
from strata.errors import ExportFailed, NameTaken, PathNotFound, UnknownRef, UsageError
from strata.ids import ObjectId
from strata.layout import GIT_HIDDEN_REPO, MARKER, Layout, create_layout, find_layout
from strata.ledger.driver import EventFilter
from strata.ledger.events import ACTION_FAMILIES, Author, Event, EventType
from strata.ledger.ledger import check_ref_name, moved
from strata.store.scan import ScanResult
from strata.store.tree import lookup, read_tree

#: the rationale of the snapshot ``init`` records of the folder as it was
INIT_MESSAGE = "the folder as it was when Strata started recording it"

if TYPE_CHECKING:
    from strata.agent.loop import AgentResult, StepRecord
    from strata.changes.blocks import EventSemantics, FileSemantics
    from strata.changes.compare import Comparison
    from strata.changes.merging import MergeResult
    from strata.changes.results import ResultRecord
    from strata.changes.rollups import Candidate
    from strata.core import Transaction
    from strata.core.budget import BudgetUsage
    from strata.core.metrics import Metrics
    from strata.core.restore import Recovery
    from strata.core.results_ops import (
        BookmarkResult,
        CatResult,
        ConvertResult,
        ImportResult,
        InitResult,
        OperationRecord,
        RedoResult,
        RewindResult,
        UndoResult,
    )
    from strata.core.storage import DiskUsage, GcResult, RepackResult
    from strata.digest import WorkspaceDigest
    from strata.gateway import Approver, ExecResult, Gateway
    from strata.host import Activity, HostResult  # the host loop
    from strata.kb import KnowledgeBase
    from strata.providers.base import CancelToken, Provider
    from strata.replay.engine import Commands, ReplayReport, StepReplay
    from strata.replay.preflight import PreflightResult
    from strata.runs.options import WorkspaceOptions
    from strata.runs.result import RunResult
    from strata.semantic.base import Block
    from strata.workbench.checkpoints import Checkpoints
    from strata.workbench.draft import Draft
    from strata.workshop.session import Workshop

__all__ = [
    "SYSTEM",
    "BookmarkResult",
    "CatResult",
    "ConvertResult",
    "DiffResult",
    "FileDiff",
    "OperationRecord",
    "Point",
    "RedoResult",
    "Repository",
    "RewindResult",
    "SnapshotResult",
    "StatusResult",
    "UndoResult",
]


def __getattr__(name: str) -> Any:
    """The results of :mod:`strata.core.results_ops`, loaded on first use (a snapshot never)."""
    return later(__name__, name)


def _features() -> dict[str, Any]:
    """What the feature packages plug into the core.

    The recoverers run at every write (a no-op snapshot too): each module
    they come from is light to import and loads the rest of its feature only
    when there is something to recover. The other hooks load their feature
    when first called.
    """
    from strata.core.budget import enforce
    from strata.core.upkeep import tend
    from strata.runs.recovery import recover_runs
    from strata.workbench.recovery import recover_draft_steps  # issue 13
    from strata.workshop.recovery import TURN_LEASE, finish_turn

    return {
        "ref_schemes": {"git": _git_tree},
        # a killed Draft step's files first (its lease is among the runs'), then the runs
        # (one killed inside a group is recorded in it); the core then finishes and closes
        # every group whose process died: the Workshop's turns with their finisher
        "recoverers": (recover_draft_steps, recover_runs),
        "group_finishers": {TURN_LEASE: finish_turn},
        # a run's undo puts back what its command changed; a Workshop operation's puts back
        # the conversation's head, the Draft's revision, the model and Published (from a
        # checkpoint), which no other operation moves (docs/architecture.md, "Groups")
        "undo_handlers": (_undo_run, _undo_draft_rewind, _undo_workshop),
        "publish_hooks": (_publish_cards,),
        # the storage budget first: what it prunes, the repack need not copy
        "upkeepers": (enforce, tend),
    }


def _git_tree(core: Core, rev: str) -> ObjectId:
    from strata.runs.git import resolve_git_ref

    return resolve_git_ref(core, rev)


def _undo_run(tx: Transaction, op: OperationRecord) -> bool:
    from strata.runs.undo import undo_run

    return undo_run(tx, op)


def _undo_draft_rewind(tx: Transaction, op: OperationRecord) -> bool:
    from strata.workbench.recovery import undo_draft_rewind  # issue 13

    return undo_draft_rewind(tx, op)


def _undo_workshop(tx: Transaction, op: OperationRecord) -> bool:
    from strata.workshop.session import undo_workshop  # issue 13

    return undo_workshop(tx, op)


def _publish_cards(tx: Transaction, event: Event) -> None:
    if not tx.core.layout.workshop.is_dir():
        return  # no Workshop has run here: no conversation to tell
    from strata.workshop.session import publish_cards  # issue 31

    publish_cards(tx, event)


class Repository(Core):
    """A workspace and its repository.

    Open one with :meth:`init`, :meth:`open` or :meth:`find`. ``clock`` returns
    milliseconds since the epoch; ``rng`` makes event ids; both are injectable
    so ledgers are byte-stable in tests.

    One Repository may be used from any number of threads: writing methods
    (snapshot, rewind, restore, undo, bookmark, a run's snapshots...) run one
    at a time, reading methods (history, diff, status, show, operations) run
    beside them and see whole operations only. ``close()`` closes every
    thread's ledger connection; a thread's own closes when the thread ends.
    For asyncio, wrap it in :class:`strata.aio.AsyncRepository`.
    """

    def __init__(self, layout: Layout, **kwargs: Any) -> None:
        super().__init__(layout, **{**_features(), **kwargs})

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

        ``ledger`` picks the ledger driver of a new repository: ``sqlite``, ``jsonl``
        or a ``postgresql://`` URL (a shared ledger: docs/sync.md).
        See :meth:`create` for what init does in a git work tree.
        """
        return cls.create(path, store=store, ledger=ledger, **kwargs)[0]

    @classmethod
    def create(
        cls,
        path: Path | str,
        *,
        store: Path | str | None = None,
        ledger: str = "sqlite",
        snapshot: bool = False,
        objects: Path | str | None = None,
        **kwargs: Any,
    ) -> tuple[Repository, InitResult]:
        """:meth:`init`, and what it did.

        In a git work tree, init also imports the runs the git backend
        recorded there before (:meth:`import_git_runs`) and, with ``store``,
        adds the ``.strata`` pointer file to git's ``info/exclude``. With
        ``snapshot``, a new repository records the folder as it is, by the
        repository's author (:data:`INIT_MESSAGE`), so that whatever an agent
        does next is a change from it that can be undone; an empty folder
        records nothing. ``objects``: an object store folder shared by the
        workspaces of a shared ledger (docs/sync.md).
        """
        layout, created = create_layout(
            Path(path),
            store=Path(store) if store else None,
            ledger=ledger,
            objects=Path(objects) if objects else None,
        )
        repo = cls(layout, **kwargs)
        try:
            exclude = None
            marker = layout.workspace / MARKER
            if marker.is_file() and not marker.is_symlink():
                from strata.runs.git import exclude_from_git

                exclude = exclude_from_git(marker)
            imported = repo.import_git_runs()
            first = None
            if snapshot and created and repo.head() is None:
                with repo.transaction(EventType.SNAPSHOT) as tx:
                    first, _ = tx.snapshot(INIT_MESSAGE, first=True)
        except BaseException:
            repo.close()
            raise
        from strata.core.results_ops import InitResult

        result = InitResult(
            str(repo.root),
            str(layout.repo),
            repo.config.ledger_driver,
            created,
            imported,
            str(exclude) if exclude else None,
            first,
        )
        return repo, result

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
        from strata.runs.flow import layout_for_run

        return cls(layout_for_run(Path(path), strategy=strategy), **kwargs)

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def last_scan(self) -> ScanResult | None:
        """The newest scan of Published (``folders_listed``, ``watcher``: how it went)."""
        return self.workspace.last_scan

    def import_git_runs(self, *, author: Author | None = None) -> ImportResult:
        """Import the runs the git backend recorded here before this workspace had a repository.

        Such runs live in a repository inside ``.git`` (``.git/strata/repo``);
        their events are appended here in order, with their ids, times and
        authors (:func:`strata.core.maintenance.import_events`). That
        repository is left as it is; importing again brings only what is new.
        """
        hidden = self.root / GIT_HIDDEN_REPO
        if self.layout.git_backed or not (hidden / "config.toml").is_file():
            from strata.core.results_ops import ImportResult

            return ImportResult()
        source = Repository(Layout(self.root, hidden), author=self.author, clock=self.clock)
        try:
            with source.writing():  # also records a killed run's events first
                from strata.core import maintenance

                return maintenance.import_events(self, source, author=author or self.author)
        finally:
            source.close()

    # -- recording ---------------------------------------------------------------

    def snapshot(
        self,
        message: str = "",
        *,
        author: Author | None = None,
        action_type: str = EventType.SNAPSHOT,
        data: dict[str, Any] | None = None,
        operation: str | None = None,
        scope: str = "project",
        bookmark: str | None = None,
        paths: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> SnapshotResult:
        """Record the working tree; no event when nothing changed since HEAD.

        ``operation`` groups events of one semantic action under one id;
        ``scope`` is its ``action_scope``; ``bookmark`` names the result.
        ``paths`` (workspace paths, files or folders) records only those paths
        and leaves every other change unrecorded: what one tool call of an
        agent changed, while a person or another agent works beside it.
        ``exclude`` (workspace paths) records every
        change but those below these paths (files another tool call is writing).
        """
        if bookmark is not None:
            check_ref_name(bookmark, what="bookmark")
        if paths is not None:
            from strata.sandbox.paths import check_relative

            paths = [p and check_relative(p) for p in paths]
        with self.transaction(EventType.parse(action_type), author) as tx:
            if bookmark is not None and bookmark in tx.view.bookmarks:
                raise NameTaken("bookmark", bookmark)
            result, _ = tx.snapshot(
                message,
                event_type=action_type,
                author=author,
                data=data,
                operation_id=operation,
                scope=scope,
                paths=paths,
                exclude=exclude,
            )
            if bookmark is not None and result.event is not None:
                tx.bookmark(bookmark, result.event.id)
        if result.event is not None and not result.event.seq:
            result.event = self.event(result.event.id)  # with its sequence number
        return result

    # -- reading -------------------------------------------------------------------

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
        family = ACTION_FAMILIES.get(action.strip().replace("-", "_")) if action else None
        if family is not None:  # e.g. 'approval': approval_requested and approval_decided
            found = [
                e
                for member in family
                for e in self.history(
                    path=path,
                    author=author,
                    limit=limit,
                    branch=branch,
                    operation=operation,
                    author_kind=author_kind,
                    action=member,
                )
            ]
            return sorted(found, key=lambda e: -e.seq)[:limit]
        where = EventFilter(
            branch=branch,
            operation_id=operation,
            author=author,
            author_kind=author_kind,
            action_type=EventType.parse(action) if action else None,
            path=path.strip("/") or None if path else None,
        )
        return [
            Event.from_json(r.body, seq=r.seq)
            for r in self.ledger.driver.find_events(where, limit=limit)
        ]

    def diff(self, a: str, b: str | None = None, *, paths: list[str] | None = None) -> DiffResult:
        """Differences from ref ``a`` to ref ``b`` (the working tree when ``b`` is None).

        A run id alone shows what the run changed (its before and after snapshots).
        """
        if b is None:
            from strata.core.refs import run_span

            span = run_span(self, a)
            if span is not None:
                return self.diff_trees(span[0].tree, span[1].tree, paths=paths)
        left = self.resolve(a)
        if b is None:
            scan = self.workspace.scan(hash_only=True)
            return self.diff_trees(left.tree, scan.tree, scan.store, paths=paths)
        return self.diff_trees(left.tree, self.resolve(b).tree, paths=paths)

    def semantic_diff(
        self, a: str, b: str | None = None, *, paths: list[str] | None = None
    ) -> list[FileSemantics]:
        """What changed from ``a`` to ``b`` in a reader's terms: each file's semantic blocks.

        Each file goes through the diff handler its path selects (functions,
        JSON Pointers, headings, cells, image likeness); a handler that fails
        or times out falls back to line ranges and says why. Results are
        cached by blob pair in ``REPO/semantic/``.
        """
        from strata.changes.blocks import file_semantics

        return file_semantics(self, self.diff(a, b, paths=paths))

    def event_semantics(self, ref: str) -> EventSemantics:
        """A state event's ``diff_mode`` and ``semantic_blocks`` (computed on first read)."""
        from strata.changes.blocks import event_semantics

        point = self.resolve(ref)
        if point.event is None:
            raise UsageError(f"{ref!r} names no event")
        return event_semantics(self, point.event)

    def block_history(
        self, block_id: str, *, branch: str | None = None, limit: int | None = None
    ) -> list[tuple[Event, list[Block]]]:
        """The events, newest first, that touched ``block_id`` (``path::name``), across renames."""
        from strata.changes.blocks import block_history

        events = self.history(branch=branch)
        found = []
        for hit in block_history(self, block_id, events):
            found.append(hit)
            if limit is not None and len(found) >= limit:
                break
        return found

    def record_result(
        self,
        name: str,
        *,
        exit_code: int,
        duration_ms: int,
        anchor: str = "HEAD",
        command: Sequence[str] = (),
        run_id: str | None = None,
        junit: bytes | None = None,
        author: Author | None = None,
    ) -> ResultRecord:
        """Record a ``result`` event (a test or eval run) anchored to the state event ``anchor``.

        ``junit``: a JUnit XML report, whose totals become the result's metrics.
        """
        from strata.changes.results import record_result

        point = self.resolve(anchor)
        if point.event is None:
            raise UsageError(f"{anchor!r} names no recorded event to anchor a result to")
        return record_result(
            self,
            name=name,
            anchor=point.event.id,
            exit_code=exit_code,
            duration_ms=duration_ms,
            command=list(command),
            run_id=run_id,
            junit=junit,
            author=author,
        )

    def results(self, *, between: str | None = None, name: str | None = None) -> list[ResultRecord]:
        """Result events, newest first; ``between='A..B'``: anchored from A to B."""
        from strata.changes.results import list_results

        span = None
        if between is not None:
            left, sep, right = between.partition("..")
            if not sep or not left or not right:
                raise UsageError(f"--between {between!r}: give A..B (two refs)")
            a, b = self.resolve(left).event, self.resolve(right).event
            if a is None or b is None:
                raise UsageError(f"--between {between!r}: both ends must name events")
            span = (a, b)
        return list_results(self.history(), between=span, name=name)

    def result(self, ref: str) -> ResultRecord:
        """The result event ``ref`` names (its id or a unique prefix)."""
        from strata.changes.results import ResultRecord

        found = [r for r in self.results() if ref.strip() and r.event.id.startswith(ref.strip())]
        if not found:
            raise UnknownRef(ref, what="result", hint="'strata results list' names them")
        if len(found) > 1:
            raise UsageError(f"{ref!r} names {len(found)} results: give more of the id")
        return ResultRecord(found[0].event)

    def merge(
        self,
        left: str,
        right: str,
        *,
        policy: str = "text",
        message: str = "",
        resolutions: dict[str, dict[str, Any]] | None = None,
        no_ff: bool = False,
    ) -> MergeResult:
        """Merge ``right`` into ``left`` three-way at their lowest common ancestor.

        The result lands on ``left``'s branch: a ``merge`` state event, and
        Published moved to the result when that branch is HEAD's (any other
        branch just moves). When ``left`` is an ancestor of ``right`` its
        branch fast-forwards to ``right`` unless ``no_ff``. Recorded only when
        no conflict is left; ``resolutions`` settles conflicts:
        ``{path: {"choices": ["ours"|"theirs"|"both"|{"edit": text}, ...],
        "rationale": "one line"}}`` (one choice per hunk, or one for the file).
        """
        from strata.changes.merging import merge

        return merge(
            self,
            left,
            right,
            policy=policy,
            message=message,
            resolutions=resolutions,
            no_ff=no_ff,
        )

    def compare(self, left: str, right: str) -> Comparison:
        """Two attempts side by side from their common ancestor: files, blocks, results."""
        from strata.changes.compare import compare

        return compare(self, left, right, self.history())

    def rollup_candidates(
        self, *, min_events: int = 200, idle_ms: int = 600_000
    ) -> list[Candidate]:
        """Operations worth rolling up: ``min_events`` events or more, or idle with snapshots."""
        from strata.changes.rollups import propose

        return propose(self.history(), now_ms=self.clock(), min_events=min_events, idle_ms=idle_ms)

    def rollup(self, operation_id: str) -> Event:
        """Record the ``rollup`` of an operation (non-destructive: a summary event)."""
        from strata.changes.rollups import apply_rollup

        return apply_rollup(self, operation_id, self.history())

    def rollup_revert(self, rollup_id: str) -> Event:
        """Withdraw a standing rollup."""
        from strata.changes.rollups import revert_rollup

        return revert_rollup(self, rollup_id, self.history())

    def status(self) -> StatusResult:
        """The working tree against HEAD (stores nothing)."""
        scan = self.workspace.scan(hash_only=True)
        head = self.head()
        head_tree = self.tree_of(head) if head else self.head_tree()
        diff = self.diff_trees(head_tree, scan.tree, scan.store, stats=False)
        from strata.workbench.draft import REMINDER_ACTIONS, draft_reminder

        reminder = draft_reminder(self, now_ms=self.clock())
        view = self.view()
        # a branch named by 'rewind --branch' is HEAD's branch, not a detached HEAD
        detached = view.detached and not view.starting_branch
        return StatusResult(
            head,
            diff.files,
            scan.warnings + ([reminder, REMINDER_ACTIONS] if reminder else []),
            branch=None if detached else view.head_branch,
            next_branch=self.branch_for_new_state(view) if view.detached else None,
        )

    def show(self, ref: str, path: str) -> bytes:
        """The bytes of ``path`` as it was at ``ref`` (a symlink's target for a link)."""
        point = self.resolve(ref)
        entry = lookup(self.objects, point.tree, path.strip("/"))
        if entry is None:
            raise PathNotFound(path, ref)
        if entry.kind == "dir":
            names_ = [
                e.name + ("/" if e.kind == "dir" else "")
                for e in read_tree(self.objects, entry.oid)
            ]
            return "".join(n + "\n" for n in names_).encode()
        return self.objects.get(entry.oid)

    def export(self, ref: str, target: Path | str, *, threads: int | None = None) -> int:
        """Write the files of ``ref`` into an empty or new folder; return how many files.

        ``threads`` write the files (default: chosen from the CPUs and the files' sizes).
        """
        point = self.resolve(ref)
        from strata.store.materialize import export_tree

        try:
            return export_tree(self.objects, point.tree, Path(target), threads=threads)
        except OSError as exc:  # the folder given: a file in the way, no permission, no parent
            if exc.errno == errno.ENOSPC or exc.filename is None:
                raise
            raise ExportFailed(str(target), exc.strerror or str(exc)) from None

    def cat(self, oid: str) -> CatResult:
        """An object by id or unique prefix: ``kind`` tree (entries), snapshot (manifest), blob."""
        from strata.core import maintenance

        return maintenance.cat(self, oid)

    def check(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Verify every object hash and every reference; return the problems found."""
        return _check.check(self, progress=progress)

    def recover(self, *, abandon: bool = False) -> list[Recovery]:
        """Finish the journals interrupted commands left; with ``abandon``, give up stuck ones.

        See :func:`strata.core.restore.recover`. A journal that cannot be
        finished raises :class:`~strata.errors.JournalError` unless ``abandon``.
        The groups whose process died are closed too, and listed in
        :attr:`closed_groups` (see :func:`strata.core.groups.recover_groups`).
        """
        from strata.core.restore import recover

        with self.writing(finish_journals=False):
            done = recover(self, abandon=abandon)
            self.recover_leftovers()
        self.recovery_error = None
        return done

    def operations(self, *, limit: int | None = None) -> list[OperationRecord]:
        """The operation log, newest first."""
        from strata.core.results_ops import OperationRecord

        return [OperationRecord.from_json(o) for o in self.ledger.operations(limit=limit)]

    # -- moving the files ------------------------------------------------------------

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
        with self.transaction("rewind", author) as tx:
            self.guard_published("rewind", force=force)
            target = self.resolve(ref)  # refs are resolved before the auto-save
            if branch is not None and branch in tx.view.branches:
                raise NameTaken("branch", branch)
            head = tx.head()
            here = head is not None and target.event is not None and target.event.id == head.id
            if here and branch is None:
                scan = self.workspace.scan()
                if scan.tree == tx.head_tree():  # already there: nothing to record
                    from strata.core.results_ops import RewindResult
                    from strata.watch import served

                    tx.on_commit(lambda: served.when_replied(scan.save_cache))
                    return RewindResult(None, target, None, [], [])
            from strata.core.restore import restore_into  # (moving files: loaded when needed)

            result = restore_into(
                tx, target, ref, paths=None, event_type=EventType.REWIND, new_branch=branch
            )
        view = self.view()
        if view.detached:
            result.next_branch = self.branch_for_new_state(view)
        return result

    def restore(
        self, ref: str, paths: list[str], *, author: Author | None = None, force: bool = False
    ) -> RewindResult:
        """Put ``paths`` back as they were at ``ref``; HEAD moves only to an auto-save.

        Unrecorded work is auto-saved first (HEAD moves to it); the restored
        files are then unrecorded changes against HEAD.

        ``force`` restores even while a run holds the workspace lease.
        """
        if not paths:
            raise UsageError("name at least one path to restore (or use 'strata rewind')")
        with self.transaction("restore", author) as tx:
            self.guard_published("restore", force=force)
            target = self.resolve(ref)
            head_tree = tx.head_tree()
            for p in paths:
                if (
                    p
                    and lookup(self.objects, target.tree, p) is None
                    and lookup(self.objects, head_tree, p) is None
                ):
                    raise PathNotFound(p, ref)
            from strata.core.restore import restore_into

            return restore_into(tx, target, ref, paths=paths, event_type=EventType.RESTORE)

    def branch_switch(
        self, name: str, *, author: Author | None = None, force: bool = False
    ) -> RewindResult:
        """Move HEAD to branch ``name`` and its files (unrecorded work is auto-saved first).

        ``force`` switches even while a run holds the workspace lease.
        """
        with self.transaction("branch switch", author) as tx:
            self.guard_published("switch branches", force=force)
            view = tx.view
            if name not in view.branches:
                raise UnknownRef(name, hint="see 'strata branch list'", what="branch")
            target = self.resolve(name)
            after = moved(view, head_branch=name, head_event=view.branches[name])
            from strata.core.restore import restore_into

            return restore_into(
                tx,
                target,
                name,
                paths=None,
                event_type=EventType.BRANCH_SWITCH,
                after_view=after,
            )

    # -- refs -------------------------------------------------------------------------

    def branch_create(self, name: str, ref: str = "HEAD", *, author: Author | None = None) -> str:
        """Create branch ``name`` at ``ref``; return the event id it points at."""
        from strata.core import names

        return names.branch_create(self, name, ref, author=author)

    def branch_delete(self, name: str, *, author: Author | None = None) -> str:
        """Remove the name ``name`` (its events stay); return where it pointed."""
        from strata.core import names

        return names.branch_delete(self, name, author=author)

    def bookmark(
        self,
        action: str,
        name: str,
        *,
        ref: str | None = None,
        new_name: str | None = None,
        author: Author | None = None,
    ) -> BookmarkResult:
        """Change a bookmark: ``add``, ``move``, ``rename``, ``lock``, ``unlock`` or ``delete``."""
        from strata.core import names

        return names.bookmark(self, action, name, ref=ref, new_name=new_name, author=author)

    def undo(self, *, author: Author | None = None, step: bool = False) -> UndoResult:
        """Reverse the newest operation not yet undone, by appending its inverse.

        A step of a group (an agent's prompt) reverses the whole group; ``step``
        reverses only that step.
        """
        from strata.core import undo as undoing  # (it moves files: loaded when needed)

        return undoing.undo(self, author=author, step=step)

    def redo(self, *, author: Author | None = None) -> RedoResult:
        """Re-apply what the newest undo reversed."""
        from strata.core import undo as undoing

        return undoing.redo(self, author=author)

    # -- runs, the Draft and checkpoints ------------------------------------------------

    def execute_run(
        self,
        target: Sequence[str] | Callable[[], Any],
        *,
        workspace: WorkspaceOptions | None = None,
        author: Author | None = None,
        label: str = "",
        cwd: Path | None = None,
        around: Callable[[], AbstractContextManager[Any]] | None = None,
        artifacts: Callable[[], Sequence[str]] | None = None,
    ) -> RunResult:
        """Run ``target`` (an argv list or a callable) between two snapshots of the workspace.

        See :mod:`strata.runs.flow`: snapshot ``before``, execute, snapshot
        ``after`` (``after_failure`` when it fails), diff, optional rollback.
        A callable's exception is kept in the result (``raise_error()``).
        ``artifacts`` names, once the target ended, stored objects (model call
        traces) that the ``run`` event links.
        """
        from strata.runs.flow import execute_run

        return execute_run(
            self,
            target,
            workspace=workspace,
            author=author,
            label=label,
            cwd=cwd,
            around=around,
            artifacts=artifacts,
        )

    run_once = execute_run

    def draft(self, *, create: bool = True, author: Author | None = None) -> Draft:
        """The open Draft; when none is open, a new one (or :class:`NoDraft` if not ``create``)."""
        from strata.workbench.draft import current_draft, open_draft, start_draft

        found = open_draft(self)
        if found is not None:
            return found
        return start_draft(self, author=author) if create else current_draft(self)

    def run_agent(
        self,
        provider: Provider,
        prompt: str,
        *,
        max_steps: int = 8,
        agent_id: str = "agent",
        tool_choice: str | None = None,
        secrets: tuple[str, ...] = (),
        cancel: CancelToken | None = None,
        on_text: Callable[[str], None] | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
    ) -> AgentResult:
        """Run an agent on ``prompt``: its edits land in the Draft, one recorded revision per step.

        Every model and tool call is recorded as a trace linked from its
        step's revision (see :mod:`strata.agent.loop`); ``tool_choice`` names
        a tool the first step must call. Every step's request is kept within
        the model's context (:func:`strata.providers.window.fit_request`).
        """
        from strata.agent.loop import run_agent
        from strata.providers.window import context_window, input_budget

        return run_agent(
            self,
            provider,
            prompt,
            input_budget=input_budget(provider, context_window(provider)),
            max_steps=max_steps,
            agent_id=agent_id,
            tool_choice=tool_choice,
            secrets=secrets,
            cancel=cancel,
            on_text=on_text,
            on_step=on_step,
        )

    def workshop(
        self,
        conversation: str | None = None,
        *,
        provider: Provider | None = None,
        model: str | None = None,
        author: Author | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Workshop:
        """The Workshop: a conversation whose agent edits land in the Draft (issue 13).

        ``conversation`` picks one (an id or prefix; default: the most recent,
        or a new one). ``provider`` answers the turns; without it the model
        ``model`` (or the last switched to, or config.toml's default) is opened
        with the API keys of ``environ``. See :mod:`strata.workshop.session`.
        """
        from strata.workshop.session import workshop

        return workshop(
            self, conversation, provider=provider, model=model, author=author, environ=environ
        )

    def replay(
        self,
        span: str,
        *,
        dry_run: bool = False,
        commands: Commands | None = None,
        progress: Callable[[StepReplay], None] | None = None,
    ) -> ReplayReport:
        """Replay ``A..B`` offline and report the first divergence (see :mod:`strata.replay`)."""
        from strata.replay.engine import replay

        return replay(self, span, dry_run=dry_run, commands=commands, progress=progress)

    def preflight(
        self,
        *,
        patch: bytes | None = None,
        patch_name: str = "",
        check: str | Sequence[str] | None = None,
        timeout_s: float | None = None,
        sandbox: str = "bwrap",
        environ: Mapping[str, str] | None = None,
        author: Author | None = None,
        scratch: Path | str | None = None,
    ) -> PreflightResult:
        """Rebuild a proposal's base in a scratch folder, apply it, hash-verify it, check it.

        The proposal is ``patch`` (a unified diff applied onto HEAD's files)
        or, without one, the open Draft as a publish would write it. ``check``
        (a shell string or an argv) runs in the rebuilt files, in the
        bubblewrap sandbox with no network unless ``sandbox="none"``, for at
        most ``timeout_s`` seconds. One ``preflight`` event records the
        outcome and links the stored report. See :mod:`strata.replay.preflight`.
        """
        from strata.replay.preflight import DEFAULT_TIMEOUT_S, preflight

        return preflight(
            self,
            patch=patch,
            patch_name=patch_name,
            check=check,
            timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
            sandbox=sandbox,
            environ=environ,
            author=author,
            scratch=Path(scratch) if scratch is not None else None,
        )

    # -- the tool gateway ---------------------------------------------------------------

    def gateway(
        self,
        *,
        profile: str | None = None,
        approver: Approver | None = None,
        author: Author | None = None,
        max_steps: int | None = None,
    ) -> Gateway:
        """The tool gateway of this workspace: its policy (``[gateway]``), approvals, ``exec``.

        See :mod:`strata.gateway`. ``profile`` overrides config.toml's.
        """
        from strata.gateway import Gateway
        from strata.gateway.exec import DEFAULT_MAX_STEPS

        return Gateway(
            self,
            profile=profile,
            approver=approver,
            author=author,
            max_steps=DEFAULT_MAX_STEPS if max_steps is None else max_steps,
        )

    def exec(
        self,
        command: str | Sequence[str],
        *,
        profile: str | None = None,
        approver: Approver | None = None,
        author: Author | None = None,
        timeout_s: float | None = None,
        max_output: int | None = None,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """``terminal_exec``: run ``command`` (a shell string or an argv) through the gate.

        The policy decides; a command it wants approved goes to ``approver``;
        the run is recorded with its diff (see :mod:`strata.gateway.exec`).
        """
        from strata.gateway.exec import DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT_S

        return self.gateway(profile=profile, approver=approver, author=author).exec(
            command,
            timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
            max_output=DEFAULT_MAX_OUTPUT if max_output is None else max_output,
            cwd=cwd,
            env=env,
        )

    @property
    def checkpoints(self) -> Checkpoints:
        """The checkpoints of Published: list, create, restore."""
        from strata.workbench.checkpoints import Checkpoints

        return Checkpoints(self)

    @property
    def kb(self) -> KnowledgeBase:
        """The local knowledge base: index a snapshot's files, search and ask with citations.

        See :mod:`strata.kb` (``index``, ``search``, ``ask``).
        """
        from strata.kb import KnowledgeBase

        return KnowledgeBase(self)

    # -- the ledger itself ------------------------------------------------------------

    def convert_ledger(self, to: str) -> ConvertResult:
        """Copy every record to the ``to`` driver (same ids, same chain head) and switch to it.

        The old store is kept beside the new one (``ledger.db.old`` or
        ``ledger.old/``) until the next conversion.
        """
        from strata.core import maintenance

        return maintenance.convert_ledger(self, to)

    # -- storage: gc, repack, du ------------------------------------------------------

    def gc(self, *, dry_run: bool = False, grace_s: float | None = None) -> GcResult:
        """Remove the objects nothing the retention policy keeps can reach (``strata gc``).

        Also removes the kept Draft folder when no Draft is open, and the git
        backend's ``refs/strata/`` refs of runs no longer kept. ``grace_s``
        overrides ``retention.prune_grace_minutes``. See :mod:`strata.core.storage`.
        """
        from strata.core import storage
        from strata.runs.git import forget_imported, prune_refs
        from strata.workbench.draft import remove_kept_folder

        with self.writing():
            # the folder first: its stat cache must not outlive the blobs it names
            folder = remove_kept_folder(self, dry_run=dry_run)
            draft_cache = (self.layout.draft / "statcache").exists()
            if dry_run:
                draft_cache = self.layout.draft_state.exists()
            plan = storage.plan_gc(self, grace_s=grace_s, draft_cache=draft_cache)
            if not dry_run:
                removed = set(plan.dead_loose).union(*plan.dead_packed.values())
                forget_imported(self.layout.repo / "gitmap.db", removed)
            result = storage.collect(self, plan, dry_run=dry_run)
            result.draft_folder_bytes = folder
            result.bytes_freed += folder
            result.git_refs_removed = prune_refs(
                self,
                plan.kept_snapshots,
                now_ms=plan.now_ms,
                days=plan.retention.git_refs_days,
                dry_run=dry_run,
            )
        return result

    def repack(self) -> RepackResult:
        """Merge every pack and the loose objects into one pack (``strata repack``)."""
        from strata.core import storage

        with self.writing():
            return storage.repack(self)

    def metrics(self) -> Metrics:
        """The metrics of seed 004 §10, from the ledger and ``metrics.json`` (strata metrics)."""
        from strata.core.metrics import compute

        return compute(self.layout.repo, self.ledger.driver)

    def budget(self) -> BudgetUsage:
        """The storage budget (``[retention] max_size``) and what the repository uses of it."""
        from strata.core.budget import usage

        return usage(self)

    def du(self) -> DiskUsage:
        """The repository's size on disk by kind, and what gc would free now (``strata du``)."""
        from strata.core import storage

        plan = storage.plan_gc(self, draft_cache=self.layout.draft_state.exists())
        usage = storage.disk_usage(self, plan)
        usage.budget = self.budget().to_json()
        from strata.runs.git import GitWorkspace

        git = GitWorkspace.find(self.root)
        if git is not None:
            usage.outside["git_index"] = storage.tree_bytes(git.index)
            refs = git.git("for-each-ref", "--format=%(refname)", "refs/strata/")
            usage.counts["git_refs"] = len(refs.splitlines())
        return usage

    # -- the workspace digest (strata.digest) ----------------------------------------------

    def digest(
        self,
        *,
        session: str = "default",
        overrides: Path | str | None = None,
        tag: str | None = None,
    ) -> WorkspaceDigest:
        """The workspace digest: scan, show, set, clear, optimize (see :mod:`strata.digest`).

        ``session`` names the session slice; ``overrides`` is the overrides
        store's folder (None: overrides are neither read nor written) and
        ``tag`` the override :meth:`~strata.digest.WorkspaceDigest.show` reads.
        """
        from strata.digest import OverridesStore, WorkspaceDigest

        store = OverridesStore(Path(overrides)) if overrides is not None else None
        return WorkspaceDigest(self, session, store, tag)

    # -- the host loop (strata.host, seed 001) ---------------------------------------------

    def host(
        self,
        request: str,
        *,
        provider: Provider,
        approver: Approver | None = None,
        profile: str | None = None,
        max_steps: int | None = None,
        timeout_s: float | None = None,
        index: bool = True,
        author: Author | None = None,
        secrets: Sequence[str] = (),
        cancel: CancelToken | None = None,
        on_text: Callable[[str], None] | None = None,
        on_activity: Callable[[Activity], None] | None = None,
    ) -> HostResult:
        """Answer ``request`` as seed 001's host: retrieve, then answer or run a plan.

        See :mod:`strata.host`: the model (``provider``) searches the knowledge
        base, then answers with citations or emits capability tasks that run
        through this workspace's gateway (``approver`` answers what its policy
        wants approved); every step, plan and task is recorded.
        """
        from strata.host import loop

        return loop.run_host(
            self,
            provider,
            request,
            approver=approver,
            profile=profile,
            max_steps=loop.MAX_STEPS if max_steps is None else max_steps,
            timeout_s=loop.TIMEOUT_S if timeout_s is None else timeout_s,
            index=index,
            author=author,
            secrets=secrets,
            cancel=cancel,
            on_text=on_text,
            on_activity=on_activity,
        )
