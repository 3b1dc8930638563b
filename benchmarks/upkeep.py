"""The store over many large events: is a 5,000-file event as fast at the 30th as at the 1st?

A 5,000-file workspace (1-2 KB files) gets 30 events, each rewriting every
file, so each event stores 5,000 new objects (a pack of its own, past 64
objects). After each event the script times:

* ``strata snapshot`` of the event (CLI, whole process, no watcher) against
  ``git add -A && git commit -q`` of the same files in a git twin (with
  ``gc.auto=0``: git's own auto gc would pause one commit in 50 for seconds);
* an object-existence check (``DiskObjectStore.has`` of an object stored by
  the first event, and of a missing one), in process, mean of 2,000 lookups.

It runs twice: with the store's upkeep (``[retention] auto_repack``, the
default) and without it (``auto_repack = false``, as before), and prints the
first, middle and last events of both with the ratio to git, plus the packs
and loose objects left and the store's size.

Run:  .venv/bin/python benchmarks/upkeep.py [--events 30] [--files 5000] [--work DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from strata import Repository  # noqa: E402
from strata.store.objects import DiskObjectStore  # noqa: E402


def _write(ws: Path, files: int, event: int) -> None:
    for i in range(files):
        body = f"event {event} file {i} ".encode() * (60 + i % 60)
        path = ws / f"d{i % 50:02}" / f"f{i:05}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(body[: 1024 + (i * 37) % 1024])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "GIT_"))}
    env.update(
        HOME=str(home),
        STRATA_NO_DAEMON="1",
        STRATA_AUTHOR="bench",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="b",
        GIT_AUTHOR_EMAIL="b@example.com",
        GIT_COMMITTER_NAME="b",
        GIT_COMMITTER_EMAIL="b@example.com",
    )
    return env


def _timed(argv: list[str], cwd: Path, env: dict[str, str], *, shell: bool = False) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv if not shell else argv[0],
        cwd=cwd,
        env=env,
        check=True,
        shell=shell,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def _lookup_us(ws: Path, known: str) -> tuple[float, float]:
    with Repository.open(ws) as repo:
        store = repo.objects
        assert isinstance(store, DiskObjectStore)
        missing = "f" * 64
        store.has(known)  # type: ignore[arg-type]
        n = 2000
        start = time.perf_counter()
        for _ in range(n):
            store.has(known)  # type: ignore[arg-type]
        hit = (time.perf_counter() - start) / n * 1e6
        start = time.perf_counter()
        for _ in range(n):
            store.has(missing)  # type: ignore[arg-type]
        miss = (time.perf_counter() - start) / n * 1e6
        return hit, miss


def _store_state(ws: Path) -> tuple[int, int, int]:
    objects = ws / ".strata" / "objects"
    packs = len(list((objects / "packs").glob("*.idx"))) if (objects / "packs").is_dir() else 0
    loose = sum(len(os.listdir(objects / d)) for d in os.listdir(objects) if len(d) == 2)
    size = sum((Path(dp) / f).stat().st_blocks * 512 for dp, _, fs in os.walk(objects) for f in fs)
    return packs, loose, size


def run(work: Path, events: int, files: int, auto: bool) -> list[dict[str, float]]:
    ws, gitws, home = work / "strata", work / "git", work / "home"
    for p in (ws, gitws, home):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    env = _env(home)
    strata = [sys.executable, "-m", "strata"]
    subprocess.run(
        [*strata, "init", "--no-snapshot"], cwd=ws, env=env, check=True, capture_output=True
    )
    if not auto:
        with open(ws / ".strata" / "config.toml", "a") as f:
            f.write("\n[retention]\nauto_repack = false\n")
    subprocess.run(["git", "init", "-q"], cwd=gitws, env=env, check=True)
    subprocess.run(["git", "config", "gc.auto", "0"], cwd=gitws, env=env, check=True)
    rows = []
    known = ""
    for n in range(events):
        _write(ws, files, n)
        _write(gitws, files, n)
        subprocess.run(["sync"], check=True)
        s = _timed([*strata, "snapshot", "-m", f"event {n}"], ws, env)
        g = _timed(["git add -A && git commit -q -m x"], gitws, env, shell=True)
        if not known:
            with Repository.open(ws) as repo:
                tree = repo.resolve("HEAD").tree
                known = str(tree)
        hit, miss = _lookup_us(ws, known)
        packs, loose, size = _store_state(ws)
        rows.append(
            {
                "event": n + 1,
                "strata_s": s,
                "git_s": g,
                "hit_us": hit,
                "miss_us": miss,
                "packs": packs,
                "loose": loose,
                "store_mb": size / 1e6,
            }
        )
        print(
            f"  {'on ' if auto else 'off'} event {n + 1:2}: strata {s * 1000:6.0f} ms, git "
            f"{g * 1000:6.0f} ms ({s / g:4.2f}x), has() {hit:5.1f} µs hit {miss:5.1f} µs miss, "
            f"{packs} packs, {loose} loose",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="strata-upkeep-"))
    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    results = {
        auto: run(work / ("on" if auto else "off"), args.events, args.files, auto)
        for auto in (True, False)
    }
    print(
        "\n| upkeep | events | strata ms (median of first 5 / last 5) | git ms | ratio | "
        "has() hit µs (first / last) | miss µs (last) | packs | loose | objects MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for auto, rows in results.items():
        first, last = rows[:5], rows[-5:]
        s1 = statistics.median(r["strata_s"] for r in first) * 1000
        s2 = statistics.median(r["strata_s"] for r in last) * 1000
        g2 = statistics.median(r["git_s"] for r in last) * 1000
        g1 = statistics.median(r["git_s"] for r in first) * 1000
        print(
            f"| {'on' if auto else 'off'} | {len(rows)} | {s1:.0f} / {s2:.0f} | "
            f"{g1:.0f} / {g2:.0f} | {s1 / g1:.2f}x / {s2 / g2:.2f}x | "
            f"{rows[0]['hit_us']:.1f} / {rows[-1]['hit_us']:.1f} | {rows[-1]['miss_us']:.1f} | "
            f"{rows[-1]['packs']:.0f} | {rows[-1]['loose']:.0f} | {rows[-1]['store_mb']:.0f} |"
        )
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
