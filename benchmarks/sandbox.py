"""What the sandbox costs per run: Strata's sandbox against bare bubblewrap and no sandbox.

Each row runs ``true`` (and a short Python script, the system interpreter) to
its end through ``strata.runs.process.run_command``:

* **direct**: the command itself, no sandbox;
* **bwrap, same flags**: ``bwrap`` with exactly the command line Strata builds,
  started directly (no signal relay);
* **strata sandbox**: ``sandbox_command`` + ``run_command`` (the relay, then
  bubblewrap), as ``strata run --draft`` does.

It also times the one-off ``sandbox_problem()`` probe. Median and 90th
percentile of ``--runs`` runs; the ratio is against bare bubblewrap.

Run:  .venv/bin/python benchmarks/sandbox.py [--runs 30]
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
from collections.abc import Callable, Sequence
from pathlib import Path

from strata.runs.process import run_command
from strata.sandbox import bwrap as sandbox

PYTHON = "/usr/bin/python3"


def _time(run: Callable[[], int], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        code = run()
        samples.append((time.perf_counter() - start) * 1000)
        if code != 0:
            raise SystemExit(f"a run failed with exit code {code}")
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def _bwrap_version() -> str:
    done = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    problem = sandbox.sandbox_problem()
    probe_ms = (time.perf_counter() - start) * 1000
    if problem is not None:
        raise SystemExit(f"no sandbox here: {problem}")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace, draft = root / "project", root / "draft"
        workspace.mkdir()
        draft.mkdir()
        spec = sandbox.SandboxSpec(workspace=workspace, source=draft, cwd=workspace)
        environ = {"PATH": "/usr/bin:/bin", "HOME": str(root / "home")}
        rows = []
        for label, command in (
            ("true", ["true"]),
            ("python3 -c pass", [PYTHON, "-c", "pass"]),
        ):
            argv_, env = sandbox.sandbox_command(spec, command, environ=environ)
            bare = argv_[argv_.index("--unshare-all") - 1 :]  # bwrap and its flags, no relay
            direct = _time(lambda c=command: run_command(c, env=environ).exit_code, args.runs)
            bwrap = _time(lambda b=bare, e=env: run_command(b, env=e).exit_code, args.runs)
            strata = _time(
                lambda a=argv_, e=env: run_command(a, env=e, new_session=True).exit_code,
                args.runs,
            )
            rows.append((label, direct, bwrap, strata))

    print(f"# Sandbox start-up cost ({datetime.date.today().isoformat()})\n")
    print(
        f"Machine: {platform.node()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"{_bwrap_version()}; "
        f"{args.runs} runs each, median / p90 in ms.\n"
    )
    print(f"`sandbox_problem()` probe (once per process): {probe_ms:.0f} ms\n")
    print("| command | direct | bwrap, same flags | strata sandbox | strata / bwrap |")
    print("|---|---|---|---|---|")
    for label, direct, bwrap, strata in rows:
        print(
            f"| `{label}` | {direct[0]:.1f} / {direct[1]:.1f} | {bwrap[0]:.1f} / {bwrap[1]:.1f} "
            f"| {strata[0]:.1f} / {strata[1]:.1f} | {strata[0] / bwrap[0]:.2f}x |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
