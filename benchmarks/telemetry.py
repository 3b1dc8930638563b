"""What the instrumentation costs when telemetry is off (seed 004 §10).

Two measurements:

1. Whole commands, this checkout (A) against a checkout without the
   instrumentation (B, ``--baseline``: a git commit, by default the one before
   it), paired by ``farm-bench --vs``: ``strata history`` (only the "is export
   on?" check), a plain ``strata snapshot`` (the hot path: the same check), and
   ``strata diff`` (a metered command: it also adds its duration to
   ``metrics.json``).
2. In-process, per call: the check a command makes (:func:`endpoint_from`),
   and a span and a traced model stream while off.

Usage: .venv/bin/python benchmarks/telemetry.py [--baseline REF] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def baseline_tree(ref: str, dest: Path) -> Path:
    """``src/`` of ``ref`` unpacked into ``dest`` (with this checkout's compiled walk)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for so in (ROOT / "src" / "strata").glob("_walk*.so"):
        shutil.copy2(so, dest / "src" / "strata" / so.name)
    # compiled ahead, as this checkout is (scripts/dev): else B compiles at every start
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=True)
    return dest / "src"


def workspace(folder: Path, env: dict[str, str]) -> None:
    folder.mkdir()
    for i in range(200):
        sub = folder / f"pkg{i % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"m{i}.py").write_text(f"value = {i}\n" * 20)
    strata = [sys.executable, "-m", "strata"]
    subprocess.run([*strata, "init"], cwd=folder, env=env, check=True, capture_output=True)
    (folder / "pkg0" / "m0.py").write_text("value = 'changed'\n")
    subprocess.run([*strata, "snapshot", "-m", "two"], cwd=folder, env=env, check=True)


def paired(name: str, args: list[str], cwd: Path, base_src: Path, runs: int) -> None:
    a = f"{sys.executable} -m strata {' '.join(args)}"
    b = f"env PYTHONPATH={base_src} {a}"
    print(f"\n### {name}: A = this checkout, B = baseline\n", flush=True)
    subprocess.run(
        ["farm-bench", "-n", str(runs), "--warmup", "2", "--vs", b, "--", *a.split()],
        cwd=cwd,
        check=False,
    )


def micro() -> None:
    from strata.cli.observe import endpoint_from

    print("\n### In-process, telemetry off (best of 5 x 100,000 calls)\n")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / ".strata").mkdir()
        (ws / ".strata" / "config.toml").write_text("[repository]\nformat = 2\n" * 10)
        env: dict[str, str] = {}
        n = 100_000
        for label, stmt in (
            ("endpoint_from (the check of every command)", lambda: endpoint_from(env, tmp)),
            ("telemetry.span(...) entered and left", _span_cycle()),
            ("traced_stream(...) of a model call", _stream_cycle()),
        ):
            best = min(timeit.repeat(stmt, number=n, repeat=5)) / n
            print(f"- {label}: {best * 1e6:.2f} µs per call")


def _span_cycle() -> Callable[[], None]:
    from strata import telemetry

    def run() -> None:
        with telemetry.span("strata.tool_call", {"strata.tool": "read_file"}):
            pass

    return run


def _stream_cycle() -> Callable[[], None]:
    from strata import telemetry

    events = (1, 2, 3)

    def run() -> None:
        for _ in telemetry.traced_stream("strata.model_call", events, {"strata.provider": "x"}):
            pass

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", default="360bc40", help="a git ref without the instrumentation"
    )
    parser.add_argument("--runs", type=int, default=20)
    opts = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STRATA_"))}
    env.update(STRATA_NO_DAEMON="1", STRATA_AUTHOR="bench")
    os.environ.clear()
    os.environ.update(env)
    # both sides compiled ahead (PYTHONDONTWRITEBYTECODE would else make one compile each run)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        base_src = baseline_tree(opts.baseline, Path(tmp))
        ws = Path(tmp) / "ws"
        workspace(ws, env)
        print(f"baseline: {opts.baseline}; workspace: 200 files, 2 snapshots")
        paired("strata history --limit 5", ["history", "--limit", "5"], ws, base_src, opts.runs)
        paired("strata snapshot (nothing changed)", ["snapshot"], ws, base_src, opts.runs)
        paired("strata diff HEAD~1", ["diff", "HEAD~1"], ws, base_src, opts.runs)
    micro()


if __name__ == "__main__":
    main()
