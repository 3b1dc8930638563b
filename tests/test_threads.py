"""One Repository shared by threads, and the AsyncRepository over it.

Writers are threads of this process sharing one ``Repository``: their
snapshots must take turns (one linear history, nothing lost, the chain
verifies); readers on other threads run meanwhile and must see whole
operations only. Both ledger drivers are exercised.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strata import AsyncRepository, Repository
from strata.errors import RepositoryLocked
from strata.layout import WriteLock
from strata.ledger.events import Author, Event

DRIVERS = ["sqlite", "jsonl"]
THREADS = 8
SNAPSHOTS = 5


def content(worker: int, step: int) -> str:
    return f"thread {worker} step {step}\n" + "y" * (step * 5 + worker)


def write_and_snapshot(repo: Repository, ws: Path, worker: int) -> list[str]:
    """Write this worker's file SNAPSHOTS times, snapshotting after each write."""
    recorded: list[str] = []
    for step in range(SNAPSHOTS):
        (ws / f"t{worker}.txt").write_text(content(worker, step))
        result = repo.snapshot(
            f"thread {worker} step {step}", author=Author(f"thread-{worker}", "agent")
        )
        if result.event is not None:  # None: another thread's snapshot already took it
            recorded.append(result.event.id)
    return recorded


def assert_linear_and_complete(repo: Repository, recorded: list[list[str]]) -> list[Event]:
    """Every acknowledged snapshot is in history once, on one line; every write was captured."""
    events = list(reversed(repo.history()))
    acknowledged = [eid for ids in recorded for eid in ids]
    assert len(acknowledged) == len(set(acknowledged)), "an event acknowledged twice"
    assert {e.id for e in events} == set(acknowledged), "no event lost, none unaccounted for"
    assert {e.action_type for e in events} == {"snapshot"}
    # writes took turns: each snapshot's parent is the one recorded just before it
    assert events[0].parent_event_id is None
    for older, newer in itertools.pairwise(events):
        assert newer.parent_event_id == older.id
    assert {e.branch for e in events} == {"main"}
    assert repo.view().head_event == events[-1].id
    # one operation per snapshot, no more
    assert len(repo.operations()) == len(events)
    # every write of every thread is in some recorded snapshot
    seen = {
        (e.id, w): repo.show(e.id, f"t{w}.txt").decode()
        for e in events
        for w in range(THREADS)
        if f"t{w}.txt" in repo.show(e.id, "").decode().split()
    }
    for worker in range(THREADS):
        for step in range(SNAPSHOTS):
            assert content(worker, step) in {
                text for (_, w), text in seen.items() if w == worker
            }, f"thread {worker} step {step} was never recorded"
    assert repo.check() == []
    return events


@pytest.mark.parametrize("driver", DRIVERS)
def test_threads_snapshot_at_once_and_lose_nothing(
    ws: Path, make_repo: Callable[..., Repository], driver: str
) -> None:
    repo = make_repo(ws, ledger=driver)
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(write_and_snapshot, repo, ws, w) for w in range(THREADS)]
        recorded = [f.result() for f in futures]  # re-raises a thread's exception
    events = assert_linear_and_complete(repo, recorded)
    for worker in range(THREADS):
        assert repo.show("HEAD", f"t{worker}.txt").decode() == content(worker, SNAPSHOTS - 1)
    by_author = {e.author.name for e in events}
    assert by_author <= {f"thread-{w}" for w in range(THREADS)}
    # a second Repository opened afterwards reads the same ledger
    with Repository.open(ws) as again:
        assert [e.id for e in again.history()] == [e.id for e in reversed(events)]
        assert again.check() == []


