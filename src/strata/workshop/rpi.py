"""The Workshop's Research → Plan → Implement loop (seed 000, "RPI Workflow").

One RPI turn answers a user's request in four phases, each with a fresh
context (the system text, the conversation history, the request and what the
earlier phases wrote):

``research``
    A tool loop of at most :data:`RESEARCH_TURNS` model calls with the
    read-only tools (:data:`RESEARCH_TOOLS`, those of them the mapping
    has). The model's last answer (the one without a tool call) is written
    to ``research.md``.
``plan``
    At most :data:`PLAN_TURNS` calls with :data:`PLAN_TOOLS`. The last answer
    must hold a checklist (``- [ ] …`` lines); the engine writes it to
    ``plan.md`` as ``- [ ] N. …`` items under ``<!-- original_count: N -->``.
``implement``
    The engine walks the unchecked items of ``plan.md``, one tool loop of at
    most :data:`ITEM_TURNS` calls per item with every tool. An item ends
    ``- [x]`` when the model's last answer does not start with ``FAILED``;
    otherwise (or when its turns run out) it is tried once more, then
    marked ``- [!] … [Failed: reason]`` and the walk goes on. ``- [ ] …``
    lines in an item's last answer are appended to the plan (never
    inserted, never rewritten), up to twice ``original_count`` items.
``summary``
    One call without tools, given the finished plan and the file list; its
    text is streamed (the only text streamed to ``on_event``), written to
    ``summary.md`` and returned: it is the turn's only user-visible
    assistant message.

The artifacts live in one ``_rpi`` folder per conversation (see
:func:`rpi_folder`: ``<repository>/workshop/<conversation>/_rpi``), each
written atomically, and they *are* the progress: an invocation with the same
request resumes at the first phase whose artifact is missing or incomplete
(the implement phase at the first unchecked item), so a turn killed midway is
finished by running it again, and no finished phase is redone. A different
request starts over. :func:`clear` removes the folder: the Workshop calls it
on a new user message, on undo/rewind and on regenerate.

Each phase's requests carry the provider's reasoning effort for that phase
(:func:`phase_effort`: ``research_effort``, ``plan_effort``,
``implement_effort`` of an OpenAI provider's table; the summary keeps the
provider's default), and each recorded step names the effort sent
(``data.step.reasoning_effort``, :func:`effort_sent`).

Loop detection is the step loop's (:class:`strata.agent.step.LoopDetector`):
the last ``LOOP_WINDOW`` tool calls of a tool loop are
kept as (name, canonical arguments); a call that makes ``LOOP_WARN``
identical calls in that window adds a warning to the conversation, one that
would make ``LOOP_STOP`` is not run and the turn stops with
:class:`~strata.errors.WorkshopLoopDetected`. Provider failures are retried by
the providers themselves (:mod:`strata.providers.transport`); this module
adds no retry of its own.

The entry point, for the Workshop's ``send(..., rpi=True)``::

    result = run_rpi(
        folder,            # the Draft's folder: where the tools read and write
        provider,          # a strata.providers Provider
        tools,             # name -> (ToolSpec, handler(folder, arguments) -> ToolResult)
        request,           # the user's message
        state=rpi_folder(repo.layout.repo, conversation_id),
        history=messages,  # earlier conversation turns (Message list), may be empty
        system=system_text,
        recorder=recorder, # a strata.providers.trace.Recorder (every call is traced),
                           # or a () -> Recorder factory (a fresh one per step)
        on_event=callback, # PhaseStarted/PhaseCompleted/ImplementProgress/ToolCompleted
                           # and the provider's TextDelta/ToolCallEvent/Finished
        on_step=callback,  # RpiStep after each model call and its tool calls
        cancel=token,      # a CancelToken: stops at the next call or tool call
        context=text,      # Workbench context (manifest, file maps): added to the first
                           # message of research, plan and each item
        manifest=callable, # () -> the current file manifest, for the summary
                           # (default: the list_files tool's answer)
        scope=callable,    # (phase, item) -> a context manager each step runs in
        key=message_id,    # what identifies the request (default: its text)
    )
    result.text            # the summary, the assistant message to persist

:func:`run_rpi_agent` is the same on a repository's Draft, shaped like
:func:`strata.agent.loop.run_agent` (same callbacks, an ``AgentResult``
whose last step is the summary): each step runs inside ``Draft.step`` and is
recorded as a Draft revision (``data.rpi``). The Workshop's
``send(..., rpi=True)`` calls it where a plain turn calls ``run_agent``, with
``state=rpi_folder(core.layout.repo, conversation)`` and ``key=`` the user
message's id, and calls :func:`clear` on rewind and regenerate.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from strata.agent.loop import AgentResult, StepRecord, open_session
from strata.agent.step import STEP, LoopDetector, step_data, step_title, take_step
from strata.agent.tools import Folder, ToolResult, WriteLimits, bounded, call_tool
from strata.atomic import atomic_write
from strata.errors import (
    UsageError,
    WorkshopLoopDetected,
    WorkshopPlanMissing,
)
from strata.ledger.events import Author
from strata.providers.base import (
    CancelToken,
    Message,
    Provider,
    Request,
    Response,
    StreamEvent,
    ToolCallEvent,
    ToolSpec,
)
from strata.providers.trace import Recorder

if TYPE_CHECKING:
    from strata.core.core import Core

Phase = Literal["research", "plan", "implement", "summary"]
PHASES: tuple[Phase, ...] = ("research", "plan", "implement", "summary")

#: the read-only tools of the research phase (seed 000; those the mapping has are used)
RESEARCH_TOOLS: tuple[str, ...] = (
    "list_files",
    "get_file_info",
    "get_file_map",
    "read_file",
    "table_get_map",
    "table_describe",
    "table_stats",
    "table_read_rows",
    "table_query",
    "recall_tool_result",
    "xlsx_get_styles",
    "docx_get_styles",
    "pptx_get_styles",
)
#: the tools of the plan phase
PLAN_TOOLS: tuple[str, ...] = ("read_file", "recall_tool_result")
RESEARCH_TURNS = 30
PLAN_TURNS = 10
ITEM_TURNS = 30
#: an item is tried this many times before it is marked failed
ITEM_ATTEMPTS = 2
#: the plan may grow to this many times its original item count
AMEND_FACTOR = 2

ToolHandler = Callable[[Path, dict[str, Any]], ToolResult]
ToolMap = Mapping[str, tuple[ToolSpec, ToolHandler]]

RESEARCH_FILE = "research.md"
PLAN_FILE = "plan.md"
SUMMARY_FILE = "summary.md"
RUN_FILE = "run.json"

# -- notifications -------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseStarted:
    """A phase begins (``research``, ``plan``, ``implement``, ``summary``)."""

    phase: Phase
    kind: Literal["phase_started"] = "phase_started"


@dataclass(frozen=True)
class PhaseCompleted:
    """A phase is done (its artifact written)."""

    phase: Phase
    kind: Literal["phase_completed"] = "phase_completed"


@dataclass(frozen=True)
class ImplementProgress:
    """The implement phase starts item ``current_item`` (1-based) of ``total_items``."""

    current_item: int
    total_items: int
    item_label: str
    kind: Literal["implement_progress"] = "implement_progress"


@dataclass(frozen=True)
class ToolCompleted:
    """A tool call finished (its :class:`~strata.providers.base.ToolCallEvent` came before)."""

    name: str
    is_error: bool
    phase: Phase
    kind: Literal["tool_completed"] = "tool_completed"


RpiEvent = PhaseStarted | PhaseCompleted | ImplementProgress | ToolCompleted | StreamEvent


@dataclass(frozen=True)
class RpiStep:
    """One model call and its tool calls, as ``on_step`` sees it."""

    phase: Phase
    item: int | None  # the plan item, in the implement phase
    response: Response
    traces: tuple[str, ...]  # the step's trace ids, model call first
    #: what fitting the step's request into the model's context left out
    notes: tuple[str, ...] = ()


# -- the plan ------------------------------------------------------------------------------

_ITEM = re.compile(r"^- \[([ xX!])\] (?:(\d+)\.\s*)?(.*?)\s*$")
_FAILED = re.compile(r"\s*\[Failed: (.*)\]$")
_ORIGINAL = re.compile(r"<!--\s*original_count:\s*(\d+)\s*-->")
_CHECKLIST = re.compile(r"^\s*[-*] \[ \]\s*(?:\d+[.)]\s*)?(\S.*?)\s*$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(\S.*?)\s*$")


@dataclass
class PlanItem:
    """One checklist item: ``status`` is ``" "`` (to do), ``"x"`` (done) or ``"!"`` (failed)."""

    number: int
    text: str
    status: str = " "
    reason: str = ""

    def render(self) -> str:
        """The item's line in ``plan.md``."""
        failed = f" [Failed: {self.reason}]" if self.status == "!" else ""
        return f"- [{self.status}] {self.number}. {self.text}{failed}"


