"""Recording and replaying agent steps: the cost of a trace, and the speed of a replay.

Two rows, measured in one run:

* ``record``  the overhead a trace adds to one model call: the same scripted
              calls made bare and through ``RecordingProvider`` into a real
              repository's object store (target: under 5 ms a call), median of
              ``--runs`` batches of ``--calls`` calls, taken in turn;
* ``replay``  a 100-step session (``strata agent`` with a scripted provider, each
              step one ``write_file`` into a 200-file workspace) recorded, then
              ``strata replay BASE..TIP`` (target: under 10 s); the time to record
              the session is shown beside it as the peer.

Usage::

    python benchmarks/replay.py [--steps 100] [--calls 200] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from strata import Repository
from strata.providers.base import Message, Request, complete
from strata.providers.scripted import Scripted
from strata.providers.trace import Recorder, RecordingProvider

STRATA = [sys.executable, "-m", "strata"]
ENV = {**os.environ, "STRATA_NO_DAEMON": "1"}


def script(steps: int) -> dict:
    responses = [
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": f"gen/step{i:03d}.txt", "content": f"step {i}\n" * 20},
                }
            ]
        }
        for i in range(steps - 1)
    ]
    responses.append({"text": "done"})
    return {"responses": responses}


def strata(*args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [*STRATA, *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"strata {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def record_row(root: Path, calls: int, runs: int) -> dict:
    ws = root / "record"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    repo = Repository.init(ws)
    answers = [{"text": "An answer of a few words, as a model would give."}] * calls
    request = Request(
        "scripted",
        (Message("system", "You edit files." * 20), Message("user", "Do the thing, please.")),
    )
    bare_ms, recorded_ms = [], []
    for n in range(runs):
        order = ("bare", "recorded") if n % 2 == 0 else ("recorded", "bare")
        for kind in order:
            provider = Scripted(answers)
            if kind == "recorded":
                recorder = Recorder(put=repo.objects.put)
                wrapped = RecordingProvider(provider, recorder)
                start = time.perf_counter()
                for _ in range(calls):
                    complete(wrapped, request)
                repo.objects.flush()
                recorded_ms.append((time.perf_counter() - start) * 1000 / calls)
            else:
                start = time.perf_counter()
                for _ in range(calls):
                    complete(provider, request)
                bare_ms.append((time.perf_counter() - start) * 1000 / calls)
    repo.close()
    bare, recorded = statistics.median(bare_ms), statistics.median(recorded_ms)
    return {
        "row": "record",
        "bare_ms_per_call": round(bare, 3),
        "recorded_ms_per_call": round(recorded, 3),
        "overhead_ms_per_call": round(recorded - bare, 3),
        "target_ms": 5.0,
        "met": recorded - bare < 5.0,
    }


def replay_row(root: Path, steps: int) -> dict:
    ws = root / "replay"
    (ws / "src").mkdir(parents=True)
    for i in range(200):
        (ws / "src" / f"f{i:03d}.txt").write_text(f"file {i}\n" * 30)
    strata("init", cwd=ws)
    (ws / "agent.yaml").write_text(yaml.safe_dump(script(steps)))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.demo]\nadapter = "scripted"\nscript = "agent.yaml"\n')
    strata("snapshot", "-m", "base", cwd=ws)
    start = time.perf_counter()
    out = strata("agent", "--model", "demo", "--max-steps", str(steps), "--json", "write", cwd=ws)
    record_s = time.perf_counter() - start
    result = json.loads(out)
    history = json.loads(
        strata("history", "--json", "--limit", "10", "--action", "snapshot", cwd=ws)
    )
    events = history["events"] if isinstance(history, dict) else history
    base = next(e["id"] for e in events if e["rationale"] == "base")
    tip = result["steps"][-1]["event_id"]
    start = time.perf_counter()
    report = json.loads(strata("replay", f"{base}..{tip}", "--json", cwd=ws))
    replay_s = time.perf_counter() - start
    if not report["ok"]:
        raise SystemExit(f"the replay diverged: {report['first_divergence']}")
    return {
        "row": "replay",
        "steps": len(result["steps"]),
        "record_s": round(record_s, 2),
        "replay_s": round(replay_s, 2),
        "ratio_replay_to_record": round(replay_s / record_s, 2),
        "target_s": 10.0,
        "met": replay_s < 10.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="strata-bench-replay-"))
    try:
        load = os.getloadavg()[0]
        rows = [record_row(root, args.calls, args.runs), replay_row(root, args.steps)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine = {
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "load_at_start": round(load, 2),
        "load_at_end": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(f"machine: {machine}")
    r, p = rows
    print(
        f"record: {r['bare_ms_per_call']} ms a call bare, {r['recorded_ms_per_call']} ms recorded: "
        f"+{r['overhead_ms_per_call']} ms (target < 5 ms: {'met' if r['met'] else 'MISSED'})"
    )
    print(
        f"replay: {p['steps']} steps recorded in {p['record_s']} s, replayed in {p['replay_s']} s "
        f"(x{p['ratio_replay_to_record']}; target < 10 s: {'met' if p['met'] else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
