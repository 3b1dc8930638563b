"""The ledger at scale: append throughput, filtered history queries, seek by id, chain verify.

For each driver (SQLite, and JSONL when ``strata.ledger.drivers.jsonl`` has a
``JsonlDriver``), in-process:

1. append throughput on a fresh ledger through ``Ledger.commit``: operations of
   100 events (batched; target >= 5,000 events/s on SQLite), and operations of
   one event (what one ``strata snapshot`` appends), for information;
2. a synthetic ledger is bulk-loaded to each size in ``--sizes`` (default
   100,000 and 1,000,000 events): records are sealed in a loop and handed to
   ``driver.append`` in chunks, bypassing ``Ledger.commit`` (one operation record
   per 100 events; no ref records);
3. at each size: ``driver.find_events(EventFilter(...), limit=50)`` with each
   indexed filter (median of ``--repeat`` runs; target < 50 ms at 1,000,000
   events), ``seek_event`` by random ids (JSONL: O(1), so flat as the ledger
   grows), batched appends into the big ledger, and ``verify_chain`` over
   every record (the hash-chain part of ``strata check``).

The synthetic events: 10 branches (half the events on ``main``; ``hotfix``
only among the first 100 events, so its matches are the oldest), 20 authors,
author kinds human 40 % / agent 50 % / system 8 % / llm 2 %, action types
snapshot 80 % / auto_save 10 % / rewind 10 % (rewinds are annotations anchored
at the previous state event), 1-3 files each out of 1,000 paths in 50 folders.

Bulk sealing canonicalizes with ``json.dumps(sort_keys=True)``, which equals
RFC 8785 for these ASCII-only bodies (checked on the first record of every
chunk; ``verify_chain`` then re-hashes every record with the real JCS).

Run:  .venv/bin/python benchmarks/ledger.py [--sizes 100000,1000000] [--drivers sqlite,jsonl]
      [--repeat 5] [--work DIR] [--keep]
      .venv/bin/python benchmarks/ledger.py --big-events 1,1000,10000 [--commits 40]
      (only: a one-file commit after that many 5,000-file events, see ``big_events``)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from strata.ledger.driver import EventFilter, LedgerDriver
from strata.ledger.drivers.sqlite import SqliteDriver
from strata.ledger.events import format_ts
from strata.ledger.ledger import Ledger, View, moved
from strata.ledger.records import Record, canonical, verify_chain

HERE = Path(__file__).resolve().parent
ALPHABET = "ghjkmnpqrstvwxyz"
T0_MS = 1_790_000_000_000
BATCH = 100  # events per operation
CHUNK = 20_000  # records per driver.append during the bulk load
KINDS = ["human"] * 20 + ["agent"] * 25 + ["system"] * 4 + ["llm"]
MIX = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: i -> i * MIX mod 2**80 is a bijection


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the synthetic ledger --------------------------------------------------------------


def event_id(i: int, salt: int = 0) -> str:
    """A unique 20-letter id for event ``i`` (a bijection of i, so never a collision)."""
    v = ((i + (salt << 60)) * MIX) % (1 << 80)
    return "".join(ALPHABET[(v >> (4 * k)) & 15] for k in range(20))


def op_id(batch: int) -> str:
    return event_id(batch, salt=1)


def path_of(n: int) -> str:
    return f"src/mod{n % 50:02d}/file_{n // 50 % 20:03d}.py"


def event_body(i: int, batch: int, parent: str | None) -> dict[str, Any]:
    """Event ``i`` of the synthetic history (fields drawn from a hash of ``i``)."""
    h = (i * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    action = ("snapshot",) * 8 + ("auto_save", "rewind")
    action_type = action[h % 10]
    if action_type == "rewind" and parent is None:
        action_type = "snapshot"  # an annotation needs a state event to anchor at
    if i < 100:
        branch = "hotfix"
    elif (h >> 4) % 10 < 5:
        branch = "main"
    else:
        branch = f"feature-{(h >> 4) % 10}"
    files = sorted({path_of((h >> 8) + k * 131) for k in range(1 + (h >> 20) % 3)})
    body: dict[str, Any] = {
        "id": event_id(i),
        "ts": format_ts(T0_MS + i),
        "author": {"name": f"author-{(h >> 24) % 20:02d}", "kind": KINDS[(h >> 14) % 50]},
        "action_type": action_type,
        "branch": branch,
        "operation_id": op_id(batch),
        "action_scope": "project",
        "diff_mode": "unified",
        "rationale": f"event {i}",
        "files": files,
        "snapshot_ref": None,
        "parent_event_id": None,
    }
    if action_type == "rewind":
        body["anchor_event_id"] = parent
    else:
        body["snapshot_ref"] = blake3.blake3(i.to_bytes(8, "big")).hexdigest()
        body["parent_event_id"] = parent
        body["data"] = {"files_changed": len(files), "insertions": i % 17, "deletions": i % 5}
    return body


def fast_canonical(value: Any) -> bytes:
    """JCS for ASCII-only JSON of strings, ints, lists, dicts and null."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class FastRecord(Record):
    """A record whose stored line is made with :func:`fast_canonical`."""

    def to_line(self) -> bytes:
        return fast_canonical(self.to_json())


