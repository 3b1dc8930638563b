"""Incremental snapshots with the watcher on: Strata vs git on the 20,000-file corpus.

Builds the large corpus of ``benchmarks/snapshots.py`` (same seed, same files,
same 10 edits), records it once in each tool, starts ``strata watch --daemon
--no-capture`` in the Strata workspace, then for each run edits the same 10
files in both workspaces and times, side by side:

* ``strata snapshot`` (the CLI hands the command to the watcher, which runs
  it with everything loaded and asks itself which paths changed)
  vs ``git add -A`` + ``git commit -q -m x``;
* the same with ``STRATA_NO_RESIDENT=1`` (the CLI loads Strata and snapshots
  in its own process, asking the watcher which paths changed), for reference;
* ``strata snapshot`` with the watcher stopped (the full ``lstat`` walk), for reference;
* ``strata status`` with the watcher on vs ``git status --porcelain``.

Then it measures where the CLI's time goes: interpreter start (``python -c
pass``), the imports a snapshot needs, one watcher round trip (cookie
included) and the in-process ``Repository.snapshot`` (scan of the named
folders, blob and tree writes, ledger append).

Run:  .venv/bin/python benchmarks/watch.py [--runs N] [--seed N] [--work DIR] [--keep] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import snapshots as sb  # noqa: E402  (the corpus, the tools and the timing helpers)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=HERE / "work" / "watch")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="print the top costs of one in-process snapshot"
    )
    args = parser.parse_args()
    size = sb.SIZES["large"]
    base = args.work
    sb.rmtree(base)
    base.mkdir(parents=True)
    sb.log(f"generating {size.files} files, {size.total / 1e6:.0f} MB")
    files = sb.plan_corpus(size, args.seed)
    st_ws, git_ws = base / "strata", base / "git"
    sb.write_corpus(st_ws, files, args.seed)
    subprocess.run(["cp", "-a", str(st_ws), str(git_ws)], check=True)
    edits = sb.pick_edits(files, args.seed)
    git = sb.GIT_TOOL
    sb.run(git.git("init", "-q"), git_ws)
    sb.run(git.git("add", "-A"), git_ws)
    sb.run(git.git("commit", "-q", "-m", "x"), git_ws)
    sb.run([sb.STRATA, "init"], st_ws)
    sb.run([sb.STRATA, "snapshot", "-m", "x"], st_ws)
    sb.log("recorded the corpus in both tools")

    watch_on = [sb.STRATA, "watch", "--daemon", "--no-capture"]
    watch_off = [sb.STRATA, "watch", "--stop"]
    rows: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    run_no = 0
    sb.run(watch_on, st_ws)
    sb.run([sb.STRATA, "snapshot"], st_ws)  # the stat cache now holds a watcher token
    for i in range(args.runs):
        run_no += 1
        sb.edit(st_ws, edits, run_no, args.seed)
        sb.edit(git_ws, edits, run_no, args.seed)
        add("status strata (watcher)", sb.timed(sb.seq(st_ws, [sb.STRATA, "status"])))
        add("status git", sb.timed(sb.seq(git_ws, git.git("status", "--porcelain"))))
        add("snapshot strata (watcher)", sb.timed(sb.seq(st_ws, [sb.STRATA, "snapshot"])))
        add(
            "snapshot git",
            sb.timed(sb.seq(git_ws, git.git("add", "-A"), git.git("commit", "-q", "-m", "x"))),
        )
        add("no-change strata (watcher)", sb.timed(sb.seq(st_ws, [sb.STRATA, "snapshot"])))
        run_no += 1
        sb.edit(st_ws, edits, run_no, args.seed)
        sb.ENV["STRATA_NO_RESIDENT"] = "1"  # the CLI loads Strata and snapshots itself
        add(
            "snapshot strata (watcher, run locally)",
            sb.timed(sb.seq(st_ws, [sb.STRATA, "snapshot"])),
        )
        del sb.ENV["STRATA_NO_RESIDENT"]
        sb.log(f"watcher on: run {i + 1}/{args.runs}")

    # where the time goes (watcher still on)
    py = sys.executable
    for _ in range(args.runs):
        add("python -c pass", sb.timed(sb.seq(st_ws, [py, "-c", "pass"])))
        add(
            "python + imports of the resident client",
            sb.timed(sb.seq(st_ws, [py, "-c", "import strata._entry, strata._resident"])),
        )
        add(
            "python + imports of a snapshot",
            sb.timed(
                sb.seq(
                    st_ws,
                    [
                        py,
                        "-c",
                        "import strata.cli, strata.repo, strata.watch.monitor, "
                        "strata.ledger.drivers.sqlite",
                    ],
                )
            ),
        )
    sys.path.insert(0, str(sb.STRATA_SRC))
    from strata import Repository
    from strata.store.statcache import StatCache
    from strata.watch.monitor import ask

    with Repository.open(st_ws) as repo:
        for _ in range(args.runs):
            token = StatCache(repo.layout.statcache).token
            start = time.perf_counter()
            answer = ask(repo.layout.watch, token)
            add("watcher round trip (in-process)", time.perf_counter() - start)
            assert answer is not None and answer.changed is not None
        for _ in range(args.runs):
            run_no += 1
            sb.edit(st_ws, edits, run_no, args.seed)
            sb.os.sync()
            profiler = cProfile.Profile() if args.profile else None
            start = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            result = repo.snapshot("x")
            if profiler is not None:
                profiler.disable()
                stats = pstats.Stats(profiler, stream=sys.stderr)
                stats.sort_stats("cumulative").print_stats(30)
            add("Repository.snapshot (in-process, watcher)", time.perf_counter() - start)
            assert result.event is not None and repo.last_scan is not None
            assert repo.last_scan.watcher == "incremental", repo.last_scan.watcher
            listed = repo.last_scan.folders_listed

    sb.run(watch_off, st_ws)
    for i in range(args.runs):
        run_no += 1
        sb.edit(st_ws, edits, run_no, args.seed)
        add("snapshot strata (no watcher)", sb.timed(sb.seq(st_ws, [sb.STRATA, "snapshot"])))
        sb.log(f"watcher off: run {i + 1}/{args.runs}")

    ratio = median_ms(rows["snapshot strata (watcher)"]) / median_ms(rows["snapshot git"])
    status_ratio = median_ms(rows["status strata (watcher)"]) / median_ms(rows["status git"])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"### Watcher on: 20,000 files, 10 edited ({now}, {platform.node()}, runs={args.runs})")
    print()
    print("| operation | strata | git | strata/git | target | met |")
    print("|---|---|---|---|---|---|")
    snap_s, snap_g = rows["snapshot strata (watcher)"], rows["snapshot git"]
    met = "yes" if ratio <= 0.3 else "NO"
    print(
        f"| incremental snapshot, watcher on | {median_ms(snap_s):.0f} ms | "
        f"{median_ms(snap_g):.0f} ms | {ratio:.2f}x | ≤ 0.3x git | {met} |"
    )
    print(
        f"| status, watcher on | {median_ms(rows['status strata (watcher)']):.0f} ms | "
        f"{median_ms(rows['status git']):.0f} ms | {status_ratio:.2f}x |  |  |"
    )
    print()
    print("Where a watcher-on `strata snapshot` spends its time (medians):")
    print()
    for key in (
        "snapshot strata (watcher, run locally)",
        "python -c pass",
        "python + imports of the resident client",
        "python + imports of a snapshot",
        "watcher round trip (in-process)",
        "Repository.snapshot (in-process, watcher)",
        "no-change strata (watcher)",
        "snapshot strata (no watcher)",
    ):
        print(f"* {key}: {median_ms(rows[key]):.1f} ms")
    print(f"* folders listed by an incremental scan: {listed} (of ~{size.folders + 20})")
    print()
    for key, values in rows.items():
        print(f"  {key} (ms): {', '.join(f'{v * 1000:.1f}' for v in values)}")
    if not args.keep:
        sb.rmtree(base)


if __name__ == "__main__":
    main()