@pytest.mark.parametrize("driver", DRIVERS)
def test_readers_see_whole_operations_while_threads_write(
    ws: Path, make_repo: Callable[..., Repository], driver: str
) -> None:
    repo = make_repo(ws, ledger=driver)
    (ws / "base.txt").write_text("base\n")
    repo.snapshot("base")
    stop = threading.Event()
    reads = {"history": 0, "status": 0, "diff": 0}
    started = {name: threading.Event() for name in reads}  # set after a reader's first read

    def read_history() -> None:
        while not stop.is_set():
            # operations first: every event they name is in the history read after them
            ops = repo.operations()
            history = repo.history()
            ids = {e.id for e in history}
            for op in ops:
                assert set(op.events) <= ids, "an operation visible before its events"
            # history first: every event in it belongs to an operation read after it
            history = repo.history()
            op_ids = {op.id for op in repo.operations()}
            for event in history:
                assert event.operation_id in op_ids, "an event visible before its operation"
            for older, newer in itertools.pairwise(reversed(history)):
                assert newer.parent_event_id == older.id
            reads["history"] += 1
            started["history"].set()

    def read_status() -> None:
        while not stop.is_set():
            status = repo.status()
            assert status.head is not None
            assert all(f.path.startswith(("t", "base")) for f in status.changes)
            reads["status"] += 1
            started["status"].set()

    def read_diff() -> None:
        while not stop.is_set():
            # between two recorded points (the working tree changes under a diff of it)
            first = repo.history()[-1]
            assert first.rationale == "base"
            diff = repo.diff(first.id, "HEAD")
            assert {f.path for f in diff.files} <= {f"t{w}.txt" for w in range(THREADS)}
            assert all(f.status == "added" for f in diff.files)
            reads["diff"] += 1
            started["diff"].set()

    with ThreadPoolExecutor(THREADS + 3) as pool:
        readers = [pool.submit(read) for read in (read_history, read_status, read_diff)]
        for reader, first_read in zip(readers, started.values(), strict=True):
            # every reader is reading before the writers start
            while not first_read.wait(0.05) and not reader.done():
                pass
            assert first_read.is_set(), reader.result()  # a reader that failed says why
        writers = [pool.submit(write_and_snapshot, repo, ws, w) for w in range(THREADS)]
        try:
            recorded = [f.result() for f in writers]
        finally:
            stop.set()
        for f in readers:
            f.result()  # re-raises a reader's failed assertion
    assert all(n > 0 for n in reads.values()), reads
    events = assert_linear_and_complete(
        repo, [[e.id for e in repo.history() if e.rationale == "base"], *recorded]
    )
    assert events[0].rationale == "base"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_threads_ledger_files_close_when_the_thread_ends(
    ws: Path, make_repo: Callable[..., Repository], driver: str
) -> None:
    repo = make_repo(ws, ledger=driver)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("one")

    def threads_read(n: int) -> int:
        for _ in range(n):  # threads that read once and end, as a server's request threads do
            thread = threading.Thread(target=repo.history)
            thread.start()
            thread.join()
        gc.collect()
        return open_fds()

    # SQLite may keep one closed connection's file open for reuse: count after one thread
    baseline = threads_read(1)
    assert threads_read(20) == baseline, "each ended thread left its ledger files open"
    # a thread still running keeps its files until the repository is closed
    started, finish = threading.Event(), threading.Event()

    def read_and_wait() -> None:
        repo.history()
        started.set()
        finish.wait(5)

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(read_and_wait)
        started.wait(5)
        assert open_fds() > baseline
        repo.close()
        assert open_fds() < baseline, "close() closed every thread's ledger files"
        finish.set()
        waiting.result()


