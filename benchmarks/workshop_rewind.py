"""Message-level rewind across a publish, in a workspace of ``--files`` files.

A workspace of ``--files`` files (1 KiB each, 100 folders), recorded. A
Workshop conversation (scripted model, through the Python API): turn 1 edits
``--changed`` files in the Draft, the Draft is published (a checkpoint),
turn 2 edits them again. Then, timed (median of ``--repeat`` runs, each
undone with ``strata undo`` before the next):

* ``rewind`` to turn 1's answer: Published restored from the publish's
  checkpoint (a ``pre_restore`` checkpoint first), the Draft reopened at
  turn 1's revision, the head moved (target: < 0.5 s at 5,000 files);
* ``undo`` of that rewind (everything back).

Run:  .venv/bin/python benchmarks/workshop_rewind.py [--files 5000] [--changed 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"d{i % 100:03}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:05}.txt").write_bytes(f"file {i}\n".encode() * 128)


def edits(changed: int, tag: str) -> list[dict[str, Any]]:
    """A scripted turn: one step writing ``changed`` files, then the answer."""
    calls = [
        {
            "name": "write_file",
            "arguments": {"path": f"d{i % 100:03}/f{i:05}.txt", "content": f"{tag} {i}\n"},
        }
        for i in range(changed)
    ]
    return [{"tool_calls": calls}, {"text": f"Wrote {changed} files ({tag})."}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["STRATA_NO_DAEMON"] = "1"
    from strata import Repository
    from strata.providers.scripted import Scripted

    with tempfile.TemporaryDirectory(prefix="strata-bench-workshop-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        build(root, args.files)
        repo = Repository.init(root)
        repo.snapshot("base")
        provider = Scripted(edits(args.changed, "one") + edits(args.changed, "two"))
        workshop = repo.workshop(provider=provider)
        workshop.send("first edit")
        target = workshop.head
        assert target is not None
        workshop.publish()
        workshop.send("second edit")
        rewinds: list[float] = []
        undos: list[float] = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = workshop.rewind(target)
            rewinds.append(time.perf_counter() - start)
            assert result.published_from_checkpoint is not None
            start = time.perf_counter()
            repo.undo()
            undos.append(time.perf_counter() - start)
        repo.close()
    rewind, undo = statistics.median(rewinds), statistics.median(undos)
    verdict = "meets" if rewind < 0.5 else "misses"
    print(f"# Workshop rewind across a publish ({datetime.date.today()})")
    print()
    print(
        f"{args.files} files, {args.changed} changed per turn, median of {args.repeat}; "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    )
    print()
    print("| operation | median | min | max |")
    print("| --- | --- | --- | --- |")
    for name, times in (("rewind across a publish", rewinds), ("undo of the rewind", undos)):
        print(
            f"| {name} | {statistics.median(times) * 1000:.0f} ms "
            f"| {min(times) * 1000:.0f} ms | {max(times) * 1000:.0f} ms |"
        )
    print()
    print(
        f"Target < 500 ms for the rewind: {verdict} it "
        f"({rewind * 1000:.0f} ms; undo {undo * 1000:.0f} ms)."
    )


if __name__ == "__main__":
    main()
