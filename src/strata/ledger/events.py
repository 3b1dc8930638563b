"""Events: the records of the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from strata.errors import CorruptRepository, UsageError
from strata.ids import EventId, SnapshotId

AuthorKind = Literal["human", "agent", "llm", "system"]
AUTHOR_KINDS: tuple[str, ...] = ("human", "agent", "llm", "system")


@dataclass(frozen=True)
class Author:
    """Who made a change."""

    name: str
    kind: AuthorKind = "human"
    version: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in AUTHOR_KINDS:
            raise UsageError(
                f"unknown author kind {self.kind!r}; use one of {', '.join(AUTHOR_KINDS)}"
            )
        if not self.name:
            raise UsageError("the author name is empty")

    def to_json(self) -> dict[str, str]:
        """The author as a JSON object."""
        out = {"name": self.name, "kind": self.kind}
        if self.version:
            out["version"] = self.version
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Author:
        """Parse a stored author."""
        return cls(str(raw["name"]), raw["kind"], raw.get("version"))


class EventType(StrEnum):
    """Every ``action_type`` Strata writes: one enum, one naming scheme (snake_case)."""

    # state events: they carry a snapshot and form the history graph
    SNAPSHOT = "snapshot"
    AUTO_SAVE = "auto_save"
    DRAFT_REVISION = "draft_revision"
    PUBLISH = "publish"
    # annotation events: they point at a state event
    REWIND = "rewind"
    RESTORE = "restore"
    BRANCH_SWITCH = "branch_switch"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_RESTORE = "checkpoint_restore"
    UNDO = "undo"
    REDO = "redo"
    ROLLBACK = "rollback"
    MERGE = "merge"
    DISCARD = "discard"
    RUN = "run"
    WORKSPACE_SNAPSHOT_TAKEN = "workspace_snapshot_taken"
    WORKSPACE_DIFF_COMPUTED = "workspace_diff_computed"
    PREFLIGHT = "preflight"
    REPLAY = "replay"
    # one step of an agent-like loop that changed no file (a host step, the digest's
    # optimizer); a step that changed the Draft's files is its draft_revision. Both carry
    # the step's fields in ``data.step`` (strata.agent.step.step_data)
    AGENT_STEP = "agent_step"
    # written by earlier versions for what is now an agent_step (read, never written):
    # the workspace digest's optimize call, and a host step
    DIGEST_OPTIMIZE = "digest_optimize"
    # the tool gateway (gateway/): terminal_exec, its approvals and what it changed
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_FINISHED = "tool_call_finished"
    TERMINAL_STEP_STARTED = "terminal_step_started"
    TERMINAL_STEP_FINISHED = "terminal_step_finished"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    FILE_ARTIFACT = "file_artifact"
    # the knowledge base: a question answered from retrieved passages (its model call linked)
    KB_ASK = "kb_ask"
    # ``strata proxy``: the model calls it recorded (their traces in ``artifacts``)
    MODEL_CALLS = "model_calls"
    # the Workshop's conversation (issue 13): annotation events anchored at HEAD
    USER_MESSAGE = "user_message"
    ASSISTANT_MESSAGE = "assistant_message"
    SYSTEM_EVENT = "system_event"
    SUMMARY_MESSAGE = "summary_message"
    # the host loop (strata.host, seed 001): a run, its model steps, its plans and tasks
    HOST_RUN_STARTED = "host_run_started"
    HOST_STEP = "host_step"  # (an agent_step now: read, never written)
    PLAN_CREATED = "plan_created"
    TASK_STARTED = "task_started"
    TASK_FINISHED = "task_finished"
    HOST_RUN_FINISHED = "host_run_finished"
    # result events (seed 004 §5.6): a test or eval run judged, anchored to its snapshot
    RESULT = "result"
    # rollups (seed 004 §5.5, §7.1): an operation's events summed up, and the undoing of one
    ROLLUP = "rollup"
    ROLLUP_REVERT = "rollup_revert"

    @classmethod
    def parse(cls, value: str) -> EventType:
        """The event type ``value`` names (older ledgers wrote ``branch switch``)."""
        try:
            return cls(value.strip().replace(" ", "_").replace("-", "_"))
        except ValueError:
            raise UsageError(
                f"unknown event type {value!r}; use one of {', '.join(t.value for t in cls)}"
            ) from None


#: names that stand for several event types in ``history --action`` (the tool gateway's)
ACTION_FAMILIES: dict[str, tuple[EventType, ...]] = {
    "approval": (EventType.APPROVAL_REQUESTED, EventType.APPROVAL_DECIDED),
    "tool_call": (EventType.TOOL_CALL_STARTED, EventType.TOOL_CALL_FINISHED),
    "terminal_step": (EventType.TERMINAL_STEP_STARTED, EventType.TERMINAL_STEP_FINISHED),
    # the host loop: a run's lifecycle, its steps, plans and tasks
    "host": (
        EventType.HOST_RUN_STARTED,
        EventType.AGENT_STEP,
        EventType.HOST_STEP,
        EventType.PLAN_CREATED,
        EventType.TASK_STARTED,
        EventType.TASK_FINISHED,
        EventType.HOST_RUN_FINISHED,
    ),
    "task": (EventType.TASK_STARTED, EventType.TASK_FINISHED),
}

ACTION_SCOPES = ("line", "block", "file", "project")
DIFF_MODES = ("unified", "ast", "schema", "binary")


@dataclass(frozen=True)
class Event:
    """One ledger event (the ChangeEvent schema).

    A *state event* carries ``snapshot_ref`` and ``parent_event_id`` (the history
    graph); an *annotation event* points at a state event through
    ``anchor_event_id`` and is never a parent.
    """

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
    branch: str = "main"
    anchor_event_id: EventId | None = None
    operation_id: str = ""
    action_scope: str = "project"
    diff_mode: str = "unified"
    artifacts: tuple[str, ...] = ()
    artifact_impacts: tuple[dict[str, Any], ...] = ()
    preflight: dict[str, Any] | None = None

    @property
    def is_state(self) -> bool:
        """True for events that carry a snapshot (they form the history graph)."""
        return self.snapshot_ref is not None

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object: the stored body and what ``--json`` prints."""
        out: dict[str, Any] = {
            "id": self.id,
            "ts": self.ts,
            "author": self.author.to_json(),
            "action_type": self.action_type,
            "branch": self.branch,
            "operation_id": self.operation_id,
            "action_scope": self.action_scope,
            "diff_mode": self.diff_mode,
            "rationale": self.rationale,
            "files": list(self.files),
            "snapshot_ref": self.snapshot_ref,
            "parent_event_id": self.parent_event_id,
        }
        if self.anchor_event_id:
            out["anchor_event_id"] = self.anchor_event_id
        if self.artifacts:
            out["artifacts"] = list(self.artifacts)
        if self.artifact_impacts:
            out["artifact_impacts"] = [dict(i) for i in self.artifact_impacts]
        if self.preflight is not None:
            out["preflight"] = dict(self.preflight)
        if self.data:
            out["data"] = self.data
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any], *, seq: int = 0) -> Event:
        """Parse a stored event body (:class:`CorruptRepository` when it is not one)."""
        try:
            return cls._from_json(raw, seq=seq)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptRepository(
                f"ledger record {seq} is not a valid event",
                hint="run 'strata ledger verify'",
            ) from None

    @classmethod
    def _from_json(cls, raw: dict[str, Any], *, seq: int) -> Event:
        return cls(
            id=EventId(raw["id"]),
            ts=raw["ts"],
            author=Author.from_json(raw["author"]),
            action_type=raw["action_type"],
            rationale=raw.get("rationale", ""),
            files=tuple(raw.get("files") or ()),
            snapshot_ref=raw.get("snapshot_ref"),
            parent_event_id=raw.get("parent_event_id"),
            data=dict(raw.get("data") or {}),
            seq=seq,
            branch=raw.get("branch") or "main",
            anchor_event_id=raw.get("anchor_event_id"),
            operation_id=raw.get("operation_id") or "",
            action_scope=raw.get("action_scope") or "project",
            diff_mode=raw.get("diff_mode") or "unified",
            artifacts=tuple(raw.get("artifacts") or ()),
            artifact_impacts=tuple(raw.get("artifact_impacts") or ()),
            preflight=raw.get("preflight"),
        )


def format_ts(ts_ms: int) -> str:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-11-22T03:49:46.123Z``."""
    dt = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON used for stored columns."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
