"""Spans of commands, model calls and tool calls, exported with OpenTelemetry when asked.

Off unless a front end calls :func:`start` (the command line does when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set or ``config.toml`` has ``[telemetry]
otlp_endpoint``): until then :func:`span` returns one shared do-nothing
context manager and :func:`traced_stream` hands its iterator back, and
OpenTelemetry is never imported. It lives in the ``otel`` extra
(``opentelemetry-sdk`` and the OTLP/HTTP exporter); without it :func:`start`
raises :class:`~strata.errors.ExtraNotInstalled`.

A library module marks its work with :func:`span`; the ids it knows go in as
attributes named ``strata.<what>`` (``strata.event_id``, ``strata.operation_id``,
``strata.branch``, ``strata.bookmark``, ``strata.tool``, ``strata.provider``).
A command also leaves numbers for the local metrics file with :func:`note`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

#: what an attribute may hold (OpenTelemetry's own types)
AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]

#: the packages of the ``otel`` extra, for the message when they are missing
EXTRA = "otel"

_NULL: contextlib.AbstractContextManager[None] = contextlib.nullcontext()

#: the tracer of :func:`start` (None: telemetry is off)
_tracer: Any = None
#: what :func:`stop` shuts down (flushing what is still queued)
_providers: list[Any] = []
#: numbers a command left for the local metrics file (see :func:`note`)
_notes: dict[str, float] = {}


def enabled() -> bool:
    """Whether spans are being exported (:func:`start` was called)."""
    return _tracer is not None


def span(
    name: str, attributes: Mapping[str, AttributeValue | None] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """A span around a piece of work, the child of the current one; a no-op when off.

    Attributes whose value is None are left out.
    """
    if _tracer is None:
        return _NULL
    opened: contextlib.AbstractContextManager[Any] = _tracer.start_as_current_span(
        name, attributes=_clean(attributes)
    )
    return opened


def traced_stream(
    name: str,
    events: Iterable[T],
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    on_event: Callable[[Any, T], None] | None = None,
) -> Iterable[T]:
    """``events`` iterated inside a span (a model's stream); ``events`` itself when off.

    ``on_event(span, event)`` may add attributes as the events arrive.
    """
    if _tracer is None:
        return events
    return _traced(name, events, attributes, on_event)


def _traced(
    name: str,
    events: Iterable[T],
    attributes: Mapping[str, AttributeValue | None] | None,
    on_event: Callable[[Any, T], None] | None,
) -> Iterator[T]:
    with _tracer.start_as_current_span(name, attributes=_clean(attributes)) as current:
        for event in events:
            if on_event is not None:
                on_event(current, event)
            yield event


def open_span(name: str, attributes: Mapping[str, AttributeValue | None] | None = None) -> Any:
    """Start a span that stays the current one until :func:`close_span` (a command's).

    Only while telemetry is on (:func:`start`).
    """
    from opentelemetry import context, trace

    opened = _tracer.start_span(name, attributes=_clean(attributes))
    return opened, context.attach(trace.set_span_in_context(opened))


def close_span(
    handle: Any, attributes: Mapping[str, AttributeValue | None], *, error: str | None
) -> None:
    """Add ``attributes`` to a span of :func:`open_span` and end it (failed, with ``error``)."""
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    opened, token = handle
    opened.set_attributes(_clean(attributes) or {})
    if error is not None:
        opened.set_status(Status(StatusCode.ERROR, error))
    opened.end()
    context.detach(token)


def note(name: str, value: float) -> None:
    """Add ``value`` to a number this command leaves for the local metrics file."""
    _notes[name] = _notes.get(name, 0) + value


def take_notes() -> dict[str, float]:
    """The numbers left by :func:`note` since the last call (then forgotten)."""
    out = dict(_notes)
    _notes.clear()
    return out


def start(
    endpoint: str,
    *,
    resource: Mapping[str, AttributeValue],
    timeout_s: float = 2.0,
    metric_kinds: Mapping[str, str] | None = None,
    metric_values: Callable[[], Mapping[str, float | None]] | None = None,
) -> None:
    """Export spans (and metrics) over OTLP/HTTP to ``endpoint`` until :func:`stop`.

    ``endpoint`` is the collector's base URL (``http://host:4318``): spans go
    to ``/v1/traces``, metrics to ``/v1/metrics``. ``metric_kinds`` names each
    metric's instrument (``counter`` or ``gauge``); ``metric_values()`` is read
    once, when :func:`stop` flushes (a None value is not exported). Raises
    :class:`~strata.errors.ExtraNotInstalled` without the ``otel`` extra.
    """
    global _tracer
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        from strata.errors import ExtraNotInstalled

        raise ExtraNotInstalled(
            "exporting telemetry", EXTRA, exc.name or "opentelemetry-sdk"
        ) from None
    import logging

    # a collector that does not answer: one line per signal, not one per retry
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    base = endpoint.rstrip("/")
    res = Resource.create(dict(resource))
    tracer_provider = TracerProvider(resource=res)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=timeout_s))
    )
    _providers.append(tracer_provider)
    if metric_kinds and metric_values is not None:
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=timeout_s),
            export_interval_millis=3_600_000,  # a command is short: exported once, at stop
        )
        meter_provider = MeterProvider(resource=res, metric_readers=[reader])
        _observe(meter_provider, metric_kinds, metric_values)
        _providers.append(meter_provider)
    _tracer = tracer_provider.get_tracer("strata")


def _observe(
    meter_provider: Any,
    kinds: Mapping[str, str],
    read_values: Callable[[], Mapping[str, float | None]],
) -> None:
    """One observable instrument per metric, all read from one call of ``read_values``."""
    from opentelemetry.metrics import CallbackOptions, Observation

    meter = meter_provider.get_meter("strata")
    values: dict[str, float | None] = {}

    def reader(name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            if not values:
                values.update(read_values())
            value = values.get(name)
            return [] if value is None else [Observation(value)]

        return callback

    for name, kind in kinds.items():
        if kind == "counter":
            meter.create_observable_counter(name, callbacks=[reader(name)])
        else:
            meter.create_observable_gauge(name, callbacks=[reader(name)])


def stop() -> None:
    """Flush and shut down what :func:`start` began (nothing when it was not called)."""
    global _tracer
    _tracer = None
    while _providers:
        _providers.pop().shutdown()


def _clean(attributes: Mapping[str, AttributeValue | None] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}
