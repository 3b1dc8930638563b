"""A recording model proxy for any agent: ``strata run --record-model`` and ``strata proxy``.

:class:`ModelProxy` is an HTTP server on 127.0.0.1 that speaks what coding agents
call: Anthropic's Messages API (``POST /v1/messages``, ``ANTHROPIC_BASE_URL``
pointing at the proxy) and OpenAI's Responses and Chat Completions APIs
(``/v1/responses``, ``/v1/chat/completions``, ``OPENAI_BASE_URL`` pointing at the
proxy's ``/v1``). A request is Anthropic's when its path starts with
``/v1/messages`` or it carries an ``anthropic-version`` header; any other is
OpenAI's.

**Recording** (``upstreams`` given): each request is forwarded to the upstream
base URL the user had (or the public default) and the answer passes back as
it arrives, read by read, server-sent events included: nothing waits for the
whole answer. When the call ends it is recorded as a trace
(:mod:`strata.providers.trace`, the IO key and fingerprint of ``strata
agent``'s traces, adapter ``proxy-anthropic`` or ``proxy-openai``): the
request (method, path, JSON body), the response (status, content type, the
body as the concatenated stream) and the duration, redacted. Headers are
never recorded (API keys travel there); their secret values are redacted
from the bodies too.

What the fingerprint is taken of, :func:`call_request`, leaves out what
changes from one session to the next without changing the question: the
body's ``metadata``, ``user``, ``prompt_cache_key`` and ``safety_identifier``
(session and user ids; the raw body is kept as the trace's ``wire_request``),
the workspace's path, written ``{workspace}`` (in the response too; and
``{workspace-folder}`` for the form agents name a folder after it,
:func:`folder_name`), and the agent's home folder, written ``{home}``, so a
run replayed in a scratch folder or a sandbox's home asks the same questions.

**Replaying** (``replay`` given): nothing is forwarded (the proxy has no
upstream and opens no connection). A request is answered with the recorded
response of the first call not yet served whose fingerprint is the same
(agents send side requests in parallel, so the order of calls is not
required; a request asked again gets the same answer again); one that
matches none is refused with a 400 in the API's own error form and kept
as the replay's first divergence: the first field where it differs from
the first unserved recorded call to the same path (or, when all were
served, the first one to that path).
"""

from __future__ import annotations

import http.client
import http.server
import json
import queue
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from strata.providers.replay import describe_difference, difference
from strata.providers.trace import LLM_CALL, Recorder, Redactor, Trace, fingerprint
from strata.sandbox.net import PROXY_PORT, SOCKET_NAME

#: the public APIs, when the user set no base URL
DEFAULT_UPSTREAMS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
#: the environment variable naming each API's base URL
BASE_URL_VARIABLES = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}
#: body fields that name a session or a user, not the question (left out of the fingerprint)
VOLATILE_FIELDS = ("metadata", "user", "prompt_cache_key", "safety_identifier")
#: how the workspace's path is written in recorded calls
WORKSPACE_TOKEN = "{workspace}"
#: how the workspace's path is written where it names a folder (:func:`folder_name`)
FOLDER_TOKEN = "{workspace-folder}"
#: how the agent's home folder is written (a sandbox gives it another one)
HOME_TOKEN = "{home}"
ADAPTERS = {"anthropic": "proxy-anthropic", "openai": "proxy-openai"}
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)
#: headers whose values are credentials (redacted from the bodies, never recorded)
_CREDENTIALS = ("authorization", "x-api-key", "api-key", "openai-api-key")
_READ = 64 * 1024
_TIMEOUT_S = 600.0


def upstreams_from(environ: Mapping[str, str]) -> dict[str, str]:
    """Each API's upstream base URL: the user's ``*_BASE_URL`` or the public default."""
    return {
        api: (environ.get(var) or DEFAULT_UPSTREAMS[api]).rstrip("/")
        for api, var in BASE_URL_VARIABLES.items()
    }


def api_of(path: str, headers: Mapping[str, str]) -> str:
    """``anthropic`` or ``openai``: which API a request to the proxy speaks."""
    if path.startswith("/v1/messages") or path.startswith("/v1/complete"):
        return "anthropic"
    if any(k.lower() == "anthropic-version" for k in headers):
        return "anthropic"
    return "openai"


