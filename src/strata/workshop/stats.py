"""The Workshop's local telemetry, computed from the ledger: nothing is counted elsewhere or sent.

Seed 000 asks for local-only counts: Workshop turns, Draft changes generated
and applied, undo use and rewind distances, model switches, and why turns
failed. Every one of them is a fact the ledger already holds (the
conversation's records, the Draft's revisions, the operations), so
:func:`workshop_stats` reads them back; ``strata stats`` prints it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.ledger.driver import EventFilter
from strata.ledger.events import Event, EventType
from strata.workshop.conversation import ChatMessage, ConversationLog, all_records

if TYPE_CHECKING:
    from strata.core import Core

#: an error type -> the reason it is counted under
_REASONS = {
    "WorkshopStepLimit": "step_limit",
    "WorkshopLoopDetected": "loop",
    "AgentLoopDetected": "loop",
    "ProviderCancelled": "cancelled",
    "KeyboardInterrupt": "cancelled",
    "Interrupted": "killed",
    "WorkshopPlanMissing": "validation",
    "ToolArgumentsInvalid": "validation",
    "UsageError": "validation",
}


def failure_reason(error_type: str) -> str:
    """The reason a failed turn is counted under (provider, validation, disk, cancelled…)."""
    if error_type in _REASONS:
        return _REASONS[error_type]
    if error_type.startswith("Provider"):
        return "provider"
    if error_type in ("OSError", "DiskFull", "UnsafeWorkspacePath", "WorkspaceChanged"):
        return "disk"
    return "other"


@dataclass(frozen=True)
class WorkshopStats:
    """What ``strata stats`` prints (see :func:`workshop_stats`)."""

    conversations: int = 0
    turns: int = 0
    turns_failed: int = 0
    turns_with_edits: int = 0
    draft_revisions: int = 0
    drafts_started: int = 0
    drafts_published: int = 0
    drafts_discarded: int = 0
    rewinds: int = 0
    rewind_distances: dict[int, int] = field(default_factory=dict)
    regenerates: int = 0
    undos: int = 0
    workshop_undos: int = 0
    model_switches: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)
    failure_types: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata stats --json`` prints."""
        return {
            "conversations": self.conversations,
            "turns": {
                "total": self.turns,
                "failed": self.turns_failed,
                "with_edits": self.turns_with_edits,
                "failure_reasons": dict(sorted(self.failure_reasons.items())),
                "failure_types": dict(sorted(self.failure_types.items())),
            },
            "draft_changes": {
                "generated": self.draft_revisions,
                "applied": self.turns_with_edits,
            },
            "drafts": {
                "started": self.drafts_started,
                "published": self.drafts_published,
                "discarded": self.drafts_discarded,
            },
            "rewinds": {
                "total": self.rewinds,
                "distances": {str(k): v for k, v in sorted(self.rewind_distances.items())},
            },
            "regenerates": self.regenerates,
            "undo": {"total": self.undos, "of_workshop": self.workshop_undos},
            "model_switches": self.model_switches,
        }


def workshop_stats(core: Core) -> WorkshopStats:
    """The Workshop's counts, read from the ledger (one pass over its records and operations).

    A turn is an assistant message; it *failed* when the message carries an
    error (its reason from the error's type, :func:`failure_reason`); it *has
    edits* (its changes applied) when one of its steps' Draft revisions
    changed files. Draft changes generated are the Draft revisions of
    Workshop steps that changed files. A rewind's distance is the
    number of answers it took back.
    """
    # the Draft revisions of Workshop steps, and how many files each changed
    changed: dict[str, int] = {}
    for r in core.ledger.driver.find_events(
        EventFilter(action_type=EventType.DRAFT_REVISION), limit=None
    ):
        event = Event.from_json(r.body, seq=r.seq)
        if "workshop" in (event.data or {}):
            changed[event.id] = int(event.data.get("files_changed") or 0)
    records = all_records(core)
    by_conversation: dict[str, list[ChatMessage]] = {}
    for record in records:
        by_conversation.setdefault(record.conversation, []).append(record)
    turns = failed = with_edits = rewinds = regenerates = switches = undos = 0
    reasons: Counter[str] = Counter()
    types: Counter[str] = Counter()
    distances: Counter[int] = Counter()
    for conversation, own in by_conversation.items():
        log: ConversationLog | None = None
        for record in own:
            if record.kind == EventType.ASSISTANT_MESSAGE:
                turns += 1
                error = record.data.get("error")
                if error:
                    failed += 1
                    named = str(error.get("type") if isinstance(error, dict) else error)
                    types[named] += 1
                    reasons[failure_reason(named)] += 1
                steps = record.data.get("steps") or ()
                if any(changed.get(str(s), 0) for s in steps if s):  # a step changed files
                    with_edits += 1
            card = record.system_kind
            if card == "rewind":
                rewinds += 1
                log = log or ConversationLog(conversation, own)
                distances[_distance(log, record)] += 1
            elif card == "regenerate":
                regenerates += 1
            elif card == "model_switch":
                switches += 1
            elif card == "undo":
                undos += 1
    revisions = sum(1 for n in changed.values() if n)
    commands = Counter(str(op.get("command")) for op in core.ledger.operations())
    return WorkshopStats(
        conversations=len(by_conversation),
        turns=turns,
        turns_failed=failed,
        turns_with_edits=with_edits,
        draft_revisions=revisions,
        drafts_started=commands["draft start"],
        drafts_published=commands["publish"],
        drafts_discarded=commands["discard"],
        rewinds=rewinds,
        rewind_distances=dict(distances),
        regenerates=regenerates,
        undos=commands["undo"],
        workshop_undos=undos,
        model_switches=switches,
        failure_reasons=dict(reasons),
        failure_types=dict(types),
    )


def _distance(log: ConversationLog, rewind: ChatMessage) -> int:
    """How many answers a rewind took back (between its ``to`` and the head it left)."""
    start, target = rewind.data.get("from"), rewind.data.get("to")
    if not start or not target:
        return 0
    chain = log.transcript(str(start))
    ids = [r.id for r in chain]
    if target not in ids:
        return 0
    after = chain[ids.index(str(target)) + 1 :]
    return sum(1 for r in after if r.kind == EventType.ASSISTANT_MESSAGE)


__all__ = ["WorkshopStats", "failure_reason", "workshop_stats"]
