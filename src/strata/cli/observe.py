"""What a command leaves for observers: local measurements, and spans when telemetry is on.

:func:`begin` is called by the root group once the command is known; it
returns None (and costs a look at two environment variables and, when the
workspace's ``config.toml`` has a ``[telemetry]`` table, at that file) unless
the command is one whose duration or outcome ``strata metrics`` reports, or
telemetry export is switched on:

- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the standard variable), or ``otlp_endpoint``
  in ``[telemetry]`` of ``config.toml``; ``OTEL_SDK_DISABLED=true`` turns it off.

With telemetry on, the command runs inside a span ``strata <command>`` whose
attributes name the ids it touched: ``strata.event_ids`` and
``strata.operation_ids`` (what it recorded), ``strata.branch`` and
``strata.head_event_id`` (where HEAD is after it), ``strata.bookmarks`` and
``strata.branches`` (the refs its operations moved); model and tool calls are
its child spans (:mod:`strata.telemetry`), and the metrics of
:mod:`strata.core.metrics` are exported when it ends.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: the commands whose duration or outcome feed ``strata metrics``
METERED = frozenset({"rewind", "restore", "diff", "replay", "gc"})

#: the standard variable that switches export on (the collector's base URL)
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"


def endpoint_from(environ: Mapping[str, str], cwd: str) -> str | None:
    """The OTLP endpoint telemetry goes to (None: off), from the environment or config.toml."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    value = environ.get(ENV_ENDPOINT, "").strip()
    if value:
        return value
    from strata._locate import find_repo

    found = find_repo(cwd)
    if found is None:
        return None
    try:
        text = Path(found[1], "config.toml").read_bytes()
    except OSError:
        return None
    if b"[telemetry]" not in text:
        return None
    return configured_endpoint(text)


def configured_endpoint(text: bytes) -> str | None:
    """``[telemetry] otlp_endpoint`` of a config.toml (a bad one: a UsageError-free None)."""
    import tomllib

    try:
        table = tomllib.loads(text.decode("utf-8")).get("telemetry")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # the command reading config.toml reports it
    value = table.get("otlp_endpoint") if isinstance(table, dict) else None
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return value.strip() if isinstance(value, str) else repr(value)  # (refused by begin)


