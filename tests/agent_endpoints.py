"""Scripted model endpoints on 127.0.0.1, for the real coding agents of the suite.

:class:`AnthropicEndpoint` speaks Anthropic's Messages API streamed as server-sent
events (as Claude Code calls it, through ``ANTHROPIC_BASE_URL``);
:class:`ResponsesEndpoint` speaks OpenAI's Responses API, streamed (as Codex CLI
calls it, through a ``model_provider`` with ``wire_api = "responses"``).

Each serves a *script*: a list of steps, each one model reply of the agent's
main conversation (text and tool calls). Which step a request gets is read
from the request itself, not from a counter: a conversation that has received
the results of the first N tool calls gets the step after them. So a request
the agent repeats gets the same answer, and the agent's side requests (a
title, a summary: any request offering no tools) get a short text without
using up a step. Past the script's end the reply is the text ``done``.

Every request is kept (``endpoint.requests``) for the test to read.

:func:`agent_binary` finds the agents ``scripts/agents`` installs (``scripts/dev
test`` runs it), and :func:`agent_env` is the environment they run in: a home
of the test's own, no key, URL or setting of the developer's, no update check
or telemetry.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: where ``scripts/agents`` installs Claude Code and Codex CLI
AGENTS_BIN = Path(__file__).resolve().parent.parent / ".agents" / "node_modules" / ".bin"


def agent_binary(name: str) -> Path:
    """The installed agent ``name`` (``claude``, ``codex``).

    ``$STRATA_TEST_CLAUDE`` / ``$STRATA_TEST_CODEX`` when set, else the one
    ``scripts/agents`` installed. A missing agent fails the test under CI
    (``scripts/dev test`` installs both) and skips it elsewhere.
    """
    given = os.environ.get(f"STRATA_TEST_{name.upper()}")
    path = Path(given) if given else AGENTS_BIN / name
    if not os.access(path, os.X_OK):
        problem = f"{name} is not installed at {path}: run scripts/agents"
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    return path


#: variables of the developer's that would point an agent elsewhere or change what it does
#: (CLAUDECODE included: set inside a Claude Code session, it changes how claude starts)
_FOREIGN = ("ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "STRATA_NOW", "STRATA_SEED")


def agent_env(base: Mapping[str, str], **extra: str) -> dict[str, str]:
    """``base`` (a test's CLI environment) fit for a real agent, plus ``extra``.

    The agent's hooks and MCP servers inherit it: the real clock and random
    ids (no ``STRATA_NOW``/``STRATA_SEED``), no ``STRATA_AUTHOR`` (each
    integration names its own author); updates, telemetry and error reports off.
    """
    env = {
        k: v
        for k, v in base.items()
        if not k.startswith(_FOREIGN) and k not in ("STRATA_AUTHOR", "STRATA_AUTHOR_KIND")
    }
    env.update(
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    env.update(extra)
    return env


#: the text of a reply past the script's end, and of a side request's
DONE = "done"


@dataclass(frozen=True)
class Text:
    """The model says ``text``."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """The model calls the tool ``name`` with ``arguments``."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Shell:
    """The model runs ``command`` with whatever shell tool the agent offers.

    Claude Code's is ``Bash``; Codex names its own by model family (``shell``
    taking an argv, ``shell_command`` or ``exec_command`` taking a string), so
    the endpoint picks the one the request offers.
    """

    command: str


@dataclass(frozen=True)
class Patch:
    """Codex edits files with its freeform ``apply_patch`` tool (``*** Begin Patch`` …)."""

    patch: str


Part = Text | ToolCall | Shell | Patch
Step = Sequence[Part]


@dataclass(frozen=True)
class Request:
    """One request the agent sent."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _calls(step: Step) -> int:
    return sum(1 for part in step if not isinstance(part, Text))


def step_after(script: Sequence[Step], results: int) -> Step:
    """The step a conversation that has ``results`` tool results is at."""
    for step in script:
        calls = _calls(step)
        if calls == 0 or results < calls:
            return step
        results -= calls
    return [Text(DONE)]


@dataclass
class ScriptedEndpoint:
    """A streaming model endpoint on 127.0.0.1 serving ``script``; a context manager."""

    script: Sequence[Step]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # a model list, a version check: nothing here
                self._send(404, "application/json", b'{"error": "not found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"raw": raw.decode("utf-8", "replace")}
                request = Request(self.path, dict(self.headers.items()), body)
                endpoint.requests.append(request)
                status, data = endpoint.reply(request)
                kind = "text/event-stream" if status == 200 else "application/json"
                self._send(status, kind, data)

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on, on 127.0.0.1."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the base URL to give the agent."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedEndpoint:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reply(self, request: Request) -> tuple[int, bytes]:
        """The HTTP status and body answering ``request``."""
        raise NotImplementedError

    def conversations(self) -> list[Request]:
        """The requests of the main conversation (those offering tools)."""
        return [r for r in self.requests if r.body.get("tools")]

    def step(self, body: dict[str, Any]) -> Step:
        """The script's step answering a request with this body (a side request: ``done``)."""
        if not body.get("tools"):
            return [Text(DONE)]
        return step_after(self.script, len(self._results(body)))

    def tool_results(self) -> list[str]:
        """What the agent answered to the script's tool calls, in order (its last request
        carries them all), each as the text the model was given."""
        conversation = self.conversations()
        return self._results(conversation[-1].body) if conversation else []

    @staticmethod
    def _results(body: dict[str, Any]) -> list[str]:
        raise NotImplementedError


def sse(events: Sequence[dict[str, Any]]) -> bytes:
    """Server-sent events, each named by its ``type``."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class AnthropicEndpoint(ScriptedEndpoint):
    """Anthropic's Messages API (``POST /v1/messages``, streamed), scripted."""

    @staticmethod
    def _results(body: dict[str, Any]) -> list[str]:
        found = []
        for message in body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") != "tool_result":
                    continue
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "".join(b.get("text", "") for b in inner)
                prefix = "error: " if block.get("is_error") else ""
                found.append(prefix + str(inner))
        return found

    def reply(self, request: Request) -> tuple[int, bytes]:
        if not request.path.startswith("/v1/messages"):
            return 404, b'{"type": "error", "error": {"type": "not_found_error"}}'
        if request.path.startswith("/v1/messages/count_tokens"):
            return 200, b'{"input_tokens": 10}'
        return 200, self._stream(self.step(request.body), serial=len(self.requests))

    @staticmethod
    def _stream(step: Step, *, serial: int) -> bytes:
        usage = {"input_tokens": 10, "output_tokens": 5}
        message = {
            "id": f"msg_{serial}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-scripted",
            "stop_reason": None,
            "usage": usage,
        }
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        stop = "end_turn"
        for index, part in enumerate(step):
            if isinstance(part, Text):
                block: dict[str, Any] = {"type": "text", "text": ""}
                delta: dict[str, Any] = {"type": "text_delta", "text": part.text}
            else:
                if isinstance(part, Shell):
                    part = ToolCall("Bash", {"command": part.command})
                if isinstance(part, Patch):
                    raise AssertionError("Claude Code has no apply_patch: use Edit or Write")
                block = {
                    "type": "tool_use",
                    "id": f"toolu_{serial}_{index}",
                    "name": part.name,
                    "input": {},
                }
                delta = {"type": "input_json_delta", "partial_json": json.dumps(part.arguments)}
                stop = "tool_use"
            events += [
                {"type": "content_block_start", "index": index, "content_block": block},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        events += [
            {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage},
            {"type": "message_stop"},
        ]
        return sse(events)


class ResponsesEndpoint(ScriptedEndpoint):
    """OpenAI's Responses API (``POST /v1/responses``, streamed), scripted."""

    @staticmethod
    def _results(body: dict[str, Any]) -> list[str]:
        return [
            str(item.get("output"))
            for item in body.get("input", [])
            if isinstance(item, dict) and str(item.get("type", "")).endswith("_output")
        ]

    def reply(self, request: Request) -> tuple[int, bytes]:
        if not request.path.rstrip("/").endswith("/responses"):
            return 404, b'{"error": {"message": "not found"}}'
        body = request.body
        return 200, self._stream(self.step(body), body.get("tools", []), serial=len(self.requests))

    @staticmethod
    def _shell(command: str, tools: list[dict[str, Any]]) -> ToolCall:
        """``command`` as a call of the shell tool the request offers."""
        names = {t.get("name") for t in tools}
        if "shell_command" in names:
            return ToolCall("shell_command", {"command": command})
        if "exec_command" in names:
            return ToolCall("exec_command", {"cmd": command})
        if "shell" in names:
            return ToolCall("shell", {"command": ["bash", "-lc", command]})
        raise AssertionError(f"the agent offers no shell tool: {sorted(map(str, names))}")

    def _stream(self, step: Step, tools: list[dict[str, Any]], *, serial: int) -> bytes:
        response_id = f"resp_{serial}"
        items: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = [
            {
                "type": "response.created",
                "response": {"id": response_id, "object": "response", "status": "in_progress"},
            }
        ]
        for index, part in enumerate(step):
            if isinstance(part, Text):
                item: dict[str, Any] = {
                    "type": "message",
                    "id": f"msg_{serial}_{index}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                }
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "content": [], "status": "in_progress"},
                    }
                )
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": part.text,
                    }
                )
            elif isinstance(part, Patch):
                item = {
                    "type": "custom_tool_call",
                    "id": f"ctc_{serial}_{index}",
                    "call_id": f"call_{serial}_{index}",
                    "name": "apply_patch",
                    "input": part.patch,
                    "status": "completed",
                }
                events.append(
                    {"type": "response.output_item.added", "output_index": index, "item": item}
                )
            else:
                call = self._shell(part.command, tools) if isinstance(part, Shell) else part
                item = {
                    "type": "function_call",
                    "id": f"fc_{serial}_{index}",
                    "call_id": f"call_{serial}_{index}",
                    "name": call.name,
                    "arguments": json.dumps(call.arguments),
                    "status": "completed",
                }
                events.append(
                    {"type": "response.output_item.added", "output_index": index, "item": item}
                )
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
            items.append(item)
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        events.append(
            {
                "type": "response.completed",
                "response": {
                    "id": response_id,
                    "object": "response",
                    "status": "completed",
                    "output": items,
                    "usage": usage,
                },
            }
        )
        return sse(events)