def upstream_url(api: str, base: str, path: str) -> str:
    """Where a request to the proxy's ``path`` goes: ``base`` as the client would have used it.

    Anthropic's clients add ``/v1/...`` to their base URL; OpenAI's base URL ends
    in ``/v1`` already (the proxy's does), so that part of the path is dropped.
    """
    if api == "openai" and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return base + path


def _swap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    return value


def parse_body(raw: bytes) -> Any:
    """A request body as JSON when it is, else its text."""
    text = raw.decode("utf-8", "replace")
    if not raw:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def call_request(
    method: str, path: str, body: Any, *, root: str | None, home: str | None = None
) -> dict[str, Any]:
    """What a call's fingerprint is taken of (see the module doc): before redaction."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE_FIELDS}
    if root:
        body = _swap(_swap(body, root, WORKSPACE_TOKEN), folder_name(root), FOLDER_TOKEN)
    if home and home != "/":
        body = _swap(body, home, HOME_TOKEN)
    return {"method": method, "path": path.split("?", 1)[0], "body": body}


def folder_name(root: str) -> str:
    """The workspace's path as agents name a folder of their own after it.

    Claude Code keeps a project's memory in ``~/.claude/projects/-tmp-ws`` for
    ``/tmp/ws`` (every character but letters and digits turned into ``-``) and
    says so in its system prompt.
    """
    return re.sub(r"[^A-Za-z0-9]", "-", root)


@dataclass
class Divergence:
    """A replayed request that matches no recorded call."""

    path: str
    detail: str
    expected: str


@dataclass(frozen=True)
class ProxiedCall:
    """One call the proxy forwarded, as queued for the recording thread."""

    api: str
    request: dict[str, Any]
    raw_body: Any
    response: dict[str, Any] | None
    error: dict[str, str] | None
    secrets: tuple[str, ...]
    duration_ms: int


@dataclass
class _Replay:
    traces: list[Trace]
    served: list[bool] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.served = [False] * len(self.traces)


class ModelProxy:
    """The proxy on 127.0.0.1; a context manager (see the module doc).

    Give ``recorder`` and ``upstreams`` to record, or ``replay`` (the recorded
    traces) to replay. ``root`` is the workspace's path as the agent sees it,
    ``home`` its home folder (both written as tokens in what is recorded).
    ``secrets`` are redacted from what is recorded, with the credentials each
    request carries.
    """

    def __init__(
        self,
        *,
        recorder: Recorder | None = None,
        upstreams: Mapping[str, str] | None = None,
        replay: Sequence[Trace] | None = None,
        root: Path | str | None = None,
        secrets: Sequence[str] = (),
        port: int = 0,
        socket_folder: Path | None = None,
        home: Path | str | None = None,
    ) -> None:
        if (replay is None) == (recorder is None):
            raise ValueError("a model proxy records (recorder) or replays (replay), not both")
        self.recorder = recorder
        self.upstreams = dict(upstreams or DEFAULT_UPSTREAMS)
        self._replay = _Replay(list(replay)) if replay is not None else None
        self.root = str(root) if root else None
        self.home = str(home) if home else None
        self.secrets = tuple(secrets)
        self._lock = threading.Lock()
        self._pool = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._queue: queue.SimpleQueue[ProxiedCall | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        #: traces that could not be stored (the store failed), as messages
        self.failures: list[str] = []
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _TcpServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._servers: list[socketserver.BaseServer] = [self._server]
        #: the folder of the Unix socket it also listens on (``proxy.sock``), bound into a
        #: sandbox whose only way out it is (:attr:`strata.sandbox.bwrap.SandboxSpec.proxy`)
        self.socket_folder = socket_folder
        if socket_folder is not None:
            unix = _UnixServer(str(socket_folder / SOCKET_NAME), Handler)
            unix.daemon_threads = True
            self._servers.append(unix)

    # -- the outside ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def environment(self) -> dict[str, str]:
        """The variables that point an agent at this proxy."""
        return {"ANTHROPIC_BASE_URL": self.url, "OPENAI_BASE_URL": f"{self.url}/v1"}

    def sandbox_environment(self) -> dict[str, str]:
        """The same, for a sandbox that reaches the proxy's socket through its relay's port."""
        url = f"http://127.0.0.1:{PROXY_PORT}"
        return {"ANTHROPIC_BASE_URL": url, "OPENAI_BASE_URL": f"{url}/v1"}

    @property
    def trace_ids(self) -> list[str]:
        """The ids of the traces recorded so far, in the order the calls ended."""
        with self._lock:
            return list(self.recorder.ids) if self.recorder else []

    @property
    def divergences(self) -> list[Divergence]:
        """Replayed requests that matched no recorded call, in order."""
        return list(self._replay.divergences) if self._replay else []

    def first_divergence(self) -> tuple[str, str] | None:
        """The first replayed request no recorded call matched: (what differs, expected key)."""
        found = self.divergences
        return (found[0].detail, found[0].expected) if found else None

    def served(self) -> tuple[int, int]:
        """How many recorded calls a replay was asked for, of how many."""
        if self._replay is None:
            return 0, 0
        return sum(self._replay.served), len(self._replay.traces)

    @property
    def unserved(self) -> list[Trace]:
        """Recorded calls a replay has not (yet) been asked for."""
        if self._replay is None:
            return []
        return [t for t, s in zip(self._replay.traces, self._replay.served, strict=True) if not s]

    def __enter__(self) -> ModelProxy:
        if self.recorder is not None:
            self._worker = threading.Thread(
                target=self._recording, name="strata-model-proxy-recorder", daemon=True
            )
            self._worker.start()
        for server in self._servers:
            threading.Thread(
                target=server.serve_forever, name="strata-model-proxy", daemon=True
            ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()

    # -- recording ----------------------------------------------------------------------

    def _connection(self, url: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        pool: dict[tuple[str, str], http.client.HTTPConnection] = getattr(self._pool, "c", {})
        self._pool.c = pool
        conn = pool.get(key)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if parts.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(parts.netloc, timeout=_TIMEOUT_S)
            pool[key] = conn
            with self._lock:
                self._opened.append(conn)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        return conn, target

    def _drop(self, url: str) -> None:
        parts = urlsplit(url)
        pool: dict[tuple[str, str], http.client.HTTPConnection] = getattr(self._pool, "c", {})
        conn = pool.pop((parts.scheme, parts.netloc), None)
        if conn is not None:
            conn.close()

    def record(self, call: ProxiedCall) -> None:
        """Queue one call's trace: the recording thread redacts and stores it.

        The connection is free for the agent's next call meanwhile; leaving
        the context manager waits until every queued trace is stored.
        """
        self._queue.put(call)

    def _recording(self) -> None:
        while (call := self._queue.get()) is not None:
            try:
                self._store(call)
            except Exception as exc:  # a store that fails: the proxy goes on, the run says so
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def _store(self, call: ProxiedCall) -> None:
        response = call.response
        assert self.recorder is not None
        if self.root and response is not None:
            response = _swap(response, self.root, WORKSPACE_TOKEN)
        if self.home and self.home != "/" and response is not None:
            response = _swap(response, self.home, HOME_TOKEN)
        with self._lock:
            before = self.recorder.secrets
            self.recorder.secrets = (*before, *call.secrets)
            try:
                self.recorder.llm_call(
                    adapter=ADAPTERS[call.api],
                    provider=urlsplit(self.upstreams[call.api]).netloc,
                    request=call.request,
                    wire_request={"body": call.raw_body},
                    chunks=[],
                    response=response,
                    error=call.error,
                    duration_ms=call.duration_ms,
                )
            finally:
                self.recorder.secrets = before

    # -- replaying ----------------------------------------------------------------------

    def answer(self, request: dict[str, Any], secrets: Sequence[str]) -> Trace | Divergence:
        """The recorded call that answers ``request`` (marked served), or why none does."""
        assert self._replay is not None
        observed = Redactor((*self.secrets, *secrets)).value(request)
        print_ = fingerprint(observed)
        replay = self._replay
        with self._lock:
            for i, trace in enumerate(replay.traces):
                if not replay.served[i] and trace.fingerprint == print_:
                    replay.served[i] = True
                    return trace
            for trace in replay.traces:  # asked again (a retry): the same answer
                if trace.fingerprint == print_:
                    return trace
            unserved = [t for t, s in zip(replay.traces, replay.served, strict=True) if not s]
            path = observed.get("path")
            same_path = [t for t in unserved if t.request.get("path") == path] or [
                t for t in replay.traces if t.request.get("path") == path
            ]
            candidates = same_path or unserved
            nearest = candidates[0] if candidates else None
            if nearest is None:
                found = Divergence(
                    observed["path"],
                    f"{observed['method']} {observed['path']}: no recorded call is left "
                    f"(the run made {len(replay.traces)})",
                    "",
                )
            else:
                diff = _where(nearest.request, observed) or "the canonical forms differ"
                where = f"{observed['method']} {observed['path']}"
                found = Divergence(observed["path"], f"{where}: {diff}", nearest.key)
            replay.divergences.append(found)
            return found


class _Quiet:
    """A server that says nothing when an agent drops its connection (no traceback on stderr)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return  # the agent went away mid-call: what it sent is recorded, or never was
        print(f"strata proxy: a call failed: {type(error).__name__}: {error}", file=sys.stderr)


