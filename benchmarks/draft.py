"""Drafts against git worktrees: making an isolated copy, then bringing its changes back.

A workspace of ``--files`` files (1 KiB each, 100 folders) that is both a git
work tree (one commit) and a Strata workspace (one snapshot). Then, each
``--repeat`` times on fresh copies, median wall time of:

1. the first ``strata draft start`` (a full copy) vs ``git worktree add``
   (git's isolated copy);
2. ``--changed`` files edited in the copy, then ``strata publish`` (snapshot
   of the Draft, auto-save, checkpoint, journaled apply) vs ``git commit -a``
   in the worktree plus ``git merge --ff-only`` in the main work tree;
3. the next ``strata draft start`` (the ended Draft's folder is kept and
   brought to Published) vs ``git checkout -B`` in the kept worktree;
4. ``--changed`` files edited again, then ``strata discard`` and ``strata
   draft start`` vs ``git reset --hard`` and ``git checkout -B``.

Run:  .venv/bin/python benchmarks/draft.py [--files 10000] [--changed 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STRATA = [sys.executable, "-m", "strata"]
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "STRATA_"))},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@example.com",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@example.com",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",  # no background gc while the template is copied
}


def sh(args: list[str], cwd: Path) -> None:
    subprocess.run(args, cwd=cwd, env=GIT_ENV, check=True, capture_output=True)


def timed(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    sh(args, cwd)
    return time.perf_counter() - start


def build(root: Path, files: int) -> None:
    for i in range(files):
        path = root / f"d{i % 100:03}" / f"f{i:06}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((f"{i} " * 256).encode()[:1024])
    sh(["git", "init", "-q", "-b", "main"], root)
    sh(["git", "add", "-A"], root)
    sh(["git", "commit", "-qm", "base"], root)
    sh([*STRATA, "init"], root)
    sh([*STRATA, "snapshot", "-m", "base"], root)


def edit(root: Path, changed: int) -> None:
    for i in range(changed):
        path = root / f"d{i % 100:03}" / f"f{i:06}.txt"
        path.write_bytes(b"edited\n" + path.read_bytes())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-bench-draft-"))
    try:
        template = work / "template"
        build(template, opts.files)
        keys = ("start", "wt", "publish", "merge", "again", "switch", "discard", "reset")
        rows: dict[str, list[float]] = {k: [] for k in keys}
        for n in range(opts.repeat):
            ws, gw = work / f"ws{n}", work / f"git{n}"
            shutil.copytree(template, ws, symlinks=True)
            shutil.copytree(template, gw, symlinks=True)
            sh([*STRATA, "status"], ws)  # the stat cache sees the copy's new inodes once
            sh(["git", "status", "-s"], gw)  # and git's index
            rows["start"].append(timed([*STRATA, "draft", "start"], ws))
            rows["wt"].append(timed(["git", "worktree", "add", "-q", f"../wt{n}", "-b", "x"], gw))
            edit(ws / ".strata" / "draft" / "files", opts.changed)
            edit(work / f"wt{n}", opts.changed)
            rows["publish"].append(timed([*STRATA, "publish"], ws))
            start = time.perf_counter()
            sh(["git", "commit", "-qam", "agent"], work / f"wt{n}")
            sh(["git", "merge", "-q", "--ff-only", "x"], gw)
            rows["merge"].append(time.perf_counter() - start)
            rows["again"].append(timed([*STRATA, "draft", "start"], ws))
            rows["switch"].append(
                timed(["git", "checkout", "-q", "-B", "y", "main"], work / f"wt{n}")
            )
            edit(ws / ".strata" / "draft" / "files", opts.changed)
            edit(work / f"wt{n}", opts.changed)
            start = time.perf_counter()
            sh([*STRATA, "discard"], ws)
            sh([*STRATA, "draft", "start"], ws)
            rows["discard"].append(time.perf_counter() - start)
            start = time.perf_counter()
            sh(["git", "reset", "-q", "--hard"], work / f"wt{n}")
            sh(["git", "checkout", "-q", "-B", "z", "main"], work / f"wt{n}")
            rows["reset"].append(time.perf_counter() - start)
            for folder in (ws, gw, work / f"wt{n}"):
                shutil.rmtree(folder)
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(
            f"# Drafts vs git worktrees ({datetime.date.today()}, {platform.platform()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()})"
        )
        print(f"{opts.files} files, {opts.changed} changed, median of {opts.repeat}\n")
        print("| step | strata | git | strata / git |")
        print("| --- | --- | --- | --- |")
        table = [
            ("first isolated copy (draft start / worktree add)", "start", "wt"),
            (
                f"bring back {opts.changed} changes (publish / commit + merge)",
                "publish",
                "merge",
            ),
            ("next isolated copy (draft start / checkout -B)", "again", "switch"),
            (
                f"throw away {opts.changed} changes, start again (discard + draft start "
                "/ reset --hard + checkout -B)",
                "discard",
                "reset",
            ),
        ]
        for label, ours, theirs in table:
            print(
                f"| {label} | {med[ours]:.2f} s | {med[theirs]:.2f} s "
                f"| {med[ours] / med[theirs]:.1f} |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
