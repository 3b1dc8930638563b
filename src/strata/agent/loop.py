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

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.agent.step import STEP, LoopDetector, StepOutcome, step_data, step_title, take_step
from strata.agent.tools import (
    TOOLS,
    Folder,
    ToolResult,
    WriteLimits,
    bounded,
    call_tool,
    writes,
)
from strata.errors import StrataError, UsageError
from strata.ledger.events import Author, Event
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
    folder: Folder,
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
    draft_id: str | None  # None: the session wrote nothing, so no Draft was opened
    provider: str
    model: str
    steps: list[StepRecord] = field(default_factory=list)
    stopped: str = "done"  # done | max_steps
    max_steps: int = MAX_STEPS
    #: what fitting the steps' requests into the model's context left out (one line each)
    notes: list[str] = field(default_factory=list)

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


class DraftOnWrite:
    """The Draft a session edits, opened at its first writing tool call.

    A session that only reads (a question) or fails before it writes opens
    no Draft: until then its tools read Published's files (the folder they
    get is the workspace's); the first call of a tool that writes
    (:func:`strata.agent.tools.writes`) starts the Draft and runs, like every
    later call, in the Draft's folder. An open Draft is edited as it is (edits
    made in it by hand are recorded first: a failed step puts the files back
    to the last revision, which must not lose them).

    With ``at_once`` the Draft is opened now (``strata agent``: every step is
    a revision, so a session replays step by step).

    Each step runs in :meth:`step`: inside the Draft's step lease when there
    is a Draft (a failed step puts its files back), and a Draft started by a
    step that then fails is discarded, so a failed step leaves no Draft it made.
    """

    def __init__(
        self,
        core: Core,
        author: Author,
        tools: ToolTable,
        *,
        source: Mapping[str, Any] | None = None,
        at_once: bool = False,
    ) -> None:
        from strata.workbench.draft import open_draft, start_draft

        self.core = core
        self.author = author
        self.tools = tools
        self.source = dict(source or {})
        self.draft = open_draft(core)
        if self.draft is not None:
            self.draft.record("before the agent", author=author)
        elif at_once:
            self.draft = start_draft(core, author=author, source=self.source or None)
        self._scope: tuple[contextlib.ExitStack, str, dict[str, Any]] | None = None
        self._started_here = False

    def folder(self, name: str) -> Path:
        """The folder tool ``name`` runs on (the Draft's, started for the first write)."""
        if self.draft is None:
            if not writes(self.tools, name):
                return self.core.root
            from strata.workbench.draft import start_draft

            self.draft = start_draft(self.core, author=self.author, source=self.source or None)
            self._started_here = True
            if self._scope is not None:
                stack, what, info = self._scope
                stack.enter_context(self.draft.step(what, **info))
        return self.draft.path

    @contextlib.contextmanager
    def step(self, what: str, **info: Any) -> Iterator[None]:
        """One step: in the Draft's step lease once there is a Draft (see the class doc)."""
        self._started_here = False
        try:
            with contextlib.ExitStack() as stack:  # the step lease puts the files back first
                if self.draft is not None:
                    stack.enter_context(self.draft.step(what, **info))
                self._scope = (stack, what, info)
                try:
                    yield
                finally:
                    self._scope = None
        except BaseException:
            if self._started_here and self.draft is not None:
                draft, self.draft = self.draft, None
                with contextlib.suppress(StrataError):
                    draft.discard(author=self.author)
            raise

    def record(
        self, title: str, *, data: dict[str, Any], artifacts: tuple[str, ...]
    ) -> Event | None:
        """Record the step as a Draft revision (None while no Draft is open: nothing written)."""
        if self.draft is None:
            return None
        return self.draft.record(
            title, author=self.author, data=data, always=True, artifacts=artifacts
        )


def open_session(
    core: Core,
    provider: Provider,
    author: Author,
    tools: ToolTable,
    *,
    source: Mapping[str, Any] | None = None,
    at_once: bool = False,
) -> tuple[DraftOnWrite, AgentResult]:
    """The Draft an agent session edits (opened at its first write) and its empty result.

    ``source`` is what ``draft.json`` records as the Draft's source, should
    the session open one; ``at_once`` opens it now (see :class:`DraftOnWrite`).
    """
    drafting = DraftOnWrite(core, author, tools, source=source, at_once=at_once)
    session = f"ses_{core.new_event_id().removeprefix('evt_')}"
    draft_id = drafting.draft.id if drafting.draft is not None else None
    return drafting, AgentResult(session, draft_id, provider.name, provider.model)


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
    limits: WriteLimits | None = None,
    source: Mapping[str, Any] | None = None,
    draft_on_write: bool = False,
    input_budget: int | None = None,
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

    With ``draft_on_write`` (a Workshop turn) the Draft is opened at the first
    call of a writing tool (:class:`DraftOnWrite`): a session that only reads,
    or fails before writing, opens none (``result.draft_id`` is None, its
    steps have no event); without, it is opened at once. ``limits`` bound
    what the tools write in the whole session (default: :class:`WriteLimits`'s);
    ``source`` is what ``draft.json`` records as the Draft's source.
    ``input_budget`` is the tokens every step's request may take
    (:func:`strata.providers.window.input_budget`): older tool results are
    left out to keep within it, each step's notes added to ``result.notes``.
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
    drafting, result = open_session(
        core,
        provider,
        author,
        table,
        source=source or {"kind": "agent", "agent": agent_id},
        at_once=not draft_on_write,
    )
    result.max_steps = max_steps
    limits = limits if limits is not None else WriteLimits()  # the whole session's
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
            input_budget=input_budget,
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
        with drafting.step(f"agent step {n + 1}", session=session), bounded(limits):
            outcome = run_step(
                RecordingProvider(provider, recorder),
                request,
                drafting.folder,
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
            event = drafting.record(
                step_title(f"agent step {n + 1}", response),
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
                artifacts=tuple(recorder.ids),
            )
        if drafting.draft is not None:
            result.draft_id = drafting.draft.id
        record = StepRecord(
            n,
            event.id if event else None,
            response.text,
            calls,
            response.finish_reason,
            tuple(recorder.ids),
        )
        result.steps.append(record)
        result.notes.extend(f"step {n + 1}: {note}" for note in outcome.notes)
        if on_step is not None:
            on_step(record)
        messages = outcome.conversation()
        if not response.tool_calls:
            return result
    result.stopped = "max_steps"
    return result
