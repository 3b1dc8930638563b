"""A first snapshot's memory grows slowly with the number of files.

A user snapshots a large tree on a small machine: the peak resident memory
of the ``strata snapshot`` process must not hold every file's diff, stat and
event entry several times over. Measured, not timed: the peak RSS of a real
child process (its ``VmHWM``) at two tree sizes, so the
interpreter's own start-up cost cancels out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CliRunner, ok
from strata import Repository
from strata.store.scan import ENCODED_PAST
from strata.store.statcache import StatCache, forget_memory

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads VmHWM from /proc")

#: what each more file may add to the peak (measured: about 1.4 KB; the diff held whole
#: as Change, TreeEntry and FileDiff objects, and the event read back, make it 1.9 KB)
KB_PER_FILE = 1.6


def make_files(root: Path, count: int) -> None:
    """``count`` small files, a tenth of them binary, 100 to a folder, two levels deep."""
    for i in range(count):
        folder = root / f"pkg{i // 2000:02d}" / f"mod{i // 100 % 20:02d}"
        if i % 100 == 0:
            folder.mkdir(parents=True)
        if i % 10 == 0:
            (folder / f"blob_{i:06d}.bin").write_bytes(b"\0\1\2" + i.to_bytes(4, "big"))
        else:
            (folder / f"source_file_{i:06d}.py").write_text(f"x = {i}\nprint(x)\n")


#: runs the CLI, then writes the process's peak resident KB (VmHWM: the peak of this
#: program's own memory, not of the test process it was forked from, which
#: ``ru_maxrss`` would count) to the file named in argv[1]
MEASURED = """
import sys
from pathlib import Path
from strata.cli import main
out = Path(sys.argv[1])
sys.argv = ["strata", *sys.argv[2:]]
try:
    main()
finally:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out.write_text(line.split()[1])
"""


def peak_kb(run_cli: CliRunner, cwd: Path) -> int:
    """The peak resident KB of one ``strata snapshot`` run in ``cwd``."""
    peak = cwd.parent / f"{cwd.name}.peak"
    proc = subprocess.run(
        [sys.executable, "-c", MEASURED, str(peak), "snapshot", "-m", "first"],
        cwd=cwd,
        env=run_cli.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "files changed" in proc.stdout
    return int(peak.read_text())


def test_a_first_snapshot_grows_by_little_memory_per_file(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    peaks = {}
    for count in (4_000, 16_000):
        ws = tmp_path / f"ws{count}"
        make_files(ws, count)
        ok(run_cli("init", "--no-snapshot", cwd=ws))
        peaks[count] = peak_kb(run_cli, ws)
        assert f'"files_changed": {count}' in ok(run_cli("history", "--json", cwd=ws))
    per_file = (peaks[16_000] - peaks[4_000]) / 12_000
    assert per_file < KB_PER_FILE, f"{per_file:.2f} KB per file ({peaks})"


def test_a_first_snapshot_lists_its_paths_in_path_order(tmp_path: Path, run_cli: CliRunner) -> None:
    # a folder's paths sort after a sibling named like it with a '.' or '-' after its name
    # (``a-b`` < ``a.txt`` < ``a/b``), an empty folder sorts by its own name
    ws = tmp_path / "ws"
    files = ["a.txt", "a-b/x", "a/b", "a/b.c/d", "a/b-c", "a0", "é", "z/y/x"]
    for name in files:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(name)
    (ws / "e").mkdir()
    (ws / "e.txt").write_text("e")
    (ws / "a" / "b.c" / "empty").mkdir()
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    out = json.loads(ok(run_cli("snapshot", "--json", cwd=ws)))
    paths = sorted([*files, "e", "e.txt", "a/b.c/empty"])
    dirs = {"e", "a/b.c/empty"}
    assert out["changed_paths"] == [p + "/" if p in dirs else p for p in paths]
    assert out["files_changed"] == len(paths)


#: snapshots the folder it runs in, then prints how many KB a thread's freed blocks of a
#: few MiB (what a hashing thread reads a big file into) still hold
RETURNED = """
import sys, threading
from strata.cli import main
sys.argv = ["strata", "snapshot", "-m", "first"]
try:
    main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

after = []
def read_big_files():
    for size in (6 << 20, 6 << 20, 3 << 20, 5 << 20):
        block = bytearray(size)
        block[::4096] = b"x" * len(block[::4096])  # touched, as a read fills it
        del block
    after.append(rss())

before = rss()
worker = threading.Thread(target=read_big_files)
worker.start()
worker.join()
print(after[0] - before)
"""


def test_after_a_snapshot_big_blocks_freed_on_a_thread_go_back_to_the_system(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    # glibc's default keeps the largest blocks a thread freed (up to 2 x 32 MiB per thread)
    # for reuse: a snapshot that read a few big files on its threads kept tens of MiB
    ws = tmp_path / "ws"
    make_files(ws, 200)  # more than a few files: they are read on the thread pool
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    proc = subprocess.run(
        [sys.executable, "-c", RETURNED],
        cwd=ws,
        env=run_cli.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    kept_kb = int(proc.stdout.strip().splitlines()[-1])
    assert kept_kb < 1024, f"{kept_kb} KB kept"


def test_a_snapshot_of_many_files_keeps_its_folders_encoded_and_saves_the_same_cache(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    # past ENCODED_PAST files read, the scan keeps each folder it built as the stat cache
    # saves it: the cache must still let the next scans skip what did not change, re-read
    # a racy file, and see an edit that kept the size and the mtime
    count = ENCODED_PAST + 500
    make_files(ws, count)
    old = 10**18  # 2001: nothing racy
    for folder, _, names in os.walk(ws):
        for name in names:
            os.utime(os.path.join(folder, name), ns=(old, old))
    racy = ws / "pkg03" / "mod07" / "source_file_006701.py"
    soon = time.time_ns() + 60 * 10**9  # within any racy window of the scan's start
    os.utime(racy, ns=(soon, soon))
    repo = make_repo(ws)
    first = repo.snapshot("first")
    assert first.event is not None and first.event.data["files_changed"] == count

    forget_memory()  # the cache as the next process reads it
    cache = StatCache(ws / ".strata" / "statcache")
    quick = {folder: cache.quick(folder) for folder in cache.folders()}
    assert len(quick) == 1 + 11 + count // 100  # the root, pkg00-pkg10, their mod folders
    racy_quick = quick["pkg03/mod07"]
    assert racy_quick is not None and racy_quick[3] == b""  # no digest: its rows are compared
    assert all(q is not None and q[3] for f, q in quick.items() if f != "pkg03/mod07")
    stat = cache.get("pkg03/mod07")
    assert stat is not None and stat.files[racy.name][2] == -1
    assert cache.racy == {"pkg03/mod07"}
    kept = cache.get("pkg10/mod04")
    assert kept is not None and len(kept.files) == 100 and kept.rows[0][4] == "blob_020400.bin"

    assert repo.snapshot("again").unchanged
    edited = ws / "pkg07" / "mod13" / "source_file_015301.py"
    edited.write_text(edited.read_text().replace("x", "y"))  # same size
    os.utime(edited, ns=(old, old))  # only the ctime says it changed
    second = repo.snapshot("edit")
    assert second.event is not None
    assert list(second.event.files) == ["pkg07/mod13/source_file_015301.py"]
