"""The host loop's own cost: what Strata adds around the model calls of ``strata host``.

The model is the scripted provider (it answers at once), so what is timed is
the host's work: recording the working tree and bringing the knowledge base up
to it, the traces, the ledger events of every step, plan and task, and the
gateway's recorded run of a command. Rows:

* ``answer``  a retrieval and an answer with citations (2 model calls, 4 events),
              on a workspace of ``--files`` markdown files already indexed;
* ``plan``    a retrieval, a plan with one ``terminal_exec`` task (``ls``: low
              risk, no approval) and a summary (3 model calls, 8 host events,
              the gateway's run);
* ``replay``  the ``answer`` run again from its traces (``ReplayProvider``).

Usage::

    python benchmarks/host.py [--files 500] [--runs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strata import Repository
from strata.providers.replay import ReplayProvider
from strata.providers.scripted import Scripted
from strata.providers.trace import Trace

RETRIEVE = {"tool_calls": [{"name": "local_kb_retrieval", "arguments": {"query": "port"}}]}
PLAN = {
    "tool_calls": [
        {
            "name": "create_plan",
            "arguments": {
                "goal": "list",
                "tasks": [{"kind": "terminal_exec", "title": "list", "command": "ls"}],
            },
        }
    ]
}


def timed(runs: int, once: Callable[[], Any]) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ["STRATA_NO_DAEMON"] = "1"
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for i in range(args.files):
            (ws / f"doc{i:04d}.md").write_text(
                f"# Service {i}\n\nService {i} listens on port {8000 + i}.\n"
            )
        with Repository.init(ws) as repo:
            repo.kb.index()
            answer = [RETRIEVE, {"text": "Port 8000 [1]."}]
            rows["answer"] = timed(
                args.runs, lambda: repo.host("which port?", provider=Scripted(answer))
            )
            plan = [RETRIEVE, PLAN, {"text": "listed"}]
            rows["plan"] = timed(args.runs, lambda: repo.host("list", provider=Scripted(plan)))
            first = repo.host("which port?", provider=Scripted(answer))
            traces = [Trace.decode(repo.objects.get(t), name=t) for t in first.traces]
            rows["replay"] = timed(
                args.runs, lambda: repo.host("which port?", provider=ReplayProvider(traces))
            )
    report = {
        "files": args.files,
        "runs": args.runs,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        "rows": rows,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.files} files, {args.runs} runs each ({report['machine']})")
    for name, row in rows.items():
        print(f"{name:8} median {row['median_ms']:8.1f} ms   p95 {row['p95_ms']:8.1f} ms")


if __name__ == "__main__":
    main()
