"""Observability (seed 004 §10): ``strata metrics``, and spans and metrics sent over OTLP.

The collector is a plain OTLP/HTTP receiver on 127.0.0.1, run by the test: an
HTTP server that decodes each payload with the OTLP protobuf messages
(``opentelemetry-proto``) and keeps what it received.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from conftest import CliRunner, Person, as_json, ok

#: a scripted model: one step writes e.txt, the next answers "done"
AGENT_SCRIPT = (
    "responses:\n"
    "  - tool_calls: [{name: write_file, arguments: {path: e.txt, content: 'e'}}]\n"
    "  - text: done\n"
)

# -- the receiver ---------------------------------------------------------------------


class Receiver:
    """What the OTLP receiver got: spans (as dicts) and metric values, by name."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, float] = {}
        self.requests = 0
        self.lock = threading.Lock()

    def take_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = _attributes(resource.resource.attributes).get("service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "service": service,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "attributes": _attributes(span.attributes),
                            "error": span.status.code == 2,
                        }
                    )

    def take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = metric.sum.data_points or metric.gauge.data_points
                    for point in points:
                        which = point.WhichOneof("value")
                        self.metrics[metric.name] = getattr(point, which)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        v = kv.value
        which = v.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [getattr(x, x.WhichOneof("value")) for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, which) if which else None
    return out


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with got.lock:
                got.requests += 1
                if self.path == "/v1/traces":
                    got.take_traces(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    got.take_metrics(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def ws(tmp_path: Path, run_cli: CliRunner) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    ok(run_cli("init", cwd=folder))
    return folder


# -- strata metrics ---------------------------------------------------------------------


def test_metrics_reports_what_the_ledger_and_the_commands_measured(
    ws: Path, run_cli: CliRunner
) -> None:
    before = as_json(run_cli("metrics", "--json", cwd=ws))["metrics"]
    assert before["events_written_total"] == 1  # init's snapshot
    assert before["events_since_last_snapshot"] == 0
    assert before["restore_duration_ms"] is None
    assert before["replay_success_rate"] is None
    assert before["diff_render_latency_ms"] is None
    assert before["gc_bytes_freed_total"] == 0

    (ws / "a.txt").write_text("two\n")
    ok(run_cli("snapshot", "-m", "two", cwd=ws))
    ok(run_cli("diff", "HEAD~1", cwd=ws))
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    ok(run_cli("bookmark", "add", "good", "HEAD", cwd=ws))
    ok(run_cli("gc", "--grace", "0", cwd=ws))
    out = as_json(run_cli("metrics", "--json", cwd=ws))
    now, counts = out["metrics"], out["counts"]
    assert now["events_written_total"] == 3  # two snapshots and the rewind
    assert now["events_since_last_snapshot"] == 1  # the rewind carries no snapshot
    assert now["restore_duration_ms"] > 0 and counts["restores"] == 1
    assert now["diff_render_latency_ms"] > 0 and counts["diffs"] == 1
    assert counts["gc_runs"] == 1
    assert out["telemetry"] == {"otlp_endpoint": None}

    text = ok(run_cli("metrics", cwd=ws))
    assert "events_written_total         3" in text
    assert "replay_success_rate          -  (0 of 0 replays)" in text
    assert "telemetry export: off" in text


def test_the_event_count_survives_a_ledger_that_changed_under_it(
    ws: Path, run_cli: CliRunner
) -> None:
    for n in range(3):
        (ws / "a.txt").write_text(f"{n}\n")
        ok(run_cli("snapshot", cwd=ws))
    assert as_json(run_cli("metrics", "--json", cwd=ws))["metrics"]["events_written_total"] == 4
    kept = ws / ".strata" / "metrics.json"
    body = json.loads(kept.read_text())
    # counted up to a record that is not the ledger's (a ledger restored from another copy)
    body.update(events_counted=40, events_counted_hash="0" * 64)
    kept.write_text(json.dumps(body))
    (ws / "a.txt").write_text("last\n")
    ok(run_cli("snapshot", cwd=ws))
    assert as_json(run_cli("metrics", "--json", cwd=ws))["metrics"]["events_written_total"] == 5


def test_a_damaged_metrics_file_reads_as_empty_and_is_replaced(
    ws: Path, run_cli: CliRunner
) -> None:
    (ws / ".strata" / "metrics.json").write_text("{not json")
    assert as_json(run_cli("metrics", "--json", cwd=ws))["metrics"]["restore_duration_ms"] is None
    ok(run_cli("diff", "HEAD", cwd=ws))
    assert as_json(run_cli("metrics", "--json", cwd=ws))["counts"]["diffs"] == 1
    ok(run_cli("check", cwd=ws))


def test_a_user_who_cannot_write_the_measurements_still_diffs(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = home_of / "ws"
    ws.mkdir()
    os.chown(ws, person.uid, person.gid)
    (ws / "a.txt").write_text("one\n")
    os.chown(ws / "a.txt", person.uid, person.gid)
    ok(cli_as("init", cwd=ws))
    lock = ws / ".strata" / "metrics.lock"  # made by root, read-only: others cannot take it
    lock.touch(mode=0o444)
    lock.chmod(0o444)
    code, _, err = cli_as("diff", "HEAD", cwd=ws)
    assert code == 0 and err == "", err
    counts = as_json(cli_as("metrics", "--json", cwd=ws))["counts"]
    assert counts["diffs"] == (1 if person.is_root else 0)


def test_metrics_outside_a_workspace_is_one_line(tmp_path: Path, run_cli: CliRunner) -> None:
    code, out, err = run_cli("metrics", cwd=tmp_path)
    assert code == 1 and out == ""
    assert err.startswith("error: not a strata workspace") and "Traceback" not in err


# -- OTLP export ----------------------------------------------------------------------


def test_command_spans_carry_the_ids_a_user_looks_for(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": url}
    (ws / "a.txt").write_text("two\n")
    snap = as_json(run_cli("snapshot", "-m", "two", "--json", cwd=ws, env=env))
    ok(run_cli("bookmark", "add", "good", "HEAD", cwd=ws, env=env))
    ops = as_json(run_cli("op", "log", "--json", cwd=ws))

    [snapshot] = got.named("strata snapshot")
    a = snapshot["attributes"]
    assert snapshot["service"] == "strata"
    assert a["strata.command"] == "snapshot"
    assert a["strata.event_id"] == snap["event_id"]
    assert a["strata.event_ids"] == [snap["event_id"]]
    assert a["strata.branch"] == "main"
    assert a["strata.head_event_id"] == snap["event_id"]
    assert a["strata.operation_id"] == ops[1]["id"]
    assert a["strata.exit_code"] == 0 and not snapshot["error"]

    [bookmark] = got.named("strata bookmark")
    assert bookmark["attributes"]["strata.bookmarks"] == ["good"]
    assert bookmark["attributes"]["strata.operation_id"] == ops[0]["id"]
    assert "strata.event_ids" not in bookmark["attributes"]  # it recorded no event

    # the metrics, exported at the end of each command
    assert got.metrics["events_written_total"] == 2
    assert got.metrics["events_since_last_snapshot"] == 0
    assert got.metrics["gc_bytes_freed_total"] == 0


def test_a_failed_command_is_an_error_span(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    code, _, err = run_cli("rewind", "nosuch", cwd=ws, env={"OTEL_EXPORTER_OTLP_ENDPOINT": url})
    assert code == 1 and err.startswith("error:")
    [rewind] = got.named("strata rewind")
    assert rewind["error"] and rewind["attributes"]["strata.exit_code"] == 1


@pytest.mark.parametrize("value", ['"127.0.0.1:4318"', "4318"])
def test_an_endpoint_that_is_no_url_is_one_warning_and_export_stays_off(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver], value: str
) -> None:
    _, got = receiver
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(f"\n[telemetry]\notlp_endpoint = {value}\n")
    code, out, err = run_cli("history", "--json", cwd=ws)
    assert code == 0 and len(json.loads(out)) == 1
    [line] = err.strip().splitlines()
    assert "not an http:// or https:// URL" in line and "stays off" in line
    assert got.requests == 0


def test_model_and_tool_calls_are_child_spans_of_the_command(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    (ws / "agent.yaml").write_text(AGENT_SCRIPT)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            '\n[providers.demo]\nadapter = "scripted"\nscript = "agent.yaml"\n'
            f'\n[telemetry]\notlp_endpoint = "{url}"\n'  # switched on by config alone
        )
    out = as_json(run_cli("agent", "--model", "demo", "--json", "write e.txt", cwd=ws))

    [agent] = got.named("strata agent")
    models = got.named("strata.model_call")
    [tool] = got.named("strata.tool_call")
    assert len(models) == 2
    for child in (*models, tool):
        assert child["trace_id"] == agent["trace_id"]
    assert tool["attributes"]["strata.tool"] == "write_file"
    first = models[0]["attributes"]
    assert first["gen_ai.system"] == "scripted" and first["strata.provider"] == "demo"
    assert first["strata.tool_calls"] == ["write_file"]
    assert models[1]["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    step_events = [s["event_id"] for s in out["steps"] if s["event_id"]]
    assert set(step_events) <= set(agent["attributes"]["strata.event_ids"])
    assert agent["attributes"]["strata.branch"] == "main"  # Published's HEAD
    assert any(b.startswith("draft/") for b in agent["attributes"]["strata.branches"])


def test_replay_success_rate_counts_reproduced_replays(ws: Path, run_cli: CliRunner) -> None:
    (ws / "agent.yaml").write_text(AGENT_SCRIPT)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.demo]\nadapter = "scripted"\nscript = "agent.yaml"\n')
    agent = as_json(run_cli("agent", "--model", "demo", "--json", "write e.txt", cwd=ws))
    base = as_json(run_cli("draft", "status", "--json", cwd=ws))["base_event_id"]
    ok(run_cli("replay", f"{base}..{agent['steps'][-1]['event_id']}", cwd=ws))
    code, _, _ = run_cli("replay", "nosuch..HEAD", cwd=ws)  # an unknown ref: not a replay
    assert code != 0
    out = as_json(run_cli("metrics", "--json", cwd=ws))
    assert out["metrics"]["replay_success_rate"] == 1
    assert (out["counts"]["replays"], out["counts"]["replays_ok"]) == (1, 1)


def test_off_by_default_and_opentelemetry_never_imported(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver]
) -> None:
    _, got = receiver
    ok(run_cli("history", cwd=ws))
    ok(run_cli("diff", "HEAD", cwd=ws))
    assert got.requests == 0
    probe = (
        "import sys\n"
        "from strata.cli import main\n"
        "for argv in (['history'], ['diff', 'HEAD'], ['snapshot', '-m', 'x']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = run_cli.env()
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ws, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_without_the_extra_one_line_names_it_and_the_command_works(
    ws: Path, run_cli: CliRunner, receiver: tuple[str, Receiver]
) -> None:
    url, got = receiver
    # an interpreter where opentelemetry cannot be imported, as where the extra is missing
    probe = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from strata.cli import main\n"
        "main(['history', '--json'])\n"
    )
    env = run_cli.env({"OTEL_EXPORTER_OTLP_ENDPOINT": url})
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ws, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "'otel' extra" in lines[0] and "strata-workspace[otel]" in lines[0]
    assert got.requests == 0
