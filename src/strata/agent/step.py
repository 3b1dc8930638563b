"""The one step of every agent-like loop: a model call, its tool calls, one recorded step.

``strata agent`` (:mod:`strata.agent.loop`), a Workshop turn and each RPI
phase (:mod:`strata.workshop.rpi`), the host loop (:mod:`strata.host.loop`) and
the digest's optimizer (:mod:`strata.digest.optimize`) are configurations of
:func:`take_step`: they choose the tools, the prompt and the limits. Each
records a step in one vocabulary: a step that changed the Draft's files is
its ``draft_revision`` (a state event), any other an ``agent_step``
annotation (a host step, the digest's optimization), and either keeps the
step's fields, :func:`step_data`, in ``data.step``. :func:`recorded_step`
reads them back, from the ``data.agent``/``data.rpi``/``data.host`` and the
``host_step``/``digest_optimize`` events earlier versions wrote too.

What every step does, in order:

1. the cancel token is checked (a cancelled loop asks nothing more), and
   the request is kept within its ``input_budget``
   (:func:`~strata.providers.window.fit_request`: older tool results are
   left out first; the loop carries the messages as sent on, in
   :meth:`StepOutcome.conversation`, and so does a replay);
2. the model is called (through a :class:`~strata.providers.trace.RecordingProvider`
   unless the caller records model calls itself, as a replay does), its stream
   events handed to ``on_event``;
3. each tool call is first shown to the :class:`LoopDetector`: the
   :data:`LOOP_WARN`-th identical call (same name, same canonical arguments)
   among the last :data:`LOOP_WINDOW` adds a warning for the model, the
   :data:`LOOP_STOP`-th is not run and the loop stops with
   :class:`~strata.errors.AgentLoopDetected` (or the error the detector was
   given). Then the cancel token is checked again, the tool runs, and its
   call is recorded as a trace (arguments, result, duration).

A tool runner may answer ``None`` for a call it leaves to its loop (the host
runs ``create_plan`` after its step is recorded): such a call is loop-checked
but neither run nor recorded here, and its result in :attr:`StepOutcome.results`
is ``None`` for the loop to fill in.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.agent.tools import ToolResult
from strata.errors import AgentLoopDetected, ProviderProtocolError, StrataError
from strata.ledger.events import Event, EventType
from strata.providers.base import (
    CancelToken,
    Finished,
    Message,
    Provider,
    Request,
    Response,
    StreamEvent,
    stream_traced,
)
from strata.providers.trace import Recorder, RecordingProvider, canonical_json
from strata.providers.transport import check_cancel
from strata.providers.window import fit_request

#: how many recent tool calls the loop detector keeps, and at how many identical ones
#: among them it warns the model and stops the loop
LOOP_WINDOW = 10
LOOP_WARN = 3
LOOP_STOP = 5

#: what runs a tool call: (tool name, arguments) -> its result, or None to leave it to the loop
ToolRunner = Callable[[str, dict[str, Any]], ToolResult | None]


class LoopDetector:
    """Counts identical tool calls among the last :data:`LOOP_WINDOW` calls of a loop.

    One detector lives as long as one tool loop (a session of ``strata agent``,
    a Workshop turn, an RPI phase, a host run, a digest optimization).
    ``error`` makes the exception raised at ``stop`` repeats from
    ``(tool, count)``.
    """

    def __init__(
        self,
        *,
        window: int = LOOP_WINDOW,
        warn: int = LOOP_WARN,
        stop: int = LOOP_STOP,
        error: Callable[[str, int], StrataError] = AgentLoopDetected,
    ) -> None:
        self.window: deque[str] = deque(maxlen=window)
        self.warn = warn
        self.stop = stop
        self.error = error

    def observe(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Note a call before it runs: a warning to give the model at ``warn`` repeats, else None.

        Raises the detector's error when the call would be the ``stop``-th
        identical one in the window (the call is not run).
        """
        key = canonical_json({"name": name, "arguments": arguments})
        count = sum(1 for k in self.window if k == key) + 1
        if count >= self.stop:
            raise self.error(name, count)
        self.window.append(key)
        if count == self.warn:
            return (
                f"Warning: you called {name} with the same arguments {count} times in your "
                f"last {self.window.maxlen} tool calls. Its result will not change; use what "
                f"you have, try something else, or answer without a tool call. At {self.stop} "
                "identical calls the turn is stopped."
            )
        return None


@dataclass(frozen=True)
class StepOutcome:
    """What one step did: the model's response, each tool call's result, the loop's warnings.

    ``sent`` is the messages as the model got them (fitted to the request's
    budget); ``notes`` says what fitting them left out, one line each.
    """

    response: Response
    results: tuple[tuple[str, ToolResult | None], ...]  # (tool call id, result)
    warnings: tuple[str, ...] = ()
    sent: tuple[Message, ...] = ()
    notes: tuple[str, ...] = ()

    def conversation(self) -> list[Message]:
        """The messages the next step sends: those this step sent, then :meth:`messages`."""
        return [*self.sent, *self.messages()]

    def messages(self) -> list[Message]:
        """The messages that continue the conversation: the answer, each result, the warnings.

        A call left to the loop (its result None) is skipped: the loop adds its result.
        """
        out = [self.response.message()]
        for call, (_, result) in zip(self.response.tool_calls, self.results, strict=True):
            if result is not None:
                out.append(Message("tool", result.text, tool_call_id=call.id, name=call.name))
        out.extend(Message("user", w) for w in self.warnings)
        return out


