"""Several writers on one ledger: PostgreSQL (shared) beside SQLite (one machine).

``--writers`` processes (default 8) append operations of one event each for
``--seconds`` (default 60), half on branch ``main`` and half on ``b2``, through
``Ledger.commit`` as a command does: each operation is built and appended
while the writer holds the ledger's admission lock (PostgreSQL: the session
advisory lock of ``PostgresDriver.admission``; SQLite: the repository's
``WriteLock`` on a file, what ``Core.writing`` takes). Commit latency is the
time from asking for the lock to the append's commit; p50 and p99 over every
operation of every writer.

Afterwards, for each driver: no event lost or duplicated (every writer's count
is in the ledger, every id once), each branch one line of history (every
event's parent is the branch's previous event), and the hash chain verifies.
Then, with ``--query-events N`` (default 0), the PostgreSQL ledger is
bulk-loaded to N events and filtered history queries (by file folder, author,
operation) are timed (p95 of ``--repeat`` runs).

The PostgreSQL server is a private cluster started in a temp folder on a Unix
socket (``initdb`` + ``pg_ctl``, as the tests do, but with fsync on: SQLite
runs with ``synchronous=FULL``), or ``--url`` of one you run.

Run:  .venv/bin/python benchmarks/ledger_pg.py [--seconds 60] [--writers 8]
      [--query-events 1000000] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def writer(kind: str, where: str, who: str, branch: str, seconds: float) -> None:
    """One writer process: append operations until the time is up; print what it did."""
    import contextlib

    from strata.ledger.ledger import Ledger, moved

    if kind == "postgresql":
        from strata.ledger.drivers.postgresql import PostgresDriver

        pg = PostgresDriver(where)
        driver: Any = pg

        def admission() -> contextlib.AbstractContextManager[Any]:
            return pg.admission(branch)  # one queue per branch
    else:
        from strata.layout import WriteLock
        from strata.ledger.drivers.sqlite import SqliteDriver

        driver = SqliteDriver(Path(where))
        lock = WriteLock(Path(where).with_suffix(".lock"), timeout=600)

        def admission() -> contextlib.AbstractContextManager[Any]:
            return lock

    ledger = Ledger(driver)
    ledger.workspace = who  # each writer is a workspace of its own, with its own HEAD
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        start = time.perf_counter()
        with admission():
            op = ledger.begin("snapshot", {"name": who, "kind": "agent"})
            before = op.before = replace(op.before, head_branch=branch)
            event = op.add_event(
                {
                    "id": ledger.new_id(),
                    "ts": op.ts,
                    "author": {"name": who, "kind": "agent"},
                    "action_type": "snapshot",
                    "branch": branch,
                    "files": [f"{who}/f{n % 50}.txt"],
                    "snapshot_ref": None,
                    "parent_event_id": before.branches.get(branch),
                    "rationale": f"{who} {n}",
                }
            )
            op.after = moved(
                before, head_event=event["id"], branches={**before.branches, branch: event["id"]}
            )
            ledger.commit(op)
        latencies.append((time.perf_counter() - start) * 1000)
        n += 1
    driver.close()
    print(json.dumps({"who": who, "count": n, "latencies": latencies}))


def check(driver: Any, counts: dict[str, int]) -> list[str]:
    """What is wrong with the ledger the writers left (empty: nothing)."""
    from strata.ledger.records import verify_chain

    problems: list[str] = []
    events = [r.body for r in driver.scan(kind="event")]
    seen: dict[str, int] = {}
    for e in events:
        seen[e["author"]["name"]] = seen.get(e["author"]["name"], 0) + 1
    if seen != counts:
        problems.append(f"events by writer {seen} != reported {counts}")
    if len({e["id"] for e in events}) != len(events):
        problems.append("an event id appears twice")
    last: dict[str, str | None] = {}
    for e in events:
        if e["parent_event_id"] != last.get(e["branch"]):
            problems.append(f"event {e['id']} does not follow its branch's previous event")
            break
        last[e["branch"]] = e["id"]
    if (bad := verify_chain(driver.scan())) is not None:
        problems.append(f"chain: {bad}")
    return problems


def race(
    kind: str, where: str, writers: int, seconds: float, src: str | None = None
) -> dict[str, Any]:
    """Run the writers on one ledger; their figures and what the check found.

    ``src``: the writers import ``strata`` from this folder (another version of the
    code, for an A/B in the same run) instead of the installed one.
    """
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                kind,
                where,
                f"w{i}",
                "main" if i % 2 == 0 else "b2",
                str(seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(writers)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds * 10 + 120)
        if p.returncode != 0:
            raise SystemExit(f"a {kind} writer failed")
        results.append(json.loads(out))
    latencies = sorted(x for r in results for x in r["latencies"])
    counts = {r["who"]: r["count"] for r in results}
    driver = open_driver(kind, where)
    try:
        problems = check(driver, counts)
    finally:
        driver.close()
    total = sum(counts.values())
    return {
        "operations": total,
        "per_s": total / seconds,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "problems": problems,
    }


def private_cluster(tmp: str) -> Any:
    """A PostgreSQL cluster started in ``tmp`` on a Unix socket, fsync on (as SQLite's FULL)."""
    from pgcluster import Cluster, _bin_dir

    bin_dir = _bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    folder = Path(tmp) / "pg"
    folder.mkdir()
    folder.chmod(0o755)
    Path(tmp).chmod(0o755)
    cluster = Cluster(bin_dir, folder, durable=True)
    cluster.init()
    cluster.start()
    return cluster


def open_driver(kind: str, where: str, *, create: bool = False) -> Any:
    if kind == "postgresql":
        from strata.ledger.drivers.postgresql import PostgresDriver

        return PostgresDriver(where, create=create)
    from strata.ledger.drivers.sqlite import SqliteDriver

    return SqliteDriver(Path(where), create=create)


def query_latency(url: str, size: int, repeat: int) -> dict[str, float]:
    """Load the PostgreSQL ledger to ``size`` events; p95 ms of each filtered query."""
    from strata.ledger.driver import EventFilter
    from strata.ledger.records import Record

    driver = open_driver("postgresql", url)
    rng = random.Random(7)
    last = driver.last()
    seq, prev = (last.seq, last.hash) if last else (0, "")
    have = sum(1 for _ in driver.scan(kind="event"))
    batch: list[Record] = []
    for n in range(have, size):
        seq += 1
        body = {
            "id": f"q{n:019d}",
            "ts": "2026-12-05T00:00:00.000Z",
            "author": {"name": f"author{rng.randrange(20)}", "kind": "agent"},
            "action_type": "snapshot",
            "branch": "main",
            "operation_id": f"op{n // 100}",
            "files": [f"dir{rng.randrange(50)}/file{rng.randrange(1000)}.py"],
            "snapshot_ref": None,
        }
        record = Record.seal(seq, "event", body, prev)
        prev = record.hash
        batch.append(record)
        if len(batch) >= 20000:
            driver.append(batch)
            batch = []
    driver.append(batch)
    # what autovacuum does after a bulk load: without statistics the planner may walk
    # the whole event table for a rare file
    driver._conn.execute("ANALYZE")
    out: dict[str, float] = {}
    for name, where in (
        ("folder", EventFilter(path="dir7")),
        ("file", EventFilter(path="dir7/file3.py")),
        ("author", EventFilter(author="author3")),
        ("operation", EventFilter(operation_id=f"op{size // 200}")),
    ):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            list(driver.find_events(where, limit=50))
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        out[name] = times[min(len(times) - 1, int(len(times) * 0.95))]
    driver.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="0: the queries only")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a private cluster)")
    parser.add_argument("--query-events", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="also race PostgreSQL writers importing strata from SRC (a folder holding the "
        "strata package of another commit: git archive COMMIT src | tar -x -C DIR; "
        "SRC=DIR/src), each round on a new database, interleaved with this code's",
    )
    parser.add_argument("--rounds", type=int, default=1, help="races per driver (interleaved)")
    args = parser.parse_args()
    if args.baseline:
        if args.url:
            raise SystemExit("--baseline runs on the private cluster only (no --url)")
        ab(args)
        return
    cluster = None
    with tempfile.TemporaryDirectory(prefix="strata-bench-pg-") as tmp:
        url = args.url
        if url is None:
            cluster = private_cluster(tmp)
            url = cluster.new_database()
        try:
            open_driver("postgresql", url, create=True).close()
            sqlite_path = str(Path(tmp) / "ledger.sqlite")
            open_driver("sqlite", sqlite_path, create=True).close()
            figures = {}
            if args.seconds > 0:
                print(f"{args.writers} writers on 2 branches for {args.seconds:g} s each driver")
                figures = {
                    kind: race(kind, where, args.writers, args.seconds)
                    for kind, where in (("postgresql", url), ("sqlite", sqlite_path))
                }
            for kind, f in figures.items():
                print(
                    f"{kind:10} {f['operations']:7d} ops  {f['per_s']:8.1f} ops/s  "
                    f"p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:7.2f} ms  "
                    f"check: {'ok' if not f['problems'] else '; '.join(f['problems'])}"
                )
            if figures:
                pg, lite = figures["postgresql"], figures["sqlite"]
                print(
                    f"ratio postgresql/sqlite: throughput {pg['per_s'] / lite['per_s']:.2f}x, "
                    f"p99 latency {pg['p99_ms'] / lite['p99_ms']:.2f}x"
                )
            if args.query_events:
                q = query_latency(url, args.query_events, args.repeat)
                print(
                    f"queries at {args.query_events} events (p95 ms, limit 50): "
                    + ", ".join(f"{k} {v:.1f}" for k, v in q.items())
                )
            if any(f["problems"] for f in figures.values()):
                raise SystemExit(1)
        finally:
            if cluster is not None:
                cluster.stop("immediate")


