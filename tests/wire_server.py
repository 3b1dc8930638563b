"""A real HTTP server on 127.0.0.1 that speaks the model providers' wire formats.

It answers OpenAI's Responses API (``POST /v1/responses``), Chat Completions
(``POST /v1/chat/completions``) and Anthropic's Messages API
(``POST /v1/messages``), as one JSON answer or as server-sent events when the
request asks to stream, closely enough that the official SDKs parse it.

Each test queues the replies it wants (:meth:`WireServer.queue`); a reply is
written in whichever format the request's path asks for. Replies can also
fail: an HTTP status (401, 429, 500…), a slow start (timeouts), slow pieces
(cancellation), a stream cut mid-way, an event that is not JSON, tool
arguments that are not JSON. Every request body received is kept
(:attr:`WireServer.requests`), so a test asserts what was sent on the wire.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1_700_000_000


@dataclass
class Reply:
    """One scripted answer (or failure) of the server."""

    text: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(name, arguments as raw JSON text: fragmented on the wire, maybe invalid on purpose)"""
    chunk: int = 3
    """characters per text delta and per argument fragment"""
    status: int = 200
    error: str = "scripted failure"
    finish: str | None = None
    """``length`` makes the answer incomplete (max tokens reached)"""
    headers_delay: float = 0.0
    """seconds before the answer starts (a server that does not answer in time)"""
    chunk_delay: float = 0.0
    """seconds before each streamed event (a slow stream)"""
    cut_after: int | None = None
    """close the connection abruptly after this many streamed events"""
    malformed: bool = False
    """replace a streamed event in the middle by one whose data is not JSON"""
    end_early: bool = False
    """end the stream cleanly but before its final event"""
    usage: tuple[int, int] = (12, 7)
    call_prefix: str = "call"
    retry_after: str | None = None
    """the ``Retry-After`` header of an error answer"""
    """OpenAI tool call ids are ``{call_prefix}_1``, ``_2``...: a client that wants ids unique
    across answers (the Agents SDK) gets a prefix per reply"""


def text(answer: str, **options: Any) -> Reply:
    """A reply with text only."""
    return Reply(text=answer, **options)


def tools(*calls: tuple[str, str | dict[str, Any]], answer: str = "", **options: Any) -> Reply:
    """A reply calling tools: ``(name, arguments)``, arguments as a dict or raw JSON text."""
    raw = [(name, a if isinstance(a, str) else json.dumps(a)) for name, a in calls]
    return Reply(text=answer, tool_calls=raw, **options)


def status(code: int, message: str = "scripted failure", **options: Any) -> Reply:
    """An HTTP error answer."""
    return Reply(status=code, error=message, **options)


@dataclass
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _pieces(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] if value else []


def _finish_chat(reply: Reply) -> str:
    return reply.finish or ("tool_calls" if reply.tool_calls else "stop")


# -- Chat Completions -----------------------------------------------------------------


def _chat_json(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"{reply.call_prefix}_{i}",
                "type": "function",
                "function": {"name": n, "arguments": a},
            }
            for i, (n, a) in enumerate(reply.tool_calls, 1)
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model", ""),
        "choices": [
            {"index": 0, "message": message, "finish_reason": _finish_chat(reply), "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": reply.usage[0],
            "completion_tokens": reply.usage[1],
            "total_tokens": sum(reply.usage),
        },
    }


def _chat_events(body: dict[str, Any], reply: Reply) -> list[tuple[str | None, str]]:
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": body.get("model", ""),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str | None, str]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return None, json.dumps({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(reply.text, reply.chunk)]
    for i, (name, arguments) in enumerate(reply.tool_calls):
        start = {"index": i, "id": f"{reply.call_prefix}_{i + 1}", "type": "function"}
        events.append(
            chunk({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]})
        )
        for piece in _pieces(arguments, reply.chunk):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, _finish_chat(reply)))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {
            "prompt_tokens": reply.usage[0],
            "completion_tokens": reply.usage[1],
            "total_tokens": sum(reply.usage),
        }
        events.append((None, json.dumps({**base, "choices": [], "usage": usage})))
    events.append((None, "[DONE]"))
    return events


# -- Responses API --------------------------------------------------------------------


