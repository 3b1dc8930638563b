"""Traces: every model and tool call, recorded (redacted) so a step can be replayed offline.

A trace is one JSON artifact per call, stored content-addressed in the object
store and linked from the ledger event of the step it produced (the event's
``artifacts``). It holds the request, the exact wire body the adapter sent,
the streamed chunks, the response (or the error), and the call's IO key::

    {event_type}:{adapter}:{agent_id}:{tool}:{call_index}:{fingerprint}

``event_type`` is ``llm_call`` or ``tool_call``; ``tool`` is the tool's name
(``-`` for a model call); ``call_index`` counts the step's calls of that kind
from 0; ``fingerprint`` is the BLAKE3 of the request's canonical form (keys
sorted, floats to 6 places, CRLF turned into LF, runs of spaces and tabs inside
strings collapsed to one space), so that a replay recognises the same request
however it was spelled.

Redaction runs before anything is written and before the fingerprint is taken
(so a replay, which redacts what it observes the same way, finds the same
key): API keys (``sk-…``, ``ghp_…`` and the other GitHub token forms, the
secret values the caller passes), ``Bearer …`` credentials, e-mail addresses,
and the values of JSON keys that name a secret (``api_key``,
``authorization``…). A redacted trace replays as long as what was redacted
did not reach the files; when it did, the replay reports the divergence.

Encryption at rest (``[traces]`` in config.toml): with ``recipients`` (age
public keys), each trace is encrypted for them with age (``pyrage``, the
``bundle-age`` extra) before it is stored, so the object store holds no
plaintext of any request or response; writing needs only the public keys.
Reading (a replay) needs ``identity``, an age key file that MUST be kept
outside the repository and the workspace; without it a replay stops with one
line saying so (:class:`~strata.errors.TraceLocked`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import blake3

from strata.errors import ProviderError, StrataError, TraceCorrupt
from strata.providers.base import (
    CancelToken,
    Finished,
    Provider,
    Request,
    Response,
    StreamEvent,
    event_to_json,
)
from strata.redaction import Redactor as _Redactor
from strata.redaction import redact as _redact
from strata.store.sealing import TraceCipher

TRACE_FORMAT = "strata-trace"
TRACE_VERSION = 1
LLM_CALL = "llm_call"
TOOL_CALL = "tool_call"
NO_TOOL = "-"

# -- canonical form and keys -------------------------------------------------------------

_SPACES = re.compile(r"[ \t]+")


def canonical(value: Any) -> Any:
    """``value`` in the canonical form fingerprints are taken of (see the module doc)."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        rounded = round(value, 6)
        if rounded == int(rounded) and abs(rounded) < 2**53:
            return int(rounded)  # 1.0 and 1 are the same request
        return rounded
    if isinstance(value, str):
        return _SPACES.sub(" ", value.replace("\r\n", "\n"))
    return canonical(str(value))


def canonical_json(value: Any) -> str:
    """The canonical form as compact JSON with sorted keys."""
    return json.dumps(canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(value: Any) -> str:
    """The BLAKE3 (hex) of :func:`canonical_json`."""
    return blake3.blake3(canonical_json(value).encode()).hexdigest()


def io_key(
    event_type: str, adapter: str, agent_id: str, tool: str, call_index: int, print_: str
) -> str:
    """The IO key of a call (see the module doc)."""
    return f"{event_type}:{adapter}:{agent_id}:{tool}:{call_index}:{print_}"


# -- redaction (strata.redaction; traces take e-mail addresses out too) --------------------


class Redactor(_Redactor):
    """Removes secrets and e-mail addresses from what a trace records; counts what it removed."""

    def __init__(self, secrets: tuple[str, ...] = (), count: int = 0) -> None:
        super().__init__(secrets, True, count)


def redact(value: Any, *, secrets: Iterable[str] = ()) -> Any:
    """``value`` redacted for a trace (see :class:`strata.redaction.Redactor`)."""
    return _redact(value, secrets=secrets, emails=True)


# -- traces ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """One recorded call, as stored."""

    key: str
    event_type: str
    adapter: str
    agent_id: str
    tool: str
    call_index: int
    fingerprint: str
    request: dict[str, Any]
    response: dict[str, Any] | None
    chunks: tuple[dict[str, Any], ...] = ()
    wire_request: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    provider: str = ""
    duration_ms: int = 0
    redactions: int = 0

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "key": self.key,
            "event_type": self.event_type,
            "adapter": self.adapter,
            "agent_id": self.agent_id,
            "tool": self.tool,
            "call_index": self.call_index,
            "fingerprint": self.fingerprint,
            "provider": self.provider,
            "request": self.request,
            "wire_request": self.wire_request,
            "chunks": list(self.chunks),
            "response": self.response,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "redactions": self.redactions,
        }

    def encode(self) -> bytes:
        """The bytes stored in the object store."""
        return json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False).encode()

    @classmethod
    def decode(cls, data: bytes, *, name: str) -> Trace:
        """Parse stored bytes; :class:`TraceCorrupt` when they are not a trace of this version."""
        try:
            raw = json.loads(data)
        except ValueError:
            raise TraceCorrupt(name, "not JSON") from None
        if not isinstance(raw, dict) or raw.get("format") != TRACE_FORMAT:
            raise TraceCorrupt(name, "not a trace")
        if raw.get("version") != TRACE_VERSION:
            raise TraceCorrupt(name, f"trace format version {raw.get('version')!r} is unknown")
        try:
            trace = cls(
                key=str(raw["key"]),
                event_type=str(raw["event_type"]),
                adapter=str(raw["adapter"]),
                agent_id=str(raw["agent_id"]),
                tool=str(raw["tool"]),
                call_index=int(raw["call_index"]),
                fingerprint=str(raw["fingerprint"]),
                request=dict(raw["request"]),
                response=raw.get("response"),
                chunks=tuple(raw.get("chunks") or ()),
                wire_request=raw.get("wire_request"),
                error=raw.get("error"),
                provider=str(raw.get("provider") or ""),
                duration_ms=int(raw.get("duration_ms") or 0),
                redactions=int(raw.get("redactions") or 0),
            )
        except (KeyError, TypeError, ValueError):
            raise TraceCorrupt(name, "a field is missing or malformed") from None
        expected = io_key(
            trace.event_type,
            trace.adapter,
            trace.agent_id,
            trace.tool,
            trace.call_index,
            fingerprint(trace.request),
        )
        if expected != trace.key:
            raise TraceCorrupt(name, "its request does not match its key")
        return trace


