"""The workspace digest's scan on a real project's tree (click's, 166 files): target < 300 ms.

Rows, each the median of ``--runs`` runs (the tree is copied into a fresh
workspace under a scratch folder and a repository made there once):

* ``cold``   ``Repository.digest().scan()`` with no stat cache: every file is
             hashed (nothing stored), the tree walked, the few config files
             read and parsed — what the first ``strata digest scan`` pays;
* ``warm``   the same call again: the stat cache spares the hashing;
* ``tree``   ``scan_tree`` of the recorded snapshot's tree from the object store
             (what ``digest optimize`` and its replay do);
* ``cli``    ``strata digest scan --json`` as a process (start-up included), for scale;
* ``status`` ``strata status`` on the same workspace, the peer of ``cli`` (the
             same start-up and hash-only scan, without the digest).

The benchmark downloads nothing: give the tree with ``--tree`` (default
``/tmp/click-tree``; benchmarks/README.md says how to make it).

Usage::

    python benchmarks/digest.py [--tree /tmp/click-tree] [--runs 9] [--json]
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

from strata import Repository
from strata.digest import scan_tree

TARGET_MS = 300.0
ENV = {**os.environ, "STRATA_NO_DAEMON": "1"}
COMMAND = [sys.executable, "-m", "strata", "digest", "scan", "--json"]
STATUS = [sys.executable, "-m", "strata", "status"]


def files_in(tree: Path) -> int:
    return sum(1 for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path("/tmp/click-tree"))
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not args.tree.is_dir():
        print(f"no tree at {args.tree}: see benchmarks/README.md for click's", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="strata-bench-digest-"))
    rows: dict[str, list[float]] = {"cold": [], "warm": [], "tree": [], "cli": [], "status": []}
    try:
        for i in range(args.runs):
            ws = base / f"ws{i}"
            shutil.copytree(args.tree, ws, ignore=shutil.ignore_patterns(".git"))
            with Repository.init(ws) as repo:
                repo.layout.statcache.unlink(missing_ok=True)  # init's snapshot made one
                rows["cold"].append(timed(lambda repo=repo: repo.digest().scan()))
                rows["warm"].append(timed(lambda repo=repo: repo.digest().scan()))
                event = repo.snapshot("bench").event
                assert event is not None
                tree = repo.tree_of(event)
                rows["tree"].append(
                    timed(lambda repo=repo, tree=tree: scan_tree(repo.objects, tree))
                )
            rows["cli"].append(
                timed(
                    lambda ws=ws: subprocess.run(
                        COMMAND, cwd=ws, env=ENV, check=True, capture_output=True
                    )
                )
            )
            rows["status"].append(
                timed(
                    lambda ws=ws: subprocess.run(
                        STATUS, cwd=ws, env=ENV, check=True, capture_output=True
                    )
                )
            )
            shutil.rmtree(ws)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in rows.items()}
    info = {
        "tree": str(args.tree),
        "files": files_in(args.tree),
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load": os.getloadavg()[0],
        "median_ms": {k: round(v, 1) for k, v in medians.items()},
        "max_ms": {k: round(max(v), 1) for k, v in rows.items()},
        "target_ms": TARGET_MS,
        "met": medians["cold"] < TARGET_MS,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(
        f"digest scan of {args.tree} ({info['files']} files), median of {args.runs} runs, "
        f"{info['cpus']} CPUs, load {info['load']:.1f}"
    )
    print()
    print("| row | median | max | target |")
    print("| --- | ---: | ---: | ---: |")
    for name, label in (
        ("cold", "`digest().scan()`, no stat cache (every file hashed)"),
        ("warm", "`digest().scan()` again (stat cache)"),
        ("tree", "`scan_tree` of the recorded snapshot"),
        ("cli", "`strata digest scan --json` (process start-up included)"),
        ("status", "`strata status` on the same tree, for scale"),
    ):
        target = (
            f"< {TARGET_MS:.0f} ms: {'met' if medians[name] < TARGET_MS else 'MISSED'}"
            if name not in ("cli", "status")
            else "—"
        )
        print(f"| {label} | {medians[name]:.1f} ms | {max(rows[name]):.1f} ms | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
