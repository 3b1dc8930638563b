"""Where the LangGraph checkpointer keeps graph state: in the event (base64) or in the store.

A chat-like graph runs ``--steps`` steps on one thread: each step appends one
message of about 300 bytes to a ``messages`` list (the state grows every
step), keeps a 6 KB ``document`` unchanged, bumps a counter and rewrites one
small file of the workspace. Each run uses a fresh workspace with
``StrataSaver`` and ``INLINE_LIMIT`` set to: 0 (every value an object of the
store), 512, 2048 (the default: small values in the event, the rest objects)
and unlimited (every value base64 in the event). Reported: the repository's size
on disk (ledger files, object files as the file system counts them, in
blocks), the ledger alone, the objects alone, and the time per step, beside
LangGraph's own ``InMemorySaver`` for the time.

Run:  .venv/bin/python benchmarks/frameworks.py [--steps 50]
"""

from __future__ import annotations

import argparse
import operator
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import strata.integrations.langgraph as lg
from strata import Repository


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]
    document: str
    turn: int


def build(ws: Path, steps: int) -> StateGraph[Chat]:
    def speak(state: Chat) -> Chat:
        turn = state["turn"] + 1
        (ws / "reply.txt").write_text(f"reply {turn}\n")
        line = f"turn {turn}: " + "the model's answer, long enough to look like one. " * 6
        return {"messages": [line], "turn": turn}

    def more(state: Chat) -> str:
        return "speak" if state["turn"] < steps else END

    builder: StateGraph[Chat] = StateGraph(Chat)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_conditional_edges("speak", more)
    return builder


def disk_usage(folder: Path) -> int:
    """Bytes the file system allots to the files below ``folder`` (blocks, not lengths)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def run(limit: int | None, steps: int, work: Path) -> dict[str, Any]:
    ws = work / f"ws-{limit}"
    ws.mkdir()
    repo = Repository.init(ws)
    doc = "a paragraph of the document the graph keeps in its state. " * 100
    saver: Any
    if limit is None:
        saver = InMemorySaver()
    else:
        lg.INLINE_LIMIT = limit
        saver = lg.StrataSaver(repo)
    graph = build(ws, steps).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps * 3}
    start = time.perf_counter()
    graph.invoke({"messages": [], "document": doc, "turn": 0}, config, durability="sync")
    elapsed = time.perf_counter() - start
    repo.close()
    store = ws / ".strata"
    ledger = sum(
        disk_usage(p) if p.is_dir() else p.stat().st_blocks * 512
        for p in store.iterdir()
        if p.name.startswith("ledger")
    )
    objects = disk_usage(store / "objects")
    return {"ms_per_step": elapsed * 1000 / steps, "ledger": ledger, "objects": objects}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-lg-"))
    try:
        os.environ.setdefault("STRATA_NO_DAEMON", "1")
        rows = [("InMemorySaver (no files)", run(None, args.steps, work))]
        for label, limit in (
            ("all objects", 0),
            ("inline <= 512 B", 512),
            ("inline <= 2 KiB (the default)", 2048),
            ("all inline", 10**9),
        ):
            rows.append((label, run(limit, args.steps, work)))
        print(f"| {args.steps} steps | ms/step | ledger KiB | objects KiB | total KiB |")
        print("|---|---:|---:|---:|---:|")
        for label, r in rows:
            total = r["ledger"] + r["objects"]
            print(
                f"| {label} | {r['ms_per_step']:.1f} | {r['ledger'] / 1024:.0f} | "
                f"{r['objects'] / 1024:.0f} | {total / 1024:.0f} |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
