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

Each step is :func:`strata.agent.step.take_step` (the one step of every
agent-like loop) with the file tools of :mod:`strata.agent.tools`. The loop
ends when the model answers without a tool call, or after ``max_steps``, or
with :class:`~strata.errors.AgentLoopDetected` when the model repeats the same
tool call (the step that would repeat it records nothing; the steps before it
stay). :func:`run_step` is the part a replay runs again
(:mod:`strata.replay.engine`): same request, the recorded answer, the same
tools on the rebuilt files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.agent.step import (
    STEP,
    LoopDetector,
    StepOutcome,
    step_data,
    step_title,
    take_step,
)
from strata.agent.tools import TOOLS, ToolResult, call_tool
from strata.errors import UsageError
from strata.ledger.events import Author
from strata.providers.base import (
    CancelToken,
    Message,
    Provider,
    Request,
    TextDelta,
    ToolSpec,
)
from strata.providers.trace import Recorder, RecordingProvider

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.workbench.draft import Draft

SYSTEM_PROMPT = (
    "You are an agent editing the files of a workspace. The files are available through "
    "your tools: use list_files and read_file to look, write_file and edit_file to change. "
    "Your edits land in a Draft that a person reviews before it is published. When the "
    "task is done, answer with a short summary and no tool call."
)
MAX_STEPS = 8


#: the shape of a tool table: name -> (its specification, its handler on a folder)
ToolTable = Mapping[str, tuple[ToolSpec, Callable[[Path, dict[str, Any]], ToolResult]]]


def run_step(
    provider: Provider,
    request: Request,
    folder: Path,
    recorder: Recorder,
    *,
    cancel: CancelToken | None = None,
    on_text: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    tools: ToolTable | None = None,
    on_event: Callable[[object], None] | None = None,
    on_tool_result: Callable[[str, str, ToolResult], None] | None = None,
    loop: LoopDetector | None = None,
) -> StepOutcome:
    """:func:`~strata.agent.step.take_step` with a tool table run on ``folder``.

    ``provider`` is called as given (wrap it in a ``RecordingProvider`` to
    record the model call; a replay passes its ``ReplayProvider``); the tool
    calls are recorded with ``recorder``. ``tools`` is the table the calls run
    from (default: :data:`strata.agent.tools.TOOLS`). ``on_event`` gets every
    stream event of the provider (``TextDelta``, ``ToolCallEvent``,
    ``Finished``); ``on_tool_result`` gets ``(call id, tool name, result)``
    after each tool call; ``loop`` is the session's loop detector.
    """
    table: ToolTable = TOOLS if tools is None else tools

    def stream_event(event: object) -> None:
        if on_event is not None:
            on_event(event)
        if isinstance(event, TextDelta) and on_text is not None:
            on_text(event.text)

    return take_step(
        provider,
        request,
        lambda name, arguments: call_tool(table, folder, name, arguments),
        recorder,
        record_model=False,
        loop=loop,
        cancel=cancel,
        on_event=stream_event,
        on_tool_result=on_tool_result,
        clock=clock,
    )


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


def open_session(core: Core, provider: Provider, author: Author) -> tuple[Draft, AgentResult]:
    """The Draft an agent session edits (opened when none is) and the session's empty result.

    Edits made in an open Draft by hand are recorded first: a failed step puts
    the files back to the last revision, which must not lose them.
    """
    from strata.workbench.draft import open_draft, start_draft

    draft = open_draft(core)
    if draft is not None:
        draft.record("before the agent", author=author)
    else:
        draft = start_draft(core, author=author)
    session = f"ses_{core.new_event_id().removeprefix('evt_')}"
    return draft, AgentResult(session, draft.id, provider.name, provider.model)


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
    history: Sequence[Message] = (),
    tools: ToolTable | None = None,
    on_event: Callable[[object], None] | None = None,
    on_step_start: Callable[[int], None] | None = None,
    on_tool_result: Callable[[int, str, str, ToolResult], None] | None = None,
    data: Mapping[str, Any] | None = None,
    loop: LoopDetector | None = None,
) -> AgentResult:
    """Run the agent on ``prompt`` in the Draft (opened when none is), one revision per step.

    ``tool_choice`` names a tool the first step must call (later steps leave
    the choice to the provider's profile). ``secrets`` are extra strings
    redacted from every trace (API keys are redacted by pattern anyway).

    ``history`` is the conversation so far (user and assistant messages,
    without the system message), sent between ``system`` and ``prompt``;
    ``tools`` the tool table (default :data:`strata.agent.tools.TOOLS`).
    ``on_event`` gets the provider's stream events, ``on_step_start`` the
    step number before each step, ``on_tool_result`` ``(step, call id, tool,
    result)``; ``data`` is merged into every revision's ``data`` (the
    Workshop names its conversation there); ``loop`` the session's loop
    detector (default: a new :class:`~strata.agent.step.LoopDetector`, which
    stops the session with :class:`~strata.errors.AgentLoopDetected`). Each step runs inside
    :meth:`~strata.workbench.draft.Draft.step`: a step that fails or is
    interrupted leaves the Draft's files as its last revision has them.
    """
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    if max_steps < 1:
        raise UsageError("max_steps must be at least 1")
    table: ToolTable = TOOLS if tools is None else tools
    names = list(table)
    if tool_choice is not None and tool_choice not in (*names, "auto", "required", "none"):
        raise UsageError(f"unknown tool {tool_choice!r}; use one of {', '.join(names)}")
    author = author or Author(agent_id, "agent", provider.model or None)
    draft, result = open_session(core, provider, author)
    session = result.session
    messages: list[Message] = [Message("system", system), *history, Message("user", prompt)]
    tool_specs = tuple(spec for spec, _ in table.values())
    loop = LoopDetector() if loop is None else loop
    for n in range(max_steps):
        recorder = Recorder(put=core.objects.put, agent_id=agent_id, secrets=secrets)
        request = Request(
            model=provider.model,
            messages=tuple(messages),
            tools=tool_specs,
            tool_choice=tool_choice if n == 0 else None,
        )
        clock_ms = core.now_ms()
        if on_step_start is not None:
            on_step_start(n)
        step_n = n

        def tool_done(call_id: str, name: str, res: ToolResult, step_n: int = step_n) -> None:
            if on_tool_result is not None:
                on_tool_result(step_n, call_id, name, res)

        # a step is recorded whole or not at all: if it fails (a Ctrl-C, a failure between
        # two tool calls, a loop stopped) the Draft's files go back to its last revision, so
        # the next step does not record them as its own
        with draft.step(f"agent step {n + 1}", session=session):
            outcome = run_step(
                RecordingProvider(provider, recorder),
                request,
                draft.path,
                recorder,
                cancel=cancel,
                on_text=on_text,
                tools=table,
                on_event=on_event,
                on_tool_result=tool_done,
                loop=loop,
            )
            response = outcome.response
            calls = tuple(c.name for c in response.tool_calls)
            event = draft.record(
                step_title(f"agent step {n + 1}", response),
                author=author,
                data={
                    STEP: step_data(
                        provider,
                        response,
                        loop="agent",
                        step=n,
                        session=session,
                        agent_id=agent_id,
                        clock_ms=clock_ms,
                    ),
                    **(data or {}),
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