@dataclass
class Plan:
    """The checklist of ``plan.md`` and its ``original_count``."""

    items: list[PlanItem]
    original_count: int

    @property
    def cap(self) -> int:
        """The most items the plan may hold after amendments."""
        return AMEND_FACTOR * self.original_count

    def render(self) -> str:
        """``plan.md``'s text."""
        lines = ["# Plan", "", f"<!-- original_count: {self.original_count} -->", ""]
        lines += [item.render() for item in self.items]
        return "\n".join(lines) + "\n"

    def amend(self, texts: Sequence[str]) -> list[PlanItem]:
        """Append new items (at the end, up to :attr:`cap`); returns those appended."""
        added = []
        for text in texts:
            if len(self.items) >= self.cap:
                break
            item = PlanItem(len(self.items) + 1, text)
            self.items.append(item)
            added.append(item)
        return added

    @classmethod
    def parse(cls, text: str) -> Plan:
        """Read ``plan.md``'s text back."""
        match = _ORIGINAL.search(text)
        items: list[PlanItem] = []
        for line in text.splitlines():
            m = _ITEM.match(line)
            if m is None:
                continue
            status = "x" if m.group(1) in "xX" else m.group(1)
            body, reason = m.group(3), ""
            failed = _FAILED.search(body)
            if status == "!" and failed is not None:
                body, reason = body[: failed.start()], failed.group(1)
            items.append(PlanItem(len(items) + 1, body, status, reason))
        original = int(match.group(1)) if match else len(items)
        return cls(items, original)