def _responses_output(reply: Reply) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append(_message_item(reply.text, "completed"))
    for i, (name, arguments) in enumerate(reply.tool_calls, 1):
        output.append(_call_item(i, name, arguments, "completed", reply.call_prefix))
    return output


def _message_item(value: str, state: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": value, "annotations": []}
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": state,
        "content": [part] if state == "completed" else [],
    }


def _call_item(
    i: int, name: str, arguments: str, state: str, prefix: str = "call"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{i}" if prefix == "call" else f"fc_{prefix}_{i}",
        "call_id": f"{prefix}_{i}",
        "name": name,
        "arguments": arguments,
        "status": state,
    }


def _responses_object(body: dict[str, Any], reply: Reply, state: str = "done") -> dict[str, Any]:
    done = state != "in_progress"
    incomplete = reply.finish == "length"
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": CREATED,
        "model": body.get("model", ""),
        "status": ("incomplete" if incomplete else "completed") if done else "in_progress",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete and done else None,
        "error": None,
        "output": _responses_output(reply) if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "truncation": body.get("truncation", "disabled"),
        "usage": {
            "input_tokens": reply.usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(reply.usage),
        }
        if done
        else None,
    }


def _responses_events(body: dict[str, Any], reply: Reply) -> list[tuple[str | None, str]]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _responses_object(body, reply, "in_progress")}
    ]
    index = 0
    if reply.text:
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": _message_item(reply.text, "in_progress"),
            }
        )
        events.append({"type": "response.content_part.added", **where, "part": part})
        for piece in _pieces(reply.text, reply.chunk):
            events.append(
                {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            )
        events.append(
            {"type": "response.output_text.done", **where, "text": reply.text, "logprobs": []}
        )
        events.append(
            {"type": "response.content_part.done", **where, "part": {**part, "text": reply.text}}
        )
        events.append(
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": _message_item(reply.text, "completed"),
            }
        )
        index = 1
    for i, (name, arguments) in enumerate(reply.tool_calls, 1):
        item_id = f"fc_{i}" if reply.call_prefix == "call" else f"fc_{reply.call_prefix}_{i}"
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": _call_item(i, name, "", "in_progress", reply.call_prefix),
            }
        )
        for piece in _pieces(arguments, reply.chunk):
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": index,
                    "delta": piece,
                }
            )
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": index,
                "arguments": arguments,
            }
        )
        events.append(
            {
                "type": "response.output_item.done",
                "output_index": index,
                "item": _call_item(i, name, arguments, "completed", reply.call_prefix),
            }
        )
        index += 1
    final = _responses_object(body, reply, "done")
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    events.append({"type": kind, "response": final})
    out: list[tuple[str | None, str]] = []
    for n, event in enumerate(events):
        event["sequence_number"] = n
        out.append((event["type"], json.dumps(event)))
    return out


# -- Anthropic Messages ---------------------------------------------------------------


def _anthropic_stop(reply: Reply) -> str:
    if reply.finish == "length":
        return "max_tokens"
    return reply.finish or ("tool_use" if reply.tool_calls else "end_turn")


def _anthropic_json(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for i, (name, arguments) in enumerate(reply.tool_calls, 1):
        try:
            parsed: Any = json.loads(arguments)
        except ValueError:
            parsed = arguments
        content.append({"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": parsed})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]},
    }


def _anthropic_events(body: dict[str, Any], reply: Reply) -> list[tuple[str | None, str]]:
    start = {**_anthropic_json(body, reply), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": reply.usage[0], "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    index = 0
    if reply.text:
        events.append(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        )
        for piece in _pieces(reply.text, reply.chunk):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                }
            )
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for i, (name, arguments) in enumerate(reply.tool_calls, 1):
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        for piece in _pieces(arguments, reply.chunk):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.usage[1]},
        }
    )
    events.append({"type": "message_stop"})
    out: list[tuple[str | None, str]] = [(e["type"], json.dumps(e)) for e in events]
    out.insert(1, ("ping", json.dumps({"type": "ping"})))
    return out


# -- the server -----------------------------------------------------------------------

