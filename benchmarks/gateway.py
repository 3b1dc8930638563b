"""What confinement costs: a confined ``strata exec -- true`` against an unconfined one.

Two workspaces alike (one file, recorded), one configured ``[gateway]
profile = "workspace-write"`` (the default: the command runs in bubblewrap,
the workspace writable, ``.strata`` masked, no network), the other ``profile =
"full"`` (not confined). Measured, A and B in turn so that drift hits both:

* the whole command, ``strata exec -- true`` (start-up, policy, the run's
  snapshots and records, the command), timed from outside by ``farm-bench``
  when it is installed, else by this script;
* in one process, :meth:`strata.gateway.Gateway.exec` of ``true`` (the same
  work without the interpreter's start-up);
* the command alone: ``bwrap … -- true`` as built by
  :func:`strata.sandbox.confine.confined_command` against ``true``.

Target: a confined exec at most 15 ms slower than an unconfined one.

Run:  .venv/bin/python benchmarks/gateway.py [--runs N]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

STRATA = Path(sys.executable).parent / "strata"


def workspace(parent: Path, name: str, profile: str) -> Path:
    ws = parent / name
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    env = {**os.environ, "STRATA_NO_DAEMON": "1"}
    subprocess.run([str(STRATA), "init"], cwd=ws, env=env, check=True, capture_output=True)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(f'\n[gateway]\nprofile = "{profile}"\n')
    return ws


Row = tuple[float, float, float, float, float, float]


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def paired(a: Callable[[], None], b: Callable[[], None], runs: int) -> Row:
    """Medians (ms) of A, of B and of A - B taken pair by pair: wall, then CPU (one warm-up)."""
    a()
    b()
    ta: list[float] = []
    tb: list[float] = []
    ca: list[float] = []
    cb: list[float] = []
    for _ in range(runs):
        for fn, into, cpu in ((a, ta, ca), (b, tb, cb)):
            start, used = time.perf_counter(), _cpu()
            fn()
            into.append((time.perf_counter() - start) * 1000)
            cpu.append((_cpu() - used) * 1000)
    walls = [x - y for x, y in zip(ta, tb, strict=True)]
    cpus = [x - y for x, y in zip(ca, cb, strict=True)]
    med = statistics.median
    return med(ta), med(tb), med(walls), med(ca), med(cb), med(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    from strata import Repository
    from strata.gateway import approve_all
    from strata.sandbox.confine import Confinement, confined_command

    rows: list[tuple[str, *tuple[float, ...]]] = []
    with tempfile.TemporaryDirectory(prefix="strata-bench-gateway-") as tmp:
        parent = Path(tmp)
        confined = workspace(parent, "confined", "workspace-write")
        bare = workspace(parent, "bare", "full")
        env = {**os.environ, "STRATA_NO_DAEMON": "1"}

        def cli(ws: Path) -> Callable[[], None]:
            def run() -> None:
                subprocess.run(
                    [str(STRATA), "exec", "--", "true"], cwd=ws, env=env, check=True,
                    capture_output=True,
                )  # fmt: skip

            return run

        rows.append(("`strata exec -- true`", *paired(cli(confined), cli(bare), args.runs)))

        repo_a, repo_b = Repository.open(confined), Repository.open(bare)
        try:

            def in_process(repo: Repository) -> Callable[[], None]:
                return lambda: repo.exec(["true"], approver=approve_all()) and None

            rows.append(
                (
                    "`Gateway.exec(['true'])` in one process",
                    *paired(in_process(repo_a), in_process(repo_b), args.runs),
                )
            )
        finally:
            repo_a.close()
            repo_b.close()

        wrapped = confined_command(
            ["true"],
            confinement=Confinement("workspace-write"),
            workspace=confined,
            cwd=confined,
            repository=confined / ".strata",
        )
        true = shutil.which("true") or "/bin/true"
        rows.append(
            (
                "the command alone (`bwrap … -- true` vs `true`)",
                *paired(
                    lambda: subprocess.run(wrapped, check=True) and None,
                    lambda: subprocess.run([true], check=True) and None,
                    args.runs,
                ),
            )
        )

    print(
        f"# {datetime.date.today()}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, {args.runs} pairs"
    )
    print(
        f"load average {os.getloadavg()[0]:.1f}\n\n"
        "| | wall: confined | unconfined | cost | CPU: confined | unconfined | cost |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, *v in rows:
        print(
            f"| {name} | {v[0]:.1f} ms | {v[1]:.1f} ms | {v[2]:+.1f} ms "
            f"| {v[3]:.1f} ms | {v[4]:.1f} ms | {v[5]:+.1f} ms |"
        )
    print(
        f"\nconfinement costs {rows[0][3]:+.1f} ms of wall time and {rows[0][6]:+.1f} ms of CPU "
        "per strata exec (target: at most +15 ms)"
    )


if __name__ == "__main__":
    main()
