"""The replay adapter: serves a step's recorded model calls back, in order, with no network.

Each call the replayed step makes is redacted and fingerprinted exactly as
recording did (:mod:`strata.providers.trace`); it must match the recorded call
at the same index, or the replay stops with :class:`~strata.errors.UnrecordedCall`
showing the first field where the expected and the observed requests differ.
A recorded failure is raised again as the error it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from strata.errors import ProviderCancelled, ProviderError, TraceCorrupt, UnrecordedCall
from strata.providers.base import (
    CancelToken,
    Request,
    StreamEvent,
    event_from_json,
)
from strata.providers.trace import LLM_CALL, NO_TOOL, Trace, fingerprint, io_key, redact

MISSING: Any = object()
"""The value :func:`difference` gives for a key one side lacks."""


def difference(expected: Any, observed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The JSON path and both values of the first place two values differ; None if equal.

    A key one side lacks has the value :data:`MISSING` there; two lists whose
    common items are equal but whose lengths differ are the difference
    themselves.
    """
    if isinstance(expected, dict) and isinstance(observed, dict):
        for key in sorted(set(expected) | set(observed)):
            where = f"{path}.{key}" if path else str(key)
            if key not in observed or key not in expected:
                return where, expected.get(key, MISSING), observed.get(key, MISSING)
            found = difference(expected[key], observed[key], where)
            if found:
                return found
        return None
    if isinstance(expected, list) and isinstance(observed, list):
        for i, (a, b) in enumerate(zip(expected, observed, strict=False)):
            found = difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return (path, expected, observed) if len(expected) != len(observed) else None
    return None if expected == observed else (path or "request", expected, observed)


def first_difference(expected: Any, observed: Any, path: str = "") -> str | None:
    """The first JSON path where two values differ, with both values (short); None if equal."""
    found = difference(expected, observed, path)
    return None if found is None else describe_difference(found)


def describe_difference(found: tuple[str, Any, Any]) -> str:
    """One line for what :func:`difference` found: the path and both values (short)."""
    where, old, new = found
    if new is MISSING:
        return f"{where}: missing (expected {_short(old)})"
    if old is MISSING:
        return f"{where}: unexpected {_short(new)}"
    if isinstance(old, list) and isinstance(new, list):
        return f"{where}: {len(new)} items (expected {len(old)})"
    return f"{where}: {_short(new)} (expected {_short(old)})"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReplayProvider:
    """A provider that answers from recorded traces (adapter ``replay``)."""

    adapter = "replay"

    def __init__(
        self,
        traces: Sequence[Trace],
        *,
        name: str = "replay",
        agent_id: str | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.name = name
        self._traces = [t for t in traces if t.event_type == LLM_CALL]
        self._secrets = tuple(secrets)
        self._next = 0
        self.model = self._traces[0].request.get("model", "") if self._traces else ""
        self.agent_id = agent_id or (self._traces[0].agent_id if self._traces else "agent")
        #: the adapter the recorded calls went through (part of their keys)
        self.recorded_adapter = self._traces[0].adapter if self._traces else "replay"

    @property
    def exhausted(self) -> bool:
        """True once every recorded call was served."""
        return self._next >= len(self._traces)

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Serve the next recorded call, after checking that ``request`` is the one recorded."""
        observed = redact(request.to_json(), secrets=self._secrets)
        print_ = fingerprint(observed)
        index = self._next
        key = io_key(LLM_CALL, self.recorded_adapter, self.agent_id, NO_TOOL, index, print_)
        if index >= len(self._traces):
            raise UnrecordedCall(
                key,
                expected=f"no model call {index} (the step made {len(self._traces)})",
                observed=_short(observed.get("messages", [])[-1:], 120),
            )
        trace = self._traces[index]
        if trace.fingerprint != print_:
            diff = first_difference(trace.request, observed) or "the canonical forms differ"
            raise UnrecordedCall(key, expected=trace.key, observed=diff)
        self._next += 1
        if cancel is not None and cancel.cancelled:
            raise ProviderCancelled(self.name, "the replayed call was cancelled")
        if trace.error is not None:
            raise ProviderError(
                trace.provider or self.name,
                f"(recorded failure) {trace.error.get('message', 'the call failed')}",
            )
        finished = False
        for raw in trace.chunks:
            try:
                event = event_from_json(raw)
            except (KeyError, TypeError, ValueError):
                raise TraceCorrupt(trace.key, "a recorded chunk is malformed") from None
            finished = finished or event.kind == "finished"
            yield event
        if not finished:
            raise TraceCorrupt(trace.key, "the recorded stream has no final response")