_FORMATS = {
    "/v1/responses": (_responses_object, _responses_events),
    "/v1/chat/completions": (_chat_json, _chat_events),
    "/v1/messages": (_anthropic_json, _anthropic_events),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # small writes go out at once (no 40 ms Nagle / delayed-ACK stall per piece)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        """``/props`` as llama.cpp's server reports it, when :attr:`WireServer.n_ctx` is set."""
        wire = self.server.wire
        path = self.path.split("?")[0]
        if path == "/props" and wire.n_ctx is not None and wire.reports_n_ctx:
            self._json(200, {"default_generation_settings": {"n_ctx": wire.n_ctx}})
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        wire = self.server.wire
        path = self.path.split("?")[0]
        wire.record(Received(path, {k.lower(): v for k, v in self.headers.items()}, body))
        if wire.n_ctx is not None and prompt_tokens(body) >= wire.n_ctx:
            # refused before any generation, as llama.cpp does: the queued reply stays queued
            said = "the request exceeds the available context size, try increasing it"
            self._json(400, {"error": {"code": 400, "message": said, "type": "exceed_context"}})
            return
        reply = wire.next_reply()
        try:
            self._answer(path, body, reply)
        except (BrokenPipeError, ConnectionResetError):
            wire.note_disconnect()
            self.close_connection = True

    def _wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.server.wire.stopping.is_set():
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))

    def _answer(self, path: str, body: dict[str, Any], reply: Reply | None) -> None:
        anthropic = path.endswith("/messages")
        if reply is None:
            reply = Reply(status=418, error="the wire server has no reply queued")
        if path not in _FORMATS:
            reply = Reply(status=404, error=f"no route {path}")
        if reply.headers_delay:
            self._wait(reply.headers_delay)
        if reply.status != 200:
            kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
            error = {"message": reply.error, "type": kind.get(reply.status, "api_error")}
            payload = {"type": "error", "error": error} if anthropic else {"error": error}
            extra = {"Retry-After": reply.retry_after} if reply.retry_after is not None else {}
            self._json(reply.status, payload, extra)
            return
        whole, events = _FORMATS[path]
        if body.get("stream") is not True:
            self._json(200, whole(body, reply))
            return
        self._stream(events(body, reply), reply)

    def _json(
        self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[tuple[str | None, str]], reply: Reply) -> None:
        if reply.malformed:
            name, _ = events[len(events) // 2]
            events[len(events) // 2] = (name, '{"type": "broken", "delta": ')
        if reply.end_early:
            events = events[: len(events) // 2]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for n, (name, data) in enumerate(events):
            if reply.cut_after is not None and n == reply.cut_after:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if reply.chunk_delay:
                self._wait(reply.chunk_delay)
            frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
            encoded = frame.encode()
            self.wfile.write(f"{len(encoded):x}\r\n".encode() + encoded + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow reply's thread never holds up the test's end
    wire: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a cancelled stream, a closed pool) is no error of the server."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def prompt_tokens(body: dict[str, Any]) -> int:
    """The tokens of a request's prompt as this server counts them: 4 characters a token.

    The messages' and tools' JSON (what a chat template puts in the prompt, near enough).
    """
    prompt = json.dumps(body.get("messages") or body.get("input") or [])
    return (len(prompt) + len(json.dumps(body.get("tools") or [])) + 3) // 4


class WireServer:
    """The server: start it (a context manager), queue replies, read what it received."""

    def __init__(self) -> None:
        #: a model context: a request whose prompt has this many tokens or more is refused
        #: (HTTP 400, llama.cpp's message); ``GET /props`` reports it when ``reports_n_ctx``
        self.n_ctx: int | None = None
        self.reports_n_ctx = True
        self.requests: list[Received] = []
        self.disconnects = 0
        self.stopping = threading.Event()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.wire = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (Anthropic's base URL; OpenAI's is ``url + "/v1"``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        """The base URL the OpenAI SDK wants (with ``/v1``)."""
        return self.url + "/v1"

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        with self._lock:
            self._replies.extend(replies)

    def next_reply(self) -> Reply | None:
        """The next queued reply (None when the queue is empty)."""
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def record(self, received: Received) -> None:
        """Keep one request."""
        with self._lock:
            self.requests.append(received)

    def note_disconnect(self) -> None:
        """The client closed the connection while an answer was being written."""
        with self._lock:
            self.disconnects += 1

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received, in order."""
        with self._lock:
            return [r.body for r in self.requests]

    @property
    def pending(self) -> int:
        """Replies queued and not yet used."""
        with self._lock:
            return len(self._replies)
