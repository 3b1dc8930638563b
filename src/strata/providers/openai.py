"""OpenAI adapters on the official ``openai`` SDK: the Responses API and Chat Completions.

Both take a ``base_url``, so any server that speaks the same wire format
works: OpenAI itself, Ollama (``http://127.0.0.1:11434/v1``), vLLM, or
llama.cpp's server (``/v1/chat/completions``). Both apply seed 000's request
profile (:mod:`strata.providers.profile`); :meth:`~OpenAIResponses.wire_request`
returns the exact JSON body a call sends, which is what a trace records.

Streaming (server-sent events) is the normal path: text is yielded as it
arrives, a tool call once its streamed argument fragments are complete, then
one :class:`~strata.providers.base.Finished`. ``stream=False`` asks for one
JSON answer instead (for servers whose streaming is broken); the events are
the same, the text in one piece. The SDK's own retries are off: retries
follow :mod:`strata.providers.transport`. A :class:`CancelToken` is checked
between two pieces of the stream, and the HTTP stream is closed when it is
set (a server that sends nothing is given up after ``timeout`` seconds).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from strata.providers import profile
from strata.providers.base import (
    CancelToken,
    Finished,
    FinishReason,
    Message,
    Request,
    Response,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    whole_answer,
)
from strata.providers.transport import (
    DEFAULT_TIMEOUT,
    Retry,
    SdkAdapter,
    Transient,
    check_cancel,
    field,
    is_local,
    protocol_error,
    read_usage,
    tool_call,
)

OPENAI_BASE_URL = "https://api.openai.com/v1"

#: the output limit of a request to a server on this machine that sets none (``max_tokens``)
DEFAULT_LOCAL_MAX_TOKENS = 1024


class _OpenAIAdapter(SdkAdapter):
    """What both OpenAI adapters share: the client and the profile's settings."""

    default_base_url = OPENAI_BASE_URL
    sdk_module = "openai"
    sdk_client = "OpenAI"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        reasoning_effort: str | None = None,
        stream: bool = True,
        tool_choice_required: bool = True,
        max_tokens: int | None = None,
        context_window: int | None = None,
        phase_efforts: Mapping[str, str] | None = None,
    ) -> None:
        """A provider named ``name`` serving ``model`` at ``base_url`` (OpenAI's by default).

        ``reasoning_effort`` is the default for requests that set none;
        ``phase_efforts`` the effort of each RPI phase (``research``,
        ``plan``, ``implement``) that has its own, which the Workshop's RPI
        loop sets on its requests (:func:`strata.workshop.rpi.phase_effort`).
        ``tool_choice_required`` false sends the profile's ``required`` as
        ``auto`` (for servers that refuse it, such as llama.cpp's).
        ``max_tokens`` is the output limit of requests that set none; a server
        on this machine gets :data:`DEFAULT_LOCAL_MAX_TOKENS` when it is None
        (a small local model can otherwise write until its context is full,
        minutes on a CPU), OpenAI's own API no limit. ``context_window`` is
        the model's context in tokens when known from configuration (else
        :func:`strata.providers.window.context_window` asks the server).
        """
        super().__init__(
            name=name,
            model=model,
            base_url=base_url,
            api_key=api_key,
            api_key_env=api_key_env,
            timeout=timeout,
            retry=retry,
            stream=stream,
            max_tokens=max_tokens,
        )
        self.reasoning_effort = reasoning_effort
        self.tool_choice_required = tool_choice_required
        self.context_window = context_window
        self.phase_efforts: dict[str, str] = dict(phase_efforts or {})

    def _default_max_tokens(self) -> int | None:
        return DEFAULT_LOCAL_MAX_TOKENS if is_local(self.base_url) else None

    def wire_request(self, request: Request) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (profile applied; pure)."""
        request = self._request(request)
        body = self._body(request)
        body.update(
            self._settings(
                request,
                default_effort=self.reasoning_effort,
                required=self.tool_choice_required,
            )
        )
        body["stream"] = self.streaming
        return body

    @abstractmethod
    def _body(self, request: Request) -> dict[str, Any]:
        """The body's model and messages, in this API's form."""

    @abstractmethod
    def _settings(
        self, request: Request, *, default_effort: str | None, required: bool
    ) -> dict[str, Any]:
        """The request profile's fields of the body, in this API's form."""

    def _request(self, request: Request) -> Request:
        """``request`` with this provider's model and output limit where it sets none."""
        if not request.model:
            request = replace(request, model=self.model)
        if request.max_output_tokens is None and self.max_tokens is not None:
            request = replace(request, max_output_tokens=self.max_tokens)
        return request


