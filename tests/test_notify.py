"""The change monitor's own inotify notifier: nothing made before a question is missing from it.

The monitor answers from the kernel's queue, read empty when the question
comes (no cookie file, no delay): these tests ask right after each change,
without sleeping, from this process and from others.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.watch.monitor import Answer, ChangeMonitor


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[ChangeMonitor]:
    ws = tmp_path / "ws"
    for i in range(6):
        (ws / f"pkg{i}" / "sub").mkdir(parents=True)
        (ws / f"pkg{i}" / "sub" / "m.py").write_text("x\n")
    (tmp_path / "repo" / "watch").mkdir(parents=True)
    with ChangeMonitor(ws, tmp_path / "repo" / "watch") as found:
        yield found


def _ask(monitor: ChangeMonitor, token: str) -> Answer:
    answer = monitor.query(token)
    assert answer is not None and answer.changed is not None, answer
    return answer


def test_every_change_made_before_a_question_is_in_its_answer(monitor: ChangeMonitor) -> None:
    ws = monitor.root
    rng = random.Random(7)
    token = _ask(monitor, monitor.token()).token
    for n in range(300):
        folder = ws / f"pkg{rng.randrange(6)}" / "sub"
        path = folder / f"f{rng.randrange(4)}.txt"
        op = rng.choice(["write", "write", "chmod", "delete", "touch"])
        if op == "delete" and path.exists():
            path.unlink()
        elif op == "chmod" and path.exists():
            path.chmod(rng.choice([0o644, 0o600]))
        elif op == "touch" and path.exists():
            os.utime(path, (n, n))
        else:
            path.write_bytes(b"x" * (n % 5))  # often the same size as before
        answer = _ask(monitor, token)
        assert path.relative_to(ws).as_posix() in answer.changed, (n, op)
        token = answer.token
    # made by other processes, each asked right after it exits
    for n in range(5):
        rel = f"pkg{n}/sub/m.py"
        code = f"open({str(ws / rel)!r}, 'a').write('by another process {n}\\n')"
        subprocess.run([sys.executable, "-c", code], check=True)
        answer = _ask(monitor, token)
        assert answer.changed == {rel}
        token = answer.token


def test_folders_made_moved_or_replaced_are_watched_at_once(
    monitor: ChangeMonitor, tmp_path: Path
) -> None:
    ws = monitor.root
    token = _ask(monitor, monitor.token()).token

    def changed() -> frozenset[str]:
        nonlocal token
        answer = _ask(monitor, token)
        token = answer.token
        assert answer.changed is not None
        return answer.changed

    # a new tree: its own name covers what was made in it before it was watched
    (ws / "a" / "b" / "c").mkdir(parents=True)
    (ws / "a" / "b" / "c" / "f").write_text("1\n")
    assert "a" in changed()
    (ws / "a" / "b" / "c" / "f").write_text("2\n")  # watched now, deep down
    assert changed() == {"a/b/c/f"}
    # moved within the workspace: reported under its new name only
    (ws / "a").rename(ws / "pkg0" / "z")
    assert changed() == {"a", "pkg0/z"}
    (ws / "pkg0" / "z" / "b" / "c" / "f").write_text("3\n")
    assert changed() == {"pkg0/z/b/c/f"}
    # moved out: its changes are no longer the workspace's
    outside = tmp_path / "outside"
    (ws / "pkg0" / "z").rename(outside)
    assert changed() == {"pkg0/z"}
    (outside / "b" / "c" / "f").write_text("4\n")
    (outside / "b" / "new").mkdir()
    assert changed() == frozenset()
    # moved in from outside, with files made in it since
    outside.rename(ws / "back")
    assert changed() == {"back"}
    (ws / "back" / "b" / "new" / "g").write_text("5\n")
    assert changed() == {"back/b/new/g"}
    # a folder replaced by another of its name (renamed over it)
    (ws / "spare" / "deep").mkdir(parents=True)
    shutil.rmtree(ws / "pkg3")
    (ws / "spare").rename(ws / "pkg3")
    assert {"pkg3", "spare"} <= changed()
    (ws / "pkg3" / "deep" / "h").write_text("6\n")
    assert changed() == {"pkg3/deep/h"}
    # noise: the repository's folder and git's are not watched, nor counted
    watches = monitor.status()["watches"]
    (ws / ".git" / "objects" / "ab").mkdir(parents=True)
    (ws / ".git" / "objects" / "ab" / "cd").write_text("blob\n")
    assert changed() == frozenset()  # the folder's own name is noise too
    assert monitor.status()["watches"] == watches


def test_a_kernel_queue_overflow_is_reported_and_every_folder_watched_again(
    monitor: ChangeMonitor,
) -> None:
    ws = monitor.root
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    token = _ask(monitor, monitor.token()).token
    flood = ws / "flood"
    flood.mkdir()
    assert _ask(monitor, token).changed == {"flood"}
    token = monitor.token()
    # nobody reads while the kernel's queue fills past its limit (3 events per file)
    with monitor._cond:
        for n in range(limit // 3 + 200):
            (flood / f"{n}.txt").write_text("x")
        (ws / "late" / "deep").mkdir(parents=True)  # its event is among those dropped
    answer = monitor.query(token)
    assert answer is not None and answer.changed is None
    assert "overflowed" in answer.reason
    assert monitor.status()["overflows"] == 1
    # every folder is watched again, the one whose event was dropped too
    (ws / "late" / "deep" / "x").write_text("seen\n")
    assert _ask(monitor, answer.token).changed == {"late/deep/x"}


#: a child that changes the workspace as fast as it can: files, folders made, moved, removed
_CHURN = """
import os, random, shutil, sys, time
ws, seed, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rng = random.Random(seed)
end = time.monotonic() + seconds
n = 0
def folders():
    found = [ws]
    for folder, dirs, _ in os.walk(ws):
        dirs[:] = [d for d in dirs if d != ".strata"]
        found += [os.path.join(folder, d) for d in dirs]
    return found
