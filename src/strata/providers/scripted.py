"""The ``scripted`` adapter: answers read from a YAML or JSON script, served in order.

For demos and for tests of agents: no network, no model, the same answers
every time. A script is a list of responses (or ``{"responses": [...]}``)::

    responses:
      - expect: "fix the test"         # the last user/tool message must contain this
        tool_calls:
          - name: write_file
            arguments: {path: a.txt, content: "fixed\\n"}
      - text: "Done: a.txt is fixed."
        stream: 4                      # yield the text 4 characters at a time

Each response has ``text`` and/or ``tool_calls`` (``name``, ``arguments``
as an object or as JSON text, optional ``id``), and optionally
``finish_reason``, ``usage`` (``input_tokens``, ``output_tokens``),
``expect`` and ``stream`` (a chunk size, or a list of chunks that join to
``text``). Running past the last response is an error naming the script.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.errors import ProviderError, ProviderNotConfigured
from strata.providers.base import (
    FINISH_REASONS,
    CancelToken,
    Finished,
    FinishReason,
    Request,
    Response,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from strata.providers.transport import check_cancel, tool_call

_KEYS = ("text", "tool_calls", "finish_reason", "usage", "expect", "stream")
_CALL_KEYS = ("name", "arguments", "id")


@dataclass(frozen=True)
class ScriptedCall:
    """A tool call of a script; ``arguments`` is JSON text (maybe not an object, on purpose)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ScriptedResponse:
    """One answer of a script."""

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage = field(default_factory=Usage)
    expect: str | None = None
    chunks: tuple[str, ...] = ()


class Scripted:
    """Serves the responses of a script in order, adapter ``scripted``."""

    adapter = "scripted"

    def __init__(
        self,
        responses: Sequence[ScriptedResponse | dict[str, Any]],
        *,
        name: str = "scripted",
        model: str = "scripted",
        source: str = "<inline script>",
    ) -> None:
        """A provider serving ``responses``; ``source`` names the script in errors."""
        self.name = name
        self.model = model
        self.source = source
        self.responses = tuple(
            r if isinstance(r, ScriptedResponse) else _parse(r, i, name, source)
            for i, r in enumerate(responses, 1)
        )
        self._next = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Scripted(name={self.name!r}, source={self.source!r})"

    @classmethod
    def from_file(cls, path: Path, *, name: str = "scripted", model: str = "scripted") -> Scripted:
        """The script in ``path`` (YAML, which includes JSON)."""
        import yaml

        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ProviderNotConfigured(
                name,
                f"cannot read the script {path}: {exc.strerror or exc}",
                hint=f"fix 'script' of [providers.{name}] in config.toml",
            ) from None
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            problem = " ".join(str(exc).split())
            raise ProviderNotConfigured(
                name,
                f"the script {path} is not YAML or JSON ({problem})",
                hint="see docs/providers.md for the script format",
            ) from None
        if isinstance(raw, dict) and set(raw) == {"responses"}:
            raw = raw["responses"]
        if not isinstance(raw, list):
            raise ProviderNotConfigured(
                name,
                f"the script {path} is not a list of responses",
                hint="write 'responses:' followed by a list (see docs/providers.md)",
            )
        return cls(raw, name=name, model=model, source=str(path))

    @property
    def served(self) -> int:
        """How many responses were served so far."""
        return self._next

    def wire_request(self, request: Request) -> dict[str, Any]:
        """What the script is asked (the request as JSON; nothing is sent anywhere)."""
        return request.to_json()

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """The script's next response as a stream (taken when the stream is first read)."""
        check_cancel(self.name, cancel)
        with self._lock:
            index = self._next
            if index >= len(self.responses):
                raise ProviderError(
                    self.name,
                    f"the script {self.source} has {len(self.responses)} responses and all "
                    "were served",
                    hint="add responses to the script, or start a new provider for a new run",
                )
            self._next += 1
        response = self.responses[index]
        if response.expect is not None:
            self._check(response.expect, request, index + 1)
        yield from self._serve(response, index + 1, cancel)

    def _check(self, expect: str, request: Request, number: int) -> None:
        last = next(
            (m.content for m in reversed(request.messages) if m.role in ("user", "tool")), ""
        )
        if expect not in last:
            shown = last if len(last) <= 60 else last[:57] + "..."
            raise ProviderError(
                self.name,
                f"response {number} of {self.source} expects {expect!r} in the last user or "
                f"tool message, which is {shown!r}",
                hint="the agent asked something else than the script was written for",
            )

    def _serve(
        self, response: ScriptedResponse, number: int, cancel: CancelToken | None
    ) -> Iterator[StreamEvent]:
        for chunk in response.chunks:
            check_cancel(self.name, cancel)
            yield TextDelta(chunk)
        calls = []
        for i, raw in enumerate(response.tool_calls, 1):
            check_cancel(self.name, cancel)
            call = tool_call(self.name, raw.id or f"call_{number}_{i}", raw.name, raw.arguments)
            calls.append(call)
            yield ToolCallEvent(call)
        finish = response.finish_reason or ("tool_calls" if calls else "stop")
        yield Finished(
            Response(
                text=response.text,
                tool_calls=tuple(calls),
                finish_reason=finish,
                usage=response.usage,
                model=self.model,
            )
        )


