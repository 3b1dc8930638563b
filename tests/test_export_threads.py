"""Export picks its threads from the CPUs it may use and from the files' sizes.

Whatever the count, the folder written is the same, byte for byte.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, Dir, File, Link, ok
from strata import Repository
from strata.store.materialize import LARGE, export_threads

MIB = 1024 * 1024


def _tree() -> dict[str, Any]:
    rng = random.Random(7)
    spec: dict[str, Any] = {
        "big/one.bin": rng.randbytes(3 * MIB),
        "big/two.bin": rng.randbytes(LARGE),  # exactly at the threshold
        "big/three.txt": b"line\n" * (LARGE // 5 + 1),
        "run.sh": File("#!/bin/sh\n", 0o755),
        "secret": File("s", 0o600),
        "empty.txt": "",
        "empty-dir": Dir(0o700),
        "link": Link("run.sh"),
    }
    for i in range(120):
        spec[f"small/{i % 7}/f{i}.txt"] = rng.randbytes(rng.randrange(0, 5000))
    return spec


def _child(code: str, cpus: set[int] | None = None) -> str:
    """Run ``code`` in a child Python limited to ``cpus`` (its affinity mask)."""
    prelude = f"import os\nos.sched_setaffinity(0, {cpus!r})\n" if cpus else ""
    proc = subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return proc.stdout.strip()


def test_one_cpu_means_one_thread_whatever_the_files() -> None:
    one = min(os.sched_getaffinity(0))
    out = _child(
        "from strata.store.materialize import export_threads\n"
        "from strata.store.scan import available_cpus\n"
        "print(available_cpus(), export_threads([64 << 20] * 16), export_threads([100] * 9000))",
        {one},
    )
    assert out == "1 1 1"


def test_small_files_get_one_thread_and_large_ones_a_thread_per_further_cpu() -> None:
    assert export_threads([4096] * 20000, cpus=8) == 1
    assert export_threads([4096] * 20000 + [LARGE], cpus=8) == 2
    assert export_threads([LARGE] * 3, cpus=2) == 2
    assert export_threads([LARGE] * 30, cpus=4) == 4
    assert export_threads([LARGE - 1] * 30, cpus=4) == 1


@pytest.mark.parametrize("threads", [1, 2, 4, None])
def test_export_is_byte_identical_at_any_thread_count(
    threads: int | None,
    ws: Path,
    tmp_path: Path,
    make_tree: Callable[[Path, Any], Path],
    manifest: Callable[..., dict[str, Any]],
    repo: Repository,
) -> None:
    make_tree(ws, _tree())
    want = manifest(ws)
    repo.snapshot()
    out = tmp_path / "out"
    assert repo.export("HEAD", out, threads=threads) == len(
        [v for v in want.values() if v[0] == "file"]
    )
    assert manifest(out) == want


def test_cli_export_on_one_cpu_and_with_threads_writes_the_same_files(
    ws: Path,
    tmp_path: Path,
    make_tree: Callable[[Path, Any], Path],
    manifest: Callable[..., dict[str, Any]],
    run_cli: CliRunner,
) -> None:
    make_tree(ws, _tree())
    want = manifest(ws)
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", cwd=ws))
    one = str(min(os.sched_getaffinity(0)))
    pinned = CliRunner(run_cli.home, prefix=("taskset", "-c", one))
    ok(pinned("export", "HEAD", tmp_path / "pinned", cwd=ws))
    assert manifest(tmp_path / "pinned") == want
    ok(run_cli("export", "--threads", "3", "HEAD", tmp_path / "three", cwd=ws))
    assert manifest(tmp_path / "three") == want
    code, _, err = run_cli("export", "--threads", "0", "HEAD", tmp_path / "zero", cwd=ws)
    assert code == 2 and "Traceback" not in err and "--threads" in err
    assert not (tmp_path / "zero").exists()
