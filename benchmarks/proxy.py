"""The recording model proxy: time to first token and per-call overhead, vs calling direct.

A streaming endpoint on 127.0.0.1 answers ``POST /v1/messages`` with
Anthropic-style server-sent events, chunked: the first event at once, then
``--events`` more, one every ``--gap-ms`` (a model writing tokens). Each
sample makes the same call, alternating, directly and through
:class:`strata.integrations.model_proxy.ModelProxy` recording into a real
on-disk object store (the traces ``strata run --record-model`` keeps), each
client with a kept-alive connection, as agents' HTTP clients do, and times:

* **time to first token**: from sending the request to reading the first
  event (``message_start``) of the body;
* **per call**: from sending the request to the end of the stream; the
  proxy's overhead is the difference of the medians (the endpoint's own
  pacing is in both).

Also a replayed call (the proxy serving the recorded answer, no upstream).

Target: time to first token through the proxy within 5 ms of direct.
With ``--events 0`` the answer is one event: the per-call overhead alone.

Run:  .venv/bin/python benchmarks/proxy.py [--runs N] [--events N] [--gap-ms MS]
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import http.server
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from strata.integrations.model_proxy import ModelProxy, replaying  # noqa: E402
from strata.providers.trace import Recorder, Trace  # noqa: E402
from strata.store.objects import DiskObjectStore  # noqa: E402

BODY = json.dumps(
    {
        "model": "claude-bench",
        "stream": True,
        "max_tokens": 1024,
        "system": "You are a coding agent. " * 200,
        "messages": [{"role": "user", "content": "Fix the failing test in src/app.py"}],
    }
).encode()


def endpoint(events: int, gap_s: float) -> http.server.ThreadingHTTPServer:
    """The streaming endpoint (started; shut it down when done)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:  # as a real server: no Nagle delay on small writes
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(events + 1):
                if i:
                    time.sleep(gap_s)
                kind = "message_start" if i == 0 else "content_block_delta"
                data = json.dumps({"type": kind, "delta": {"text": f"token {i} "}})
                chunk = f"event: {kind}\ndata: {data}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def connect(url: str) -> http.client.HTTPConnection:
    """A kept-alive client connection to ``url``, without Nagle's delay (as agents' clients)."""
    conn = http.client.HTTPConnection(url.removeprefix("http://"))
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def call(conn: http.client.HTTPConnection) -> tuple[float, float]:
    """One streamed call: (seconds to the first event, seconds to the end)."""
    start = time.perf_counter()
    conn.request(
        "POST",
        "/v1/messages",
        body=BODY,
        headers={"Content-Type": "application/json", "x-api-key": "sk-ant-bench-0123456789"},
    )
    response = conn.getresponse()
    first = response.read1(65536)
    ttft = time.perf_counter() - start
    assert b"message_start" in first, first[:200]
    response.read()
    return ttft, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    args = parser.parse_args()
    server = endpoint(args.events, args.gap_ms / 1000)
    upstream = f"http://127.0.0.1:{server.server_address[1]}"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-proxy-"))
    store = DiskObjectStore(work / "objects")
    recorder = Recorder(put=store.put, agent_id="proxy")
    samples: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": [], "replay": []}
    with ModelProxy(recorder=recorder, upstreams={"anthropic": upstream}) as proxy:
        direct, through = connect(upstream), connect(proxy.url)
        for _ in range(3):  # warm up: connections, imports
            call(direct), call(through)
        for i in range(args.runs):  # alternating which goes first
            pair = [("direct", direct), ("proxy", through)]
            for kind, conn in pair if i % 2 else pair[::-1]:
                samples[kind].append(call(conn))
        direct.close()
        through.close()
    ids = list(proxy.trace_ids)  # every trace stored once the proxy stopped
    # what recording one call costs, off the call's path (the proxy's recording thread)
    one = Trace.decode(store.get(ids[0]), name=ids[0])  # type: ignore[arg-type]
    timing = Recorder(put=store.put, agent_id="proxy")
    started = time.perf_counter()
    for _ in range(args.runs):
        timing.llm_call(
            adapter=one.adapter,
            provider=one.provider,
            request=one.request,
            wire_request=one.wire_request,
            chunks=[],
            response=one.response,
        )
    store_ms = (time.perf_counter() - started) * 1000 / args.runs
    traces = [Trace.decode(store.get(oid), name=oid) for oid in ids[:1]]  # type: ignore[arg-type]
    with replaying(traces, work) as replay:
        conn = connect(replay.url)
        for _ in range(args.runs):
            samples["replay"].append(call(conn))
        conn.close()
    server.shutdown()
    server.server_close()

    def med(kind: str, i: int) -> float:
        return statistics.median(s[i] for s in samples[kind]) * 1000

    def p90(kind: str, i: int) -> float:
        return statistics.quantiles([s[i] * 1000 for s in samples[kind]], n=10)[-1]

    ttft_extra = med("proxy", 0) - med("direct", 0)
    call_extra = med("proxy", 1) - med("direct", 1)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    print(
        f"## {stamp}, `--runs {args.runs} --events {args.events} --gap-ms {args.gap_ms:g}`, "
        f"load {load:.2f}: **{'met' if ttft_extra <= 5 else 'not met'}, "
        f"+{ttft_extra:.2f} ms to the first token**\n"
    )
    print(
        f"Machine: {os.cpu_count()} vCPUs, {platform.platform()}, "
        f"Python {platform.python_version()}.\n"
    )
    print("| call | first token (median) | p90 | whole stream (median) | p90 |")
    print("|---|---|---|---|---|")
    for kind in ("direct", "proxy", "replay"):
        print(
            f"| {kind} | {med(kind, 0):.2f} ms | {p90(kind, 0):.2f} ms | "
            f"{med(kind, 1):.2f} ms | {p90(kind, 1):.2f} ms |"
        )
    print(
        f"\n* through the proxy: first token +{ttft_extra:.2f} ms (target ≤ 5 ms), "
        f"per call +{call_extra:.2f} ms; recording a trace (redacted, encoded, stored; "
        f"on the proxy's recording thread, off the call's path) {store_ms:.2f} ms; "
        f"{len(ids)} traces written; request body {len(BODY)} bytes, "
        f"{args.events + 1} events"
    )


if __name__ == "__main__":
    main()
