"""Several processes recording one workspace at once: one writer per operation, no lost event.

Writers are real processes (``python -m strata snapshot``, or a child that
opens the Repository in a loop); readers (``history``, ``status``) run while
they write and must never wait for long.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CliRunner
from strata import Repository

pytestmark = pytest.mark.slow

WORKERS = 4
SNAPSHOTS = 10
READ_LIMIT_S = 5.0  # a reader that waited this long was blocked by a writer


def content(worker: int, step: int) -> str:
    return f"worker {worker} step {step}\n" + "x" * (step * 7 + worker)


def verify_history(ws: Path, reported: dict[int, list[str]]) -> None:
    """Every acknowledged snapshot is in history, on one unbroken line, with its author."""
    with Repository.open(ws) as repo:
        events = list(reversed(repo.history()))
        assert {e.action_type for e in events} == {"snapshot"}
        by_id = {e.id: e for e in events}
        acknowledged = [eid for ids in reported.values() for eid in ids]
        assert len(acknowledged) == len(set(acknowledged))
        assert set(acknowledged) == set(by_id), "no event lost, none unaccounted for"
        # a worker may record nothing itself (under load, another writer's snapshot can take
        # each of its writes first); that its writes were kept is checked on HEAD below
        for worker, ids in reported.items():
            for eid in ids:
                assert by_id[eid].author.name == f"worker-{worker}"
        # one writer per operation: each snapshot's parent is the one recorded before it
        assert events[0].parent_event_id is None
        for older, newer in itertools.pairwise(events):
            assert newer.parent_event_id == older.id
        assert {e.branch for e in events} == {"main"}
        assert repo.view().branches == {"main": events[-1].id}
        # the newest snapshot holds every worker's last write
        for worker in range(WORKERS):
            got = repo.show("HEAD", f"w{worker}.txt").decode()
            assert got == content(worker, SNAPSHOTS - 1)
        assert repo.check() == []


class Readers:
    """Threads that read while the writers write, timing every read."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.times: dict[str, list[float]] = {}
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def add(
        self, name: str, read: Callable[[], None], done: Callable[[], None] | None = None
    ) -> None:
        """Run ``read`` in a loop on a new thread, then ``done`` on that thread."""
        self.times[name] = []

        def loop() -> None:
            try:
                while not self.stop.is_set():
                    start = time.monotonic()
                    read()
                    self.times[name].append(time.monotonic() - start)
            except BaseException as exc:  # reported by the test thread
                self.errors.append(exc)
            finally:
                if done is not None:
                    done()

        thread = threading.Thread(target=loop, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        if self.errors:
            raise self.errors[0]
        for name, times in self.times.items():
            print(f"{name}: {len(times)} reads, slowest {max(times, default=0):.3f} s")
            assert times, f"the {name} reader never finished a read"
            assert max(times) < READ_LIMIT_S, f"{name} waited {max(times):.1f} s"


def test_four_cli_processes_snapshot_at_once_and_lose_nothing(ws: Path, run_cli: CliRunner) -> None:
    code, _, err = run_cli("init", cwd=ws)
    assert code == 0, err
    reported: dict[int, list[str]] = {w: [] for w in range(WORKERS)}
    failures: list[str] = []
    start = threading.Barrier(WORKERS)

    def writer(worker: int) -> None:
        start.wait()
        for step in range(SNAPSHOTS):
            (ws / f"w{worker}.txt").write_text(content(worker, step))
            code, out, err = run_cli(
                "snapshot",
                "--json",
                "--author",
                f"worker-{worker}",
                "--author-kind",
                "agent",
                "-m",
                f"worker {worker} step {step}",
                cwd=ws,
                timeout=120,
            )
            if code != 0:
                failures.append(f"worker {worker} step {step}: exit {code}: {err}")
                return
            event = json.loads(out)["event_id"]
            if event is not None:  # None: another writer recorded this change already
                reported[worker].append(event)

    def cli_read(*args: str) -> Callable[[], None]:
        def read() -> None:
            code, out, err = run_cli(*args, cwd=ws, timeout=60)
            assert code == 0, err
            json.loads(out)

        return read

    readers = Readers()
    readers.add("history", cli_read("history", "--json", "--limit", "5"))
    readers.add("status", cli_read("status", "--json"))
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    readers.finish()
    assert not failures, failures

    verify_history(ws, reported)
    code, _, err = run_cli("ledger", "verify", cwd=ws)
    assert code == 0, err
    code, _, err = run_cli("check", cwd=ws)
    assert code == 0, err


CHILD = r"""
import json, sys, time
from pathlib import Path
from strata import Author, Repository

ws, worker, snapshots, go = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
me = Author(f"worker-{worker}", "agent")
while not go.exists():
    time.sleep(0.001)
for step in range(snapshots):
    text = f"worker {worker} step {step}\n" + "x" * (step * 7 + worker)
    (ws / f"w{worker}.txt").write_text(text)
    with Repository.open(ws, author=me) as repo:
        result = repo.snapshot(f"worker {worker} step {step}")
    print(json.dumps(result.event.id if result.event else None), flush=True)
"""


def test_four_library_processes_snapshot_at_once_while_readers_read(
    ws: Path, tmp_path: Path
) -> None:
    Repository.init(ws).close()
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ws), str(w), str(SNAPSHOTS), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    opened: list[Repository] = []  # one long-lived reader, opened in its own thread
    seen: list[int] = []

    def history() -> None:
        if not opened:
            opened.append(Repository.open(ws))
        seen.append(len(opened[0].history(limit=50)))

    def status() -> None:
        with Repository.open(ws) as repo:
            repo.status()
            repo.view()

    readers = Readers()

    def close() -> None:
        for repo in opened:
            repo.close()

    readers.add("history", history, close)
    readers.add("status", status)
    try:
        time.sleep(0.2)  # let every child reach the starting line
        go.touch()
        reported: dict[int, list[str]] = {}
        for w, child in enumerate(children):
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            reported[w] = [i for i in map(json.loads, out.split()) if i is not None]
        readers.finish()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert max(seen) > 0 and min(seen) < max(seen), "the readers saw the history grow"
    verify_history(ws, reported)
    with Repository.open(ws) as repo:
        assert repo.ledger.verify() is None
        assert repo.ledger.driver.verify_index() == []
