"""The results of the operations a snapshot never returns (rewind, undo, bookmarks, ...).

Kept apart from :mod:`strata.core.results` because making a dataclass costs
about half a millisecond of ``exec`` at import: a command that never builds
these (a snapshot, a status) does not pay for them. Both modules' names are
imported from :mod:`strata.core` (it loads this one on first use of one of
them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.core.results import Point, SnapshotResult
from strata.ids import EventId, ObjectId
from strata.ledger.events import Author, Event
from strata.ledger.ledger import View


@dataclass
class ImportResult:
    """What importing another repository's events brought in.

    ``branches`` maps each branch name of the source to the name it has here
    (its own, or ``git-runs/<name>`` when this repository already has that name).
    """

    events: int = 0
    runs: int = 0
    branches: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The import as JSON."""
        return {"events": self.events, "runs": self.runs, "branches": self.branches}


@dataclass
class InitResult:
    """What ``init`` did: whether it created the repository, and what it brought in.

    ``imported`` counts the events of git-backed runs recorded (inside
    ``.git``) before the workspace had a repository of its own;
    ``git_exclude`` is the git exclude file the ``.strata`` pointer was added to.
    """

    workspace: str
    repository: str
    ledger: str
    created: bool
    imported: ImportResult = field(default_factory=ImportResult)
    git_exclude: str | None = None
    snapshot: SnapshotResult | None = None
    """The first snapshot, of the folder as it was (None: none was taken, or it was empty)."""

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata init --json`` prints."""
        first = self.snapshot.event if self.snapshot is not None else None
        return {
            "workspace": self.workspace,
            "repository": self.repository,
            "ledger": self.ledger,
            "created": self.created,
            "imported_events": self.imported.events,
            "imported_runs": self.imported.runs,
            "git_exclude": self.git_exclude,
            "snapshot": None
            if first is None or self.snapshot is None
            else {
                "event_id": first.id,
                "snapshot_id": self.snapshot.snapshot_id,
                "files": self.snapshot.diff.files_changed if self.snapshot.diff else 0,
                "warnings": self.snapshot.warnings,
            },
        }


@dataclass
class RewindResult:
    """What ``rewind`` or ``restore`` did.

    ``event`` is its annotation; None for an undo that emptied the view (no
    state event is left to annotate: the operation record tells what happened).
    """

    event: Event | None
    target: Point
    auto_save: Event | None
    restored_paths: list[str]
    skipped_paths: list[str]
    next_branch: str | None = None
    """After a rewind to a point that is not a branch tip: the branch the next snapshot starts."""

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata rewind --json`` prints."""
        return {
            "event_id": self.event.id if self.event else None,
            "target_event_id": self.target.event.id if self.target.event else None,
            "target_snapshot_id": self.target.snapshot_id,
            "auto_save_event_id": self.auto_save.id if self.auto_save else None,
            "restored_paths": self.restored_paths,
            "skipped_paths": self.skipped_paths,
            "next_branch": self.next_branch,
        }


@dataclass(frozen=True)
class OperationRecord:
    """One entry of the operation log: a command that changed the repository."""

    id: str
    seq: int
    command: str
    ts: str
    author: Author
    events: tuple[EventId, ...]
    view_before: View
    view_after: View
    details: dict[str, Any] = field(default_factory=dict)
    group: dict[str, Any] | None = None
    """The user action this operation is a step of (an agent's prompt), when it is one."""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> OperationRecord:
        """Parse a stored ``operation`` record body (with its ``seq``)."""
        return cls(
            id=str(raw["id"]),
            seq=int(raw.get("seq") or 0),
            command=str(raw["command"]),
            ts=str(raw["ts"]),
            author=Author.from_json(raw["author"]),
            events=tuple(EventId(e) for e in raw.get("events") or ()),
            view_before=View.from_json(raw["view_before"]),
            view_after=View.from_json(raw["view_after"]),
            details=dict(raw.get("details") or {}),
            group=raw.get("group") or None,
        )

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata op log --json`` prints for each operation."""
        return {
            "seq": self.seq,
            "id": self.id,
            "command": self.command,
            "ts": self.ts,
            "author": self.author.to_json(),
            "event_ids": list(self.events),
            "view_before": self.view_before.to_json(),
            "view_after": self.view_after.to_json(),
            **({"details": self.details} if self.details else {}),
            **({"group": self.group} if self.group else {}),
        }


@dataclass(frozen=True)
class UndoResult:
    """What ``undo`` reversed."""

    undid: str
    command: str
    ts: str
    operation_id: str
    run_id: str | None = None
    """The run the undone operation ended (the id ``strata run`` and ``strata exec`` print)."""
    group: dict[str, Any] | None = None
    """The group (an agent's prompt) undone whole, when the operation was a step of one."""

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata undo --json`` prints."""
        return {
            "undone_operation_id": self.undid,
            "command": self.command,
            "ts": self.ts,
            "operation_id": self.operation_id,
            "group": self.group,
        }


@dataclass(frozen=True)
class RedoResult:
    """What ``redo`` re-applied."""

    redid: str
    command: str
    operation_id: str

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata redo --json`` prints."""
        return {
            "redone_operation_id": self.redid,
            "command": self.command,
            "operation_id": self.operation_id,
        }


@dataclass(frozen=True)
class BookmarkResult:
    """A bookmark after a change (``deleted`` when it is gone)."""

    name: str
    action: str
    target: EventId | None
    locked: bool
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata bookmark … --json`` prints."""
        if self.deleted:
            return {"name": self.name, "action": self.action, "deleted": True}
        return {
            "name": self.name,
            "action": self.action,
            "target_event_id": self.target,
            "locked": self.locked,
        }


@dataclass(frozen=True)
class ConvertResult:
    """What ``convert_ledger`` did."""

    driver: str
    records: int
    head: str
    backup: str

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata ledger convert --json`` prints."""
        return {
            "driver": self.driver,
            "records": self.records,
            "head": self.head,
            "backup": self.backup,
        }


@dataclass(frozen=True)
class CatResult:
    """A stored object: ``kind`` is ``tree`` (entries), ``snapshot`` (manifest) or ``blob``."""

    object_id: ObjectId
    kind: str
    value: Any

    def __iter__(self) -> Any:
        """Unpack as ``kind, value`` (the shape of earlier versions)."""
        return iter((self.kind, self.value))