def _parse(raw: Any, number: int, name: str, source: str) -> ScriptedResponse:
    def bad(problem: str) -> ProviderNotConfigured:
        return ProviderNotConfigured(
            name,
            f"response {number} of the script {source}: {problem}",
            hint="see docs/providers.md for the script format",
        )

    if isinstance(raw, str):
        raw = {"text": raw}
    if not isinstance(raw, dict):
        raise bad("is not a mapping of text, tool_calls…")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise bad(f"{unknown[0]!r} is not a key (known: {', '.join(_KEYS)})")
    text = raw.get("text", "")
    if not isinstance(text, str):
        raise bad("text is not a string")
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or [], 1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise bad(f"tool call {i} has no name")
        extra = sorted(set(call) - set(_CALL_KEYS))
        if extra:
            raise bad(f"tool call {i}: {extra[0]!r} is not a key (known: {', '.join(_CALL_KEYS)})")
        arguments = call.get("arguments", {})
        text_args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ScriptedCall(str(call.get("id") or ""), call["name"], text_args))
    if not text and not calls:
        raise bad("has neither text nor tool_calls")
    finish = raw.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise bad(f"finish_reason {finish!r} is not one of {', '.join(FINISH_REASONS)}")
    usage = raw.get("usage") or {}
    if not isinstance(usage, dict) or not all(
        type(usage.get(k, 0)) is int for k in ("input_tokens", "output_tokens")
    ):
        raise bad("usage is not {input_tokens: N, output_tokens: N}")
    expect = raw.get("expect")
    if expect is not None and not isinstance(expect, str):
        raise bad("expect is not a string")
    return ScriptedResponse(
        text=text,
        tool_calls=tuple(calls),
        finish_reason=finish,
        usage=Usage.from_json(usage),
        expect=expect,
        chunks=_chunks(text, raw.get("stream"), bad),
    )


def _chunks(text: str, stream: Any, bad: Any) -> tuple[str, ...]:
    if not text:
        return ()
    if stream is None:
        return (text,)
    if isinstance(stream, bool) or not isinstance(stream, int | list):
        raise bad("stream is not a chunk size or a list of chunks")
    if isinstance(stream, int):
        if stream < 1:
            raise bad("stream (the chunk size) must be 1 or more")
        return tuple(text[i : i + stream] for i in range(0, len(text), stream))
    if not all(isinstance(c, str) for c in stream) or "".join(stream) != text:
        raise bad("the chunks of stream do not join to text")
    return tuple(stream)