while time.monotonic() < end:
    n += 1
    where = rng.choice(folders())
    op = rng.choice(["write"] * 4 + ["mkdir", "move", "rmtree", "delete"])
    try:
        if op == "write":
            with open(os.path.join(where, f"f{rng.randrange(5)}"), "w") as f:
                f.write(str(n) * rng.randrange(3))
        elif op == "mkdir":
            deep = os.path.join(where, f"d{n}", "in")
            os.makedirs(deep)
            open(os.path.join(deep, "x"), "w").write(str(n))
        elif op == "move" and where != ws:
            target = rng.choice(folders())
            if not (target + "/").startswith(where + "/"):
                os.rename(where, os.path.join(target, f"m{n}"))
        elif op == "rmtree" and where != ws:
            shutil.rmtree(where)
        elif op == "delete":
            names = [e for e in os.scandir(where) if e.is_file()]
            if names:
                os.unlink(rng.choice(names).path)
    except OSError:
        pass
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_snapshots_taken_while_another_process_churns_miss_nothing(
    seed: int, tmp_path: Path
) -> None:
    from strata import Repository
    from strata.store.ignore import IgnoreRules
    from strata.store.objects import MemoryObjectStore
    from strata.store.scan import Scanner
    from strata.store.statcache import StatCache
    from strata.watch.monitor import MonitorServer

    ws = tmp_path / "ws"
    for i in range(4):
        (ws / f"pkg{i}" / "sub").mkdir(parents=True)
    repo = Repository.init(ws)
    repo.snapshot("start")
    with ChangeMonitor(ws, repo.layout.watch) as monitor:
        server = MonitorServer(monitor).start()
        try:
            repo.snapshot("token")
            child = subprocess.Popen([sys.executable, "-c", _CHURN, str(ws), str(seed), "1.5"])
            while child.poll() is None:  # snapshots in the middle of the churn
                repo.snapshot("during")
                assert repo.last_scan is not None
                assert repo.last_scan.watcher == "incremental", repo.last_scan.watcher
            assert child.returncode == 0
            repo.snapshot("after")
            assert repo.last_scan is not None and repo.last_scan.watcher == "incremental"
            rules = IgnoreRules.root(defaults=repo.config.ignore_defaults)
            full = Scanner(ws, MemoryObjectStore(), rules=rules, cache=StatCache(None)).scan()
            assert repo.last_scan.tree == full.tree
            assert monitor.status()["overflows"] == 0
        finally:
            server.close()
            repo.close()


_LIMITED = """
import os, sys
from pathlib import Path
with open("/proc/sys/user/max_inotify_watches", "w") as f:
    f.write("20")  # in this user namespace only
from strata.errors import WatcherFailed
from strata.watch.monitor import ChangeMonitor

big, small, folder = (Path(p) for p in sys.argv[1:4])
try:
    ChangeMonitor(big, folder).start()
    print("started over", big)
except WatcherFailed as exc:
    print("refused:", exc.reason)
monitor = ChangeMonitor(small, folder).start()
token = monitor.query("").token
for n in range(30):
    (small / f"new{n}").mkdir()  # past the limit: no longer watched
answer = monitor.query(token)
print("answer:", answer)
print("alive:", monitor.alive)
print("error:", monitor.error.reason if isinstance(monitor.error, WatcherFailed) else monitor.error)
monitor.stop()
"""


def test_the_limit_of_watches_stops_the_monitor_and_says_why(tmp_path: Path) -> None:
    # a user namespace of its own has its own limit (fs.inotify.max_user_watches is global)
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    big, small, folder = tmp_path / "big", tmp_path / "small", tmp_path / "repo" / "watch"
    for n in range(40):
        (big / f"d{n}").mkdir(parents=True)
    for n in range(5):
        (small / f"d{n}").mkdir(parents=True)
    folder.mkdir(parents=True)
    unshare = ["unshare", "--user", "--map-root-user"]
    proc = subprocess.run(
        [*unshare, sys.executable, "-c", _LIMITED, str(big), str(small), str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if "Permission denied" in proc.stderr or "unshare failed" in proc.stderr:
        pytest.skip(f"no user namespaces here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    limit = "the limit of inotify watches is reached"
    assert f"refused: {limit}" in proc.stdout
    assert "answer: None" in proc.stdout  # it cannot vouch: the asker walks
    assert "alive: False" in proc.stdout
    assert f"error: {limit}" in proc.stdout
