"""The Workshop's conversations, kept as ledger events: append-only, in history, crash-safe.

Every record of a conversation is an annotation event anchored at HEAD (the
Published state the workspace was in), of one of four types:
``user_message``, ``assistant_message``, ``system_event`` and
``summary_message``. A record's id is its event id. Its ``data``:

* ``conversation``: the conversation's id (``conv_…``);
* ``text``: what it says (an assistant message's final text);
* ``parent``: the record before it in the transcript (None for the first),
  or absent for an *off-chain* record (a rewind, undo or regenerate note: in
  the log for the audit trail, never in the transcript);
* ``head``: the conversation's head once the record is appended (a chained
  record's own id; an off-chain one names where it moved the head);
* for an assistant message: ``draft_revision`` (the Draft revision event its
  turn left, None for a turn with no Draft), ``draft_id``, ``tool_calls``,
  ``traces``, ``steps``, ``model``, and ``error``/``interrupted`` when its
  turn failed;
* for a system event: ``kind`` (:data:`SYSTEM_KINDS`) and what it is about.

The conversation's head is the ``head`` of its newest record, so a record
and the head it sets are written by one ledger operation: a crash leaves
both or neither. The transcript is the chain from the head back through
``parent`` links (linear: a rewind moves the head back, and the records
after it stay in the log, inactive). The model in use is the ``model`` of
the newest ``model_switch`` of any conversation (the workspace default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from strata.errors import AmbiguousRef, UnknownRef
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author, Event, EventType
from strata.schemas import fields_json
from strata.store.tree import EMPTY_TREE

if TYPE_CHECKING:
    from strata.core import Core, Transaction

#: the event types of a conversation's records
TYPES: tuple[str, ...] = (
    EventType.USER_MESSAGE,
    EventType.ASSISTANT_MESSAGE,
    EventType.SYSTEM_EVENT,
    EventType.SUMMARY_MESSAGE,
)
#: the kinds of ``system_event``
SYSTEM_KINDS = (
    "conversation_created",
    "model_switch",
    "draft_created",
    "draft_published",
    "draft_discarded",
    "checkpoint_publish",
    "checkpoint_restore",
    "rewind",
    "regenerate",
    "undo",
    "context_compressed",
)


@dataclass(frozen=True)
class ChatMessage:
    """One record of a conversation (a message or a system event card)."""

    id: str
    kind: str  # user_message | assistant_message | system_event | summary_message
    text: str
    ts: str
    data: dict[str, Any] = field(default_factory=dict)
    draft_revision: str | None = None
    conversation: str = ""
    parent: str | None = None
    seq: int = 0

    @property
    def chained(self) -> bool:
        """True when the record belongs in a transcript (not an off-chain note)."""
        return bool(self.data.get("chain", True))

    @property
    def system_kind(self) -> str | None:
        """A system event's kind (``model_switch``, ``checkpoint_publish``…), else None."""
        return str(self.data["kind"]) if self.kind == EventType.SYSTEM_EVENT else None

    @classmethod
    def from_event(cls, event: Event) -> ChatMessage:
        """The record an event holds."""
        data = dict(event.data)
        revision = data.get("draft_revision")
        return cls(
            id=event.id,
            kind=str(event.action_type),
            text=str(data.get("text", "")),
            ts=event.ts,
            data=data,
            draft_revision=str(revision) if revision else None,
            conversation=str(data.get("conversation", "")),
            parent=data.get("parent"),
            seq=event.seq,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as JSON (what ``strata chat log --json`` lists)."""
        extra = {
            k: v
            for k, v in self.data.items()
            if k not in ("text", "conversation", "parent", "draft_revision", "chain", "head")
        }
        return {
            "id": self.id,
            "kind": self.kind,
            "system_kind": self.system_kind,
            "text": self.text,
            "ts": self.ts,
            "conversation": self.conversation,
            "parent": self.parent,
            "draft_revision": self.draft_revision,
            "data": extra,
        }


@dataclass(frozen=True)
class ConversationInfo:
    """A conversation of the workspace, as ``strata chat list`` shows it."""

    id: str
    title: str
    created_ts: str
    updated_ts: str
    records: int
    head: str | None

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return fields_json(self)


def all_records(core: Core) -> list[ChatMessage]:
    """Every conversation record of the workspace, oldest first."""
    found: list[ChatMessage] = []
    for kind in TYPES:
        for record in core.ledger.driver.find_events(EventFilter(action_type=kind), limit=None):
            found.append(ChatMessage.from_event(Event.from_json(record.body, seq=record.seq)))
    found.sort(key=lambda m: m.seq)
    return found


class ConversationLog:
    """Every record of one conversation, read from the ledger."""

    def __init__(self, conversation: str, records: list[ChatMessage]) -> None:
        self.conversation = conversation
        self.records = records
        self.by_id = {r.id: r for r in records}

    @classmethod
    def load(cls, core: Core, conversation: str) -> ConversationLog:
        """The conversation's records as the ledger has them now."""
        return cls(conversation, [r for r in all_records(core) if r.conversation == conversation])

    @property
    def head(self) -> str | None:
        """The conversation's head: where its newest record left it."""
        if not self.records:
            return None
        head = self.records[-1].data.get("head")
        return str(head) if head else None

    def transcript(self, head: str | None = None) -> list[ChatMessage]:
        """The chain from the first record to ``head`` (default: the current head)."""
        current = self.head if head is None else head
        chain: list[ChatMessage] = []
        while current:
            record = self.by_id.get(current)
            if record is None:
                break
            chain.append(record)
            current = record.parent
        chain.reverse()
        return chain

    def find(self, message_id: str) -> ChatMessage:
        """The record ``message_id`` names (a full id or a unique prefix of 4+ characters)."""
        wanted = message_id.strip()
        hint = "see 'strata chat log' for the messages' ids"
        if len(wanted) < 4:
            raise UnknownRef(message_id, hint=hint)
        found = [r for r in self.records if r.id.startswith(wanted)]
        if not found:
            raise UnknownRef(message_id, hint=hint)
        if len(found) > 1:
            raise AmbiguousRef(message_id, [r.id for r in found])
        return found[0]


def conversations(core: Core) -> list[ConversationInfo]:
    """Every conversation of the workspace, the most recently active first."""
    grouped: dict[str, list[ChatMessage]] = {}
    for record in all_records(core):
        grouped.setdefault(record.conversation, []).append(record)
    infos: list[ConversationInfo] = []
    for cid, records in grouped.items():
        title = next(
            (str(r.data.get("title")) for r in records if r.data.get("title")),
            next((r.text[:60] for r in records if r.kind == EventType.USER_MESSAGE), ""),
        )
        log = ConversationLog(cid, records)
        infos.append(
            ConversationInfo(cid, title, records[0].ts, records[-1].ts, len(records), log.head)
        )
    last_seq = {cid: records[-1].seq for cid, records in grouped.items()}
    infos.sort(key=lambda i: last_seq[i.id], reverse=True)
    return infos


def latest_conversation(core: Core) -> str | None:
    """The conversation with the newest record (the one a Workshop reopens), or None."""
    records = all_records(core)
    return records[-1].conversation if records else None


def active_model(core: Core) -> str | None:
    """The model the newest ``model_switch`` chose (the workspace's default), or None."""
    records = core.ledger.driver.find_events(
        EventFilter(action_type=EventType.SYSTEM_EVENT), limit=None
    )
    for record in records:  # newest first
        data = record.body.get("data") or {}
        if data.get("kind") == "model_switch":  # an undo may switch back to no choice (None)
            return str(data["model"]) if data.get("model") else None
    return None


def append(
    tx: Transaction,
    kind: str,
    conversation: str,
    *,
    text: str = "",
    parent: str | None = None,
    chain: bool = True,
    head: str | None = None,
    data: dict[str, Any] | None = None,
    author: Author | None = None,
    artifacts: tuple[str, ...] = (),
) -> Event:
    """Append one record to ``conversation`` within ``tx``; return its event.

    ``artifacts`` are stored objects the record links (the traces of a turn's
    steps that made no Draft revision: a question's model calls).

    A chained record follows ``parent`` in the transcript and becomes the
    head; an off-chain record (``chain=False``) moves the head to ``head``.
    """
    body: dict[str, Any] = {"conversation": conversation, "text": text, **(data or {})}
    if chain:
        body["parent"] = parent
    else:
        body["chain"] = False
    head_event = tx.head()
    if head_event is None:  # nothing recorded yet: a record is anchored at Published's state
        tx.auto_save("the conversation's first record")
        head_event = tx.head()
        if head_event is None:  # an empty workspace: recorded as it is
            tx.record(EMPTY_TREE, "the workspace before the conversation")
            head_event = tx.head()
    summary = text.strip().splitlines()[0][:120] if text.strip() else ""
    label = body.get("kind") or kind
    event = tx.annotate(
        kind,
        anchor=head_event.id if head_event else None,
        rationale=f"{label}: {summary}" if summary else str(label),
        data=body,
        author=author,
        artifacts=artifacts,
    )
    tx.update_data(event.id, head=event.id if chain else head)
    return replace(event, data={**body, "head": event.id if chain else head})