def fast_seal(seq: int, kind: str, body: dict[str, Any], prev: str) -> Record:
    digest = blake3.blake3(
        fast_canonical({"body": body, "kind": kind, "prev": prev, "seq": seq})
    ).hexdigest()
    return FastRecord(seq, kind, body, prev, digest)  # type: ignore[arg-type]


@dataclass
class Generator:
    """Makes the synthetic ledger in order, chunk by chunk."""

    events: int = 0  # events made so far
    seq: int = 0
    prev: str = ""
    parent: str | None = None

    def chunk(self, up_to: int) -> Iterator[list[Record]]:
        """Records for events ``self.events .. up_to - 1``, in chunks of about CHUNK."""
        out: list[Record] = []
        while self.events < up_to:
            batch = self.events // BATCH
            ids = []
            for i in range(self.events, min(self.events + BATCH, up_to)):
                body = event_body(i, batch, self.parent)
                if body["action_type"] != "rewind":
                    self.parent = body["id"]
                ids.append(body["id"])
                out.append(self._seal("event", body))
            self.events += len(ids)
            out.append(
                self._seal(
                    "operation",
                    {
                        "id": op_id(batch),
                        "command": "bench",
                        "ts": format_ts(T0_MS + self.events),
                        "author": {"name": "bench", "kind": "system"},
                        "events": ids,
                        "view_before": View().to_json(),
                        "view_after": View().to_json(),
                    },
                )
            )
            if len(out) >= CHUNK:
                yield out
                out = []
        if out:
            yield out

    def _seal(self, kind: str, body: dict[str, Any]) -> Record:
        self.seq += 1
        record = fast_seal(self.seq, kind, body, self.prev)
        if self.seq == 1 or self.seq % CHUNK == 0:  # the fast path must agree with JCS
            assert canonical(body) == fast_canonical(body), body
            assert Record.seal(self.seq, record.kind, body, self.prev).hash == record.hash
        self.prev = record.hash
        return record


# -- drivers ---------------------------------------------------------------------------


def jsonl_driver_class() -> Any:
    try:
        from strata.ledger.drivers.jsonl import JsonlDriver
    except ImportError:
        return None
    return JsonlDriver


def open_driver(kind: str, folder: Path, *, create: bool = False) -> LedgerDriver:
    if kind == "sqlite":
        return SqliteDriver(folder / "ledger.db", create=create)
    cls = jsonl_driver_class()
    return cls(folder / "ledger", create=create, writer=True)  # type: ignore[no-any-return]


