"""``strata metrics``: the metrics of seed 004 §10, computed here, with no collector."""

from __future__ import annotations

import os

import click

from strata.cli.common import emit_json, json_option, open_repo

#: what each count behind a metric is called in the text output
_BEHIND = {
    "restore_duration_ms": ("restores", "restore", "restores"),
    "diff_render_latency_ms": ("diffs", "diff", "diffs"),
    "gc_bytes_freed_total": ("gc_runs", "gc run", "gc runs"),
}


@click.command("metrics")
@json_option
def metrics(as_json: bool) -> None:
    """Show the workspace's metrics (seed 004 §10), computed locally.

    events_written_total and events_since_last_snapshot (events recorded
    after the newest one that carries a snapshot) are read from the ledger;
    restore_duration_ms (the last rewind or restore), diff_render_latency_ms
    (the last diff), replay_success_rate and gc_bytes_freed_total are what
    those commands measured, kept in the repository's metrics.json. A value
    nothing measured yet is '-' (null in JSON). With OTEL_EXPORTER_OTLP_ENDPOINT
    or [telemetry] otlp_endpoint in config.toml set, every command also
    exports them, with its spans, over OTLP (the 'otel' extra; docs/telemetry.md).

    \b
    Example:
      strata metrics
      strata metrics --json | jq .metrics.replay_success_rate
    """
    from strata.cli.observe import endpoint_from

    with open_repo(start_watcher=False) as repo:
        found = repo.metrics()
        folder = str(repo.layout.repo)
    endpoint = endpoint_from(os.environ, os.getcwd())
    if as_json:
        emit_json(
            {
                "schema": 1,
                "repository": folder,
                **found.to_json(),
                "telemetry": {"otlp_endpoint": endpoint},
            }
        )
        return
    counts = found.counts
    for name, value in found.values.items():
        shown = "-" if value is None else str(value)
        extra = ""
        if name in _BEHIND:
            key, one, many = _BEHIND[name]
            n = int(counts[key])
            extra = f"  ({n} {one if n == 1 else many})"
        elif name == "replay_success_rate":
            extra = f"  ({int(counts['replays_ok'])} of {int(counts['replays'])} replays)"
        click.echo(f"{name:<28} {shown}{extra}")
    click.echo(f"telemetry export: {endpoint or 'off'}")


COMMANDS = [metrics]