def ab(args: argparse.Namespace) -> None:
    """PostgreSQL with the baseline code, with this code, and SQLite, ``--rounds`` times."""
    labels = {"baseline": ("postgresql", args.baseline), "this": ("postgresql", None)}
    found: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": [], "sqlite": []}
    with tempfile.TemporaryDirectory(prefix="strata-bench-pg-") as tmp:
        cluster = private_cluster(tmp)
        try:
            print(f"{args.writers} writers on 2 branches, {args.seconds:g} s a race")
            for n in range(args.rounds):
                order = ["baseline", "this"] if n % 2 == 0 else ["this", "baseline"]
                for label in [*order, "sqlite"]:
                    if label == "sqlite":
                        where = str(Path(tmp) / f"ledger{n}.sqlite")
                        open_driver("sqlite", where, create=True).close()
                        f = race("sqlite", where, args.writers, args.seconds)
                    else:
                        kind, src = labels[label]
                        where = cluster.new_database()
                        open_driver(kind, where, create=True).close()
                        f = race(kind, where, args.writers, args.seconds, src)
                    found[label].append(f)
                    load = os.getloadavg()[0]
                    print(
                        f"round {n + 1} {label:8} {f['per_s']:7.1f} ops/s  p50 {f['p50_ms']:7.1f}"
                        f" ms  p99 {f['p99_ms']:7.1f} ms  load {load:.1f}  check: "
                        + ("ok" if not f["problems"] else "; ".join(f["problems"]))
                    )
        finally:
            cluster.stop("immediate")
    med = {
        k: {m: statistics.median(f[m] for f in v) for m in ("per_s", "p50_ms", "p99_ms")}
        for k, v in found.items()
    }
    for k, m in med.items():
        print(
            f"median {k:8} {m['per_s']:7.1f} ops/s  p50 {m['p50_ms']:7.1f}  p99 {m['p99_ms']:7.1f}"
        )
    for k in ("baseline", "this"):
        print(
            f"{k}/sqlite: throughput {med[k]['per_s'] / med['sqlite']['per_s']:.2f}x, "
            f"p99 {med[k]['p99_ms'] / med['sqlite']['p99_ms']:.2f}x"
        )
    print(f"this/baseline throughput {med['this']['per_s'] / med['baseline']['per_s']:.2f}x")
    if any(f["problems"] for v in found.values() for f in v):
        raise SystemExit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, where, who, branch, seconds = sys.argv[2:7]
        os.environ.setdefault("STRATA_NO_DAEMON", "1")
        writer(kind, where, who, branch, float(seconds))
    else:
        main()
