"""The MCP server's start: ``strata mcp`` vs a bare one-tool server of the same library.

Times, side by side and in turn, a stdio client's view of a new server: the
process started, ``initialize`` answered, ``tools/list`` answered (a client
such as Claude Code is connected from here on), and a first ``tools/call``
answered (``status`` for Strata, ``echo`` for the bare server). The bare
server is the ``mcp`` package's ``MCPServer`` with one tool and nothing else:
the floor any Python MCP server built on that library pays to start.

Issue 25's target: ready for the first tool call in ≤ 300 ms. ``strata mcp`` is
timed in both conditions: cold (``STRATA_NO_DAEMON=1``: no server started
ahead, the library imported by the session itself) and with the workspace's
server started ahead running (``strata.integrations.mcp_prestart``: the
session a fork of it), started by a first session before the timed ones.

Run:  .venv/bin/python benchmarks/mcp_ready.py [--runs N] [--work DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
STRATA = str(BIN / "strata")

BARE = """
from mcp.server.mcpserver import MCPServer

server = MCPServer(name="bare")


@server.tool()
def echo(text: str = "") -> str:
    return text


server.run("stdio")
"""


def session(
    cmd: list[str], cwd: Path, tool: str, env: dict[str, str] | None = None
) -> tuple[float, float, float]:
    """Seconds from start to the answers of initialize, tools/list and a tools/call."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def answer(want: int) -> dict[str, object]:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{cmd[0]} closed its output")
            found: dict[str, object] = json.loads(line)
            if found.get("id") == want:
                return found

    client = {"name": "bench", "version": "1"}
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    answer(1)
    initialized = time.perf_counter() - start
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    listed_tools = answer(2)
    listed = time.perf_counter() - start
    assert tool in json.dumps(listed_tools), listed_tools
    call = {"name": tool, "arguments": {}}
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
    result = answer(3)
    called = time.perf_counter() - start
    assert "error" not in result and not result["result"].get("isError"), result  # type: ignore[union-attr]
    proc.stdin.close()
    proc.wait(timeout=30)
    return initialized, listed, called


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--work", type=Path, default=HERE / "work" / "mcp_ready")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    ws = args.work / "workspace"
    ws.mkdir(parents=True)
    for i in range(100):
        (ws / f"file{i}.txt").write_text(f"line {i}\n")
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    subprocess.run([STRATA, "init"], cwd=ws, env=env, check=True, capture_output=True)
    bare = args.work / "bare.py"
    bare.write_text(BARE)
    cold, warm = "strata mcp, cold (none started ahead)", "strata mcp, a server started ahead"
    rows: dict[str, list[tuple[float, float, float]]] = {cold: [], warm: [], "bare MCPServer": []}
    session([STRATA, "mcp"], ws, "status")  # starts the server started ahead (and a watcher)
    sock = ws / ".strata" / "watch" / "mcp.sock"
    deadline = time.monotonic() + 60
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sock.exists(), "no server was started ahead"
    for _ in range(args.runs):  # in turn, so that load falls on all alike
        rows[cold].append(session([STRATA, "mcp"], ws, "status", env))
        rows[warm].append(session([STRATA, "mcp"], ws, "status"))
        rows["bare MCPServer"].append(session([sys.executable, str(bare)], ws, "echo"))
    subprocess.run([STRATA, "watch", "--stop"], cwd=ws, check=False, capture_output=True)
    pid = (ws / ".strata" / "watch" / "mcp.pid").read_text().strip()
    if pid.isdigit():
        os.kill(int(pid), 15)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"### MCP server start, stdio ({now}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}, runs={args.runs})"
    )
    print()
    print("| server | initialize | tools/list | first tools/call |")
    print("|---|---|---|---|")
    medians = {}
    for name, samples in rows.items():
        cols = [statistics.median(s[i] for s in samples) * 1000 for i in range(3)]
        medians[name] = cols
        print(f"| {name} | {cols[0]:.0f} ms | {cols[1]:.0f} ms | {cols[2]:.0f} ms |")
    for name in (cold, warm):
        ratio = medians[name][2] / medians["bare MCPServer"][2]
        met = "yes" if medians[name][2] <= 300 else "NO"
        print()
        print(
            f"{name}: strata/bare, first tool call: {ratio:.2f}x; "
            f"target ≤ 300 ms to the first tool call: {met}"
        )


if __name__ == "__main__":
    main()
