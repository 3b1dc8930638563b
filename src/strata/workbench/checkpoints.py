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

from strata.core.restore import restore_into
from strata.errors import AmbiguousRef, UnknownRef, UsageError
from strata.ids import EventId, SnapshotId
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author, Event, EventType
from strata.schemas import fields_json

if TYPE_CHECKING:
    from strata.core import Core, RewindResult, Transaction

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
        return fields_json(self)


class Checkpoints:
    """The checkpoints of a repository (``repo.checkpoints``)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def list(self) -> list[Checkpoint]:
        """Every checkpoint, newest first."""
        records = self.core.ledger.driver.find_events(
            EventFilter(action_type=EventType.CHECKPOINT), limit=None
        )
        events = (Event.from_json(r.body, seq=r.seq) for r in records)
        return [Checkpoint.from_event(e) for e in events if e.anchor_event_id is not None]

    def create(self, message: str = "", *, author: Author | None = None) -> Checkpoint:
        """Record Published and protect it as a ``manual`` checkpoint."""
        return create_checkpoint(self.core, kind="manual", message=message, author=author)

    def get(self, checkpoint_id: str) -> Checkpoint:
        """The checkpoint with this id (or unique prefix)."""
        found = [c for c in self.list() if c.id.startswith(checkpoint_id.strip())]
        if not checkpoint_id.strip() or not found:
            raise UnknownRef(checkpoint_id, hint="see 'strata checkpoint list'")
        if len(found) > 1:
            raise AmbiguousRef(checkpoint_id, [c.id for c in found])
        return found[0]

    def restore(self, checkpoint_id: str, *, author: Author | None = None) -> RewindResult:
        """Put Published back as the checkpoint holds it (a ``pre_restore`` checkpoint first)."""
        core = self.core
        with core.writing():
            core.guard_published("restore a checkpoint")
            checkpoint = self.get(checkpoint_id)
            target = core.point(core.event(checkpoint.event_id), checkpoint.id)
            create_checkpoint(
                core,
                kind="pre_restore",
                message=f"before restoring checkpoint {checkpoint.id}",
                author=author,
            )
            with core.transaction("checkpoint restore", author) as tx:
                return restore_into(
                    tx,
                    target,
                    f"checkpoint {checkpoint.id}",
                    paths=None,
                    event_type=EventType.CHECKPOINT_RESTORE,
                    details={"checkpoint_id": checkpoint.id},
                )


def create_checkpoint(
    core: Core, *, kind: str, message: str = "", author: Author | None = None
) -> Checkpoint:
    """Auto-save Published, then record a checkpoint of it (one operation)."""
    if kind not in KINDS:
        raise UsageError(f"unknown checkpoint kind {kind!r}")
    with core.transaction("checkpoint", author, kind=kind) as tx:
        tx.auto_save(f"a {kind} checkpoint")
        event = record_checkpoint(tx, kind=kind, message=message, author=author)
    return Checkpoint.from_event(core.event(event.id))


def record_checkpoint(
    tx: Transaction, *, kind: str, message: str = "", author: Author | None = None
) -> Event:
    """Record HEAD (as ``tx`` leaves it) as a checkpoint: an event and a locked bookmark."""
    head = tx.head()
    if head is None:
        raise UsageError("nothing is recorded yet: there is nothing to checkpoint")
    event = tx.annotate(
        EventType.CHECKPOINT,
        anchor=head.id,
        rationale=message,
        author=author,
        data={"kind": kind, "snapshot_id": head.snapshot_ref},
    )
    tx.bookmark(f"checkpoint/{event.id}", head.id, locked=True)
    return event
