"""The ledger: events, branches, bookmarks and operations over a driver.

Every command that changes repository state is one *operation*. Committing
an operation appends, in one atomic batch: its event records, one ``ref``
record per branch or HEAD move, one ``bookmark`` record per bookmark change,
and last the ``operation`` record, which carries the *view* before and after
(HEAD, every branch tip, every bookmark). The current view is the last
operation's ``view_after``; undo appends an operation whose view is an earlier
one (jj's operation log): nothing is ever erased.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from strata.errors import NothingToRedo, NothingToUndo, UsageError
from strata.ids import new_event_id
from strata.ledger.driver import EventFilter, LedgerConflict, LedgerDriver
from strata.ledger.events import format_ts
from strata.ledger.records import Record, verify_chain
from strata.redaction import Redactor

DEFAULT_BRANCH = "main"


@dataclass(frozen=True)
class Bookmark:
    """A named pointer to a state event; a locked one cannot move or be deleted."""

    target: str
    locked: bool = False

    def to_json(self) -> dict[str, Any]:
        """As stored in a view."""
        return {"target": self.target, "locked": self.locked}


@dataclass(frozen=True)
class View:
    """Where every ref points: HEAD (branch and position), branch tips, bookmarks."""

    head_branch: str = DEFAULT_BRANCH
    head_event: str | None = None
    branches: dict[str, str] = field(default_factory=dict)
    bookmarks: dict[str, Bookmark] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As stored in an operation record."""
        return {
            "head": {"branch": self.head_branch, "event": self.head_event},
            "branches": dict(sorted(self.branches.items())),
            "bookmarks": {k: v.to_json() for k, v in sorted(self.bookmarks.items())},
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> View:
        """Parse a stored view."""
        head = raw.get("head") or {}
        return cls(
            head_branch=str(head.get("branch") or DEFAULT_BRANCH),
            head_event=head.get("event"),
            branches={str(k): str(v) for k, v in (raw.get("branches") or {}).items()},
            bookmarks={
                str(k): Bookmark(str(v["target"]), bool(v.get("locked")))
                for k, v in (raw.get("bookmarks") or {}).items()
            },
        )

    @property
    def starting_branch(self) -> bool:
        """True when HEAD's branch has no event yet ('rewind --branch'): the next starts it."""
        return self.head_event is not None and self.head_branch not in self.branches

    @property
    def detached(self) -> bool:
        """True when HEAD is not at its branch's tip (the next state event starts a branch)."""
        return (
            self.head_event is not None and self.branches.get(self.head_branch) != self.head_event
        )


@dataclass
class Operation:
    """An operation being built; committed by :meth:`Ledger.commit`."""

    id: str
    command: str
    author: dict[str, Any]
    ts: str
    before: View
    after: View
    events: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    #: the user action this operation is a step of (``{"id", "kind", "title", "author", ...}``):
    #: an agent's prompt, whose tool calls are each an operation; undo reverses it whole
    group: dict[str, Any] | None = None
    #: once committed: the sequence number of the first of :attr:`events` (the others follow)
    first_seq: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The operation as JSON (kept in a journal until it is committed)."""
        return {
            "id": self.id,
            "command": self.command,
            "author": self.author,
            "ts": self.ts,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "events": self.events,
            "details": self.details,
            **({"group": self.group} if self.group else {}),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Operation:
        """The inverse of :meth:`to_json`."""
        return cls(
            id=raw["id"],
            command=raw["command"],
            author=raw["author"],
            ts=raw["ts"],
            before=View.from_json(raw["before"]),
            after=View.from_json(raw["after"]),
            events=list(raw["events"]),
            details=dict(raw.get("details") or {}),
            group=raw.get("group") or None,
        )

    def add_event(self, body: dict[str, Any]) -> dict[str, Any]:
        """Queue an event body (its ``operation_id`` defaults to the group's, else this one's)."""
        body.setdefault("operation_id", self.group["id"] if self.group else self.id)
        self.events.append(body)
        return body


class _Held:
    """One thread's driver, kept in the thread's locals: collected when the thread ends."""

    __slots__ = ("__weakref__", "driver", "finalizer", "generation")

    def __init__(self, driver: LedgerDriver, generation: int, opened: _OpenDrivers) -> None:
        self.driver = driver
        self.generation = generation
        #: closes the driver when this holder is collected (its thread ended)
        self.finalizer = weakref.finalize(self, opened.release, driver)
        self.finalizer.atexit = False


class _OpenDrivers:
    """Every driver open in any thread, so that closing the ledger closes them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._drivers: list[LedgerDriver] = []

    def add(self, driver: LedgerDriver) -> None:
        with self._lock:
            self._drivers.append(driver)

    def discard(self, driver: LedgerDriver) -> None:
        with self._lock:
            self._drivers = [d for d in self._drivers if d is not driver]

    def release(self, driver: LedgerDriver) -> None:
        self.discard(driver)
        driver.close()

    def take_all(self) -> list[LedgerDriver]:
        with self._lock:
            drivers, self._drivers = self._drivers, []
        return drivers


class Ledger:
    """Events, refs and operations, stored through a :class:`LedgerDriver`.

    Each thread reads and writes through its own driver (a SQLite connection
    or a JSONL reader belongs to one thread): ``driver`` is the calling
    thread's, opened with ``opener`` on first use and closed when the thread
    ends or the ledger is closed. Without an ``opener`` the ledger has only
    the driver it was made with and is for one thread.
    """

    def __init__(
        self,
        driver: LedgerDriver,
        *,
        opener: Callable[[], LedgerDriver] | None = None,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        #: values never written (the environment's secrets), beside what looks like a secret
        self.secrets = secrets
        self._opener = opener
        self._local = threading.local()
        #: bumped by :meth:`switch` and :meth:`close`: an older driver is replaced on next use
        self._generation = 0
        self._opened = _OpenDrivers()
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._rng = rng or random.Random()
        self._last_ms = 0
        #: which workspace this ledger writes for: on a shared ledger (a driver with
        #: ``lanes``) each workspace has its own HEAD
        self.workspace = ""
        self.driver = driver

    @property
    def driver(self) -> LedgerDriver:
        """The calling thread's driver (opened on the thread's first use)."""
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.generation == self._generation:
            return held.driver
        if self._opener is None:
            raise RuntimeError("this ledger has no driver opener: use it from one thread only")
        if held is not None:
            held.finalizer()  # the stale driver is closed now
        self.driver = self._opener()
        current: _Held = self._local.held
        return current.driver

    @driver.setter
    def driver(self, driver: LedgerDriver) -> None:
        """Make ``driver`` the calling thread's (the caller closes the one it replaces)."""
        old: _Held | None = getattr(self._local, "held", None)
        if old is not None:
            old.finalizer.detach()
            self._opened.discard(old.driver)
        self._opened.add(driver)
        self._local.held = _Held(driver, self._generation, self._opened)

    def switch(self, driver: LedgerDriver) -> None:
        """Make ``driver`` the calling thread's and have every other thread open a new one.

        Used when the ledger moves to another store (a conversion); the caller
        closes the calling thread's old driver, the others are closed on their
        thread's next use, when their thread ends, or by :meth:`close`.
        """
        self._generation += 1
        self.driver = driver

    def close(self) -> None:
        """Release every thread's driver."""
        self._generation += 1  # a thread using the ledger after this opens a new driver
        for driver in self._opened.take_all():
            driver.close()

    # -- ids and time --------------------------------------------------------------

    def now_ms(self) -> int:
        """Milliseconds since the epoch, never going backwards within this ledger."""
        now = max(self._clock(), self._last_ms)
        self._last_ms = now
        return now

    def new_id(self) -> str:
        """A fresh event or operation id."""
        return new_event_id(self._rng)

    # -- the view ------------------------------------------------------------------

    @property
    def shared(self) -> bool:
        """True on a ledger shared by workspaces: one chain and one queue per branch."""
        return bool(getattr(self.driver, "lanes", False))

    def view(self) -> View:
        """The current view (empty before the first operation).

        On a shared ledger, made of where each ref points now (every writer's
        branches and bookmarks) and this workspace's own HEAD; a workspace new
        to the ledger starts where the ledger's HEAD was before it was shared,
        else at the tip of ``main``.
        """
        if self.shared:
            return self._shared_view()
        last = self.driver.last_of_kind("operation")
        if last is None:
            return View()
        return View.from_json(last.body["view_after"])

    def _shared_view(self) -> View:
        refs: dict[str, Any] = self.driver.refs()  # type: ignore[attr-defined]
        branches = {
            k.removeprefix("branch/"): str(v) for k, v in refs.items() if k.startswith("branch/")
        }
        bookmarks = {
            k.removeprefix("bookmark/"): Bookmark(str(v["target"]), bool(v.get("locked")))
            for k, v in refs.items()
            if k.startswith("bookmark/")
        }
        head = refs.get(f"HEAD@{self.workspace}") or refs.get("HEAD")
        if head is None:
            tip = branches.get(DEFAULT_BRANCH)
            head = {"branch": DEFAULT_BRANCH, "event": tip}
        return View(
            head_branch=str(head.get("branch") or DEFAULT_BRANCH),
            head_event=head.get("event"),
            branches=branches,
            bookmarks=bookmarks,
        )

    def chain_head(self) -> str:
        """The hash of the newest record ("" for an empty ledger)."""
        last = self.driver.last()
        return last.hash if last else ""

    def chain_heads(self) -> dict[str, str]:
        """The hash of each branch's newest record on a shared ledger.

        ``""`` names the records without a branch; on a ledger of one chain,
        ``{"": chain_head()}``.
        """
        if self.shared:
            heads: dict[str, str] = self.driver.lane_heads()  # type: ignore[attr-defined]
            return heads
        head = self.chain_head()
        return {"": head} if head else {}

    # -- operations ----------------------------------------------------------------

    def begin(
        self,
        command: str,
        author: dict[str, Any],
        *,
        group: dict[str, Any] | None = None,
        **details: Any,
    ) -> Operation:
        """Start an operation from the current view (a step of ``group`` when given)."""
        view = self.view()
        return Operation(
            id=self.new_id(),
            command=command,
            author=author,
            ts=format_ts(self.now_ms()),
            before=view,
            after=view,
            details=details,
            group=group,
        )

    def commit(self, op: Operation) -> Record:
        """Append the operation's records atomically; return its operation record.

        On a shared ledger the records are chained in the lane of the branch
        HEAD was on, and refused (:class:`~strata.errors.CorruptRepository`'s
        ``LedgerConflict``, naming the events missed) when another writer
        recorded on that branch, or moved a ref this operation moves, since;
        an undo or redo is fitted first (:meth:`settle_reversal`).
        """
        self.settle_reversal(op)
        # a shared ledger gives the seq itself: no need to read its last record
        last = None if self.shared else self.driver.last()
        redactor = Redactor(self.secrets)
        for body in op.events:
            # what an event says (its rationale, a command in its data) never carries a
            # secret into the ledger; its paths and ids are kept as they are
            if body.get("rationale"):
                body["rationale"] = redactor.text(str(body["rationale"]))
            if body.get("data"):
                body["data"] = redactor.value(body["data"])
        if op.group and op.group.get("title"):
            op.group = {**op.group, "title": redactor.text(str(op.group["title"]))}
        records = seal_operation(
            op.events,
            {
                "id": op.id,
                "command": op.command,
                "ts": op.ts,
                "author": op.author,
                "events": [e["id"] for e in op.events],
                "view_before": op.before.to_json(),
                "view_after": op.after.to_json(),
                **({"workspace": self.workspace} if self.shared and self.workspace else {}),
                **({"details": op.details} if op.details else {}),
                **({"group": op.group} if op.group else {}),
            },
            op.before,
            op.after,
            last=last,
            **(
                {
                    "lane": op.before.head_branch,
                    "lane_prev": self.driver.lane_head(op.before.head_branch),  # type: ignore[attr-defined]
                    "workspace": self.workspace,
                }
                if self.shared
                else {}
            ),
        )
        if self.shared:
            records = self.driver.append_lane(records)  # type: ignore[attr-defined]
        else:
            self.driver.append(records)
        op.first_seq = records[0].seq if op.events else 0
        return records[-1]

    def leave_shared(self, target: LedgerDriver) -> Record | None:
        """Close a copy of this shared ledger's records in ``target`` with this workspace's view.

        A ledger of one workspace (SQLite, JSONL) takes its view from its last
        operation record, which on a shared ledger is whichever workspace
        wrote last, as that workspace saw it. When that is not the view here
        (every branch and bookmark where it points now, this workspace's own
        HEAD), one operation record ``ledger convert`` is appended to
        ``target``, with no event and the same view before and after (undo
        steps over it); its details keep every workspace's HEAD. Returns it,
        or None when the copy's view was already this one.
        """
        if not self.shared:
            return None
        view = self.view()
        last_op = target.last_of_kind("operation")
        if last_op is not None and View.from_json(last_op.body["view_after"]) == view:
            return None
        refs: dict[str, Any] = self.driver.refs()  # type: ignore[attr-defined]
        heads = {
            name.removeprefix("HEAD@"): value
            for name, value in sorted(refs.items())
            if name.startswith("HEAD@")
        }
        operation = {
            "id": self.new_id(),
            "command": "ledger convert",
            "ts": format_ts(self.now_ms()),
            "author": {"name": "strata", "kind": "system"},
            "events": [],
            "view_before": view.to_json(),
            "view_after": view.to_json(),
            "details": {"from": "postgresql", "workspace": self.workspace, "heads": heads},
        }
        records = seal_operation([], operation, view, view, last=target.last())
        target.append(records)
        return records[-1]

    # -- reading events ------------------------------------------------------------

    def event(self, event_id: str) -> dict[str, Any]:
        """The body of the event with this full id; KeyError if none."""
        record = self.driver.seek_event(event_id)
        if record is None:
            raise KeyError(event_id)
        return record.body

    def events(
        self,
        where: EventFilter | None = None,
        *,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> Iterator[dict[str, Any]]:
        """Event bodies passing the filters."""
        for record in self.driver.find_events(
            where or EventFilter(), limit=limit, newest_first=newest_first
        ):
            yield record.body

    def operations(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Operation records, newest first (on a shared ledger, this workspace's only)."""
        out: list[dict[str, Any]] = []
        mine = self.workspace if self.shared else None
        for record in self.driver.scan(kind="operation", reverse=True):
            if mine is not None and record.body.get("workspace", mine) != mine:
                continue  # another workspace's: its undo is its own
            out.append({"seq": record.seq, **record.body})
            if limit is not None and len(out) >= limit:
                break
        return out

    def ancestors(self, event_id: str) -> Iterator[dict[str, Any]]:
        """The state event ``event_id`` and its ancestors through ``parent_event_id``."""
        current: str | None = event_id
        while current:
            body = self.event(current)
            yield body
            current = body.get("parent_event_id")

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """True when ``ancestor`` is ``descendant`` or one of its ancestors."""
        return any(b["id"] == ancestor for b in self.ancestors(descendant))

    # -- undo and redo -------------------------------------------------------------

    def undo_target(self) -> dict[str, Any]:
        """The operation ``undo`` would reverse: the newest one not yet undone.

        Undo operations themselves are skipped together with what they undid,
        so undoing twice reverses two operations.
        """
        undone: set[str] = set()
        for op in self.operations():
            details = op.get("details") or {}
            if op["command"] in ("auto_save", "gc") or self.changes_nothing(op):
                continue  # part of the command that needed it; gc moves no ref and no file
            if op["command"] == "undo":
                undone.add(details["undid"])
                undone.update(details.get("undid_also", ()))  # the rest of an undone run
                continue
            if op["id"] in undone:
                continue  # reversed by a newer undo (a redo too)
            if op["command"] == "redo":
                undone.discard(details["redid"])
                # the redo itself is what the next undo reverses
                return op
            if op["id"] in undone:
                continue
            return op
        raise NothingToUndo()

    def changes_nothing(self, op: dict[str, Any]) -> bool:
        """True for an operation undo and redo step over: it only recorded something.

        See :func:`changes_nothing`; a run's closing operation counts when the run
        changed no file (its ``before`` and ``after`` marks name the same state).
        """
        if op["command"] != "run" or op.get("view_before") != op.get("view_after"):
            return changes_nothing(op)
        run_id = (op.get("details") or {}).get("run_id")
        if not run_id:
            return False
        marks: dict[str, str | None] = {}
        for record in self.driver.find_events(
            EventFilter(operation_id=str(run_id), action_type="workspace_snapshot_taken"),
            limit=None,
        ):
            body = record.body
            label = str((body.get("data") or {}).get("label"))
            marks.setdefault(label, body.get("anchor_event_id"))
        before = marks.get("before")
        after = marks.get("after", marks.get("after_failure"))
        return before is not None and before == after

    def redo_target(self) -> dict[str, Any]:
        """The undo that ``redo`` would reverse: the newest undo not yet redone.

        Only undos and redos may stand between it and the newest operation, so
        ``undo, undo, redo, redo`` re-applies both.
        """
        redone = 0
        for op in self.operations():
            if op["command"] == "redo":
                redone += 1
            elif op["command"] == "undo":
                if redone == 0:
                    return op
                redone -= 1
            elif op["command"] in ("auto_save", "gc") or self.changes_nothing(op):
                continue  # saved by the undo or redo that follows it; gc changes no view
            else:
                break
        raise NothingToRedo()

    # -- undo on a shared ledger ---------------------------------------------------

    def settle_reversal(self, op: Operation) -> None:
        """Fit an undo or redo to a shared ledger; refuse one another workspace overtook.

        An undo (``details["undid"]``, ``undid_also``) sets the view the undone
        operations found, a redo (``details["redid"]``, ``undo``) the one they
        left. On a shared ledger other workspaces move branches and bookmarks
        meanwhile: of those, the reversal moves only the refs the reversed
        operations moved (every other one stays where it is now, in
        ``op.after``), and only when each still points where they left it.
        When another writer moved one since, the reversal would drop that
        writer's work from the branch: it is refused with
        :class:`~strata.ledger.driver.LedgerConflict`, naming the events missed,
        before anything is written. The same holds on a ledger converted back
        from a shared one, for the operations recorded while it was shared.
        Nothing to do for operations recorded on a ledger of one workspace,
        or for any other operation.
        """
        details = op.details
        if "undid" in details:
            ids = {str(details["undid"]), *(str(i) for i in details.get("undid_also") or ())}
        elif "redid" in details and details.get("undo"):
            ids = {str(details["undo"])}
        else:
            return
        reversed_ops = self._operations_by_id(ids)
        if not reversed_ops or not (self.shared or any("workspace" in r for r in reversed_ops)):
            return  # one workspace's ledger, and operations recorded there
        moves: set[tuple[str, str]] = set()
        for raw in reversed_ops:
            moves |= _refs_moved(
                View.from_json(raw["view_before"]), View.from_json(raw["view_after"])
            )
        # what the reversed operations left: the newest one's view after
        left = View.from_json(reversed_ops[-1]["view_after"])
        now, wanted = op.before, op.after
        branches = dict(wanted.branches)
        bookmarks = dict(wanted.bookmarks)
        for kind, name in sorted(_refs_moved(now, wanted)):
            if (kind, name) in moves:
                continue
            # moved since by another workspace, never by what is reversed: it stays
            table: dict[str, Any] = branches if kind == "branch" else bookmarks
            found = (now.branches if kind == "branch" else now.bookmarks).get(name)
            if found is None:
                table.pop(name, None)
            else:
                table[name] = found
        command = "redo" if "redid" in details else "undo"
        for kind, name in sorted(moves):
            if kind == "branch" and now.branches.get(name) != left.branches.get(name):
                raise LedgerConflict(
                    f"refused: {command} would move branch {name} back, but another workspace "
                    "recorded on it since; nothing was written",
                    missed=self._events_since(now.branches.get(name), left.branches.get(name)),
                    hint=f"their work is on {name} now: restore the files you want back and "
                    "snapshot them, or rewind to start a branch from before your change",
                )
            if kind == "bookmark" and now.bookmarks.get(name) != left.bookmarks.get(name):
                mark = now.bookmarks.get(name)
                where = f"to {mark.target}" if mark else "away (deleted)"
                raise LedgerConflict(
                    f"refused: {command} would move bookmark {name} back, but another workspace "
                    f"moved it {where} since; nothing was written",
                    hint="move the bookmark by hand: strata bookmark move",
                )
        op.after = replace(wanted, branches=branches, bookmarks=bookmarks)

    def _operations_by_id(self, ids: set[str]) -> list[dict[str, Any]]:
        """The operation records with these ids, oldest first."""
        found: list[dict[str, Any]] = []
        left = set(ids)
        for record in self.driver.scan(kind="operation", reverse=True):
            if record.body.get("id") in left:
                found.append(record.body)
                left.discard(str(record.body["id"]))
                if not left:
                    break
        return found[::-1]

    def _events_since(self, now: str | None, tip: str | None, most: int = 50) -> list[str]:
        """Ids of the state events from ``tip`` (excluded) to ``now``, oldest first.

        What a branch at ``now`` holds that it did not at ``tip``: ``now`` and its
        parents back to ``tip`` (at most ``most`` of them).
        """
        missed: list[str] = []
        if now is None:
            return missed
        with contextlib.suppress(KeyError):  # an event named but missing: say what was found
            for body in self.ancestors(now):
                if body["id"] == tip or len(missed) >= most:
                    break
                missed.append(str(body["id"]))
        return missed[::-1]

    def verify(self) -> str | None:
        """The first broken link of the hash chain, or None."""
        return verify_chain(self.driver.scan())


#: operations that only record what happened (an audit trail: a tool call, an approval,
#: a question answered): with no ref moved and no file written, undo has nothing to reverse
RECORD_ONLY = frozenset(
    {
        "workspace_snapshot_taken",
        "workspace_diff_computed",
        "tool_call_started",
        "tool_call_finished",
        "terminal_step_started",
        "terminal_step_finished",
        "approval_requested",
        "approval_decided",
        "file_artifact",
        "kb_ask",
        "model_calls",
        "host_run_started",
        "agent_step",
        "host_step",
        "plan_created",
        "task_started",
        "task_finished",
        "host_run_finished",
        "preflight",
        "replay",
    }
)

#: details of an operation that say it changed something a handler of undo reverses
_CHANGED = ("tree_before", "tree_after", "workshop", "draft_tree_before", "undid", "redid")


def seal_operation(
    events: list[dict[str, Any]],
    operation: dict[str, Any],
    before: View,
    after: View,
    *,
    last: Record | None,
    lane: str | None = None,
    lane_prev: str = "",
    workspace: str = "",
) -> list[Record]:
    """The records of one operation, hash-chained after the record ``last`` (None: first).

    ``lane``: sealed in that branch's chain instead, after the hash
    ``lane_prev`` (the driver gives the ``seq``), and HEAD's ref record names
    the ``workspace`` whose HEAD it is (a shared ledger).

    In their order in the ledger: the ``events``, one ``ref`` record per branch
    (sorted by name) and for HEAD, one ``bookmark`` record per bookmark, for
    what moved from ``before`` to ``after``, then the ``operation`` record
    itself. The ledger's commits and the migration of old ledgers seal
    operations here, so both write the same chain.
    """
    seq, prev = (last.seq, last.hash) if last else (0, "")
    if lane is not None:
        prev = lane_prev
    records: list[Record] = []

    def add(kind: str, body: dict[str, Any]) -> None:
        nonlocal seq, prev
        seq += 1
        record = Record.seal(seq, kind, body, prev, lane=lane)  # type: ignore[arg-type]
        records.append(record)
        prev = record.hash

    op_id = operation["id"]
    for body in events:
        add("event", body)
    for name in sorted(before.branches.keys() | after.branches.keys()):
        old, new = before.branches.get(name), after.branches.get(name)
        if old != new:
            add("ref", {"name": f"branch/{name}", "old": old, "new": new, "operation_id": op_id})
    if (before.head_branch, before.head_event) != (after.head_branch, after.head_event):
        add(
            "ref",
            {
                "name": "HEAD",
                "old": {"branch": before.head_branch, "event": before.head_event},
                "new": {"branch": after.head_branch, "event": after.head_event},
                "operation_id": op_id,
                **({"workspace": workspace} if workspace else {}),
            },
        )
    for name in sorted(before.bookmarks.keys() | after.bookmarks.keys()):
        old_b, new_b = before.bookmarks.get(name), after.bookmarks.get(name)
        if old_b != new_b:
            add(
                "bookmark",
                {
                    "name": name,
                    "old": old_b.to_json() if old_b else None,
                    "new": new_b.to_json() if new_b else None,
                    "operation_id": op_id,
                },
            )
    add("operation", operation)
    return records


def _refs_moved(before: View, after: View) -> set[tuple[str, str]]:
    """The branches and bookmarks (``("branch" | "bookmark", name)``) that differ."""
    moved_refs = {
        ("branch", name)
        for name in before.branches.keys() | after.branches.keys()
        if before.branches.get(name) != after.branches.get(name)
    }
    return moved_refs | {
        ("bookmark", name)
        for name in before.bookmarks.keys() | after.bookmarks.keys()
        if before.bookmarks.get(name) != after.bookmarks.get(name)
    }


def changes_nothing(op: dict[str, Any]) -> bool:
    """True for an operation ``undo`` skips: no ref moved, no file written, only a record.

    An operation with no event at all (a review that found the Draft as recorded), or
    one of :data:`RECORD_ONLY`; never one that moved a ref or carries files to put back.
    """
    if op.get("view_before") != op.get("view_after"):
        return False
    details = op.get("details") or {}
    if any(key in details for key in _CHANGED):
        return False
    return not op.get("events") or op["command"] in RECORD_ONLY


def check_ref_name(name: str, *, what: str) -> str:
    """Validate a branch or bookmark name: it must not look like an id or a ref expression."""
    from strata.ids import looks_like_id

    parts = name.split("/")
    if (
        not name
        or name in ("HEAD", "@")
        or any(c in name for c in " ~:^\\*?[")
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
        or name.startswith("-")
        or "@{" in name
        or any(not p or p.startswith(".") or p.endswith((".", ".lock")) for p in parts)
    ):
        raise UsageError(
            f"invalid {what} name {name!r}",
            hint="names follow git's rules: no spaces, no '..', no part starting with '.', "
            "no ~ ^ : ? * [ \\",
        )
    if looks_like_id(name):
        raise UsageError(
            f"{what} name {name!r} looks like an id; pick a name with other characters "
            "(ids use hex digits or the letters ghjkmnpqrstvwxyz)"
        )
    return name


def moved(view: View, **changes: Any) -> View:
    """A copy of ``view`` with fields replaced (dicts are copied, never shared)."""
    base = replace(view, branches=dict(view.branches), bookmarks=dict(view.bookmarks))
    return replace(base, **changes)
