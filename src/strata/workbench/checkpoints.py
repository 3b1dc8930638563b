"""Checkpoints: protected, restorable snapshots of Published.

A checkpoint is stored as two things written by one ledger operation
(``checkpoint``):

* an annotation event ``checkpoint`` anchored at Published's state event
  (``data``: ``kind`` publish|manual|pre_restore, ``message``); its id is the
  checkpoint's id;
* a locked bookmark ``checkpoint/<id>`` at that state event, so what it
  reaches is never collected and cannot be moved by accident.

Published is auto-saved first, so a checkpoint always holds the real files.
Restoring one takes a ``pre_restore`` checkpoint, then moves HEAD and the
files to it like ``rewind`` (an operation ``strata undo`` reverses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.errors import UnknownRef, UsageError
from strata.ids import EventId, SnapshotId
from strata.ledger.events import Author, Event
from strata.ledger.ledger import Bookmark, moved

if TYPE_CHECKING:
    from strata.repo import Repository, RewindResult

KINDS = ("publish", "manual", "pre_restore")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of Published."""

    id: EventId
    ts: str
    kind: str
    message: str
    event_id: EventId
    snapshot_id: SnapshotId | None

    @classmethod
    def from_event(cls, event: Event) -> Checkpoint:
        """The checkpoint an annotation event ``checkpoint`` records."""
        assert event.anchor_event_id is not None
        return cls(
            id=event.id,
            ts=event.ts,
            kind=str(event.data.get("kind", "manual")),
            message=event.rationale,
            event_id=event.anchor_event_id,
            snapshot_id=event.data.get("snapshot_id"),
        )

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata checkpoint list --json`` prints for each entry."""
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "message": self.message,
            "event_id": self.event_id,
            "snapshot_id": self.snapshot_id,
        }


class Checkpoints:
    """The checkpoints of a repository (``repo.checkpoints``)."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    def list(self) -> list[Checkpoint]:
        """Every checkpoint, newest first."""
        return [
            Checkpoint.from_event(e)
            for e in self.repo.history(action="checkpoint")
            if e.anchor_event_id is not None
        ]

    def create(self, message: str = "", *, author: Author | None = None) -> Checkpoint:
        """Record Published and protect it as a ``manual`` checkpoint."""
        return create_checkpoint(self.repo, kind="manual", message=message, author=author)

    def get(self, checkpoint_id: str) -> Checkpoint:
        """The checkpoint with this id (or unique prefix)."""
        found = [c for c in self.list() if c.id.startswith(checkpoint_id.strip())]
        if not checkpoint_id.strip() or not found:
            raise UnknownRef(checkpoint_id, hint="see 'strata checkpoint list'")
        if len(found) > 1:
            from strata.errors import AmbiguousRef

            raise AmbiguousRef(checkpoint_id, [c.id for c in found])
        return found[0]

    def restore(self, checkpoint_id: str, *, author: Author | None = None) -> RewindResult:
        """Put Published back as the checkpoint holds it (a ``pre_restore`` checkpoint first)."""
        repo = self.repo
        with repo._writing():
            repo._guard_published("restore a checkpoint")
            checkpoint = self.get(checkpoint_id)
            target = repo._point(repo._event(checkpoint.event_id), checkpoint.id)
            create_checkpoint(
                repo,
                kind="pre_restore",
                message=f"before restoring checkpoint {checkpoint.id}",
                author=author,
            )
            return repo._restore(
                target,
                f"checkpoint {checkpoint.id}",
                paths=None,
                author=author,
                command="checkpoint restore",
                details={"checkpoint_id": checkpoint.id},
            )


def create_checkpoint(
    repo: Repository, *, kind: str, message: str = "", author: Author | None = None
) -> Checkpoint:
    """Auto-save Published, then record a checkpoint of it."""
    from strata.repo import SYSTEM

    if kind not in KINDS:
        raise UsageError(f"unknown checkpoint kind {kind!r}")
    with repo._writing():
        repo._snapshot(f"auto-save for a {kind} checkpoint", author=SYSTEM, action_type="auto_save")
        head = repo.head()
        assert head is not None
        op = repo._begin("checkpoint", author, kind=kind)
        event = repo._new_event(
            "checkpoint",
            author=author,
            rationale=message,
            branch=op.before.head_branch,
            anchor=EventId(head.id),
            data={"kind": kind, "snapshot_id": head.snapshot_ref},
            operation_id=op.id,
        )
        op.add_event(event.to_json())
        marks = {**op.before.bookmarks, f"checkpoint/{event.id}": Bookmark(head.id, True)}
        op.after = moved(op.before, bookmarks=marks)
        repo._commit(op)
        return Checkpoint.from_event(repo._event(event.id))