@dataclass
class Recorder:
    """Collects the traces of one step, writing each to the store as it completes.

    ``put`` stores bytes and returns their id (the object store's ``put``).
    The ids, in call order, are what the step's ledger event links. A call that
    fails is recorded too (with its error), so a replay can show what failed.
    ``cipher`` encrypts each trace before it is put; when None, the cipher of
    the store ``put`` belongs to (its ``trace_cipher``: a callable the core
    sets, reading ``[traces]``) is used, so that every recorder writing into a
    repository encrypts.
    """

    put: Callable[[bytes], str]
    agent_id: str = "agent"
    secrets: tuple[str, ...] = ()
    clock: Callable[[], float] = time.monotonic
    ids: list[str] = field(default_factory=list)
    traces: list[Trace] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)
    cipher: TraceCipher | None = None

    def __post_init__(self) -> None:
        if self.cipher is None:
            found = getattr(getattr(self.put, "__self__", None), "trace_cipher", None)
            if callable(found):
                found = found()  # (a mistake in [traces] stops this recording here)
            self.cipher = found if isinstance(found, TraceCipher) else None

    def _index(self, event_type: str) -> int:
        n = self._counts.get(event_type, 0)
        self._counts[event_type] = n + 1
        return n

    def _store(self, trace: Trace) -> Trace:
        data = trace.encode()
        self.ids.append(self.put(self.cipher.seal(data) if self.cipher else data))
        self.traces.append(trace)
        return trace

    def llm_call(
        self,
        *,
        adapter: str,
        provider: str,
        request: dict[str, Any],
        wire_request: dict[str, Any] | None,
        chunks: list[dict[str, Any]],
        response: dict[str, Any] | None,
        error: dict[str, str] | None = None,
        duration_ms: int = 0,
    ) -> Trace:
        """Record a model call."""
        r = Redactor(self.secrets)
        clean = r.value(request)
        index = self._index(LLM_CALL)
        print_ = fingerprint(clean)
        return self._store(
            Trace(
                key=io_key(LLM_CALL, adapter, self.agent_id, NO_TOOL, index, print_),
                event_type=LLM_CALL,
                adapter=adapter,
                agent_id=self.agent_id,
                tool=NO_TOOL,
                call_index=index,
                fingerprint=print_,
                request=clean,
                wire_request=r.value(wire_request) if wire_request is not None else None,
                chunks=tuple(r.value(chunks)),
                response=r.value(response) if response is not None else None,
                error=r.value(error) if error is not None else None,
                provider=provider,
                duration_ms=duration_ms,
                redactions=r.count,
            )
        )

    def tool_call(
        self,
        *,
        tool: str,
        arguments: dict[str, Any],
        result: str,
        is_error: bool,
        adapter: str = "tool",
        duration_ms: int = 0,
    ) -> Trace:
        """Record a tool call and its result."""
        r = Redactor(self.secrets)
        request = r.value({"name": tool, "arguments": arguments})
        index = self._index(TOOL_CALL)
        return self._store(
            Trace(
                key=io_key(TOOL_CALL, adapter, self.agent_id, tool, index, fingerprint(request)),
                event_type=TOOL_CALL,
                adapter=adapter,
                agent_id=self.agent_id,
                tool=tool,
                call_index=index,
                fingerprint=fingerprint(request),
                request=request,
                response=r.value({"result": result, "is_error": is_error}),
                duration_ms=duration_ms,
                redactions=r.count,
            )
        )


class RecordingProvider:
    """Wraps a provider: each call is passed through, and recorded when it ends.

    The trace is written before the caller sees the final event, so a step's
    effects are never recorded without the call that caused them.
    """

    def __init__(self, inner: Provider, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.name = inner.name
        self.adapter = inner.adapter
        self.model = inner.model

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Ask the wrapped provider, recording the request, every chunk and the response."""
        wire = getattr(self.inner, "wire_request", None)
        wire_body: dict[str, Any] | None = wire(request) if callable(wire) else None
        chunks: list[dict[str, Any]] = []
        started = self.recorder.clock()

        def record(response: Response | None, error: dict[str, str] | None = None) -> None:
            self.recorder.llm_call(
                adapter=self.adapter,
                provider=self.name,
                request=request.to_json(),
                wire_request=wire_body,
                chunks=chunks,
                response=response.to_json() if response is not None else None,
                error=error,
                duration_ms=int((self.recorder.clock() - started) * 1000),
            )

        try:
            for event in self.inner.stream(request, cancel=cancel):
                chunks.append(event_to_json(event))
                if isinstance(event, Finished):
                    record(event.response)
                yield event
        except (ProviderError, StrataError) as exc:
            if not chunks or chunks[-1].get("kind") != "finished":
                record(None, {"type": type(exc).__name__, "message": str(exc)})
            raise