def checklist(text: str, *, numbered: bool = False) -> list[str]:
    """The ``- [ ] …`` items of a model's answer (numbers stripped).

    ``numbered``: when there is none, its ``1. …`` lines instead (a plan
    written as a numbered list; amendments must be ``- [ ]`` lines).
    """
    lines = text.splitlines()
    found = [m.group(1) for line in lines if (m := _CHECKLIST.match(line))]
    if not found and numbered:
        found = [m.group(1) for line in lines if (m := _NUMBERED.match(line))]
    return found


# -- loop detection ------------------------------------------------------------------------


def phase_effort(provider: Provider, phase: str) -> str | None:
    """The reasoning effort ``provider`` is configured with for ``phase`` (None: its default).

    ``research_effort``, ``plan_effort`` and ``implement_effort`` of a
    ``[providers.NAME]`` table (the OpenAI adapters' ``phase_efforts``); the
    summary phase has none of its own.
    """
    efforts = getattr(provider, "phase_efforts", None)
    found = efforts.get(phase) if isinstance(efforts, Mapping) else None
    return found if isinstance(found, str) else None


def effort_sent(provider: Provider, phase: str) -> str | None:
    """The reasoning effort a ``phase`` request of ``provider`` carries (None: not sent).

    Seed 000's OpenAI profile: the phase's effort, else the provider's
    default, else ``medium``, sent only to OpenAI models that reason.
    """
    from strata.providers.profile import effort, reasons

    if not provider.adapter.startswith("openai") or not reasons(provider.model):
        return None
    return effort(phase_effort(provider, phase) or getattr(provider, "reasoning_effort", None))


