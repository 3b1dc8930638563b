"""Events: the records of the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from strata.errors import UsageError
from strata.ids import EventId, SnapshotId

AuthorKind = Literal["human", "agent", "llm", "system"]
AUTHOR_KINDS: tuple[str, ...] = ("human", "agent", "llm", "system")

#: action types that carry a snapshot and form the history graph
STATE_ACTIONS = frozenset({"snapshot", "auto_save"})


@dataclass(frozen=True)
class Author:
    """Who made a change."""

    name: str
    kind: AuthorKind = "human"

    def __post_init__(self) -> None:
        if self.kind not in AUTHOR_KINDS:
            raise UsageError(
                f"unknown author kind {self.kind!r}; use one of {', '.join(AUTHOR_KINDS)}"
            )
        if not self.name:
            raise UsageError("the author name is empty")

    def to_json(self) -> dict[str, str]:
        """The author as a JSON object."""
        return {"name": self.name, "kind": self.kind}


@dataclass(frozen=True)
class Event:
    """One append-only ledger record."""

    id: EventId
    ts: str
    author: Author
    action_type: str
    rationale: str = ""
    files: tuple[str, ...] = ()
    snapshot_ref: SnapshotId | None = None
    parent_event_id: EventId | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0

    @property
    def is_state(self) -> bool:
        """True for events that carry a snapshot (they form the history graph)."""
        return self.snapshot_ref is not None

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object (the shape ``--json`` prints)."""
        return {
            "id": self.id,
            "ts": self.ts,
            "author": self.author.to_json(),
            "action_type": self.action_type,
            "rationale": self.rationale,
            "files": list(self.files),
            "snapshot_ref": self.snapshot_ref,
            "parent_event_id": self.parent_event_id,
            **({"data": self.data} if self.data else {}),
        }


def format_ts(ts_ms: int) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-11-22T03:49:46.123Z``."""
    dt = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON used for stored columns."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
