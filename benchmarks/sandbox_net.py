"""The network allow-list's cost: starting a sandboxed command, and data through the proxy.

An HTTP server on the host's 127.0.0.1 serves ``--mib`` MiB. Median wall time
over ``--repeat`` runs of:

1. ``strata run --draft -- true`` with no network (``--net deny``), with the
   host's network (``--net allow``) and with an allow-list (the proxy started,
   the relay in the sandbox): what the allow-list adds to a run's start;
2. the download of ``--mib`` MiB by the system's curl in the sandbox, directly
   (``--net allow``) and through the allow-list's proxy (``--net allow=localhost:PORT``).

Run:  .venv/bin/python benchmarks/sandbox_net.py [--mib 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

STRATA = [sys.executable, "-m", "strata"]


def _server(size: int) -> tuple[http.server.ThreadingHTTPServer, int]:
    block = b"x" * (1 << 20)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            left = size
            while left:
                chunk = block[: min(left, len(block))]
                self.wfile.write(chunk)
                left -= len(chunk)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _median(argv: list[str], cwd: Path, env: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Measure and print a Markdown table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    server, port = _server(args.mib << 20)
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    with tempfile.TemporaryDirectory(prefix="strata-bench-net-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        subprocess.run([*STRATA, "init"], cwd=ws, env=env, check=True, capture_output=True)
        subprocess.run(
            [*STRATA, "draft", "start"], cwd=ws, env=env, check=True, capture_output=True
        )
        run = [*STRATA, "run", "--draft"]
        rows = []
        for net in ("deny", "allow", f"allow=localhost:{port}"):
            seconds = _median([*run, "--net", net, "--", "true"], ws, env, args.repeat)
            rows.append((f"`strata run --draft --net {net} -- true`", seconds))
        url = f"http://localhost:{port}/"
        curl = ["curl", "-sS", "-o", "/dev/null", url]
        direct = _median([*run, "--net", "allow", "--", *curl], ws, env, args.repeat)
        proxied = _median(
            [*run, "--net", f"allow=localhost:{port}", "--", *curl], ws, env, args.repeat
        )
    server.shutdown()
    print(f"{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores\n")
    print("| what | median |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1000:.0f} ms |")
    for name, seconds in (("direct (--net allow)", direct), ("through the proxy", proxied)):
        print(
            f"| {args.mib} MiB by curl, {name} | {seconds * 1000:.0f} ms "
            f"({args.mib / seconds:.0f} MiB/s, run start included) |"
        )


if __name__ == "__main__":
    main()