def loop_detector() -> LoopDetector:
    """The step loop's detector, raising :class:`~strata.errors.WorkshopLoopDetected`."""
    return LoopDetector(error=WorkshopLoopDetected)


# -- state ---------------------------------------------------------------------------------


def rpi_folder(private: Path, conversation: str) -> Path:
    """The ``_rpi`` folder of a conversation under the repository's private folder."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", conversation) or conversation in (".", ".."):
        raise UsageError(f"{conversation!r} is not a conversation id")
    return private / "workshop" / conversation / "_rpi"


def clear(state: Path) -> bool:
    """Remove a conversation's RPI progress (True when there was some)."""
    if not state.exists():
        return False
    shutil.rmtree(state)
    return True


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode())


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@dataclass
class _Run:
    """``run.json``: the request the artifacts answer, and each item's attempts so far."""

    request: str
    attempts: dict[str, int] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def save(self, state: Path) -> None:
        data = {"request": self.request, "attempts": self.attempts, "failures": self.failures}
        _write(state / RUN_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, state: Path) -> _Run | None:
        text = _read(state / RUN_FILE)
        if text is None:
            return None
        try:
            raw = json.loads(text)
            return cls(str(raw["request"]), dict(raw["attempts"]), dict(raw["failures"]))
        except (ValueError, KeyError, TypeError):
            return None


def progress(state: Path) -> Phase | None:
    """The phase an invocation would resume at (None: the turn is finished)."""
    if _read(state / RESEARCH_FILE) is None:
        return "research"
    plan_text = _read(state / PLAN_FILE)
    if plan_text is None:
        return "plan"
    if any(item.status == " " for item in Plan.parse(plan_text).items):
        return "implement"
    if _read(state / SUMMARY_FILE) is None:
        return "summary"
    return None


# -- the engine ----------------------------------------------------------------------------


@dataclass
class RpiResult:
    """What a turn did: the summary text and the phases this invocation ran."""

    text: str
    phases_run: list[Phase]
    plan: Plan
    research: str
    traces: list[str] = field(default_factory=list)

    @property
    def failed_items(self) -> list[PlanItem]:
        """The items marked failed."""
        return [i for i in self.plan.items if i.status == "!"]


_RESEARCH = (
    "You are in the RESEARCH phase of a research, plan, implement workflow. Use the read-only "
    "tools to learn what the request needs: which files exist and what they hold. Do not "
    "change anything. When you know enough, answer without a tool call with your findings "
    "as notes (they are kept for the next phases)."
)
_PLAN = (
    "You are in the PLAN phase. From the request and the research notes, write the steps "
    "that carry out the request as a checklist, one line per step, each line starting with "
    "'- [ ] ', in the order they should be done. Answer with the checklist and no tool call."
)
_IMPLEMENT = (
    "You are in the IMPLEMENT phase: carry out ONE item of the plan with the tools. When the "
    "item is done, answer without a tool call, starting with 'DONE:' and what you did. If it "
    "cannot be done, answer 'FAILED: <why>'. If a step is missing from the plan, add a line "
    "'- [ ] <step>' to your answer (it is appended to the plan)."
)
_SUMMARY = (
    "You are in the SUMMARY phase. Tell the user, briefly and plainly, what was done for the "
    "request, what failed and why, and where the changes are (they are in the Draft, for "
    "the user to review and publish). Do not call tools."
)