def test_the_write_lock_is_held_by_one_thread_at_a_time(tmp_path: Path) -> None:
    lock = WriteLock(tmp_path / "lock", timeout=5.0)
    order: list[str] = []
    inside = threading.Event()
    leave = threading.Event()

    def holder() -> None:
        with lock:
            with lock:  # the holding thread may enter again
                assert lock.depth == 2
            order.append("first in")
            inside.set()
            leave.wait(5)
            order.append("first out")

    def waiter() -> None:
        inside.wait(5)
        assert not lock.held, "another thread's lock is not this thread's"
        with lock:
            order.append("second in")
            assert lock.depth == 1

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(holder)
        second = pool.submit(waiter)
        inside.wait(5)
        time.sleep(0.2)  # the waiter is blocked now
        assert order == ["first in"]
        leave.set()
        first.result()
        second.result()
    assert order == ["first in", "first out", "second in"]
    assert not lock.held

    # a thread gives up after the timeout, as a process does
    impatient = WriteLock(tmp_path / "lock", timeout=0.2)
    with impatient, ThreadPoolExecutor(1) as pool:
        failed = pool.submit(impatient.__enter__)
        with pytest.raises(RepositoryLocked):
            failed.result()


@pytest.mark.parametrize("driver", DRIVERS)
def test_threads_read_the_converted_ledger(
    ws: Path, make_repo: Callable[..., Repository], driver: str
) -> None:
    repo = make_repo(ws, ledger=driver)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("one")
    other = "jsonl" if driver == "sqlite" else "sqlite"
    with ThreadPoolExecutor(1) as pool:  # one thread: the same driver before and after
        before = pool.submit(lambda: (repo.ledger.driver.name, repo.history())).result()
        assert before[0] == driver
        repo.convert_ledger(other)
        (ws / "a.txt").write_text("b\n")
        repo.snapshot("two")
        name, after = pool.submit(lambda: (repo.ledger.driver.name, repo.history())).result()
    assert name == other
    assert [e.rationale for e in after] == ["two", "one"]
    assert [e.id for e in after[1:]] == [e.id for e in before[1]]


@pytest.mark.parametrize("driver", DRIVERS)
def test_async_repository(ws: Path, driver: str) -> None:
    Repository.init(ws, ledger=driver).close()
    author = Author("async", "agent")

    async def session() -> None:
        async with AsyncRepository.open(ws, author=author) as repo:
            (ws / "a.txt").write_text("one\n")
            first = await repo.snapshot("first")
            assert first.event is not None
            first_id = first.event.id
            # calls overlap: the writes take turns, the reads run beside them
            for n in range(4):
                (ws / f"n{n}.txt").write_text(f"{n}\n")
            snapshots, during, _ = await asyncio.gather(
                asyncio.gather(*(repo.snapshot(f"gathered {n}") for n in range(4))),
                repo.history(),
                repo.status(),
            )
            made = [r.event.id for r in snapshots if r.event is not None]
            assert first.event.id in {e.id for e in during}
            assert made, "the gathered snapshots recorded the four files"
            history = await repo.history()
            assert [e.id for e in history] == [*reversed(made), first.event.id]
            for older, newer in itertools.pairwise(reversed(history)):
                assert newer.parent_event_id == older.id
            assert (await repo.show("HEAD", "n3.txt")) == b"3\n"
            assert [f.path for f in (await repo.diff(first.event.id, "HEAD")).files] == [
                f"n{n}.txt" for n in range(4)
            ]
            mark = await repo.bookmark("add", "start", ref=first.event.id)
            assert mark.name == "start"
            rewound = await repo.rewind("start")
            assert rewound.event is not None
            assert not (ws / "n0.txt").exists()
            assert (await repo.status()).clean
            await repo.undo()
            assert (ws / "n0.txt").read_text() == "0\n"
            await repo.redo()
            assert not (ws / "n0.txt").exists()
            ops = await repo.operations()
            assert [op.command for op in ops[:3]] == ["redo", "undo", "rewind"]
            assert (await repo.check()) == []
        # the context closed it; opening again works, and awaiting open is the other form
        again = await AsyncRepository.open(ws)
        try:
            head = await again.head()
            assert head is not None and head.id == first_id  # where the redone rewind left it
        finally:
            await again.aclose()

    asyncio.run(session())
