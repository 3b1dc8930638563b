"""What every model provider speaks: requests, stream events, responses, the protocol.

A :class:`Provider` takes a :class:`Request` (messages, tools, settings) and
yields a stream of :class:`StreamEvent`: :class:`TextDelta` pieces of the
answer as they arrive, a :class:`ToolCallEvent` for each complete tool call,
and one final :class:`Finished` carrying the whole :class:`Response` (text,
tool calls, usage, finish reason). Adapters (OpenAI, Anthropic, scripted,
replay) translate to and from their wire formats; nothing above this layer
knows any wire format.

Every type here round-trips through JSON (``to_json`` / ``from_json``): that
JSON is what a trace records and what a replay serves back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
#: "auto", "required", "none", or the name of one tool the model must call
ToolChoice = str
TOOL_CHOICES: tuple[str, ...] = ("auto", "required", "none")
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "cancelled"]
FINISH_REASONS: tuple[str, ...] = ("stop", "tool_calls", "length", "content_filter", "cancelled")
#: reasoning effort levels of seed 000's request profile (anything else is read as medium)
EFFORTS: tuple[str, ...] = ("none", "low", "medium", "high", "xhigh")


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: a name, what it does, its arguments as a JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The tool as a JSON object."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ToolSpec:
        """Parse :meth:`to_json`'s output."""
        return cls(str(raw["name"]), str(raw.get("description", "")), dict(raw["parameters"]))


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool by the model; ``arguments`` is the parsed JSON object."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The call as a JSON object."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ToolCall:
        """Parse :meth:`to_json`'s output."""
        return cls(str(raw["id"]), str(raw["name"]), dict(raw["arguments"]))


@dataclass(frozen=True)
class Message:
    """One message of a conversation.

    ``assistant`` messages may carry ``tool_calls``; a ``tool`` message is the
    result of the call ``tool_call_id`` (``name`` is the tool's name).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The message as a JSON object (empty fields left out)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Message:
        """Parse :meth:`to_json`'s output."""
        role = raw["role"]
        if role not in ROLES:
            raise ValueError(f"unknown message role {role!r}")
        return cls(
            role=role,
            content=str(raw.get("content") or ""),
            tool_calls=tuple(ToolCall.from_json(c) for c in raw.get("tool_calls") or ()),
            tool_call_id=raw.get("tool_call_id"),
            name=raw.get("name"),
        )


@dataclass(frozen=True)
class Request:
    """What is asked of a model.

    ``tool_choice`` None lets the adapter's profile decide (seed 000: required
    until a tool result exists in ``messages``, then auto); a tool's name
    forces that tool (servers without ``required``, such as llama.cpp's,
    accept only this form of forcing). ``reasoning_effort``
    None means the profile's default (medium). ``input_budget`` is the
    tokens the messages and tools may take (the model's context less the
    answer's room): a step cuts older tool results to keep within it
    (:func:`strata.providers.window.fit_request`); None leaves them whole.
    It is recorded with the request, never sent.
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    reasoning_effort: str | None = None
    max_output_tokens: int | None = None
    input_budget: int | None = None

    def has_tool_result(self) -> bool:
        """True once a tool's result is part of the conversation."""
        return any(m.role == "tool" for m in self.messages)

    def to_json(self) -> dict[str, Any]:
        """The request as a JSON object (what a trace records, before redaction)."""
        out: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_json() for m in self.messages],
        }
        if self.tools:
            out["tools"] = [t.to_json() for t in self.tools]
        if self.tool_choice is not None:
            out["tool_choice"] = self.tool_choice
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.max_output_tokens is not None:
            out["max_output_tokens"] = self.max_output_tokens
        if self.input_budget is not None:
            out["input_budget"] = self.input_budget
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Request:
        """Parse :meth:`to_json`'s output."""
        return cls(
            model=str(raw["model"]),
            messages=tuple(Message.from_json(m) for m in raw["messages"]),
            tools=tuple(ToolSpec.from_json(t) for t in raw.get("tools") or ()),
            tool_choice=raw.get("tool_choice"),
            reasoning_effort=raw.get("reasoning_effort"),
            max_output_tokens=raw.get("max_output_tokens"),
            input_budget=raw.get("input_budget"),
        )


@dataclass(frozen=True)
class Usage:
    """Tokens a call used, as the provider reported them (0 when it did not)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        """The usage as a JSON object."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Usage:
        """Parse :meth:`to_json`'s output."""
        return cls(int(raw.get("input_tokens", 0)), int(raw.get("output_tokens", 0)))


