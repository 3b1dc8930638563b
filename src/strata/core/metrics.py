"""The metrics of seed 004 §10, computed locally: from the ledger and ``metrics.json``.

Two metrics are read from the ledger itself (``events_written_total``,
``events_since_last_snapshot``); the others are what commands measured and
left in the repository's small ``metrics.json``: the last restore's and diff's
duration, how many replays reproduced their range, how many bytes ``gc``
freed. The file is a cache of measurements, never part of the history:
deleting it loses those numbers and nothing else; a damaged one reads as
empty (and is replaced by the next update). Updates take ``metrics.lock``
(``flock``) around read-modify-write, and write atomically.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.atomic import atomic_write
from strata.ledger.driver import EventFilter, LedgerDriver

#: the file's name in the repository folder, and its lock
FILE = "metrics.json"
LOCK = "metrics.lock"
VERSION = 1

#: every metric: its OpenTelemetry instrument (``counter``: only grows; ``gauge``: a value)
KINDS: dict[str, str] = {
    "events_written_total": "counter",
    "events_since_last_snapshot": "gauge",
    "restore_duration_ms": "gauge",
    "replay_success_rate": "gauge",
    "diff_render_latency_ms": "gauge",
    "gc_bytes_freed_total": "counter",
}

#: the counts kept in the file (all start at zero)
COUNTS = (
    "restores",
    "restore_duration_ms_total",
    "diffs",
    "diff_render_latency_ms_total",
    "replays",
    "replays_ok",
    "gc_runs",
    "gc_bytes_freed_total",
)


@dataclass(frozen=True)
class Metrics:
    """The current values (None: nothing measured yet) and the counts behind them."""

    values: dict[str, float | None]
    counts: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        """The ``metrics`` and ``counts`` of ``strata metrics --json``."""
        return {"metrics": dict(self.values), "counts": dict(self.counts)}


def read_file(repo_folder: Path) -> dict[str, Any]:
    """The measurements of ``metrics.json`` (empty when there is none or it is damaged)."""
    try:
        raw = json.loads((repo_folder / FILE).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        return {}
    return raw


def record(
    repo_folder: Path,
    *,
    restore_ms: float | None = None,
    diff_ms: float | None = None,
    replay_ok: bool | None = None,
    gc_bytes_freed: int | None = None,
) -> None:
    """Add one command's measurements to ``metrics.json`` (under its lock, atomically).

    A repository whose folder cannot be written (a read-only reader) keeps no
    measurements: :class:`OSError` is left to the caller.
    """
    fd = os.open(repo_folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = read_file(repo_folder)
        counts: dict[str, float] = {k: _number(raw.get(k)) for k in COUNTS}
        last: dict[str, float | None] = {
            "restore_duration_ms": _optional(raw.get("restore_duration_ms")),
            "diff_render_latency_ms": _optional(raw.get("diff_render_latency_ms")),
        }
        if restore_ms is not None:
            counts["restores"] += 1
            counts["restore_duration_ms_total"] += restore_ms
            last["restore_duration_ms"] = round(restore_ms, 3)
        if diff_ms is not None:
            counts["diffs"] += 1
            counts["diff_render_latency_ms_total"] += diff_ms
            last["diff_render_latency_ms"] = round(diff_ms, 3)
        if replay_ok is not None:
            counts["replays"] += 1
            counts["replays_ok"] += 1 if replay_ok else 0
        if gc_bytes_freed is not None:
            counts["gc_runs"] += 1
            counts["gc_bytes_freed_total"] += gc_bytes_freed
        body = {**raw, "version": VERSION, **last, **{k: round(v, 3) for k, v in counts.items()}}
        atomic_write(repo_folder / FILE, json.dumps(body, indent=1).encode() + b"\n")
    finally:
        os.close(fd)


def _remember(repo_folder: Path, values: dict[str, Any]) -> None:
    """Set keys of ``metrics.json`` (best effort: a folder this user cannot write keeps none)."""
    try:
        fd = os.open(repo_folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        body = {**read_file(repo_folder), "version": VERSION, **values}
        atomic_write(repo_folder / FILE, json.dumps(body, indent=1).encode() + b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def compute(repo_folder: Path, driver: LedgerDriver) -> Metrics:
    """The current value of every metric of :data:`KINDS`."""
    raw = read_file(repo_folder)
    counts = {k: _number(raw.get(k)) for k in COUNTS}
    replays = counts["replays"]
    values: dict[str, float | None] = {
        "events_written_total": _events_total(repo_folder, driver, raw),
        "events_since_last_snapshot": _since_last_snapshot(driver),
        "restore_duration_ms": _optional(raw.get("restore_duration_ms")),
        "replay_success_rate": round(counts["replays_ok"] / replays, 4) if replays else None,
        "diff_render_latency_ms": _optional(raw.get("diff_render_latency_ms")),
        "gc_bytes_freed_total": counts["gc_bytes_freed_total"],
    }
    return Metrics(
        values={k: _int_if_whole(v) for k, v in values.items()},
        counts={k: _int_if_whole(v) or 0 for k, v in counts.items()},
    )


def _events_total(repo_folder: Path, driver: LedgerDriver, raw: dict[str, Any]) -> int:
    """How many events the ledger holds (its operation and ref records are not events).

    Counted once, then from where the last count stopped: ``metrics.json``
    keeps the count with the seq and hash of the record it reached (the ledger
    only grows; a count whose record is gone or changed is redone).
    """
    last = driver.last()
    if last is None:
        return 0
    seq, total = raw.get("events_counted_seq"), raw.get("events_counted")
    start, counted = 1, 0
    if isinstance(seq, int) and isinstance(total, int) and 0 < seq <= last.seq:
        try:
            same = driver.get(seq).hash == raw.get("events_counted_hash")
        except KeyError:
            same = False
        if same:
            start, counted = seq + 1, total
    if start <= last.seq:
        new = driver.scan(start=start, stop=last.seq + 1)
        counted += sum(1 for rec in new if rec.kind == "event")
        _remember(
            repo_folder,
            {
                "events_counted_seq": last.seq,
                "events_counted_hash": last.hash,
                "events_counted": counted,
            },
        )
    return counted


def _since_last_snapshot(driver: LedgerDriver) -> int:
    """Events recorded after the newest one that carries a snapshot (0 when that is the last)."""
    since = 0
    for rec in driver.find_events(EventFilter(), newest_first=True):
        if driver.snapshot_of(str(rec.body.get("id"))):
            return since
        since += 1
    return since


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _optional(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None  # type: ignore[arg-type]


def _int_if_whole(value: float | None) -> float | None:
    return int(value) if value is not None and float(value).is_integer() else value
