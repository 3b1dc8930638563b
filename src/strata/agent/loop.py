"""The agent loop: a model proposes, its tool calls edit the Draft, each step is a Draft revision.

One *step* is one model call plus the tool calls it asked for, run on the
Draft's files. Every step is recorded as a ``draft_revision`` event whose
``artifacts`` are the step's traces (the model call first, then each tool
call, see :mod:`strata.providers.trace`) and whose ``data.agent`` says which
session, step, provider, model, seed and clock it ran with. The traces are
written before the event, so an event never names a call that was not
recorded; a step that fails (its model call, or a Ctrl-C between its tool
calls) records nothing and leaves the Draft's files as its last revision has
them (the steps before it stay recorded).

The loop ends when the model answers without a tool call, or after
``max_steps``. :func:`run_step` is the part a replay runs again
(:mod:`strata.replay.engine`): same request, the recorded answer, the same
tools on the rebuilt files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.agent.tools import ToolResult, run_tool, specs
from strata.errors import ProviderProtocolError, UsageError
from strata.ledger.events import Author
from strata.providers.base import (
    CancelToken,
    Finished,
    Message,
    Provider,
    Request,
    Response,
    TextDelta,
)
from strata.providers.trace import Recorder, RecordingProvider

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.ids import ObjectId
    from strata.workbench.draft import Draft

SYSTEM_PROMPT = (
    "You are an agent editing the files of a workspace. The files are available through "
    "your tools: use list_files and read_file to look, write_file and edit_file to change. "
    "Your edits land in a Draft that a person reviews before it is published. When the "
    "task is done, answer with a short summary and no tool call."
)
MAX_STEPS = 8


@dataclass(frozen=True)
class StepOutcome:
    """What one step did: the model's response and each tool call's result."""

    response: Response
    results: tuple[tuple[str, ToolResult], ...]  # (tool call id, result)

    def messages(self) -> list[Message]:
        """The messages that continue the conversation: the answer, then each tool result."""
        out = [self.response.message()]
        for call, (_, result) in zip(self.response.tool_calls, self.results, strict=True):
            out.append(Message("tool", result.text, tool_call_id=call.id, name=call.name))
        return out


def run_step(
    provider: Provider,
    request: Request,
    folder: Path,
    recorder: Recorder,
    *,
    cancel: CancelToken | None = None,
    on_text: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> StepOutcome:
    """Ask the model, then run its tool calls on ``folder``, recording each one."""
    response: Response | None = None
    for event in provider.stream(request, cancel=cancel):
        if isinstance(event, TextDelta) and on_text is not None:
            on_text(event.text)
        elif isinstance(event, Finished):
            response = event.response
    if response is None:
        raise ProviderProtocolError(provider.name, "the stream ended without a final response")
    results: list[tuple[str, ToolResult]] = []
    for call in response.tool_calls:
        started = clock()
        result = run_tool(folder, call.name, call.arguments)
        recorder.tool_call(
            tool=call.name,
            arguments=call.arguments,
            result=result.text,
            is_error=result.is_error,
            duration_ms=int((clock() - started) * 1000),
        )
        results.append((call.id, result))
    return StepOutcome(response, tuple(results))


@dataclass(frozen=True)
class StepRecord:
    """One recorded step."""

    step: int
    event_id: str | None
    text: str
    tool_calls: tuple[str, ...]
    finish_reason: str
    traces: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The step as JSON."""
        return {
            "step": self.step,
            "event_id": self.event_id,
            "text": self.text,
            "tool_calls": list(self.tool_calls),
            "finish_reason": self.finish_reason,
            "traces": list(self.traces),
        }


