"""The host loop of seed 001: retrieve until the context suffices, then answer or plan.

One *host run* answers one request:

1. ``host_run_started``; the knowledge base is brought up to the working
   tree (``index``: the tree is recorded first, as ``strata kb index`` does);
2. *steps*: the host model (any :class:`~strata.providers.Provider`) reads the
   conversation and either calls ``local_kb_retrieval`` (passages come back
   numbered, with citations), calls ``create_plan`` (see
   :mod:`strata.host.tools`), or answers without a tool call, which ends the
   run. Each model call is recorded as a trace (:mod:`strata.providers.trace`)
   and linked, with the step's retrieval calls, from an ``agent_step`` event;
3. a plan: ``plan_created``, then for each task ``task_started``, the
   capability through the gateway's registry
   (:func:`strata.gateway.run_capability`: ``terminal_exec`` through the
   policy and the approval gate, with the gateway's own events), and
   ``task_finished`` (its status, error and the trace of the call). A task
   that fails (a command that exits non-zero, ``approval_denied``,
   ``command_forbidden``, ``unsupported capability kind: X``) stops the
   plan; the remaining tasks are ``skipped``. The outcome goes back to the
   model as the tool's result, and the model decides what comes next;
4. ``host_run_finished``: the status (``answered``, ``completed``, ``failed``,
   ``max_steps``, ``error``), the answer and the citations; its
   ``artifacts`` are every trace of the run, in order.

Bounds: ``max_steps`` model calls; each terminal task at most ``timeout_s``
seconds (the gateway kills its process group); the gateway runs at most
``max_commands`` commands per host run.

A host run is one operation group (:meth:`strata.core.core.Core.new_group`,
kind ``host``, its request as title): every operation it records (its
events, each task's run and the gateway's events) is a step of it, so
``strata op log`` shows the run as one line and one ``strata undo`` reverts
every change its tasks made (``strata undo --step`` one step). The knowledge
base is brought up to the working tree before the group opens: the person's
files are never the run's.

A replay: the traces of a run, served by
:class:`strata.providers.replay.ReplayProvider`, answer the same requests
again with no model (the results the model is shown hold no ids or
timings, so the same workspace gives the same requests).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.agent.loop import StepRecord
from strata.agent.step import STEP, LoopDetector, StepOutcome, step_data, take_step
from strata.agent.tools import Tool, ToolResult, ToolSet
from strata.core.groups import open_group
from strata.errors import StrataError, UsageError
from strata.host.tools import (
    PLAN_TOOL,
    dumps,
    parse_k,
    plan_tasks,
    shown_result,
    specs,
    task_args,
)
from strata.ledger.events import Author, EventType
from strata.providers.base import (
    CancelToken,
    Message,
    Provider,
    Request,
    StreamEvent,
    TextDelta,
    ToolCall,
)
from strata.providers.trace import Recorder

if TYPE_CHECKING:
    from strata.core import Core
    from strata.gateway import Approver, Gateway
    from strata.kb import Hit, KnowledgeBase

SYSTEM_PROMPT = (
    "You are the host of a local workspace assistant. Analyse the user's request. Call "
    "local_kb_retrieval to read passages of the workspace's knowledge base, as often as you "
    "need, until you have enough context. Then either answer directly with no tool call, "
    "citing the passages you used as [n], or call create_plan with the capability tasks "
    "that carry the request out (terminal_exec runs a shell command in the workspace; docx "
    "and excel write or read documents). After a plan ran, read each task's outcome and "
    "finish with a short summary of what was done; say plainly which task failed and why."
)
MAX_STEPS = 8
MAX_COMMANDS = 20
TIMEOUT_S = 120.0
AGENT_ID = "host"
_CITED = re.compile(r"\[(\d+)\]")

#: what a run ended as
STATUSES = ("answered", "completed", "failed", "max_steps", "error")


@dataclass
class Activity:
    """One line of the inline activity feed: what the host did, in plain words."""

    kind: str
    """``retrieval``, ``plan``, ``task_started``, ``task_finished``, ``answer``, ``limit``."""
    text: str
    step: int | None = None
    task: str | None = None
    """``P.N``: task N of plan P."""
    event_id: str | None = None
    traces: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "kind": self.kind,
            "text": self.text,
            "step": self.step,
            "task": self.task,
            "event_id": self.event_id,
            "traces": list(self.traces),
        }


@dataclass
class HostTask:
    """One task of a plan and what became of it."""

    plan: int
    index: int
    kind: str
    title: str
    args: dict[str, Any]
    status: str = "pending"
    """``pending``, ``ok``, ``failed`` or ``skipped``."""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    """``{"code", "message", "hint"}`` when it failed with an error."""
    run_id: str | None = None
    started_event_id: str | None = None
    finished_event_id: str | None = None
    traces: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``P.N``."""
        return f"{self.plan}.{self.index}"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "task": self.label,
            "kind": self.kind,
            "title": self.title,
            "args": self.args,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "run_id": self.run_id,
            "started_event_id": self.started_event_id,
            "finished_event_id": self.finished_event_id,
            "traces": list(self.traces),
        }


