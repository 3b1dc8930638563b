"""The Workshop's RPI loop and terminal UI: what they cost besides the model.

With the scripted provider (no model time), median wall time over
``--repeat`` runs of:

1. one RPI turn of the engine alone (``run_rpi`` on a folder, traces kept in
   memory): research with 2 tool calls, a plan of ``--items`` items, one
   tool call per item, the summary; reported per model call;
2. the same turn on a repository's Draft (``run_rpi_agent``: every step in
   ``Draft.step`` and recorded as a Draft revision with its traces) in a
   workspace of ``--files`` files; reported per model call;
3. starting the terminal UI's libraries in a fresh interpreter
   (``import strata.workshop.tui``, prompt_toolkit and rich, and a ``Chat``
   built), what ``strata chat`` adds to its start.

Run:  .venv/bin/python benchmarks/workshop_rpi.py [--items 10] [--files 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("STRATA_NO_DAEMON", "1")


def script(items: int) -> list[dict[str, Any]]:
    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": arguments}]}

    out = [call("list_files"), call("read_file", path="f0/0.txt"), {"text": "notes"}]
    out.append({"text": "\n".join(f"- [ ] step {n}" for n in range(1, items + 1))})
    for n in range(1, items + 1):
        out += [call("write_file", path=f"out/{n}.txt", content=f"{n}\n"), {"text": "DONE"}]
    out.append({"text": "Summary."})
    return out


def make_files(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"f{i % 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.txt").write_bytes(os.urandom(512).hex().encode())


def engine_turn(tmp: Path, items: int) -> tuple[float, int]:
    from strata.agent.tools import TOOLS
    from strata.providers.scripted import Scripted
    from strata.providers.trace import Recorder
    from strata.workshop.rpi import run_rpi

    folder = tmp / "folder"
    make_files(folder, 10)
    store: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        store[str(len(store))] = data
        return str(len(store) - 1)

    steps = script(items)
    started = time.perf_counter()
    run_rpi(
        folder,
        Scripted(steps),
        TOOLS,
        "do it",
        state=tmp / "_rpi",
        recorder=Recorder(put=put),
    )
    return time.perf_counter() - started, len(steps)


def draft_turn(tmp: Path, items: int, files: int) -> tuple[float, int]:
    from strata import Repository
    from strata.providers.scripted import Scripted
    from strata.workshop.rpi import rpi_folder, run_rpi_agent

    ws = tmp / "ws"
    make_files(ws, files)
    steps = script(items)
    with Repository.init(ws) as repo:
        repo.snapshot(message="base")
        started = time.perf_counter()
        run_rpi_agent(
            repo, Scripted(steps), "do it", state=rpi_folder(repo.layout.repo, "c1"), key="m1"
        )
        return time.perf_counter() - started, len(steps)


def tui_start() -> float:
    code = (
        "import time; t = time.perf_counter()\n"
        "from prompt_toolkit.data_structures import Size\n"
        "from prompt_toolkit.input import create_pipe_input\n"
        "from prompt_toolkit.output import DummyOutput\n"
        "from strata.workshop.tui import Chat\n"
        "class W:\n"
        "    model = 'm'\n"
        "    def messages(self): return []\n"
        "with create_pipe_input() as pipe:\n"
        "    Chat(W(), input=pipe, output=DummyOutput())\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    engine, draft, start = [], [], []
    calls = 0
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="wsrpi-bench-") as tmp:
            seconds, calls = engine_turn(Path(tmp), args.items)
            engine.append(seconds)
        with tempfile.TemporaryDirectory(prefix="wsrpi-bench-") as tmp:
            draft.append(draft_turn(Path(tmp), args.items, args.files)[0])
        start.append(tui_start())
    e, d, s = (statistics.median(x) for x in (engine, draft, start))
    print(f"# {datetime.date.today()} · {platform.machine()} · {os.cpu_count()} cores")
    print(f"model calls per turn: {calls} ({args.items} plan items)")
    print(f"engine alone:      {e * 1000:8.1f} ms per turn, {e / calls * 1000:6.2f} ms per call")
    print(
        f"on the Draft ({args.files} files): {d * 1000:8.1f} ms per turn, "
        f"{d / calls * 1000:6.2f} ms per call"
    )
    print(f"terminal UI libraries + Chat: {s * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
