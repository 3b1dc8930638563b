"""The cost of instrumenting a run, against running bare and against git.

1. ``strata run -- true`` against plain ``true`` (both through a fresh
   process), in a workspace of ``--files`` files with nothing changing: the
   fixed overhead of a run (start-up, two snapshots of an unchanged tree, four
   events). Once in a Strata workspace (hash backend), once in a git work tree
   with no Strata repository (git backend).
2. The git backend's incremental snapshot (private index ``add -A``,
   ``write-tree``, ``commit-tree``, ref, import into Strata's store) of
   ``--changed`` modified files, against ``git add -A && git commit`` on an
   identical copy, which is what a user would otherwise run.

Median of ``--repeat`` runs. Run:
    .venv/bin/python benchmarks/runs.py [--files 5000] [--changed 10] [--repeat 7]
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
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


def make_files(root: Path, n: int) -> None:
    for i in range(n):
        path = root / f"d{i % 50:02d}" / f"f{i:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n" + "line of text\n" * 20)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, env=GIT_ENV, check=True, capture_output=True)


def median_ms(
    fn: Callable[[], None], repeat: int, before: Callable[[], None] | None = None
) -> float:
    times = []
    for _ in range(repeat):
        if before:
            before()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def strata(root: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "strata", *args],
        cwd=root,
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        hashws, gitws, peer = base / "hash", base / "git", base / "peer"
        for root in (hashws, gitws, peer):
            root.mkdir()
            make_files(root, args.files)
        strata(hashws, "init")
        strata(hashws, "snapshot")
        for root in (gitws, peer):
            git(root, "init", "-q")
            git(root, "add", "-A")
            git(root, "commit", "-qm", "base")
        strata(gitws, "run", "--", "true")  # first run: seeds the private index, imports

        def bare() -> None:
            subprocess.run(["true"], check=True)

        bare_ms = median_ms(bare, args.repeat)
        rows.append(("`true` (bare)", bare_ms, 1.0))
        snap_ms = median_ms(lambda: strata(hashws, "snapshot"), args.repeat)
        rows.append(("`strata snapshot`, nothing changed (for scale)", snap_ms, snap_ms / bare_ms))
        for name, root in (("hash", hashws), ("git", gitws)):
            ms = median_ms(lambda root=root: strata(root, "run", "--", "true"), args.repeat)
            rows.append((f"`strata run -- true`, {name} backend", ms, ms / bare_ms))

        counter = [0]

        def touch(root: Path) -> None:
            counter[0] += 1
            for i in range(args.changed):
                (root / f"d{i % 50:02d}" / f"f{i:05d}.txt").write_text(f"v{counter[0]}\n")

        from strata.layout import find_layout
        from strata.repo import Repository
        from strata.runs.git import GitWorkspace, import_commit

        repo = Repository(find_layout(gitws))
        gws = GitWorkspace.find(gitws)
        assert gws is not None

        def strata_snapshot() -> None:
            sha = gws.snapshot("bench")
            gws.set_ref("bench", sha)
            import_commit(repo.objects, repo.layout.repo / "gitmap.db", gws.git_dir, sha)

        def git_commit() -> None:
            git(peer, "add", "-A")
            git(peer, "commit", "-qm", "x")

        peer_ms = median_ms(git_commit, args.repeat, before=lambda: touch(peer))
        ours_ms = median_ms(strata_snapshot, args.repeat, before=lambda: touch(gitws))
        repo.close()
    rows.append((f"`git add -A && git commit`, {args.changed} changed", peer_ms, 1.0))
    rows.append(
        (f"git backend snapshot + import, {args.changed} changed", ours_ms, ours_ms / peer_ms)
    )
    lines = [
        "| what | median ms | ratio |",
        "| --- | ---: | ---: |",
        *[f"| {what} | {ms:.1f} | {ratio:.2f}x |" for what, ms, ratio in rows],
    ]
    print(f"{args.files} files, {args.repeat} repeats")
    print("\n".join(lines))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    machine = (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    (HERE / "RESULTS-runs.md").write_text(
        "# Runs: overhead of `strata run` and of the git backend\n\n"
        f"{stamp}, {machine}; {args.files} files of ~250 bytes in 50 folders, "
        f"median of {args.repeat}. Produced by `benchmarks/runs.py`.\n\n"
        "The first ratio column compares with a bare `true`; the last row compares\n"
        "with `git add -A && git commit` on an identical copy. A run costs about two\n"
        "unchanged snapshots (one process start, two scans of the tree, four events);\n"
        "the git backend pays ~8 git processes per snapshot.\n\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()
