"""The events a Workshop turn reports while it runs (besides the provider's stream events).

``Workshop.send(..., on_event=...)`` receives, in order, for each agent step:
:class:`StepStarted`, the provider's :class:`~strata.providers.base.TextDelta`,
:class:`~strata.providers.base.ToolCallEvent` and
:class:`~strata.providers.base.Finished` events, one :class:`ToolResultEvent`
per tool call, then :class:`StepFinished` (with the Draft revision the step
recorded). Each is a frozen dataclass with a ``kind`` and ``to_json()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class StepStarted:
    """A step (one model call and its tool calls) begins."""

    step: int
    kind: Literal["step_started"] = "step_started"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)


@dataclass(frozen=True)
class ToolResultEvent:
    """A tool call ran on the Draft's files."""

    step: int
    call_id: str
    tool: str
    text: str
    is_error: bool
    kind: Literal["tool_result"] = "tool_result"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)


@dataclass(frozen=True)
class StepFinished:
    """A step was recorded: ``draft_revision`` is its Draft revision event."""

    step: int
    draft_revision: str | None
    finish_reason: str
    kind: Literal["step_finished"] = "step_finished"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return asdict(self)