@dataclass(frozen=True)
class Response:
    """A model's whole answer: text, tool calls, why it stopped, what it used."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def message(self) -> Message:
        """The answer as the assistant message that continues the conversation."""
        return Message("assistant", self.text, tool_calls=self.tool_calls)

    def to_json(self) -> dict[str, Any]:
        """The response as a JSON object."""
        return {
            "text": self.text,
            "tool_calls": [c.to_json() for c in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": self.usage.to_json(),
            "model": self.model,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Response:
        """Parse :meth:`to_json`'s output."""
        reason = raw.get("finish_reason", "stop")
        if reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish reason {reason!r}")
        return cls(
            text=str(raw.get("text") or ""),
            tool_calls=tuple(ToolCall.from_json(c) for c in raw.get("tool_calls") or ()),
            finish_reason=reason,
            usage=Usage.from_json(raw.get("usage") or {}),
            model=str(raw.get("model") or ""),
        )


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer's text, as it streams in."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True)
class ToolCallEvent:
    """A complete tool call (adapters assemble streamed argument fragments first)."""

    call: ToolCall
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class Finished:
    """The end of a stream: the whole response."""

    response: Response
    kind: Literal["finished"] = "finished"


StreamEvent = TextDelta | ToolCallEvent | Finished


def whole_answer(response: Response) -> Iterator[StreamEvent]:
    """The events of an answer that came in one piece: its text, its tool calls, Finished."""
    if response.text:
        yield TextDelta(response.text)
    for call in response.tool_calls:
        yield ToolCallEvent(call)
    yield Finished(response)


def event_to_json(event: StreamEvent) -> dict[str, Any]:
    """A stream event as JSON (a trace's ``chunks``)."""
    if isinstance(event, TextDelta):
        return {"kind": "text", "text": event.text}
    if isinstance(event, ToolCallEvent):
        return {"kind": "tool_call", "call": event.call.to_json()}
    return {"kind": "finished", "response": event.response.to_json()}


def event_from_json(raw: dict[str, Any]) -> StreamEvent:
    """Parse :func:`event_to_json`'s output."""
    kind = raw.get("kind")
    if kind == "text":
        return TextDelta(str(raw["text"]))
    if kind == "tool_call":
        return ToolCallEvent(ToolCall.from_json(raw["call"]))
    if kind == "finished":
        return Finished(Response.from_json(raw["response"]))
    raise ValueError(f"unknown stream event kind {kind!r}")


class CancelToken:
    """Set from any thread to stop a call: the stream ends with :class:`ProviderCancelled`."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the call to stop."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._event.is_set()


@runtime_checkable
class Provider(Protocol):
    """A model behind one adapter.

    ``name`` is the configured provider's name (``local``, ``openai``…), used in
    every error; ``adapter`` the wire format (``openai-responses``,
    ``openai-chat``, ``anthropic``, ``scripted``, ``replay``), part of a
    trace's key.
    """

    name: str
    adapter: str
    model: str

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Ask the model; yields deltas and tool calls, then exactly one :class:`Finished`.

        Raises :class:`~strata.errors.ProviderError` subclasses only: a
        timeout or refused connection after the retries is
        :class:`~strata.errors.ProviderUnavailable`, a cancelled call
        :class:`~strata.errors.ProviderCancelled`.
        """
        ...


def stream_traced(
    provider: Provider, request: Request, *, cancel: CancelToken | None = None
) -> Iterable[StreamEvent]:
    """``provider.stream(request)``, inside a ``strata.model_call`` span when telemetry is on.

    The span names the provider, its adapter and model, and (from the final
    response) why the model stopped, the tokens it used and its tool calls.
    """
    from strata import telemetry

    def finished(span: Any, event: StreamEvent) -> None:
        if isinstance(event, Finished):
            r = event.response
            span.set_attributes(
                {
                    "gen_ai.response.finish_reasons": [r.finish_reason],
                    "gen_ai.usage.input_tokens": r.usage.input_tokens,
                    "gen_ai.usage.output_tokens": r.usage.output_tokens,
                    "strata.tool_calls": [c.name for c in r.tool_calls],
                }
            )

    return telemetry.traced_stream(
        "strata.model_call",
        provider.stream(request, cancel=cancel),
        {
            "strata.provider": provider.name,
            "gen_ai.system": provider.adapter,
            "gen_ai.request.model": provider.model,
        },
        on_event=finished,
    )


def complete(
    provider: Provider, request: Request, *, cancel: CancelToken | None = None
) -> Response:
    """Ask ``provider`` and return the whole response (the stream consumed)."""
    for event in stream_traced(provider, request, cancel=cancel):
        if isinstance(event, Finished):
            return event.response
    from strata.errors import ProviderProtocolError

    raise ProviderProtocolError(provider.name, "the stream ended without a final response")
