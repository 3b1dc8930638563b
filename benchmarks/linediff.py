"""Line diffs on large files: libgit2's xdiff (pygit2) against difflib and git.

Strata counts changed lines (``line_stats``) and prints patches
(``render_patch``) with libgit2's xdiff through pygit2. This script measures
that engine against the two obvious alternatives on inputs that stress a line
diff:

* Python's ``difflib.unified_diff``, which is quadratic when the longest
  matching block keeps being found at one end of the range;
* ``git diff --no-index --numstat`` in a subprocess (git's own xdiff, plus the
  cost of starting a process and reading two files).

difflib runs in a child process with a time limit; a run that exceeds it is
reported as ``>Ns``. The other engines report the best of ``--repeat`` runs.
The script also checks that ``line_stats`` agrees with git's ``--numstat``.

Run:  .venv/bin/python benchmarks/linediff.py [--timeout 30] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata.diff.patch import FileSide, line_stats, render_patch

DIFFLIB_CHILD = """
import difflib, sys, time
old = open(sys.argv[1], encoding="utf-8").read().splitlines(keepends=True)
new = open(sys.argv[2], encoding="utf-8").read().splitlines(keepends=True)
start = time.perf_counter()
lines = list(difflib.unified_diff(old, new, "a", "b", n=3))
elapsed = time.perf_counter() - start
body = lines[2:]
print(elapsed, sum(x[0] == "+" for x in body), sum(x[0] == "-" for x in body))
"""


@dataclass(frozen=True)
class Case:
    name: str
    old: bytes
    new: bytes


def _lines(items: list[str]) -> bytes:
    return "".join(items).encode()


def make_cases() -> list[Case]:
    rng = random.Random(20240601)
    cases = []

    base = [
        f"line {i}: {rng.getrandbits(64):016x} lorem ipsum dolor sit amet\n" for i in range(100_000)
    ]
    changed = list(base)
    for i in rng.sample(range(len(base)), len(base) // 100):
        changed[i] = f"edited {i}: {rng.getrandbits(32):08x}\n"
    cases.append(Case("100k lines, 1% changed at random places", _lines(base), _lines(changed)))

    changed = list(base)
    for i in range(0, len(base), 100):
        changed[i] = f"edited {i}\n"
    cases.append(Case("100k lines, every 100th line changed", _lines(base), _lines(changed)))

    old = [f"old {i}: {rng.getrandbits(64):016x}\n" for i in range(20_000)]
    new = [f"new {i}: {rng.getrandbits(64):016x}\n" for i in range(20_000)]
    cases.append(Case("20k lines, fully rewritten", _lines(old), _lines(new)))

    values = ["{\n", "}\n", "\n", "    return None\n"]
    old = [rng.choice(values) for _ in range(20_000)]
    new = list(old)
    rng.shuffle(new)
    cases.append(Case("20k lines of 4 distinct values, shuffled", _lines(old), _lines(new)))

    old = [f"line {i}\n" for i in range(20_000)]
    new = [line if i % 2 == 0 else f"changed {i}\n" for i, line in enumerate(old)]
    cases.append(Case("20k lines, every other line changed", _lines(old), _lines(new)))
    return cases


def best_of(repeat: int, func: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def time_difflib(old: Path, new: Path, timeout: float) -> tuple[float, str] | None:
    """Seconds difflib took in its child process and its +/- counts; None past ``timeout``."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", DIFFLIB_CHILD, str(old), str(new)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    seconds, plus, minus = done.stdout.split()
    return float(seconds), f"+{plus}/-{minus}"


def git_numstat(old: Path, new: Path) -> tuple[int, int]:
    done = subprocess.run(
        ["git", "diff", "--no-index", "--numstat", str(old), str(new)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr)
    insertions, deletions, _ = done.stdout.split("\t", 2)
    return int(insertions), int(deletions)


def fmt(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def measure(case: Case, scratch: Path, *, repeat: int, timeout: float) -> str:
    """Time every engine on one case; return the table row."""
    old_path, new_path = scratch / "old.txt", scratch / "new.txt"
    old_path.write_bytes(case.old)
    new_path.write_bytes(case.new)
    old_side = FileSide("bench.txt", "file", 0o644, case.old)
    new_side = FileSide("bench.txt", "file", 0o644, case.new)

    stats = line_stats(case.old, case.new)
    agrees = (stats.insertions, stats.deletions) == git_numstat(old_path, new_path)
    t_stats = best_of(repeat, lambda: line_stats(case.old, case.new))
    t_patch = best_of(repeat, lambda: render_patch(old_side, new_side))
    t_git = best_of(repeat, lambda: git_numstat(old_path, new_path))
    difflib_run = time_difflib(old_path, new_path, timeout)

    if difflib_run is None:
        difflib_cell = f">{timeout:.0f} s"
        difflib_counts = "?"
        ratio = f">{timeout / t_stats:,.0f}x"
    else:
        difflib_cell = fmt(difflib_run[0])
        difflib_counts = difflib_run[1]
        ratio = f"{difflib_run[0] / t_stats:,.1f}x"
    return (
        f"| {case.name} | +{stats.insertions}/-{stats.deletions} "
        f"| {'yes' if agrees else 'NO'} | {fmt(t_stats)} | {fmt(t_patch)} "
        f"| {fmt(t_git)} | {difflib_cell} | {difflib_counts} | {ratio} | {t_git / t_stats:.1f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=30.0, help="difflib time limit (s)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per fast engine")
    args = parser.parse_args()

    git_version = subprocess.run(
        ["git", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    import pygit2

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({platform.processor() or '?'}); "
        f"Python {platform.python_version()}; pygit2 {pygit2.__version__} "
        f"(libgit2 {pygit2.LIBGIT2_VERSION}); {git_version}; "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(f"best of {args.repeat} runs; difflib once, limit {args.timeout:.0f} s\n")
    header = (
        "| case | +/- (line_stats) | numstat agrees | pygit2 line_stats | pygit2 render_patch "
        "| git diff --no-index --numstat | difflib unified_diff | difflib +/- "
        "| difflib ÷ line_stats | git ÷ line_stats |"
    )
    print(header)
    print("|" + "---|" * header.count(" | ") + "---|")
    with tempfile.TemporaryDirectory() as scratch:
        for case in make_cases():
            print(
                measure(case, Path(scratch), repeat=args.repeat, timeout=args.timeout), flush=True
            )


if __name__ == "__main__":
    main()