class OpenAIResponses(_OpenAIAdapter):
    """OpenAI's Responses API (``POST /responses``), adapter ``openai-responses``."""

    adapter = "openai-responses"

    def _body(self, request: Request) -> dict[str, Any]:
        return {"model": request.model, "input": responses_input(request.messages)}

    def _settings(
        self, request: Request, *, default_effort: str | None, required: bool
    ) -> dict[str, Any]:
        return profile.responses_settings(request, default_effort=default_effort, required=required)

    def _send(self, client: Any, body: dict[str, Any]) -> Any:
        return client.responses.create(**body)

    def _whole(self, answer: Any) -> Iterator[StreamEvent]:
        yield from whole_answer(self._response(answer, *self._output(answer)))

    def _output(self, answer: Any) -> tuple[str, list[ToolCall]]:
        """The text and tool calls of a whole Responses API answer."""
        parts: list[str] = []
        calls: list[ToolCall] = []
        for item in field(answer, "output", []):
            kind = field(item, "type")
            if kind == "message":
                for part in field(item, "content", []):
                    if field(part, "type") == "output_text":
                        parts.append(str(field(part, "text", "")))
            elif kind == "function_call":
                calls.append(self._call(item))
        return "".join(parts), calls

    def _call(self, item: Any) -> ToolCall:
        name = field(item, "name")
        if not isinstance(name, str) or not name:
            raise protocol_error(self.name, self.base_url, "a function call without a name")
        call_id = field(item, "call_id") or field(item, "id") or f"call_{name}"
        return tool_call(self.name, str(call_id), name, field(item, "arguments", ""))

    def _response(self, answer: Any, text: str, calls: list[ToolCall]) -> Response:
        usage = field(answer, "usage")
        finish: FinishReason = "tool_calls" if calls else "stop"
        if field(answer, "status") == "incomplete":
            reason = field(field(answer, "incomplete_details"), "reason")
            finish = "content_filter" if reason == "content_filter" else "length"
        return Response(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish,
            usage=read_usage(usage),
            model=str(field(answer, "model", "")),
        )

    def _failed(self, what: Any) -> BaseException:
        error = field(what, "error") or what
        code = str(field(error, "code", "") or "")
        message = " ".join(str(field(error, "message", "") or "the model failed").split())
        if code in ("server_error", "rate_limit_exceeded", "") or code.startswith("5"):
            return Transient(f"{self.base_url} reported an error mid-stream ({message})")
        from strata.errors import ProviderError

        return ProviderError(
            self.name,
            f"{self.base_url} failed the request ({code}: {message})",
            hint="check the request's model and tools; see the provider's message",
        )

    def _events(self, stream: Any, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        texts: list[str] = []
        pending: dict[int, dict[str, Any]] = {}  # function calls being streamed, by output index
        calls: list[ToolCall] = []
        final: Any = None
        for event in stream:
            check_cancel(self.name, cancel)
            kind = field(event, "type")
            if kind == "response.output_text.delta":
                delta = field(event, "delta")
                if not isinstance(delta, str):
                    raise protocol_error(self.name, self.base_url, "a text delta without text")
                if delta:
                    texts.append(delta)
                    yield TextDelta(delta)
            elif kind == "response.output_item.added":
                item = field(event, "item")
                if field(item, "type") == "function_call":
                    pending[int(field(event, "output_index", len(pending)))] = {
                        "item": item,
                        "fragments": [],
                    }
            elif kind == "response.function_call_arguments.delta":
                index = field(event, "output_index")
                if index not in pending:
                    raise protocol_error(
                        self.name, self.base_url, "arguments for a function call never started"
                    )
                pending[index]["fragments"].append(str(field(event, "delta", "")))
            elif kind == "response.output_item.done":
                item = field(event, "item")
                if field(item, "type") == "function_call":
                    started = pending.pop(int(field(event, "output_index", -1)), None)
                    if not field(item, "arguments") and started is not None:
                        item = {
                            "name": field(item, "name"),
                            "call_id": field(item, "call_id"),
                            "id": field(item, "id"),
                            "arguments": "".join(started["fragments"]),
                        }
                    call = self._call(item)
                    calls.append(call)
                    yield ToolCallEvent(call)
            elif kind in ("response.completed", "response.incomplete"):
                final = field(event, "response")
                if final is None:
                    raise protocol_error(self.name, self.base_url, f"{kind} without a response")
            elif kind == "response.failed":
                raise self._failed(field(event, "response"))
            elif kind == "error":
                raise self._failed(event)
            # any other event (reasoning, annotations, refusals as parts…) carries nothing we use
        if final is None:
            raise self._ended_early()
        for started in pending.values():  # calls whose 'done' event never came
            item = started["item"]
            call = self._call(
                {
                    "name": field(item, "name"),
                    "call_id": field(item, "call_id"),
                    "id": field(item, "id"),
                    "arguments": "".join(started["fragments"]),
                }
            )
            calls.append(call)
            yield ToolCallEvent(call)
        if not texts and not calls:  # a server that sent the answer only at the end
            yield from self._whole(final)
        else:
            yield Finished(self._response(final, "".join(texts), calls))


def responses_input(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages as Responses API input items (tool calls and results as their own items)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m.tool_call_id or "",
                    "output": m.content,
                }
            )
            continue
        if m.content or not m.tool_calls:
            items.append({"role": m.role, "content": m.content})
        for call in m.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                }
            )
    return items


