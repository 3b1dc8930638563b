"""The semantic diff handlers on a real history: success rate and latency per handler.

Every file changed by each of the last ``--commits`` (300) first-parent commits
of a git repository (click's, by default at ``/tmp/click-src``; benchmarks/README.md
says how to clone it) goes through the handler its path selects, with both
sides read from git. Per handler it prints how many files, how many fell
back (``fallback_reason`` set) with the most common reasons, and p50/p95/max
milliseconds per file (wall clock, and CPU time: on a shared machine the
wall clock counts the time other processes held the cores). Targets (seed
004 §3.A): success ≥ 95 % per handler, p95 ≤ 100 ms per file.

The ``python`` handler uses the standard ``ast``; with ``--libcst`` the same
Python files are also parsed by libcst (both sides), to compare the two parsers.

Usage::

    python benchmarks/semantic.py [--repo /tmp/click-src] [--commits 300] [--json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import pygit2

from strata.semantic.registry import analyze, handler_for


def _blob(repo: pygit2.Repository, oid: Any) -> bytes | None:
    if oid is None or oid == pygit2.Oid(hex="0" * 40):
        return None
    return bytes(repo[oid].data)


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default="/tmp/click-src")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--libcst", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    repo = pygit2.Repository(args.repo)
    commits = []
    commit = repo[repo.head.target]
    while commit.parents and len(commits) < args.commits:
        commits.append(commit)
        commit = commit.parents[0]
    times: dict[str, list[float]] = collections.defaultdict(list)
    failed: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    libcst_ms: list[float] = []
    cpu_ms: dict[str, list[float]] = collections.defaultdict(list)
    ast_ms: list[float] = []
    for commit in commits:
        diff = repo.diff(commit.parents[0], commit)
        diff.find_similar()
        for delta in diff.deltas:
            if delta.new_file.mode == pygit2.GIT_FILEMODE_COMMIT:
                continue
            path = delta.new_file.path
            before = _blob(repo, delta.old_file.id) if delta.status_char() != "A" else None
            after = _blob(repo, delta.new_file.id) if delta.status_char() != "D" else None
            handler = handler_for(path)
            name = handler.name if handler else "unified"
            started, cpu = time.perf_counter(), time.process_time()
            result = analyze(path, before, after)
            took = (time.perf_counter() - started) * 1000
            cpu_ms[name if handler else result.handler].append((time.process_time() - cpu) * 1000)
            name = name if handler else result.handler
            times[name].append(took)
            if result.fallback_reason and handler is not None:
                failed[name][result.fallback_reason.split(" (")[0]] += 1
            if name == "python":
                ast_ms.append(took)
                if args.libcst:
                    import libcst

                    started = time.perf_counter()
                    for side in (before, after):
                        if side is not None:
                            with contextlib.suppress(Exception):
                                libcst.parse_module(side)
                    libcst_ms.append((time.perf_counter() - started) * 1000)
    rows = []
    for name in sorted(times):
        n = len(times[name])
        bad = sum(failed[name].values())
        rows.append(
            {
                "handler": name,
                "files": n,
                "fell_back": bad,
                "success_pct": round(100 * (n - bad) / n, 1) if n else None,
                "p50_ms": round(pct(times[name], 0.5), 2),
                "p95_ms": round(pct(times[name], 0.95), 2),
                "max_ms": round(max(times[name]), 2),
                "cpu_p95_ms": round(pct(cpu_ms[name], 0.95), 2),
                "reasons": dict(failed[name].most_common(3)),
            }
        )
    report = {
        "repo": os.path.abspath(args.repo),
        "commits": len(commits),
        "head": str(commits[0].id) if commits else None,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}",
        "rows": rows,
    }
    if libcst_ms:
        report["python_parsers"] = {
            "ast_handler_p50_ms": round(statistics.median(ast_ms), 2),
            "ast_handler_p95_ms": round(pct(ast_ms, 0.95), 2),
            "libcst_parse_only_p50_ms": round(statistics.median(libcst_ms), 2),
            "libcst_parse_only_p95_ms": round(pct(libcst_ms, 0.95), 2),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['commits']} commits of {report['repo']} (head {report['head']})")
    print(report["machine"])
    print("| handler | files | fell back | success | p50 ms | p95 ms | max ms | CPU p95 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['handler']} | {r['files']} | {r['fell_back']} | {r['success_pct']} % "
            f"| {r['p50_ms']} | {r['p95_ms']} | {r['max_ms']} | {r['cpu_p95_ms']} |"
        )
    for r in rows:
        if r["reasons"]:
            print(f"{r['handler']} fell back: {r['reasons']}")
    if "python_parsers" in report:
        print("python parsers:", report["python_parsers"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
