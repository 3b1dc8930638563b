"""The Anthropic adapter on the official ``anthropic`` SDK: the Messages API.

System messages become the request's ``system`` prompt (joined by blank
lines); tool calls are ``tool_use`` blocks of the assistant's message and
their results ``tool_result`` blocks of the next user message (consecutive
messages of one role are merged, as the API wants them alternating).
``max_tokens``, which the API requires, is the request's
``max_output_tokens`` or the adapter's default (4096).

Seed 000's request profile is OpenAI's and is not applied here: a request's
``tool_choice``, when it sets one, is sent (``required`` as ``any``);
otherwise the API's default (auto) holds. Streaming, retries, cancellation
and errors work as in :mod:`strata.providers.openai`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

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
    SdkAdapter,
    check_cancel,
    field,
    protocol_error,
    read_usage,
    tool_call,
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

_TOOL_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


class Anthropic(SdkAdapter):
    """Anthropic's Messages API (``POST /v1/messages``), adapter ``anthropic``.

    ``base_url`` is the server's root, without ``/v1``; ``max_tokens``, which the
    API requires, is :data:`DEFAULT_MAX_TOKENS` unless set.
    """

    adapter = "anthropic"
    default_base_url = ANTHROPIC_BASE_URL
    sdk_module = "anthropic"
    sdk_client = "Anthropic"

    def _default_max_tokens(self) -> int:
        return DEFAULT_MAX_TOKENS

    def _send(self, client: Any, body: dict[str, Any]) -> Any:
        return client.messages.create(**body)

    def wire_request(self, request: Request) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (pure)."""
        if not request.model:
            request = replace(request, model=self.model)
        system = [m.content for m in request.messages if m.role == "system" and m.content]
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens or self.max_tokens,
            "messages": anthropic_messages(request.messages),
        }
        if system:
            body["system"] = "\n\n".join(system)
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
            if request.tool_choice is not None:
                choice = request.tool_choice
                body["tool_choice"] = (
                    dict(_TOOL_CHOICE[choice])
                    if choice in _TOOL_CHOICE
                    else {"type": "tool", "name": choice}
                )
        body["stream"] = self.streaming
        return body

    def _whole(self, answer: Any) -> Iterator[StreamEvent]:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in field(answer, "content", []) or []:
            kind = field(block, "type")
            if kind == "text":
                texts.append(str(field(block, "text", "")))
            elif kind == "tool_use":
                calls.append(self._call(field(block, "id"), field(block, "name"), None, block))
        usage = field(answer, "usage")
        yield from whole_answer(
            Response(
                text="".join(texts),
                tool_calls=tuple(calls),
                finish_reason=self._finish(field(answer, "stop_reason"), calls),
                usage=read_usage(usage),
                model=str(field(answer, "model", "")),
            )
        )

    def _call(self, call_id: Any, name: Any, arguments: str | None, block: Any) -> ToolCall:
        if not isinstance(name, str) or not name:
            raise protocol_error(self.name, self.base_url, "a tool_use block without a name")
        if arguments is None:  # a whole block: its input is already parsed
            value = field(block, "input", {})
            if not isinstance(value, dict):
                import json

                return tool_call(self.name, str(call_id or name), name, json.dumps(value))
            return ToolCall(str(call_id or f"toolu_{name}"), name, dict(value))
        return tool_call(self.name, str(call_id or f"toolu_{name}"), name, arguments)

    def _finish(self, reason: Any, calls: list[ToolCall]) -> FinishReason:
        if calls:
            return "tool_calls"
        return _FINISH.get(str(reason), "stop")

    def _events(self, stream: Any, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        texts: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}  # tool_use blocks being streamed, by index
        calls: list[ToolCall] = []
        input_tokens = output_tokens = 0
        reason: Any = None
        model = ""
        stopped = False
        for event in stream:
            check_cancel(self.name, cancel)
            kind = field(event, "type")
            if kind == "message_start":
                message = field(event, "message")
                model = str(field(message, "model", ""))
                usage = field(message, "usage")
                input_tokens = int(field(usage, "input_tokens", 0))
                output_tokens = int(field(usage, "output_tokens", 0))
            elif kind == "content_block_start":
                block = field(event, "content_block")
                if field(block, "type") == "tool_use":
                    blocks[int(field(event, "index", 0))] = {"block": block, "fragments": []}
            elif kind == "content_block_delta":
                delta = field(event, "delta")
                delta_kind = field(delta, "type")
                if delta_kind == "text_delta":
                    text = field(delta, "text")
                    if not isinstance(text, str):
                        raise protocol_error(self.name, self.base_url, "a text delta without text")
                    if text:
                        texts.append(text)
                        yield TextDelta(text)
                elif delta_kind == "input_json_delta":
                    index = int(field(event, "index", -1))
                    if index not in blocks:
                        raise protocol_error(
                            self.name, self.base_url, "tool input for a block never started"
                        )
                    blocks[index]["fragments"].append(str(field(delta, "partial_json", "")))
            elif kind == "content_block_stop":
                started = blocks.pop(int(field(event, "index", -1)), None)
                if started is not None:
                    block = started["block"]
                    fragments = "".join(started["fragments"])
                    call = self._call(
                        field(block, "id"),
                        field(block, "name"),
                        fragments if started["fragments"] else None,
                        block,
                    )
                    calls.append(call)
                    yield ToolCallEvent(call)
            elif kind == "message_delta":
                reason = field(field(event, "delta"), "stop_reason") or reason
                usage = field(event, "usage")
                output_tokens = int(field(usage, "output_tokens", output_tokens))
                input_tokens = int(field(usage, "input_tokens", 0)) or input_tokens
            elif kind == "message_stop":
                stopped = True
        if not stopped:
            raise self._ended_early()
        yield Finished(
            Response(
                text="".join(texts),
                tool_calls=tuple(calls),
                finish_reason=self._finish(reason, calls),
                usage=Usage(input_tokens, output_tokens),
                model=model,
            )
        )


def anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Messages as Messages API messages (system left out, same-role neighbours merged)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        blocks: list[dict[str, Any]]
        if m.role == "tool":
            role = "user"
            blocks = [
                {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}
            ]
        elif m.role == "assistant":
            role = "assistant"
            blocks = [{"type": "text", "text": m.content}] if m.content else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            ]
            if not blocks:
                continue  # an empty assistant turn: the API refuses empty content
        else:
            role = "user"
            blocks = [{"type": "text", "text": m.content}]
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            if isinstance(previous, str):
                previous = [{"type": "text", "text": previous}]
            out[-1]["content"] = previous + blocks
        elif len(blocks) == 1 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks})
    return out