class _TcpServer(_Quiet, http.server.ThreadingHTTPServer):
    pass


class _UnixServer(_Quiet, socketserver.ThreadingUnixStreamServer):
    def get_request(self) -> tuple[Any, Any]:
        conn, _ = self.socket.accept()
        return conn, ("sandbox", 0)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: ModelProxy

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        if self.connection.family != socket.AF_UNIX:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def address_string(self) -> str:
        return str(self.client_address[0]) if self.client_address else "sandbox"

    def do_CONNECT(self) -> None:
        """A tunnel elsewhere: refused, the model APIs are the only way out."""
        message = (
            f"strata's model proxy refuses {self.path}: only the model APIs are reachable "
            "(ANTHROPIC_BASE_URL, OPENAI_BASE_URL)"
        )
        self._send(403, "text/plain", message.encode())

    def do_POST(self) -> None:
        self._call()

    def do_GET(self) -> None:
        self._call()

    def do_PUT(self) -> None:
        self._call()

    def do_DELETE(self) -> None:
        self._call()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _call(self) -> None:
        proxy = self.owner
        raw = self._body()
        headers = {k: v for k, v in self.headers.items()}
        api = api_of(self.path, headers)
        secrets = [
            v.split(" ", 1)[-1]
            for k, v in headers.items()
            if k.lower() in _CREDENTIALS and len(v.split(" ", 1)[-1]) >= 8
        ]
        body = parse_body(raw)
        request = call_request(self.command, self.path, body, root=proxy.root, home=proxy.home)
        if proxy.recorder is None:
            self._replayed(api, request, secrets)
        else:
            self._forwarded(api, request, body, raw, headers, secrets)

    def _replayed(self, api: str, request: dict[str, Any], secrets: list[str]) -> None:
        proxy = self.owner
        found = proxy.answer(request, secrets)
        if isinstance(found, Divergence):
            message = f"strata replay: this request was not recorded: {found.detail}"
            self._send(400, "application/json", _error_body(api, message))
            return
        if found.error is not None or found.response is None:
            message = f"(recorded failure) {(found.error or {}).get('message', 'the call failed')}"
            self._send(502, "application/json", _error_body(api, message))
            return
        response = found.response
        text = str(response.get("body", ""))
        if proxy.root:
            text = text.replace(WORKSPACE_TOKEN, proxy.root)
        if proxy.home:
            text = text.replace(HOME_TOKEN, proxy.home)
        self._send(
            int(response.get("status", 200)),
            str(response.get("content_type") or "application/json"),
            text.encode(),
        )

    def _send(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forwarded(
        self,
        api: str,
        request: dict[str, Any],
        body: Any,
        raw: bytes,
        headers: dict[str, str],
        secrets: list[str],
    ) -> None:
        proxy = self.owner
        url = upstream_url(api, proxy.upstreams[api], self.path)
        out = {k: v for k, v in headers.items() if k.lower() not in _HOP}
        out["Accept-Encoding"] = "identity"  # the recorded body is the text
        start = time.monotonic()
        upstream: http.client.HTTPResponse | None = None
        for attempt in (0, 1):  # a kept-alive connection the upstream closed: once more
            conn, target = proxy._connection(url)
            try:
                conn.request(self.command, target, body=raw or None, headers=out)
                if conn.sock is not None:
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as exc:
                proxy._drop(url)
                if attempt == 0 and isinstance(
                    exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
                ):
                    continue
                message = f"the model proxy could not reach {url}: {exc}"
                ms = int((time.monotonic() - start) * 1000)
                error = {"type": type(exc).__name__, "message": message}
                proxy.record(ProxiedCall(api, request, body, None, error, tuple(secrets), ms))
                self._send(502, "application/json", _error_body(api, message))
                return
        assert upstream is not None
        self.send_response(upstream.status, upstream.reason)
        kind = upstream.getheader("Content-Type", "")
        for k, v in upstream.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        received: list[bytes] = []
        client_gone = False
        while True:
            try:
                data = upstream.read1(_READ)
            except (OSError, http.client.HTTPException):
                proxy._drop(url)
                break
            if not data:
                break
            received.append(data)
            if not client_gone:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                except OSError:
                    client_gone = True
        if not client_gone:
            with suppress(OSError):
                self.wfile.write(b"0\r\n\r\n")
        if upstream.will_close:
            proxy._drop(url)
        text = b"".join(received).decode("utf-8", "replace")
        response = {"status": upstream.status, "content_type": kind, "body": text}
        ms = int((time.monotonic() - start) * 1000)
        proxy.record(ProxiedCall(api, request, body, response, None, tuple(secrets), ms))


def _where(expected: Any, observed: Any) -> str | None:
    """The first field where two requests differ; for text, around the first differing character."""
    found = difference(expected, observed)
    if found is None:
        return None
    where, old, new = found
    if isinstance(old, str) and isinstance(new, str):
        at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), None)
        at = min(len(old), len(new)) if at is None else at
        lo = max(0, at - 30)

        def shown(text: str) -> str:
            part = text[lo : at + 40]
            return json.dumps(("..." if lo else "") + part + ("..." if at + 40 < len(text) else ""))

        return f"{where}: {shown(new)} (expected {shown(old)}; from character {at})"
    return describe_difference(found)