def take_step(
    provider: Provider,
    request: Request,
    run_tool: ToolRunner,
    recorder: Recorder,
    *,
    record_model: bool = True,
    loop: LoopDetector | None = None,
    cancel: CancelToken | None = None,
    on_event: Callable[[StreamEvent], None] | None = None,
    on_tool_result: Callable[[str, str, ToolResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> StepOutcome:
    """One step: ask the model, then run its tool calls, recording each (see the module doc).

    ``record_model`` False leaves the model call unrecorded (the caller's
    provider records it, or a replay checks it); tool calls are always
    recorded with ``recorder``. ``on_tool_result`` gets ``(call id, tool
    name, result)`` after each tool call that ran.
    """
    check_cancel(provider.name, cancel)
    request, notes = fit_request(request)
    model = RecordingProvider(provider, recorder) if record_model else provider
    response: Response | None = None
    for event in stream_traced(model, request, cancel=cancel):  # a span when telemetry is on
        if on_event is not None:
            on_event(event)
        if isinstance(event, Finished):
            response = event.response
    if response is None:
        raise ProviderProtocolError(provider.name, "the stream ended without a final response")
    results: list[tuple[str, ToolResult | None]] = []
    warnings: list[str] = []
    for call in response.tool_calls:
        if loop is not None:
            warning = loop.observe(call.name, call.arguments)
            if warning is not None:
                warnings.append(warning)
        check_cancel(provider.name, cancel)
        started = clock()
        result = run_tool(call.name, call.arguments)
        if result is not None:
            recorder.tool_call(
                tool=call.name,
                arguments=call.arguments,
                result=result.text,
                is_error=result.is_error,
                duration_ms=int((clock() - started) * 1000),
            )
            if on_tool_result is not None:
                on_tool_result(call.id, call.name, result)
        results.append((call.id, result))
    return StepOutcome(response, tuple(results), tuple(warnings), request.messages, notes)


#: the key of ``data`` that holds a recorded step's fields (:func:`step_data`)
STEP = "step"
#: where earlier versions kept them, by the loop that recorded the step
OLD_STEP_KEYS = {"agent": "agent", "rpi": "rpi", "host": "host"}
#: the event types of a recorded step (the older ones are read, never written)
STEP_EVENTS = frozenset({EventType.DRAFT_REVISION, EventType.AGENT_STEP, EventType.HOST_STEP})


def step_data(
    provider: Provider,
    response: Response,
    *,
    loop: str,
    step: int,
    session: str | None = None,
    agent_id: str | None = None,
    clock_ms: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The fields every recorded step carries in ``data.step``, whichever loop took it.

    ``loop`` names the configuration (``agent``: ``strata agent`` and a
    Workshop turn, ``rpi``, ``host``, ``digest``); ``extra`` adds its own
    fields (an RPI phase and item). ``session``, ``agent_id`` and
    ``clock_ms`` are left out when None (a host step names its run instead of
    a session).
    """
    data: dict[str, Any] = {"loop": loop, "step": step}
    if session is not None:
        data["session"] = session
    if agent_id is not None:
        data["agent_id"] = agent_id
    data.update(
        provider=provider.name,
        adapter=provider.adapter,
        model=provider.model,
    )
    if clock_ms is not None:
        data["clock_ms"] = clock_ms
    data["finish_reason"] = response.finish_reason
    data["tool_calls"] = [c.name for c in response.tool_calls]
    data.update(extra)
    return data


def recorded_step(event: Event) -> dict[str, Any] | None:
    """The step fields ``event`` records (see :func:`step_data`); None if it is no step.

    Reads ledgers of earlier versions too: a Draft revision's ``data.agent``
    or ``data.rpi``, a ``host_step``'s ``data.host`` (their ``tool_calls`` a
    count, or names), a ``digest_optimize`` annotation's ``data.digest``.
    """
    fields = event.data.get(STEP)
    if event.action_type in STEP_EVENTS and isinstance(fields, dict):
        return fields
    if event.action_type == EventType.DIGEST_OPTIMIZE:
        digest = event.data.get("digest")
        if isinstance(digest, dict):
            return {"loop": "digest", "step": 0, **digest}
        return None
    if event.action_type not in STEP_EVENTS:
        return None
    for loop, key in OLD_STEP_KEYS.items():
        old = event.data.get(key)
        if isinstance(old, dict) and "step" in old and "provider" in old:
            return {"loop": loop, **old}
    return None


def step_title(prefix: str, response: Response) -> str:
    """A step's one-line title: the tools it called, else its answer's first line."""
    calls = ", ".join(c.name for c in response.tool_calls)
    text = response.text.strip()
    first = text.splitlines()[0][:72] if text else ""
    return f"{prefix}: " + (calls or first or "answer")