def chat_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages as Chat Completions messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    # a string, even empty: some servers (llama.cpp's) refuse null here
                    "content": m.content,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.name,
                                "arguments": json.dumps(c.arguments, ensure_ascii=False),
                            },
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out


_CHAT_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


class OpenAIChat(_OpenAIAdapter):
    """OpenAI's Chat Completions (``POST /chat/completions``), adapter ``openai-chat``.

    The wire format most OpenAI-compatible servers speak (llama.cpp, Ollama, vLLM).
    """

    adapter = "openai-chat"

    def _body(self, request: Request) -> dict[str, Any]:
        return {"model": request.model, "messages": chat_messages(request.messages)}

    def _settings(
        self, request: Request, *, default_effort: str | None, required: bool
    ) -> dict[str, Any]:
        return profile.chat_settings(request, default_effort=default_effort, required=required)

    def wire_request(self, request: Request) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (profile applied; pure)."""
        body = super().wire_request(request)
        if self.streaming:
            body["stream_options"] = {"include_usage": True}
        return body

    def _send(self, client: Any, body: dict[str, Any]) -> Any:
        return client.chat.completions.create(**body)

    def _finish(self, reason: Any, calls: list[ToolCall]) -> FinishReason:
        if calls:
            return "tool_calls"
        return _CHAT_FINISH.get(str(reason), "stop")

    def _whole(self, answer: Any) -> Iterator[StreamEvent]:
        choices = field(answer, "choices", [])
        if not choices:
            raise protocol_error(self.name, self.base_url, "an answer without choices")
        message = field(choices[0], "message")
        text = str(field(message, "content", "") or "")
        calls = [self._call(raw, i) for i, raw in enumerate(field(message, "tool_calls", []) or [])]
        yield from whole_answer(
            Response(
                text=text,
                tool_calls=tuple(calls),
                finish_reason=self._finish(field(choices[0], "finish_reason"), calls),
                usage=read_usage(field(answer, "usage"), "prompt_tokens", "completion_tokens"),
                model=str(field(answer, "model", "")),
            )
        )

    def _call(self, raw: Any, index: int) -> ToolCall:
        function = field(raw, "function")
        name = field(function, "name")
        if not isinstance(name, str) or not name:
            raise protocol_error(self.name, self.base_url, "a tool call without a name")
        call_id = field(raw, "id") or f"call_{index}"
        return tool_call(self.name, str(call_id), name, field(function, "arguments", ""))

    def _events(self, stream: Any, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        texts: list[str] = []
        pending: dict[int, dict[str, Any]] = {}  # tool calls being streamed, by index
        finish: Any = None
        usage = Usage()
        model = ""
        for chunk in stream:
            check_cancel(self.name, cancel)
            model = str(field(chunk, "model", "") or model)
            reported = field(chunk, "usage")
            if reported is not None:
                usage = read_usage(reported, "prompt_tokens", "completion_tokens")
            for choice in field(chunk, "choices", []) or []:
                if field(choice, "index", 0) != 0:
                    continue
                delta = field(choice, "delta")
                content = field(delta, "content")
                if content:
                    if not isinstance(content, str):
                        raise protocol_error(self.name, self.base_url, "content that is not text")
                    texts.append(content)
                    yield TextDelta(content)
                for piece in field(delta, "tool_calls", []) or []:
                    index = field(piece, "index")
                    if not isinstance(index, int):
                        raise protocol_error(self.name, self.base_url, "a tool call without index")
                    entry = pending.setdefault(index, {"id": None, "name": "", "fragments": []})
                    entry["id"] = field(piece, "id") or entry["id"]
                    function = field(piece, "function")
                    entry["name"] = field(function, "name") or entry["name"]
                    entry["fragments"].append(str(field(function, "arguments", "") or ""))
                if field(choice, "finish_reason"):
                    finish = field(choice, "finish_reason")
        if finish is None:
            raise self._ended_early()
        calls = []
        for index in sorted(pending):
            entry = pending[index]
            raw = {
                "id": entry["id"],
                "function": {"name": entry["name"], "arguments": "".join(entry["fragments"])},
            }
            call = self._call(raw, index)
            calls.append(call)
            yield ToolCallEvent(call)
        yield Finished(
            Response(
                text="".join(texts),
                tool_calls=tuple(calls),
                finish_reason=self._finish(finish, calls),
                usage=usage,
                model=model,
            )
        )
