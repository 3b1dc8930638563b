"""Strata Studio in a real browser: first paint of a large timeline, a 10,000-line diff,
a play-head move at 20,000 files, and the delay before a new event shows.

Usage: .venv/bin/python benchmarks/studio.py [--events N] [--files N]

The peer of each figure is its target from the studio's issue (the ratio is
measured / target: below 1 meets it). Timings come from the browser's own
clock (Navigation and Paint Timing; the fetch the play head makes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from strata import Author, Repository
from strata.studio import running

BOT = Author("bot", "agent")


def build(root: Path, events: int, files: int) -> None:
    for d in range(files // 1000):
        folder = root / f"pkg{d:02d}"
        folder.mkdir(parents=True)
        for i in range(1000):
            (folder / f"m{i:04d}.py").write_text(f"X = {i}\n")
    (root / "big.py").write_text("".join(f"value_{i} = {i}\n" for i in range(10_000)))
    with Repository.create(root)[0] as repo:
        (root / "big.py").write_text("".join(f"value_{i} = {i * 2}\n" for i in range(10_000)))
        (root / "pkg00" / "m0000.py").write_text("X = -1\n")
        repo.snapshot("double every value", author=BOT)
        head = repo.view().head_event
        done = 2
        while done < events:
            with repo.transaction("note", BOT) as tx:
                for _ in range(min(1000, events - done)):
                    tx.annotate("system_event", anchor=head, rationale=f"step {done}")
                    done += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="studio-bench-"))
    root = tmp / "ws"
    started = time.monotonic()
    build(root, args.events, args.files)
    print(f"built {args.events} events, {args.files} files in {time.monotonic() - started:.0f} s")
    browser_path = shutil.which("chromium") or "chromium"
    flags = ["--no-sandbox"] if os.geteuid() == 0 else []
    rows = []
    with running([root]) as studio, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=flags)
        # the figures are read with page.evaluate, which the studio's CSP would refuse
        page = browser.new_context(bypass_csp=True).new_page()
        page.goto(studio.url)
        base = f"http://127.0.0.1:{studio.port}/w/0"

        def paint(url: str) -> float:
            page.goto(url)
            page.wait_for_function(
                "performance.getEntriesByName('first-contentful-paint').length > 0"
            )
            return float(
                page.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime")
            )

        timeline = [paint(base + "/timeline") for _ in range(args.runs)]
        rows.append(("timeline first paint", args.events, timeline, 300))
        diff = [paint(base + "/diff?a=HEAD~1&b=HEAD&path=big.py") for _ in range(args.runs)]
        rows.append(("10,000-line diff first paint", 10_000, diff, 500))
        split = [
            paint(base + "/diff?a=HEAD~1&b=HEAD&path=big.py&mode=split") for _ in range(args.runs)
        ]
        rows.append(("10,000-line diff, side by side", 10_000, split, 500))
        page.goto(base + "/timeline?action=snapshot")
        moves = []
        for i in range(args.runs):
            before = page.get_attribute("#tree", "data-loaded-ms")
            t0 = time.monotonic()
            page.locator("#playhead").fill(str(i % 2))
            page.wait_for_function(
                f"document.querySelector('#tree').getAttribute('data-loaded-ms') !== {before!r}"
                if before
                else "document.querySelector('#tree').hasAttribute('data-loaded-ms')"
            )
            moves.append((time.monotonic() - t0) * 1000)
            page.evaluate("document.querySelector('#tree').removeAttribute('data-loaded-ms')")
        rows.append(("play-head move (tree shown)", args.files, moves, 150))
        page.goto(base + "/timeline")
        live = []
        with Repository.open(root) as repo:
            for i in range(args.runs):
                (root / "live.txt").write_text(str(i))
                t0 = time.monotonic()
                repo.snapshot(f"live {i}")
                page.wait_for_selector(f"text=live {i}", timeout=10_000)
                live.append((time.monotonic() - t0) * 1000)
        rows.append(("event appears in the open page", args.events, live, 1000))
        browser.close()
    print(f"\n{'what':34} {'size':>8} {'median ms':>10} {'target ms':>10} {'ratio':>6}")
    for what, size, values, target in rows:
        median = statistics.median(values)
        print(f"{what:34} {size:>8} {median:>10.0f} {target:>10} {median / target:>6.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