@dataclass
class AgentResult:
    """What a session did."""

    session: str
    draft_id: str
    provider: str
    model: str
    steps: list[StepRecord] = field(default_factory=list)
    stopped: str = "done"  # done | max_steps

    @property
    def text(self) -> str:
        """The model's last answer."""
        return self.steps[-1].text if self.steps else ""

    def to_json(self) -> dict[str, Any]:
        """The session as JSON."""
        return {
            "session": self.session,
            "draft_id": self.draft_id,
            "provider": self.provider,
            "model": self.model,
            "stopped": self.stopped,
            "text": self.text,
            "steps": [s.to_json() for s in self.steps],
        }


def _put_back(draft: Draft, tree: ObjectId) -> None:
    """Bring the Draft's files back to ``tree`` (its last revision), writing only what differs."""
    workspace = draft.workspace
    workspace.apply(workspace.plan(workspace.scan(), tree))


def run_agent(
    core: Core,
    provider: Provider,
    prompt: str,
    *,
    system: str = SYSTEM_PROMPT,
    max_steps: int = MAX_STEPS,
    agent_id: str = "agent",
    author: Author | None = None,
    tool_choice: str | None = None,
    secrets: tuple[str, ...] = (),
    cancel: CancelToken | None = None,
    on_text: Callable[[str], None] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> AgentResult:
    """Run the agent on ``prompt`` in the Draft (opened when none is), one revision per step.

    ``tool_choice`` names a tool the first step must call (later steps leave
    the choice to the provider's profile). ``secrets`` are extra strings
    redacted from every trace (API keys are redacted by pattern anyway).
    """
    from strata.workbench.draft import open_draft, start_draft

    if not prompt.strip():
        raise UsageError("the prompt is empty")
    if max_steps < 1:
        raise UsageError("max_steps must be at least 1")
    names = [spec.name for spec in specs()]
    if tool_choice is not None and tool_choice not in (*names, "auto", "required", "none"):
        raise UsageError(f"unknown tool {tool_choice!r}; use one of {', '.join(names)}")
    author = author or Author(agent_id, "agent", provider.model or None)
    draft = open_draft(core) or start_draft(core, author=author)
    session = f"ses_{core.new_event_id().removeprefix('evt_')}"
    result = AgentResult(session, draft.id, provider.name, provider.model)
    messages: list[Message] = [Message("system", system), Message("user", prompt)]
    tools = specs()
    for n in range(max_steps):
        recorder = Recorder(put=core.objects.put, agent_id=agent_id, secrets=secrets)
        request = Request(
            model=provider.model,
            messages=tuple(messages),
            tools=tools,
            tool_choice=tool_choice if n == 0 else None,
        )
        clock_ms = core.now_ms()
        before = core.tree_of(draft.tip())
        try:
            outcome = run_step(
                RecordingProvider(provider, recorder),
                request,
                draft.path,
                recorder,
                cancel=cancel,
                on_text=on_text,
            )
        except BaseException:
            # a step is recorded whole or not at all: the writes of its tool calls so far
            # (a Ctrl-C, a failure between two calls) are undone, so the next step does
            # not record them as its own
            _put_back(draft, before)
            raise
        response = outcome.response
        calls = tuple(c.name for c in response.tool_calls)
        summary = response.text.strip().splitlines()[0][:72] if response.text.strip() else ""
        event = draft.record(
            f"agent step {n + 1}: " + (", ".join(calls) if calls else summary or "answer"),
            author=author,
            data={
                "agent": {
                    "session": session,
                    "step": n,
                    "agent_id": agent_id,
                    "provider": provider.name,
                    "adapter": provider.adapter,
                    "model": provider.model,
                    "clock_ms": clock_ms,
                    "finish_reason": response.finish_reason,
                    "tool_calls": len(calls),
                }
            },
            always=True,
            artifacts=tuple(recorder.ids),
        )
        record = StepRecord(
            n,
            event.id if event else None,
            response.text,
            calls,
            response.finish_reason,
            tuple(recorder.ids),
        )
        result.steps.append(record)
        if on_step is not None:
            on_step(record)
        messages.extend(outcome.messages())
        if not response.tool_calls:
            return result
    result.stopped = "max_steps"
    return result
