"""The one unit of work: every command that changes a repository is a transaction.

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

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from strata.core.results import SnapshotResult
from strata.errors import UsageError
from strata.ids import EventId, ObjectId, SnapshotId
from strata.ledger.events import ACTION_SCOPES, Author, Event, EventType, format_ts
from strata.ledger.ledger import Bookmark, Operation, View, moved
from strata.store.tree import EMPTY_TREE
from strata.watch import served

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.workspace import Scan, Workspace
    from strata.store.materialize import Action, Journal, RestoreReport


class Transaction:
    """A unit of work over one repository; use it as a context manager."""

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
        from strata.core.core import SYSTEM

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
