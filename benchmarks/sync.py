"""The Git sync's cost: a first sync, then one new operation, against git committing the same.

A workspace of ``--files`` files in ``--folders`` folders is a git work tree;
``--ops`` snapshots each change one file. Rows (milliseconds, median of
``--runs`` for the incremental rows):

* ``first``       ``GitSync.sync()`` of the whole history (every operation a commit,
                  each verified);
* ``noop``        a second sync with nothing new;
* ``one``         a sync after one more snapshot (one new commit, verified);
* ``git commit``  the peer of ``one``: ``git add -A && git commit`` of the same
                  one-file change in the same work tree (a private index, as a
                  user's own commit would cost);
* ``one / git``   the ratio.

``one`` should not grow with ``--ops`` (a sync reads only new operations).

Usage::

    python benchmarks/sync.py [--files 2000] [--folders 40] [--ops 100] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from strata import Repository
from strata.sync.git import GitSync


def git(ws: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--folders", type=int, default=40)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.com",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.com",
        "GIT_INDEX_FILE": "",
    }
    del env["GIT_INDEX_FILE"]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        for i in range(args.files):
            folder = ws / f"d{i % args.folders}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{i}.txt").write_text(f"file {i}\n" * 20)
        git(ws, "init", "-q", env=env)
        repo = Repository.init(ws)
        for n in range(args.ops):
            (ws / "d0" / "f0.txt").write_text(f"change {n}\n")
            repo.snapshot(message=f"op {n}")
        with GitSync(repo) as sync:
            start = time.perf_counter()
            first = sync.sync()
            first_ms = (time.perf_counter() - start) * 1000
            noop, one, peer = [], [], []
            for n in range(args.runs):
                start = time.perf_counter()
                sync.sync()
                noop.append((time.perf_counter() - start) * 1000)
                (ws / "d1" / "f1.txt").write_text(f"again {n}\n")
                repo.snapshot(message=f"more {n}")
                start = time.perf_counter()
                done = sync.sync()
                one.append((time.perf_counter() - start) * 1000)
                assert len(done.commits) == 1
                (ws / "d2" / "f2.txt").write_text(f"peer {n}\n")
                start = time.perf_counter()
                git(ws, "add", "-A", env=env)
                git(ws, "commit", "-q", "-m", f"peer {n}", env=env)
                peer.append((time.perf_counter() - start) * 1000)
        repo.close()
    cpus = len(os.sched_getaffinity(0))
    print(f"{args.files} files, {args.ops} operations, {cpus} cores, {time.strftime('%F %H:%M')}")
    made = f"{len(first.commits)} commits, {first.verified} verified"
    print(f"first       {first_ms:9.1f} ms  ({made})")
    print(f"noop        {statistics.median(noop):9.1f} ms")
    print(f"one         {statistics.median(one):9.1f} ms")
    print(f"git commit  {statistics.median(peer):9.1f} ms")
    print(f"one / git   {statistics.median(one) / statistics.median(peer):9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