def disk_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# -- measurements ---------------------------------------------------------------------


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = func()
    return time.perf_counter() - start, value


def append_throughput(kind: str, folder: Path, *, per_op: int, ops: int) -> float:
    """Events/s appended through Ledger.commit, ``per_op`` events per operation."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ledger = Ledger(open_driver(kind, folder, create=True), rng=random.Random(7))
    author = {"name": "bench", "kind": "agent"}
    parent: str | None = None
    n = 0
    start = time.perf_counter()
    for _ in range(ops):
        op = ledger.begin("bench", author)
        for _ in range(per_op):
            body = event_body(n + 1000, 0, parent)
            body["id"] = ledger.new_id()
            body["operation_id"] = op.id
            if body["action_type"] == "rewind":
                body["anchor_event_id"] = parent
            else:
                body["parent_event_id"] = parent
                parent = body["id"]
            op.add_event(body)
            n += 1
        op.after = moved(op.before, head_event=parent, branches={"main": parent})
        ledger.commit(op)
    elapsed = time.perf_counter() - start
    assert ledger.verify() is None
    ledger.close()
    return n / elapsed


def append_into(driver: LedgerDriver, gen: Generator, events: int) -> float:
    """Events/s for driver.append of pre-sealed 100-event operations into a big ledger."""
    times = []
    for _ in range(events // BATCH):
        (records,) = list(gen.chunk(gen.events + BATCH))
        elapsed, _ = timed(lambda r=records: driver.append(r))  # type: ignore[misc]
        times.append(elapsed)
    return BATCH * len(times) / sum(times)


def filters(size: int) -> list[tuple[str, EventFilter]]:
    """(label, filter) for the query table."""
    middle_batch = size // BATCH // 2
    sample = path_of(21)  # one of 1,000 files
    folder = sample.rsplit("/", 1)[0]
    return [
        ("none (plain history)", EventFilter()),
        ("branch=main (50 %)", EventFilter(branch="main")),
        ("branch=hotfix (the first 100 events only)", EventFilter(branch="hotfix")),
        ("operation_id (one op of 100, mid-ledger)", EventFilter(operation_id=op_id(middle_batch))),
        ("author (5 %)", EventFilter(author="author-07")),
        ("author_kind=llm (2 %)", EventFilter(author_kind="llm")),
        ("action_type=rewind (10 %)", EventFilter(action_type="rewind")),
        (f"path={sample} (one file)", EventFilter(path=sample)),
        (f"path={folder} (a folder)", EventFilter(path=folder)),
        ("author + action_type (0.5 %)", EventFilter(author="author-03", action_type="auto_save")),
        ("author_kind=llm + folder path (0.1 %)", EventFilter(author_kind="llm", path=folder)),
        ("author + branch=hotfix (oldest, rare)", EventFilter(author="author-03", branch="hotfix")),
    ]


def query_times(
    driver: LedgerDriver, size: int, repeat: int
) -> list[tuple[str, float, float, int]]:
    """(label, median ms, max ms, rows returned) of each filter with limit 50."""
    out = []
    for label, where in filters(size):
        runs = []
        rows = 0
        for _ in range(repeat):
            elapsed, got = timed(lambda w=where: list(driver.find_events(w, limit=50)))  # type: ignore[misc]
            runs.append(elapsed * 1000)
            rows = len(got)
            assert all(r.kind == "event" for r in got)
        out.append((label, statistics.median(runs), max(runs), rows))
    return out


def seek_time(driver: LedgerDriver, size: int, count: int = 2000) -> float:
    """Mean microseconds of seek_event over random ids (every one must be found)."""
    rng = random.Random(size)
    ids = [event_id(rng.randrange(size)) for _ in range(count)]
    start = time.perf_counter()
    for i in ids:
        found = driver.seek_event(i)
        assert found is not None and found.body["id"] == i
    return (time.perf_counter() - start) / count * 1e6


# -- the run ---------------------------------------------------------------------------


@dataclass
class Result:
    driver: str
    appends: dict[str, float]
    sizes: dict[int, dict[str, Any]]
    error: str | None = None


def bench_driver(kind: str, work: Path, sizes: list[int], repeat: int) -> Result:
    result = Result(kind, {}, {})
    log(f"[{kind}] append throughput")
    result.appends["batched (100 events per op)"] = append_throughput(
        kind, work / f"{kind}-append", per_op=BATCH, ops=50
    )
    result.appends["one event per op"] = append_throughput(
        kind, work / f"{kind}-append", per_op=1, ops=300
    )
    shutil.rmtree(work / f"{kind}-append", ignore_errors=True)

    folder = work / f"{kind}-big"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    driver = open_driver(kind, folder, create=True)
    gen = Generator()
    loaded_s = 0.0
    try:
        for size in sizes:
            log(f"[{kind}] loading to {size:,} events")
            start = time.perf_counter()
            for records in gen.chunk(size):
                driver.append(records)
            loaded_s += time.perf_counter() - start
            # reopen, as a reading command would
            driver.close()
            driver = open_driver(kind, folder)
            log(f"[{kind}] {size:,}: queries")
            at: dict[str, Any] = {"load_s": loaded_s, "records": driver.count()}
            at["queries"] = query_times(driver, size, repeat)
            at["seek_us"] = seek_time(driver, size)
            log(f"[{kind}] {size:,}: verify_chain")
            elapsed, broken = timed(lambda d=driver: verify_chain(d.scan()))  # type: ignore[misc]
            assert broken is None, broken
            at["verify_s"] = elapsed
            at["disk_mb"] = disk_size(folder) / 1e6
            log(f"[{kind}] {size:,}: appends into the big ledger")
            at["append_big"] = append_into(driver, gen, 2000)  # the next size counts them
            result.sizes[size] = at
    finally:
        driver.close()
    return result


# -- big events: does a 5,000-file event make later commits slower? ---------------------

BIG_FILES = 5000


def big_event_paths() -> list[str]:
    """The 5,000 files every big event names: a workspace of 100 folders, every file touched."""
    return sorted(f"src/pkg{k % 100:02d}/module_{k // 100:03d}.py" for k in range(BIG_FILES))


def big_events(
    kind: str, work: Path, levels: list[int], commits: int
) -> dict[int, tuple[float, float, float]]:
    """Median, p95 and max ms of a one-file ``Ledger.commit`` after N 5,000-file events.

    The big events are sealed and appended through ``driver.append`` (10 operations of
    one event per call; what ``Ledger.commit`` would write, minus the ref records), the
    timed commits go through ``Ledger.commit`` with a durable append each, as one
    ``strata snapshot`` does.
    """
    folder = work / f"{kind}-bigevents"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    paths = big_event_paths()
    driver = open_driver(kind, folder, create=True)
    made, seq, prev, parent = 0, 0, "", None
    out: dict[int, tuple[float, float, float]] = {}
    author = {"name": "bench", "kind": "human"}
    try:
        for level in levels:
            start = time.perf_counter()
            while made < level:
                batch: list[Record] = []
                for _ in range(min(10, level - made)):
                    eid, oid = event_id(made, salt=3), event_id(made, salt=4)
                    body = {
                        "id": eid,
                        "ts": format_ts(T0_MS + made),
                        "author": author,
                        "action_type": "snapshot",
                        "branch": "main",
                        "operation_id": oid,
                        "files": paths,
                        "snapshot_ref": blake3.blake3(eid.encode()).hexdigest(),
                        "parent_event_id": parent,
                        "rationale": f"every file, {made}",
                    }
                    for rec_kind, rec_body in (
                        ("event", body),
                        (
                            "operation",
                            {
                                "id": oid,
                                "command": "snapshot",
                                "ts": body["ts"],
                                "author": author,
                                "events": [eid],
                                "view_before": View(branches={"main": parent or eid}).to_json(),
                                "view_after": View(
                                    head_event=eid, branches={"main": eid}
                                ).to_json(),
                            },
                        ),
                    ):
                        seq += 1
                        record = Record.seal(seq, rec_kind, rec_body, prev)  # type: ignore[arg-type]
                        batch.append(record)
                        prev = record.hash
                    parent = eid
                    made += 1
                driver.append(batch)
            log(f"[{kind}] {level:,} big events ({time.perf_counter() - start:.0f} s)")
            driver.close()
            driver = open_driver(kind, folder)
            ledger = Ledger(driver, rng=random.Random(level))
            times = []
            for n in range(commits):
                op = ledger.begin("snapshot", author)
                eid = ledger.new_id()
                op.add_event(
                    {
                        "id": eid,
                        "ts": op.ts,
                        "author": author,
                        "action_type": "snapshot",
                        "branch": "main",
                        "files": [f"src/pkg07/module_{n:03d}.py"],
                        "snapshot_ref": blake3.blake3(eid.encode()).hexdigest(),
                        "parent_event_id": parent,
                    }
                )
                op.after = moved(op.before, head_event=eid, branches={"main": eid})
                elapsed, record = timed(lambda op=op, lg=ledger: lg.commit(op))  # type: ignore[misc]
                times.append(elapsed * 1000)
                parent, seq, prev = eid, record.seq, record.hash
            times.sort()
            out[level] = (
                statistics.median(times),
                times[min(len(times) - 1, int(len(times) * 0.95))],
                times[-1],
            )
            log(f"[{kind}] after {level:,}: median {out[level][0]:.2f} ms")
            ledger.close()
            driver = open_driver(kind, folder)
        out_mb = disk_size(folder) / 1e6
        log(f"[{kind}] on disk: {out_mb:.0f} MB")
    finally:
        driver.close()
        shutil.rmtree(folder, ignore_errors=True)
    return out


def big_events_report(results: dict[str, dict[int, tuple[float, float, float]]]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    levels = sorted(next(iter(results.values())))
    lines = [
        "## A one-file commit after many 5,000-file events (`benchmarks/ledger.py --big-events`)",
        "",
        f"Machine: {machine()}. Measured {now}; load average at the end {load}.",
        "",
        "| driver | " + " | ".join(f"after {n:,}: median / p95 / max ms" for n in levels) + " |",
        "|---|" + "---|" * len(levels),
    ]
    for kind, at in results.items():
        cells = [f"{at[n][0]:.2f} / {at[n][1]:.2f} / {at[n][2]:.2f}" for n in levels]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} CPUs "
        f"({cpu}), Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def report(results: list[Result], sizes: list[int], args: argparse.Namespace) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        "## Ledger drivers at scale (`benchmarks/ledger.py`)",
        "",
        f"Machine: {machine()}. Measured {now}; load average at the end {load}.",
        "",
        f"Command: `.venv/bin/python benchmarks/ledger.py --sizes {','.join(map(str, sizes))} "
        f"--drivers {','.join(r.driver for r in results)} --repeat {args.repeat}`",
        "",
        "### Appends (events/s)",
        "",
        "| driver | " + " | ".join(results[0].appends) + " | batched, into the largest ledger |",
        "|---|" + "---|" * (len(results[0].appends) + 1),
    ]
    for r in results:
        big = r.sizes[max(sizes)]["append_big"] if r.sizes else float("nan")
        lines.append(
            f"| {r.driver} | "
            + " | ".join(f"{v:,.0f}" for v in r.appends.values())
            + f" | {big:,.0f} |"
        )
    lines += ["", "### `find_events(filter, limit=50)`, median (max) of runs, ms", ""]
    header = "| filter | " + " | ".join(f"{r.driver} {s:,}" for s in sizes for r in results) + " |"
    lines += [header, "|---|" + "---|" * (len(sizes) * len(results))]
    labels = [label for label, _ in filters(max(sizes))]
    for n, label in enumerate(labels):
        cells = []
        for s in sizes:
            for r in results:
                q = r.sizes[s]["queries"][n]
                cells.append(f"{q[1]:.2f} ({q[2]:.2f}) [{q[3]}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "[n] = rows returned.", "", "### Seek, verify, load, size", ""]
    lines += [
        "| driver | events | records | seek_event by id (µs, mean of 2,000) | verify_chain (s) "
        "| verify (records/s) | bulk load so far (s) | on disk (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for s in sizes:
            at = r.sizes[s]
            lines.append(
                f"| {r.driver} | {s:,} | {at['records']:,} | {at['seek_us']:.1f} | "
                f"{at['verify_s']:.1f} | {at['records'] / at['verify_s']:,.0f} | "
                f"{at['load_s']:.1f} | {at['disk_mb']:.0f} |"
            )
    lines += ["", "### Targets", ""]
    lines += targets(results, sizes)
    return "\n".join(lines) + "\n"


SINGLE_FILTERS = 9  # the first rows of filters(): no filter, then one filter each


def targets(results: list[Result], sizes: list[int]) -> list[str]:
    big, small = max(sizes), min(sizes)
    out = []
    for r in results:
        batched = r.appends["batched (100 events per op)"]
        if r.driver == "sqlite":
            out.append(
                f"- SQLite batched appends >= 5,000 events/s: {batched:,.0f} "
                f"({'met' if batched >= 5000 else 'MISSED'})"
            )
        slow = [
            (label, med)
            for label, med, _, _ in r.sizes[big]["queries"][:SINGLE_FILTERS]
            if med >= 50
        ]
        worst = max(q[1] for q in r.sizes[big]["queries"][:SINGLE_FILTERS])
        out.append(
            f"- {r.driver}: every single indexed filter, limit 50, < 50 ms at {big:,} events: "
            + ("met" if not slow else "MISSED: " + ", ".join(f"{lb} {m:.0f} ms" for lb, m in slow))
            + f" (slowest median {worst:.1f} ms)"
        )
        if r.driver == "jsonl":
            a, b = r.sizes[small]["seek_us"], r.sizes[big]["seek_us"]
            out.append(
                f"- JSONL seek by id O(1): {a:.1f} µs at {small:,} events, {b:.1f} µs at {big:,} "
                f"({'flat: met' if b < 2 * a else 'grows: MISSED'})"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--drivers", default="sqlite,jsonl")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work", type=Path, default=HERE / "work" / "ledger")
    parser.add_argument("--keep", action="store_true", help="Keep the ledgers in --work.")
    parser.add_argument(
        "--big-events",
        default="",
        help="Only time one-file commits after this many 5,000-file events (e.g. 1,1000,10000).",
    )
    parser.add_argument("--commits", type=int, default=40)
    args = parser.parse_args()
    if args.big_events:
        levels = sorted(int(n) for n in args.big_events.split(","))
        args.work.mkdir(parents=True, exist_ok=True)
        found = {
            kind: big_events(kind, args.work, levels, args.commits)
            for kind in args.drivers.split(",")
            if kind
        }
        print(big_events_report(found))
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    kinds = [k for k in args.drivers.split(",") if k]
    if "jsonl" in kinds and jsonl_driver_class() is None:
        log("strata.ledger.drivers.jsonl.JsonlDriver is not there yet: skipping JSONL")
        kinds.remove("jsonl")
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for kind in kinds:
            started = time.perf_counter()
            results.append(bench_driver(kind, args.work, sizes, args.repeat))
            log(f"[{kind}] done in {time.perf_counter() - started:.0f} s")
    finally:
        if not args.keep:
            for kind in kinds:
                shutil.rmtree(args.work / f"{kind}-big", ignore_errors=True)
    print(report(results, sizes, args))


if __name__ == "__main__":
    main()