@dataclass
class _Options:
    history: tuple[Message, ...]
    system: str
    new_recorder: Callable[[], Recorder]
    on_event: Callable[[RpiEvent], None] | None
    on_step: Callable[[RpiStep], None] | None
    cancel: CancelToken | None
    clock: Callable[[], float]
    context: str
    manifest: Callable[[], str] | None
    scope: Callable[[Phase, int | None], AbstractContextManager[object]]
    on_tool_result: Callable[[str, str, ToolResult], None] | None = None
    input_budget: int | None = None


class _Engine:
    def __init__(
        self,
        folder: Folder,
        provider: Provider,
        tools: ToolMap,
        request: str,
        state: Path,
        options: _Options,
    ) -> None:
        self.folder = folder
        self.provider = provider
        self.tools = tools
        self.request = request
        self.state = state
        self.history = options.history
        self.system = options.system
        self.new_recorder = options.new_recorder
        self.on_event = options.on_event
        self.on_step = options.on_step
        self.cancel = options.cancel
        self.clock = options.clock
        self.context = options.context.strip()
        self.manifest = options.manifest
        self.scope = options.scope
        self.on_tool_result = options.on_tool_result
        self.input_budget = options.input_budget
        self.traces: list[str] = []

    def emit(self, event: RpiEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def toolset(self, phase: Phase) -> dict[str, tuple[ToolSpec, ToolHandler]]:
        if phase == "research":
            return {n: self.tools[n] for n in RESEARCH_TOOLS if n in self.tools}
        if phase == "plan":
            return {n: self.tools[n] for n in PLAN_TOOLS if n in self.tools}
        if phase == "implement":
            return dict(self.tools)
        return {}

    def opening(self, phase_text: str, user: str, *, context: bool = True) -> list[Message]:
        system = f"{self.system}\n\n{phase_text}" if self.system else phase_text
        if context and self.context:
            user = f"{self.context}\n\n{user}"
        return [Message("system", system), *self.history, Message("user", user)]

    # one model call and its tool calls
    def step(
        self,
        phase: Phase,
        item: int | None,
        messages: list[Message],
        tools: Mapping[str, tuple[ToolSpec, ToolHandler]],
        detector: LoopDetector | None,
    ) -> Response:
        request = Request(
            model=self.provider.model,
            messages=tuple(messages),
            tools=tuple(spec for spec, _ in tools.values()),
            tool_choice="auto" if phase == "plan" and tools else None,
            reasoning_effort=phase_effort(self.provider, phase),
            input_budget=self.input_budget,
        )
        recorder = self.new_recorder()
        first = len(recorder.ids)
        visible = phase == "summary"

        def stream_event(event: StreamEvent) -> None:
            if visible or isinstance(event, ToolCallEvent):
                self.emit(event)

        def tool_done(call_id: str, name: str, result: ToolResult) -> None:
            if self.on_tool_result is not None:
                self.on_tool_result(call_id, name, result)
            self.emit(ToolCompleted(name, result.is_error, phase))

        with self.scope(phase, item):
            outcome = take_step(
                self.provider,
                request,
                lambda name, arguments: _run(
                    self.folder, self.tools, tools, phase, name, arguments
                ),
                recorder,
                loop=detector,
                cancel=self.cancel,
                on_event=stream_event,
                on_tool_result=tool_done,
                clock=self.clock,
            )
            traces = tuple(recorder.ids[first:])
            if self.on_step is not None:
                self.on_step(RpiStep(phase, item, outcome.response, traces, outcome.notes))
        self.traces.extend(traces)
        messages[:] = outcome.conversation()
        return outcome.response

    def tool_loop(
        self,
        phase: Phase,
        item: int | None,
        messages: list[Message],
        turns: int,
    ) -> tuple[str, bool]:
        """Call until an answer without a tool call: (its text, True), or (last text, False)."""
        tools = self.toolset(phase)
        detector = loop_detector()
        text = ""
        for _ in range(turns):
            response = self.step(phase, item, messages, tools, detector)
            text = response.text.strip() or text
            if not response.tool_calls:
                return response.text.strip(), True
        return text, False

    def research(self) -> str:
        messages = self.opening(_RESEARCH, f"Request:\n{self.request}")
        text, finished = self.tool_loop("research", None, messages, RESEARCH_TURNS)
        if not finished:
            text += f"\n\n[research stopped after its {RESEARCH_TURNS} turns]"
        return text.strip() or "(no findings)"

    def plan(self, research: str) -> Plan:
        messages = self.opening(_PLAN, f"Request:\n{self.request}\n\nResearch notes:\n{research}")
        text, _ = self.tool_loop("plan", None, messages, PLAN_TURNS)
        steps = checklist(text, numbered=True)
        if not steps:
            raise WorkshopPlanMissing(self.provider.name)
        return Plan([PlanItem(n, s) for n, s in enumerate(steps, 1)], len(steps))

    def implement_item(self, research: str, plan: Plan, item: PlanItem, failure: str) -> str:
        user = (
            f"Request:\n{self.request}\n\nResearch notes:\n{research}\n\n"
            f"Plan:\n{plan.render()}\nDo item {item.number} now: {item.text}"
        )
        if failure:
            user += f"\n\nA previous attempt at this item failed: {failure}. Try another way."
        messages = self.opening(_IMPLEMENT, user)
        text, finished = self.tool_loop("implement", item.number, messages, ITEM_TURNS)
        if not finished:
            raise _ItemFailed(f"no answer within its {ITEM_TURNS} turns", text)
        head = text.lstrip("*# ").upper()
        if head.startswith("FAILED"):
            reason = text.lstrip("*# ")[len("FAILED") :].lstrip(":*- ").splitlines()
            raise _ItemFailed((reason[0].strip() if reason else "") or "the model gave up", text)
        return text

    def summary(self, research: str, plan: Plan) -> str:
        files = ""
        if self.manifest is not None:
            files = self.manifest()
        elif "list_files" in self.tools:
            files = call_tool(self.tools, self.folder, "list_files", {}).text
        user = (
            f"Request:\n{self.request}\n\nResearch notes:\n{research}\n\n"
            f"Finished plan:\n{plan.render()}\nFiles now in the workspace:\n{files}"
        )
        messages = self.opening(_SUMMARY, user, context=False)
        response = self.step("summary", None, messages, {}, None)
        return response.text.strip()


class _ItemFailed(Exception):
    def __init__(self, reason: str, text: str) -> None:
        super().__init__(reason)
        self.reason = " ".join(reason.split())[:200].replace("]", ")")
        self.text = text


def _run(
    folder: Folder,
    table: ToolMap,
    allowed: Mapping[str, tuple[ToolSpec, ToolHandler]],
    phase: str,
    name: str,
    arguments: dict[str, Any],
) -> ToolResult:
    if name in table and name not in allowed:
        return ToolResult(
            f"{name!r} is not a tool of the {phase} phase; use one of {', '.join(allowed)}", True
        )
    return call_tool(allowed, folder, name, arguments)


def run_rpi(
    folder: Folder,
    provider: Provider,
    tools: ToolMap,
    request: str,
    *,
    state: Path,
    history: Sequence[Message] = (),
    system: str = "",
    recorder: Recorder | Callable[[], Recorder],
    on_event: Callable[[RpiEvent], None] | None = None,
    on_step: Callable[[RpiStep], None] | None = None,
    cancel: CancelToken | None = None,
    clock: Callable[[], float] = time.monotonic,
    context: str = "",
    manifest: Callable[[], str] | None = None,
    scope: Callable[[Phase, int | None], AbstractContextManager[object]] | None = None,
    key: str | None = None,
    on_tool_result: Callable[[str, str, ToolResult], None] | None = None,
    input_budget: int | None = None,
) -> RpiResult:
    """Run (or resume) one RPI turn for ``request``; see the module doc for every argument."""
    if not request.strip():
        raise UsageError("the request is empty")
    identity = request if key is None else key
    run = _Run.load(state)
    if run is None or run.request != identity:
        clear(state)
        run = _Run(identity)
        run.save(state)
    new_recorder: Callable[[], Recorder]
    if isinstance(recorder, Recorder):
        shared = recorder

        def new_recorder() -> Recorder:
            return shared

    else:
        new_recorder = recorder
    options = _Options(
        history=tuple(history),
        system=system,
        new_recorder=new_recorder,
        on_event=on_event,
        on_step=on_step,
        cancel=cancel,
        clock=clock,
        context=context,
        manifest=manifest,
        scope=scope or (lambda phase, item: contextlib.nullcontext()),
        on_tool_result=on_tool_result,
        input_budget=input_budget,
    )
    engine = _Engine(folder, provider, tools, request, state, options)
    ran: list[Phase] = []

    research = _read(state / RESEARCH_FILE)
    if research is None:
        ran.append("research")
        engine.emit(PhaseStarted("research"))
        research = engine.research() + "\n"
        _write(state / RESEARCH_FILE, research)
        engine.emit(PhaseCompleted("research"))

    plan_text = _read(state / PLAN_FILE)
    if plan_text is None:
        ran.append("plan")
        engine.emit(PhaseStarted("plan"))
        plan = engine.plan(research)
        _write(state / PLAN_FILE, plan.render())
        engine.emit(PhaseCompleted("plan"))
    else:
        plan = Plan.parse(plan_text)

    if any(item.status == " " for item in plan.items):
        ran.append("implement")
        engine.emit(PhaseStarted("implement"))
        _implement(engine, run, research, plan)
        engine.emit(PhaseCompleted("implement"))

    summary = _read(state / SUMMARY_FILE)
    if summary is None:
        ran.append("summary")
        engine.emit(PhaseStarted("summary"))
        summary = engine.summary(research, plan) + "\n"
        _write(state / SUMMARY_FILE, summary)
        engine.emit(PhaseCompleted("summary"))
    return RpiResult(summary.strip(), ran, plan, research.strip(), engine.traces)


def _implement(engine: _Engine, run: _Run, research: str, plan: Plan) -> None:
    state = engine.state
    while True:
        todo = next((i for i in plan.items if i.status == " "), None)
        if todo is None:
            return
        key = str(todo.number)
        engine.emit(ImplementProgress(todo.number, len(plan.items), todo.text))
        try:
            text = engine.implement_item(research, plan, todo, run.failures.get(key, ""))
        except _ItemFailed as failed:
            run.attempts[key] = run.attempts.get(key, 0) + 1
            run.failures[key] = failed.reason
            if run.attempts[key] >= ITEM_ATTEMPTS:
                todo.status, todo.reason = "!", failed.reason
            plan.amend(checklist(failed.text))
        else:
            todo.status = "x"
            plan.amend(checklist(text))
        # plan.md first: a crash between the two writes retries an item at most once more
        _write(state / PLAN_FILE, plan.render())
        run.save(state)


# -- on a repository's Draft ---------------------------------------------------------------


def _effort_field(provider: Provider, phase: str) -> dict[str, str]:
    sent = effort_sent(provider, phase)
    return {"reasoning_effort": sent} if sent is not None else {}


def run_rpi_agent(
    core: Core,
    provider: Provider,
    prompt: str,
    *,
    state: Path,
    key: str | None = None,
    system: str = "",
    history: Sequence[Message] = (),
    tools: ToolMap | None = None,
    context: str = "",
    author: Author | None = None,
    agent_id: str = "workshop-rpi",
    secrets: tuple[str, ...] = (),
    cancel: CancelToken | None = None,
    on_event: Callable[[object], None] | None = None,
    on_step_start: Callable[[int], None] | None = None,
    on_tool_result: Callable[[int, str, str, ToolResult], None] | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    data: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    limits: WriteLimits | None = None,
    source: Mapping[str, Any] | None = None,
    draft_on_write: bool = False,
    input_budget: int | None = None,
) -> AgentResult:
    """:func:`run_rpi` on the Draft, shaped like :func:`strata.agent.loop.run_agent`.

    The Draft is opened when none is (hand edits in an open one are recorded
    first); every model call with its tool calls runs inside
    :meth:`~strata.workbench.draft.Draft.step` and is recorded as a Draft
    revision whose artifacts are its traces and whose ``data.rpi`` names the
    session, step, phase and plan item (``data`` is merged in). The result's
    last step is the summary: ``result.text`` is the assistant's answer.
    ``key`` identifies the request for resumption (the Workshop passes the
    user message's id); ``state`` is the conversation's ``_rpi`` folder
    (:func:`rpi_folder`). A turn whose summary was written before returns it
    as a last step without an event (nothing is asked of the model).
    ``on_tool_result`` gets ``(step, call id, tool, result)``; ``max_steps``
    is accepted for ``run_agent``'s callers and ignored: the phases have
    their own budgets. As in ``run_agent``, with ``draft_on_write`` the Draft
    is opened at the first write (the research and plan phases open none),
    ``limits`` bound the turn's writes and ``source`` is the Draft's source;
    ``input_budget`` keeps every step's request within the model's context
    (what it left out is added to ``result.notes``).
    """
    from strata.agent.tools import TOOLS

    table = TOOLS if tools is None else tools
    author = author or Author(agent_id, "agent", provider.model or None)
    drafting, result = open_session(
        core,
        provider,
        author,
        table,
        source=source or {"kind": "agent", "agent": agent_id},
        at_once=not draft_on_write,
    )
    limits = limits if limits is not None else WriteLimits()
    session = result.session
    current: dict[str, Any] = {}

    @contextlib.contextmanager
    def scope(phase: Phase, item: int | None) -> Iterator[None]:
        n = len(result.steps)
        current.update(step=n, clock_ms=core.now_ms())
        if on_step_start is not None:
            on_step_start(n)
        label = f"rpi {phase}" + (f" item {item}" if item is not None else "")
        with drafting.step(label, session=session), bounded(limits):
            yield

    def tool_done(call_id: str, name: str, result: ToolResult) -> None:
        if on_tool_result is not None:
            on_tool_result(current["step"], call_id, name, result)

    def record(step: RpiStep) -> None:
        response = step.response
        calls = tuple(c.name for c in response.tool_calls)
        phase = step.phase + (f" item {step.item}" if step.item is not None else "")
        event = drafting.record(
            step_title(f"rpi {phase}", response),
            data={
                STEP: step_data(
                    provider,
                    response,
                    loop="rpi",
                    step=current["step"],
                    session=session,
                    agent_id=agent_id,
                    clock_ms=current["clock_ms"],
                    phase=step.phase,
                    item=step.item,
                    **_effort_field(provider, step.phase),
                ),
                **(data or {}),
            },
            artifacts=step.traces,
        )
        if drafting.draft is not None:
            result.draft_id = drafting.draft.id
        record = StepRecord(
            current["step"],
            event.id if event else None,
            response.text,
            calls,
            response.finish_reason,
            step.traces,
        )
        result.steps.append(record)
        label = f"rpi {phase}"
        result.notes.extend(f"{label}: {note}" for note in step.notes)
        if on_step is not None:
            on_step(record)

    outcome = run_rpi(
        drafting.folder,
        provider,
        table,
        prompt,
        state=state,
        key=key,
        history=history,
        system=system,
        recorder=lambda: Recorder(put=core.objects.put, agent_id=agent_id, secrets=secrets),
        on_event=on_event,
        on_step=record,
        cancel=cancel,
        context=context,
        scope=scope,
        on_tool_result=tool_done,
        input_budget=input_budget,
    )
    if "summary" not in outcome.phases_run:
        # a turn finished before (killed before its answer was recorded): its summary again
        result.steps.append(StepRecord(len(result.steps), None, outcome.text, (), "stop", ()))
    return result