@dataclass
class HostPlan:
    """A plan the host emitted."""

    plan: int
    goal: str
    tasks: list[HostTask]
    event_id: str | None = None

    @property
    def status(self) -> str:
        """``completed`` when every task is ok, else ``failed``."""
        return "completed" if all(t.status == "ok" for t in self.tasks) else "failed"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "plan": self.plan,
            "goal": self.goal,
            "status": self.status,
            "event_id": self.event_id,
            "tasks": [t.to_json() for t in self.tasks],
        }


HostStep = StepRecord
"""One model call of the run (and its retrieval calls): recorded as an agent's step is."""


@dataclass
class HostResult:
    """What a host run did: its answer and citations, its plans, its steps and its activity."""

    host_run: str
    request: str
    provider: str
    model: str
    status: str = "error"
    answer: str = ""
    passages: list[Hit] = field(default_factory=list)
    citations: list[int] = field(default_factory=list)
    """The numbers (1-based, into :attr:`passages`) of the passages the answer cites."""
    plans: list[HostPlan] = field(default_factory=list)
    steps: list[HostStep] = field(default_factory=list)
    activity: list[Activity] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)
    started_event_id: str | None = None
    finished_event_id: str | None = None

    @property
    def ok(self) -> bool:
        """True when the run answered, or completed every task it planned."""
        return self.status in ("answered", "completed")

    @property
    def tasks(self) -> list[HostTask]:
        """Every task of every plan, in order."""
        return [t for p in self.plans for t in p.tasks]

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata host --json`` prints: raw trace ids and activity lines both."""
        return {
            "host_run": self.host_run,
            "request": self.request,
            "provider": self.provider,
            "model": self.model,
            "status": self.status,
            "answer": self.answer,
            "citations": [{"n": n, **self.passages[n - 1].to_json()} for n in self.citations],
            "passages": [{"n": n, **h.to_json()} for n, h in enumerate(self.passages, 1)],
            "plans": [p.to_json() for p in self.plans],
            "steps": [s.to_json() for s in self.steps],
            "activity": [a.to_json() for a in self.activity],
            "events": list(self.events),
            "traces": list(self.traces),
            "started_event_id": self.started_event_id,
            "finished_event_id": self.finished_event_id,
        }


class HostRun:
    """The state of one host run; :func:`run_host` makes one and calls :meth:`run`."""

    def __init__(
        self,
        core: Core,
        provider: Provider,
        request: str,
        *,
        kb: KnowledgeBase,
        gateway: Gateway,
        author: Author,
        max_steps: int,
        timeout_s: float,
        k: int,
        secrets: tuple[str, ...],
        cancel: CancelToken | None,
        on_text: Callable[[str], None] | None,
        on_activity: Callable[[Activity], None] | None,
    ) -> None:
        self.core = core
        self.provider = provider
        self.kb = kb
        self.gateway = gateway
        self.author = author
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.k = k
        self.secrets = secrets
        self.cancel = cancel
        self.on_text = on_text
        self.on_activity = on_activity
        run = f"host_{core.new_event_id().removeprefix('evt_')}"
        self.result = HostResult(run, request, provider.name, provider.model)
        #: the newest Strata run a task made: later host events join its operation
        self.last_run: str | None = None
        self._seen: dict[tuple[str, int], int] = {}
        #: traces of the step under way, not yet linked from an event
        self.pending: list[str] = []
        #: the step's activity lines, shown once its event is recorded
        self.step_activity: list[Activity] = []
        kb_spec, plan_spec = specs()
        #: the host's tool set (the knowledge group): one executor checks and runs each call
        self.tools = ToolSet(
            [Tool(kb_spec, self.retrieval, "knowledge"), Tool(plan_spec, _in_loop, "knowledge")]
        )
        self._line = ""

    # -- the ledger ----------------------------------------------------------------------

    def note(
        self,
        action: EventType,
        data: dict[str, Any],
        rationale: str,
        *,
        artifacts: Sequence[str] = (),
        step: dict[str, Any] | None = None,
    ) -> str:
        """Record one host event (in the newest task run's operation, when there is one).

        ``step``: the fields of a model step (its ``agent_step`` event's ``data.step``).
        """
        core = self.core
        # alone, a run's later events join its task run's operation, so that one undo
        # reverts the task; in the run's group, undo reverts the whole group anyway
        joined = self.last_run if core.group is None else None
        details: dict[str, Any] = {"run_id": joined} if joined else {}
        command = EventType.RUN if joined else action
        with core.transaction(command, self.author, **details) as tx:
            head = tx.head()
            event = tx.annotate(
                action,
                anchor=head.id if head else None,
                data={
                    "host": {"run": self.result.host_run, **data},
                    **({STEP: step} if step is not None else {}),
                },
                rationale=rationale[:300],
                author=self.author,
                # in the run's group its events take the group's id; alone, the run's
                operation_id=None if core.group is not None else self.result.host_run,
                artifacts=tuple(artifacts),
            )
        self.result.events.append(event.id)
        return event.id

    def tell(self, activity: Activity) -> None:
        """Add an activity line (and show it, live)."""
        self.result.activity.append(activity)
        if self.on_activity is not None:
            self.on_activity(activity)

    # -- the run -------------------------------------------------------------------------

    def run(self) -> HostResult:
        """Run the loop to its end (see the module doc)."""
        result = self.result
        result.started_event_id = self.note(
            EventType.HOST_RUN_STARTED,
            {
                "request": result.request,
                "provider": result.provider,
                "model": result.model,
                "max_steps": self.max_steps,
                "timeout_s": self.timeout_s,
            },
            f"host run: {result.request}",
        )
        try:
            self.loop()
        except BaseException as exc:
            result.status = "error"
            reason = str(exc) or type(exc).__name__
            # the ledger may refuse now (a busy workspace): the cause is what matters
            with contextlib.suppress(StrataError):
                self.finish(error={"type": type(exc).__name__, "message": reason})
            raise
        self.finish()
        return result

    def loop(self) -> None:
        """The steps: a model call, its retrievals, its ``agent_step`` event, its plans."""
        result = self.result
        messages: list[Message] = [
            Message("system", SYSTEM_PROMPT),
            Message("user", result.request),
        ]
        tools = specs()
        loop = LoopDetector()
        for n in range(self.max_steps):
            recorder = Recorder(put=self.core.objects.put, agent_id=AGENT_ID, secrets=self.secrets)
            request = Request(model=self.provider.model, messages=tuple(messages), tools=tools)
            outcome = self.step(n, request, recorder, loop)
            response = outcome.response
            replies: dict[str, Message] = {
                call_id: Message("tool", result.text, tool_call_id=call_id, name=call.name)
                for call, (call_id, result) in zip(
                    response.tool_calls, outcome.results, strict=True
                )
                if result is not None
            }
            names = tuple(c.name for c in response.tool_calls)
            traces = tuple(recorder.ids)
            event_id = self.note(
                EventType.AGENT_STEP,
                {},
                f"host step {n + 1}: {', '.join(names) or 'answer'}",
                artifacts=traces,
                step=step_data(self.provider, response, loop="host", step=n),
            )
            step = HostStep(n, event_id, response.text, names, response.finish_reason, traces)
            result.steps.append(step)
            result.traces.extend(step.traces)
            self.pending = []
            for activity in self.step_activity:
                activity.event_id = step.event_id
                self.tell(activity)
            self.step_activity = []
            for call in response.tool_calls:
                if call.name == PLAN_TOOL:
                    replies[call.id] = self.plan(n, call)
            messages.append(response.message())
            messages.extend(replies[c.id] for c in response.tool_calls)
            messages.extend(Message("user", w) for w in outcome.warnings)
            if not response.tool_calls:
                self.answered(response.text, n, step.event_id)
                return
        result.status = "max_steps"
        self.tell(
            Activity(
                "limit",
                f"stopped after {self.max_steps} model calls without a final answer",
                step=self.max_steps - 1,
            )
        )

    def step(self, n: int, request: Request, recorder: Recorder, loop: LoopDetector) -> StepOutcome:
        """Step ``n``: the model call and its retrievals (``create_plan`` waits for the event)."""
        lines: list[str] = []

        def tool_done(call_id: str, name: str, result: ToolResult) -> None:
            traces = (recorder.ids[-1],)
            self.step_activity.append(Activity("retrieval", lines.pop(0), step=n, traces=traces))

        try:
            return take_step(
                self.provider,
                request,
                lambda name, arguments: self.tool(name, arguments, lines),
                recorder,
                loop=loop,
                cancel=self.cancel,
                on_event=self.stream_event,
                on_tool_result=tool_done,
            )
        finally:
            self.pending = list(recorder.ids)  # a failed call's trace too

    def stream_event(self, event: StreamEvent) -> None:
        """A model's stream event: its text goes to ``on_text``."""
        if isinstance(event, TextDelta) and self.on_text is not None:
            self.on_text(event.text)

    def answered(self, text: str, step: int, event_id: str | None) -> None:
        """The model answered without a tool call: the run's answer and its citations."""
        result = self.result
        result.answer = text
        cited = sorted(
            {int(m) for m in _CITED.findall(text) if 1 <= int(m) <= len(result.passages)}
        )
        result.citations = cited or list(range(1, len(result.passages) + 1))
        if result.plans:
            result.status = (
                "failed" if any(p.status != "completed" for p in result.plans) else ("completed")
            )
        else:
            result.status = "answered"
        shown = ", ".join(f"[{n}] {result.passages[n - 1].citation}" for n in result.citations)
        self.tell(
            Activity(
                "answer",
                "answered" + (f", citing {shown}" if shown else ""),
                step=step,
                event_id=event_id,
            )
        )

    def finish(self, *, error: dict[str, str] | None = None) -> None:
        """Record ``host_run_finished``, linking every trace of the run."""
        result = self.result
        result.traces.extend(t for t in self.pending if t not in result.traces)
        result.finished_event_id = self.note(
            EventType.HOST_RUN_FINISHED,
            {
                "status": result.status,
                "steps": len(result.steps),
                "plans": len(result.plans),
                "tasks": {
                    s: sum(1 for t in result.tasks if t.status == s)
                    for s in ("ok", "failed", "skipped")
                },
                "answer": result.answer[:2000],
                "citations": [result.passages[n - 1].citation for n in result.citations],
                "error": error,
            },
            f"host run {result.status}"
            + (f": {error['message']}" if error else f" after {len(result.steps)} steps"),
            artifacts=result.traces,
        )

    # -- tools ---------------------------------------------------------------------------

    def tool(self, name: str, arguments: dict[str, Any], lines: list[str]) -> ToolResult | None:
        """Run a call through the host's tool set; ``create_plan`` is left to the loop.

        The activity line of the call goes to ``lines`` (shown once the call is recorded).
        """
        if name == PLAN_TOOL:
            return None
        self._line = ""
        result = self.tools.run(Path("."), name, arguments)  # no tool of the host reads files
        if not self._line:
            self._line = (
                f"called {name}: {result.text}"
                if name in self.tools
                else f"called an unknown tool {name!r}"
            )
        lines.append(self._line)
        return result

    def retrieval(self, folder: Path, arguments: dict[str, Any]) -> ToolResult:
        """``local_kb_retrieval`` as a tool of the set (its activity line kept for the step)."""
        text, is_error, self._line = self.retrieve(arguments)
        return ToolResult(text, is_error)

    def retrieve(self, arguments: dict[str, Any]) -> tuple[str, bool, str]:
        """``local_kb_retrieval``: the passages, numbered across the run, with citations."""
        query = arguments.get("query")
        try:
            if not isinstance(query, str):
                raise UsageError('"query" must be a string')
            found = self.kb.search(query, k=parse_k(arguments.get("k"), default=self.k))
        except StrataError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            return f"error: {exc.message}{hint}", True, f"searched for {query!r}: {exc.message}"
        lines: list[str] = []
        numbers = []
        for hit in found.hits:
            key = (hit.snapshot_id, hit.chunk_id)
            if key not in self._seen:
                self.result.passages.append(hit)
                self._seen[key] = len(self.result.passages)
            n = self._seen[key]
            numbers.append(n)
            heading = f" ({hit.heading})" if hit.heading else ""
            lines += [f"[{n}] {hit.citation}{heading}", hit.text, ""]
        if not lines:
            lines = ["(no passage matched)"]
        shown = ", ".join(f"[{n}]" for n in numbers) or "nothing"
        return (
            "\n".join(lines).rstrip("\n"),
            False,
            f"searched the knowledge base for {query!r}: {shown}",
        )

    # -- plans -------------------------------------------------------------------------

    def plan(self, step: int, call: ToolCall) -> Message:
        """``create_plan``: record it, dispatch its tasks in order, tell the model how it went."""
        result = self.result
        try:
            goal, raw_tasks = plan_tasks(call.arguments)
        except UsageError as exc:
            self.tell(Activity("plan", f"emitted a malformed plan: {exc.message}", step=step))
            return Message("tool", f"error: {exc.message}", tool_call_id=call.id, name=PLAN_TOOL)
        number = len(result.plans) + 1
        tasks = [
            HostTask(
                number,
                i,
                str(raw["kind"]),
                str(raw.get("title") or raw["kind"]),
                {k: v for k, v in raw.items() if k not in ("kind", "title") and v is not None},
            )
            for i, raw in enumerate(raw_tasks, start=1)
        ]
        plan = HostPlan(number, goal, tasks)
        result.plans.append(plan)
        listed = "; ".join(f"{t.label} {t.kind}: {t.title}" for t in tasks)
        plan.event_id = self.note(
            EventType.PLAN_CREATED,
            {
                "plan": number,
                "step": step,
                "goal": goal,
                "tasks": [
                    {"task": t.label, "kind": t.kind, "title": t.title, "args": t.args}
                    for t in tasks
                ],
            },
            f"plan {number}: {goal or listed}",
        )
        self.tell(
            Activity(
                "plan",
                f"planned {len(tasks)} task{'s' if len(tasks) != 1 else ''}: {listed}",
                step=step,
                event_id=plan.event_id,
            )
        )
        stopped = False
        for task, raw in zip(tasks, raw_tasks, strict=True):
            if stopped:
                task.status = "skipped"
                continue
            self.dispatch(step, task, raw)
            stopped = task.status != "ok"
        outcome = {
            "plan": number,
            "status": plan.status,
            "tasks": [
                {
                    "task": t.label,
                    "kind": t.kind,
                    "title": t.title,
                    "status": t.status,
                    "result": shown_result(t.result) if t.result is not None else None,
                    "error": t.error,
                }
                for t in tasks
            ],
        }
        return Message("tool", dumps(outcome), tool_call_id=call.id, name=PLAN_TOOL)

    def dispatch(self, step: int, task: HostTask, raw: dict[str, Any]) -> None:
        """Run one task through the registry, between ``task_started`` and ``task_finished``."""
        from strata.gateway import run_capability

        what = f"task {task.label} ({task.kind}): {task.title}"
        task.started_event_id = self.note(
            EventType.TASK_STARTED,
            {"plan": task.plan, "task": task.label, "kind": task.kind, "title": task.title},
            f"started {what}",
        )
        self.tell(
            Activity(
                "task_started",
                f"started {what}",
                step=step,
                task=task.label,
                event_id=task.started_event_id,
            )
        )
        recorder = Recorder(put=self.core.objects.put, agent_id=AGENT_ID, secrets=self.secrets)
        started = time.monotonic()
        args: dict[str, Any] = {}
        try:
            args = task_args(raw)
            if task.kind == "terminal_exec":
                asked = args.get("timeout_s")
                limit = self.timeout_s
                if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
                    limit = min(float(asked), self.timeout_s)
                args["timeout_s"] = limit
            output = run_capability(self.core, task.kind, args, gateway=self.gateway)
        except Exception as exc:  # a capability's failure is the task's, never the run's
            code = getattr(exc, "code", None) or (
                "usage_error" if isinstance(exc, UsageError) else "capability_error"
            )
            message = (
                exc.message if isinstance(exc, StrataError) else f"{type(exc).__name__}: {exc}"
            )
            hint = exc.hint if isinstance(exc, StrataError) else None
            task.status = "failed"
            task.error = {"code": code, "message": message, "hint": hint}
            body = dumps({"error": task.error})
        else:
            task.result = output
            task.run_id = output.get("run_id") if isinstance(output.get("run_id"), str) else None
            if task.run_id:
                self.last_run = task.run_id
            fine = (
                output.get("exit_code", 0) == 0
                and not output.get("timed_out")
                and not output.get("truncated")
            )
            task.status = "ok" if fine else "failed"
            if not fine:
                task.error = {
                    "code": "timed_out" if output.get("timed_out") else "command_failed",
                    "message": _failure(output),
                    "hint": None,
                }
            body = dumps(output)
        recorder.tool_call(
            tool=task.kind,
            arguments=args,
            result=body,
            is_error=task.status != "ok",
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        task.traces = tuple(recorder.ids)
        self.result.traces.extend(task.traces)
        if task.status == "ok":
            changed = len(
                (task.result or {}).get("changes") or (task.result or {}).get("changed_paths") or []
            )
            line = f"finished {what}" + (
                f"; {changed} file{'s' if changed != 1 else ''} changed" if changed else ""
            )
        else:
            assert task.error is not None
            line = f"failed {what}: {task.error['message']}"
        task.finished_event_id = self.note(
            EventType.TASK_FINISHED,
            {
                "plan": task.plan,
                "task": task.label,
                "kind": task.kind,
                "status": task.status,
                "error": task.error,
                "run_id": task.run_id,
                "tool_call_id": (task.result or {}).get("tool_call_id"),
            },
            line,
            artifacts=task.traces,
        )
        self.tell(
            Activity(
                "task_finished",
                line,
                step=step,
                task=task.label,
                event_id=task.finished_event_id,
                traces=task.traces,
            )
        )


def _in_loop(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    raise AssertionError("create_plan runs in the host loop, after its step is recorded")


def _failure(output: dict[str, Any]) -> str:
    if output.get("timed_out"):
        return "the command timed out (its process group was killed)"
    if output.get("truncated"):
        return "the command printed more than its output limit (it was killed)"
    tail = (output.get("stderr") or output.get("stdout") or "").strip().splitlines()
    last = f": {tail[-1][:200]}" if tail else ""
    return f"the command exited {output.get('exit_code')}{last}"


def run_host(
    core: Core,
    provider: Provider,
    request: str,
    *,
    approver: Approver | None = None,
    profile: str | None = None,
    max_steps: int = MAX_STEPS,
    max_commands: int = MAX_COMMANDS,
    timeout_s: float = TIMEOUT_S,
    k: int = 5,
    index: bool = True,
    author: Author | None = None,
    secrets: Sequence[str] = (),
    cancel: CancelToken | None = None,
    on_text: Callable[[str], None] | None = None,
    on_activity: Callable[[Activity], None] | None = None,
) -> HostResult:
    """Answer ``request`` with ``provider`` as the host (see the module doc).

    ``approver`` answers the commands the policy wants approved (default:
    none, so they are denied and the task fails with the reason);
    ``profile`` overrides config.toml's ``[gateway]`` profile. ``index``
    brings the knowledge base up to the working tree first. ``on_text``
    receives the model's text as it streams, ``on_activity`` each activity
    line as it happens.
    """
    from strata.gateway import Gateway
    from strata.kb import KnowledgeBase

    if not request.strip():
        raise UsageError("the request is empty")
    if max_steps < 1:
        raise UsageError("max_steps must be at least 1")
    if timeout_s <= 0:
        raise UsageError("the timeout must be above 0 seconds")
    if k < 1:
        raise UsageError("k must be at least 1")
    author = author or Author(AGENT_ID, "agent", provider.model or None)
    gateway = Gateway(
        core, profile=profile, approver=approver, author=author, max_steps=max_commands
    )
    kb = KnowledgeBase(core)
    try:
        if index:  # the person's files as they are: recorded before the run's group opens
            kb.index(author=author)
        host = HostRun(
            core,
            provider,
            request,
            kb=kb,
            gateway=gateway,
            author=author,
            max_steps=max_steps,
            timeout_s=timeout_s,
            k=k,
            secrets=tuple(secrets),
            cancel=cancel,
            on_text=on_text,
            on_activity=on_activity,
        )
        group = core.new_group("host", request, author, host_run=host.result.host_run)
        # leased: should this process die, the next writer closes the group, interrupted
        with open_group(core, group, "host", group.id):
            return host.run()
    finally:
        kb.close()