def _error_body(api: str, message: str) -> bytes:
    if api == "anthropic":
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        error = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return json.dumps(error).encode()


@contextmanager
def recording(
    put: Callable[[bytes], str],
    environ: Mapping[str, str],
    *,
    root: Path | None,
    secrets: Sequence[str] = (),
    agent_id: str = "proxy",
    port: int = 0,
    socket_folder: Path | None = None,
) -> Iterator[ModelProxy]:
    """A recording proxy to the upstreams ``environ`` names, storing traces with ``put``.

    With ``socket_folder`` it listens on a Unix socket there too (for a sandbox).
    ``environ``'s ``HOME`` is the agent's home folder.
    """
    recorder = Recorder(put=put, agent_id=agent_id, secrets=tuple(secrets))
    with ModelProxy(
        recorder=recorder,
        upstreams=upstreams_from(environ),
        root=root,
        secrets=secrets,
        port=port,
        socket_folder=socket_folder,
        home=environ.get("HOME") or None,
    ) as proxy:
        yield proxy


@contextmanager
def replaying(
    traces: Sequence[Trace],
    root: Path,
    *,
    home: str | None = None,
    secrets: Sequence[str] = (),
) -> Iterator[ModelProxy]:
    """A proxy serving ``traces`` (a run's recorded calls); it never connects anywhere.

    ``root`` is the workspace's path as the replayed command sees it, ``home``
    its home folder. It listens on 127.0.0.1 and on a Unix socket in a folder
    of its own (``socket_folder``), for a sandbox to bind.
    """
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="strata-model-replay-"))
    try:
        with ModelProxy(
            replay=model_traces(traces),
            root=root,
            home=home,
            secrets=secrets,
            socket_folder=folder,
        ) as proxy:
            yield proxy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def model_traces(traces: Sequence[Trace]) -> list[Trace]:
    """The traces a recording proxy made (its model calls)."""
    return [t for t in traces if t.event_type == LLM_CALL and t.adapter in set(ADAPTERS.values())]
