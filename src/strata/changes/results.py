"""Result events (seed 004 §5.6): a test or eval run, judged, anchored to its snapshot.

``strata run --result NAME -- pytest …`` records, after the run, one ``result``
annotation event anchored to the state event the command ran on (the run's
*before* snapshot): its name, whether it passed (exit code 0), its duration,
and the metrics of a JUnit XML report when the command wrote one (tests,
failures, errors, skipped, time), the report itself kept as an artifact.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.errors import UsageError
from strata.ledger.events import Event, EventType

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.ledger.events import Author

__all__ = ["ResultRecord", "junit_metrics", "list_results", "record_result"]


@dataclass(frozen=True)
class ResultRecord:
    """One recorded result: its event and what it says."""

    event: Event

    @property
    def name(self) -> str:
        """The result's name (``--result NAME``)."""
        return str(self.event.data.get("name", ""))

    @property
    def passed(self) -> bool:
        """Whether the command exited 0 (and the report, if any, lists no failure)."""
        return bool(self.event.data.get("passed"))

    def to_json(self) -> dict[str, Any]:
        """The result as ``strata results --json`` prints it."""
        d = self.event.data
        return {
            "event_id": self.event.id,
            "ts": self.event.ts,
            "name": self.name,
            "passed": self.passed,
            "exit_code": d.get("exit_code"),
            "duration_ms": d.get("duration_ms"),
            "metrics": d.get("metrics") or {},
            "anchor_event_id": self.event.anchor_event_id,
            "run_id": d.get("run_id"),
            "command": d.get("command") or [],
            "artifacts": list(self.event.artifacts),
        }


def junit_metrics(data: bytes) -> dict[str, float | int]:
    """Totals of a JUnit XML report: tests, failures, errors, skipped, time (seconds)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise UsageError(f"the JUnit XML report cannot be read ({exc})") from None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals: dict[str, float | int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for suite in suites:
        for key in totals:
            try:
                totals[key] += int(suite.get(key, "0") or 0)
            except ValueError:
                continue
        with contextlib.suppress(ValueError):
            seconds += float(suite.get("time", "0") or 0)
    totals["time_s"] = round(seconds, 3)
    return totals


def record_result(
    core: Core,
    *,
    name: str,
    anchor: str,
    exit_code: int,
    duration_ms: int,
    command: list[str],
    run_id: str | None = None,
    junit: bytes | None = None,
    author: Author | None = None,
) -> ResultRecord:
    """Record a ``result`` event anchored to the state event ``anchor``."""
    if not name.strip():
        raise UsageError("a result needs a name: --result NAME")
    metrics: dict[str, Any] = {}
    artifacts: tuple[str, ...] = ()
    if junit is not None:
        metrics = junit_metrics(junit)
    passed = exit_code == 0 and not (metrics.get("failures") or metrics.get("errors"))
    with core.transaction("result", author) as tx:
        if junit is not None:
            artifacts = (core.objects.put(junit),)
        event = tx.annotate(
            EventType.RESULT,
            anchor=anchor,
            rationale=f"{name}: {'passed' if passed else 'failed'}",
            data={
                "name": name,
                "passed": passed,
                "exit_code": exit_code,
                "duration_ms": duration_ms,
                "metrics": metrics,
                "run_id": run_id,
                "command": command,
            },
            author=author,
            artifacts=artifacts,
        )
    return ResultRecord(core.event(event.id))


def list_results(
    events: list[Event], *, between: tuple[Event, Event] | None = None, name: str | None = None
) -> list[ResultRecord]:
    """The result events among ``events`` (newest first), optionally anchored within a range.

    ``between`` keeps results whose anchor was recorded from the first event
    to the second, both included (ledger order).
    """
    out = []
    low, high = (0, 0)
    if between is not None:
        low, high = sorted((between[0].seq, between[1].seq))
    seqs: dict[str, int] = {}
    for e in events:
        seqs[e.id] = e.seq
    for e in events:
        if e.action_type != EventType.RESULT:
            continue
        record = ResultRecord(e)
        if name is not None and record.name != name:
            continue
        if between is not None:
            anchored = seqs.get(e.anchor_event_id or "", -1)
            if not low <= anchored <= high:
                continue
        out.append(record)
    return out