def trust_codex_hooks(codex: Path, *, cwd: Path, env: Mapping[str, str]) -> list[str]:
    """Trust every hook Codex finds for ``cwd``, as its ``/hooks`` review does; their keys.

    Codex runs a hook of the user's or the project's only once trusted: a
    ``[hooks.state."KEY"] trusted_hash`` in ``$CODEX_HOME/config.toml``, the hash
    being Codex's own. Its app server (``codex app-server``, JSON-RPC on stdin and
    stdout) lists the hooks with their ``currentHash`` (``hooks/list``) and writes
    the trust (``config/batchWrite``), so nothing here computes a hash.
    """
    server = subprocess.Popen(
        [str(codex), "app-server"],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    stdin, stdout = server.stdin, server.stdout
    assert stdin is not None and stdout is not None
    ids = iter(range(1, 100))

    def call(method: str, params: dict[str, Any]) -> Any:
        number = next(ids)
        message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()
        for line in stdout:
            answer = json.loads(line)
            if answer.get("id") == number:
                assert "error" not in answer, answer
                return answer["result"]
        raise AssertionError(f"codex app-server ended before answering {method}")

    try:
        call("initialize", {"clientInfo": {"name": "strata-tests", "version": "0"}})
        stdin.write(json.dumps({"jsonrpc": "2.0", "method": "initialized"}) + "\n")
        [listing] = call("hooks/list", {"cwds": [str(cwd)]})["data"]
        assert not listing["errors"], listing
        state = {h["key"]: {"trusted_hash": h["currentHash"]} for h in listing["hooks"]}
        edit = {"keyPath": "hooks.state", "value": state, "mergeStrategy": "upsert"}
        call("config/batchWrite", {"edits": [edit], "filePath": None, "expectedVersion": None})
        [after] = call("hooks/list", {"cwds": [str(cwd)]})["data"]
        assert {h["trustStatus"] for h in after["hooks"]} == {"trusted"}, after
        return sorted(state)
    finally:
        stdin.close()
        server.terminate()
        server.wait(timeout=10)
        stdout.close()


class _QuietServer(http.server.ThreadingHTTPServer):
    """The endpoint, saying nothing when an agent drops a connection (its retries, its exit)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