class Observer:
    """One command being measured (and traced, with an endpoint)."""

    def __init__(self, command: str, endpoint: str | None) -> None:
        self.command = command
        self.started = time.perf_counter()
        self.endpoint = endpoint
        self._span: Any = None
        self._seq_before = 0
        self._values: dict[str, float | None] = {}
        if endpoint is not None:
            self._start_tracing(endpoint)

    def _start_tracing(self, endpoint: str) -> None:
        from strata import telemetry
        from strata._version import __version__
        from strata.cli.common import warn
        from strata.core.metrics import KINDS
        from strata.errors import ExtraNotInstalled

        try:
            telemetry.start(
                endpoint,
                resource={"service.name": "strata", "service.version": __version__},
                metric_kinds=KINDS,
                metric_values=self._metric_values,
            )
        except ExtraNotInstalled as exc:
            warn(exc.message)
            self.endpoint = None
            return
        self._seq_before = self._with_repo(_last_seq) or 0
        self._span = telemetry.open_span(f"strata {self.command}", {"strata.command": self.command})

    def _metric_values(self) -> dict[str, float | None]:
        return self._values

    def _with_repo(self, use: Any) -> Any:
        """``use(repo)`` on the workspace's repository; None where there is none."""
        import sqlite3

        from strata.cli.common import open_repo
        from strata.errors import StrataError

        try:
            with open_repo(start_watcher=False) as repo:
                return use(repo)
        except (StrataError, OSError, sqlite3.Error):  # the command itself reports these
            return None

    def finish(self, exit_code: int) -> None:
        """Record what the command measured; end and export its span."""
        from strata import telemetry

        elapsed_ms = (time.perf_counter() - self.started) * 1000
        notes = telemetry.take_notes()
        if self.command in METERED:
            self._record(exit_code, elapsed_ms, notes)
        if self._span is None:
            return
        try:
            found = self._with_repo(self._ids_and_metrics) or {}
            attributes = {k: v for k, v in found.items() if v}
            attributes["strata.exit_code"] = exit_code
            error = f"exit code {exit_code}" if exit_code != 0 else None
            telemetry.close_span(self._span, attributes, error=error)
        finally:
            telemetry.stop()

    def _record(self, exit_code: int, elapsed_ms: float, notes: dict[str, float]) -> None:
        from strata._locate import find_repo
        from strata.core.metrics import record

        found = find_repo(os.getcwd())
        if found is None:
            return
        kwargs: dict[str, Any] = {}
        if self.command in ("rewind", "restore") and exit_code == 0:
            kwargs["restore_ms"] = elapsed_ms
        elif self.command == "diff" and exit_code == 0:
            kwargs["diff_ms"] = elapsed_ms
        elif self.command == "replay" and notes:  # a replay that ran (not a bad range)
            kwargs["replay_ok"] = "replay_failed" not in notes
        elif self.command == "gc" and "gc_bytes_freed" in notes:
            kwargs["gc_bytes_freed"] = int(notes["gc_bytes_freed"])
        if not kwargs:
            return
        with contextlib.suppress(OSError):  # a repository this user cannot write: none kept
            record(Path(found[1]), **kwargs)

    def _ids_and_metrics(self, repo: Any) -> dict[str, Any]:
        """The ids this command recorded and moved; the metrics read for export, too."""
        from strata.core.metrics import compute

        driver = repo.ledger.driver
        events: list[str] = []
        operations: list[str] = []
        bookmarks: set[str] = set()
        branches: set[str] = set()
        for rec in driver.scan(start=self._seq_before + 1):
            if rec.kind == "event":
                events.append(str(rec.body.get("id")))
            elif rec.kind == "operation":
                operations.append(str(rec.body.get("id")))
                before = rec.body.get("view_before") or {}
                after = rec.body.get("view_after") or {}
                bookmarks |= _moved(before.get("bookmarks"), after.get("bookmarks"))
                branches |= _moved(before.get("branches"), after.get("branches"))
        view = repo.ledger.view()
        self._values.update(compute(repo.layout.repo, driver).values)
        return {
            "strata.event_ids": events,
            "strata.operation_ids": operations,
            "strata.operation_id": operations[-1] if operations else None,
            "strata.event_id": events[-1] if events else None,
            "strata.bookmarks": sorted(bookmarks),
            "strata.branches": sorted(branches),
            "strata.branch": view.head_branch,
            "strata.head_event_id": view.head_event,
        }


def _last_seq(repo: Any) -> int:
    last = repo.ledger.driver.last()
    return int(last.seq) if last is not None else 0


def _moved(before: object, after: object) -> set[str]:
    """The names whose entry differs between two ``{name: ...}`` tables of a view."""
    a = before if isinstance(before, dict) else {}
    b = after if isinstance(after, dict) else {}
    return {str(k) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def begin(command: str | None) -> Observer | None:
    """An observer of ``command`` when it is measured or traced; None otherwise."""
    if command is None:
        return None
    endpoint = endpoint_from(os.environ, os.getcwd())
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        from strata.cli.common import warn

        warn(
            f"the OTLP endpoint {endpoint} is not an http:// or https:// URL "
            f"({ENV_ENDPOINT} or [telemetry] otlp_endpoint); telemetry export stays off"
        )
        endpoint = None
    if endpoint is None and command not in METERED:
        return None
    return Observer(command, endpoint)


def exit_code_of(exc: BaseException | None) -> int:
    """The exit code a command ends with, from what ended it."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    exit_code = getattr(exc, "exit_code", None)
    if isinstance(exit_code, int):
        return exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1
