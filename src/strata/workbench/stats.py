"""Local usage statistics of the Workshop and its Drafts, read from the ledger alone.

Seed 000 asks for local-only telemetry: how many Workshop turns, Draft
changes generated and applied, how often undo is used and how far chat
rewinds go, how often the model is switched, and why turns failed. Every one
of those facts is already an event in the ledger; :func:`workshop_stats`
counts them. Nothing is stored and nothing is sent anywhere.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.ledger.driver import EventFilter
from strata.ledger.events import EventType

if TYPE_CHECKING:
    from strata.core import Core

__all__ = ["WorkshopStats", "failure_category", "workshop_stats"]


@dataclass
class WorkshopStats:
    """The counts :func:`workshop_stats` found."""

    conversations: int = 0
    turns: int = 0
    answers: int = 0
    failed_turns: int = 0
    interrupted_turns: int = 0
    drafts_opened: int = 0
    drafts_published: int = 0
    drafts_discarded: int = 0
    draft_revisions: int = 0
    undos: int = 0
    redos: int = 0
    chat_rewinds: int = 0
    #: how many messages each chat rewind stepped back over, by distance
    rewind_distances: Counter[int] = field(default_factory=Counter)
    model_switches: int = 0
    #: answers by the model that gave them
    models: Counter[str] = field(default_factory=Counter)
    #: failed turns by category (provider, validation, disk, interrupted, other)
    failure_categories: Counter[str] = field(default_factory=Counter)
    #: failed turns by the error's type (``ProviderError``, ``EditRefused``…)
    failure_types: Counter[str] = field(default_factory=Counter)

    @property
    def undo_rate(self) -> float | None:
        """Undos per Workshop turn (None before the first turn)."""
        return round(self.undos / self.turns, 3) if self.turns else None

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata stats --json`` prints under ``stats``."""
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "answers": self.answers,
            "failed_turns": self.failed_turns,
            "interrupted_turns": self.interrupted_turns,
            "drafts": {
                "opened": self.drafts_opened,
                "published": self.drafts_published,
                "discarded": self.drafts_discarded,
                "revisions": self.draft_revisions,
            },
            "undo": {
                "undos": self.undos,
                "redos": self.redos,
                "undos_per_turn": self.undo_rate,
                "chat_rewinds": self.chat_rewinds,
                "rewind_distances": {str(k): v for k, v in sorted(self.rewind_distances.items())},
            },
            "models": {
                "switches": self.model_switches,
                "answers_by_model": dict(self.models.most_common()),
            },
            "failures": {
                "by_category": dict(self.failure_categories.most_common()),
                "by_type": dict(self.failure_types.most_common()),
            },
        }


def failure_category(error_type: str, interrupted: bool = False) -> str:
    """The seed's reason for a failed turn: provider, validation, disk, interrupted or other."""
    if interrupted or error_type in ("Interrupted", "KeyboardInterrupt", "ProviderCancelled"):
        return "interrupted"
    if error_type.startswith("Provider") or error_type in ("ModelUnavailable", "ConnectionError"):
        return "provider"
    if error_type in ("OSError", "DiskFull", "PermissionError", "StorageError", "NoSpace"):
        return "disk"
    if any(word in error_type for word in ("Refused", "Invalid", "Validation", "Limit")):
        return "validation"
    return "other"


def _events(core: Core, kind: str) -> list[dict[str, Any]]:
    return list(core.ledger.events(EventFilter(action_type=kind), newest_first=False))


def workshop_stats(core: Core) -> WorkshopStats:
    """Count the ledger's Workshop turns, Drafts, undos, rewinds, model switches and failures."""
    stats = WorkshopStats()
    parents: dict[str, str | None] = {}
    conversations: set[str] = set()
    for body in _events(core, EventType.USER_MESSAGE):
        stats.turns += 1
        data = body.get("data") or {}
        parents[str(body["id"])] = data.get("parent")
        conversations.add(str(data.get("conversation", "")))
    for body in _events(core, EventType.ASSISTANT_MESSAGE):
        data = body.get("data") or {}
        parents[str(body["id"])] = data.get("parent")
        stats.answers += 1
        if data.get("model"):
            stats.models[str(data["model"])] += 1
        error = data.get("error")
        if isinstance(error, dict):
            kind = str(error.get("type") or "Error")
            interrupted = bool(data.get("interrupted"))
            stats.failed_turns += 1
            stats.interrupted_turns += interrupted
            stats.failure_types[kind] += 1
            stats.failure_categories[failure_category(kind, interrupted)] += 1
    rewinds: list[dict[str, Any]] = []
    for body in _events(core, EventType.SYSTEM_EVENT):
        data = body.get("data") or {}
        parents[str(body["id"])] = data.get("parent")
        card = data.get("kind")
        if card == "conversation_created":
            conversations.add(str(data.get("conversation", "")))
        elif card == "model_switch":
            stats.model_switches += 1
        elif card == "rewind":
            rewinds.append(data)
    stats.conversations = len(conversations)
    for data in rewinds:
        stats.chat_rewinds += 1
        stats.rewind_distances[_distance(parents, data.get("from"), data.get("to"))] += 1
    drafts: set[str] = set()
    for kind in (EventType.DRAFT_REVISION, EventType.PUBLISH, EventType.DISCARD):
        for body in _events(core, kind):
            draft_id = (body.get("data") or {}).get("draft_id")
            if draft_id:
                drafts.add(str(draft_id))
            if kind == EventType.DRAFT_REVISION:
                stats.draft_revisions += 1
            elif kind == EventType.PUBLISH:
                stats.drafts_published += 1
            else:
                stats.drafts_discarded += 1
    from strata.workbench.draft import open_draft

    current = open_draft(core)
    if current is not None:
        drafts.add(current.id)
    stats.drafts_opened = len(drafts)
    # every undo is an operation of its own (a Workshop undo records no undo event)
    commands = Counter(str(op.get("command")) for op in core.ledger.operations())
    stats.undos, stats.redos = commands["undo"], commands["redo"]
    return stats


def _distance(parents: dict[str, str | None], start: Any, target: Any) -> int:
    """Messages from ``start`` back to ``target`` along the parent links (0 when unknown)."""
    steps, current = 0, start if isinstance(start, str) else None
    while current and current != target and steps < 100_000:
        current = parents.get(current)
        steps += 1
    return steps if current == target and current else 0
