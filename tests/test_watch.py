"""The watcher: live capture, ``strata watch``, and the watcher as a change oracle for scans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strata import Repository
from strata.runs.watch import LiveCapture
from strata.watch.monitor import ChangeMonitor, MonitorServer, ask

FOLDERS = 12


def _fill(ws: Path) -> None:
    for i in range(FOLDERS):
        folder = ws / f"pkg{i}" / "sub"
        folder.mkdir(parents=True)
        for j in range(3):
            (folder / f"m{j}.py").write_text(f"value = {i * 10 + j}\n")
    (ws / ".gitignore").write_text("build/\n*.log\n")


@pytest.fixture
def watched(
    ws: Path, make_repo: Callable[..., Repository]
) -> Iterator[tuple[Repository, ChangeMonitor]]:
    """A filled workspace with a first snapshot and a watcher serving its socket."""
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    monitor = ChangeMonitor(ws, repo.layout.watch).start()
    server = MonitorServer(monitor).start()
    try:
        yield repo, monitor
    finally:
        server.close()
        monitor.stop()


def _total_folders(repo: Repository) -> int:
    """How many folders a full walk lists (every folder but .strata and ignored ones)."""
    import os

    return sum(
        1
        for folder, dirs, _ in os.walk(repo.root)
        if not any(p in (".strata", "build") for p in Path(folder).relative_to(repo.root).parts)
    )


# -- live capture ----------------------------------------------------------------


def test_live_capture_records_a_step_for_each_settled_change(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws)
    (ws / "readme.txt").write_text("hello\n")
    repo.snapshot("start")
    script = (
        "import pathlib, time\n"
        "for i in range(3):\n"
        "    pathlib.Path(f'step{i}.txt').write_text(f'step {i}\\n')\n"
        "    time.sleep(1)\n"
    )
    with LiveCapture(repo, debounce_ms=300) as capture:
        subprocess.run([sys.executable, "-c", script], cwd=ws, check=True)
    assert len(capture.events) >= 3, capture.errors
    assert capture.errors == []
    recorded = [e for e in repo.history() if e.rationale == "live capture"]
    assert len(recorded) == len(capture.events)
    assert {e.action_type for e in recorded} == {"snapshot"}
    files = sorted(f for e in recorded for f in e.files)
    assert files == ["step0.txt", "step1.txt", "step2.txt"]
    assert repo.show("HEAD", "step2.txt") == b"step 2\n"
    assert repo.check() == []


def test_live_capture_ignores_ignored_and_repository_paths(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    with LiveCapture(repo, debounce_ms=100) as capture:
        (ws / "build").mkdir()
        (ws / "build" / "out.o").write_bytes(b"\0" * 10)
        (ws / "run.log").write_text("noise\n")
        repo.bookmark("add", "here")  # writes into .strata only
    assert capture.events == []
    assert [e.rationale for e in repo.history()] == ["start"]


def test_live_capture_records_what_is_unsettled_at_exit(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    repo = make_repo(ws)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("start")
    with LiveCapture(repo, debounce_ms=60_000) as capture:
        (ws / "a.txt").write_text("changed\n")
    assert [list(e.files) for e in capture.events] == [["a.txt"]]
    assert repo.show("HEAD", "a.txt") == b"changed\n"


# -- the watcher as a change oracle ------------------------------------------------


def test_a_write_just_before_a_snapshot_is_never_missed(
    watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    repo, _ = watched
    ws = repo.root
    other = make_repo(ws, init=False, seed=1)  # asks through the socket, like another command
    other.snapshot("prime the token")
    for n in range(25):
        target = ws / f"pkg{n % FOLDERS}" / "sub" / f"m{n % 3}.py"
        target.write_text(f"value = {n}  # edit\n")  # same size as before on purpose
        result = other.snapshot(f"edit {n}")
        assert other.last_scan is not None
        assert other.last_scan.watcher == "incremental"
        assert result.event is not None, f"edit {n} was missed"
        assert list(result.event.files) == [target.relative_to(ws).as_posix()]
        assert other.show("HEAD", target.relative_to(ws).as_posix()) == target.read_bytes()
    # new folders, renames and deletions in quick succession
    (ws / "fresh" / "deep").mkdir(parents=True)
    (ws / "fresh" / "deep" / "x.txt").write_text("x\n")
    (ws / "pkg0").rename(ws / "moved")
    (ws / "pkg1" / "sub" / "m0.py").unlink()
    result = other.snapshot("shuffle")
    assert other.last_scan is not None and other.last_scan.watcher == "incremental"
    assert other.last_scan.folders_listed < _total_folders(other)
    status = other.status()
    assert status.clean, status.changes
    # the incremental snapshots equal what a full walk finds
    other.layout.statcache.unlink()
    assert other.status().clean
    assert other.last_scan is not None and "no token" in other.last_scan.watcher


def test_status_and_rewind_ask_the_watcher(
    watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    repo, _ = watched
    ws = repo.root
    other = make_repo(ws, init=False, seed=3)
    other.snapshot("prime")
    (ws / "pkg3" / "sub" / "m1.py").write_text("changed\n")
    status = other.status()
    assert other.last_scan is not None and other.last_scan.watcher == "incremental"
    assert [c.path for c in status.changes] == ["pkg3/sub/m1.py"]
    other.snapshot("edit")
    result = other.rewind("HEAD~1")
    assert other.last_scan is not None and other.last_scan.watcher == "incremental"
    assert result.restored_paths == ["pkg3/sub/m1.py"]
    assert (ws / "pkg3" / "sub" / "m1.py").read_text() == "value = 31\n"
    assert other.status().clean  # the rewind's own writes are seen too
    assert other.last_scan is not None and other.last_scan.watcher == "incremental"


def test_a_racy_file_the_watcher_vouches_for_is_not_read_again_until_it_changes(
    watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    repo, _ = watched
    ws = repo.root
    other = make_repo(ws, init=False, seed=4)
    other.snapshot("prime")
    target = ws / "pkg2" / "sub" / "m1.py"
    soon = time.time_ns() + 600 * 10**9  # racy for every scan below
    target.write_text("value = 99\n")
    os.utime(target, ns=(soon, soon))
    first = other.snapshot("edit")
    assert first.event is not None and list(first.event.files) == ["pkg2/sub/m1.py"]
    # racy, but the watcher saw no write since the scan that read it: its stat is enough
    for n in range(3):
        assert other.snapshot(f"again {n}").event is None
        assert other.last_scan is not None and other.last_scan.watcher == "incremental"
        assert other.last_scan.files_hashed == 0
    # a same-size edit that keeps every time stamp is named by the watcher: read again
    target.write_text("value = 42\n")
    os.utime(target, ns=(soon, soon))
    second = other.snapshot("edit again")
    assert second.event is not None and list(second.event.files) == ["pkg2/sub/m1.py"]
    assert other.show("HEAD", "pkg2/sub/m1.py") == b"value = 42\n"
    # a status stores nothing: the file it read is read again by the next snapshot
    target.write_text("value = 77\n")
    os.utime(target, ns=(soon, soon))
    assert [c.path for c in other.status().changes] == ["pkg2/sub/m1.py"]
    third = other.snapshot("after a status")
    assert third.event is not None and other.show("HEAD", "pkg2/sub/m1.py") == b"value = 77\n"
    assert other.check() == []


@pytest.mark.parametrize(("turn_after", "queued"), [(0.02, False), (0.5, True)])
def test_an_asker_is_told_it_is_queued_only_when_its_turn_does_not_come_at_once(
    ws: Path, make_repo: Callable[..., Repository], turn_after: float, queued: bool
) -> None:
    import socket
    import threading

    from strata import _resident
    from strata.watch.monitor import Served

    repo = make_repo(ws)
    (ws / "a.txt").write_text("a\n")
    repo.snapshot("start")
    gate = threading.Event()

    def runner(request: dict[str, Any]) -> Served:
        gate.wait(10)  # the first command runs until the gate opens
        return Served(0, [[1, "ran\n"]])

    monitor = ChangeMonitor(ws, repo.layout.watch).start()
    server = MonitorServer(monitor, runner=runner).start()
    try:
        path = str(repo.layout.watch / "watch.sock")
        key = _resident._read_key(path)
        first = threading.Thread(
            target=_resident._exchange, args=(path, _resident._request(["status"], key, str(ws)))
        )
        first.start()
        time.sleep(0.2)  # the first command now runs
        threading.Timer(turn_after, gate.set).start()
        with socket.socket(socket.AF_UNIX) as sock, sock.makefile("rb") as lines:
            sock.settimeout(5)
            sock.connect(path)
            request = _resident._request(["status"], key, str(ws))
            sock.sendall(json.dumps(request).encode() + b"\n")
            replies = [json.loads(lines.readline())]
            if replies[0].get("queued"):
                replies.append(json.loads(lines.readline()))
            assert [r.get("queued", False) for r in replies] == [True] * queued + [False]
            assert replies[-1]["ready"] is True
            sock.sendall(b'{"go": true}\n')
            assert json.loads(lines.readline())["code"] == 0
        first.join(10)
    finally:
        gate.set()
        server.close()
        monitor.stop()


def _walked(repo: Repository, total: int, reason: str) -> None:
    scan = repo.last_scan
    assert scan is not None
    assert scan.watcher != "incremental"
    assert reason in scan.watcher
    assert scan.folders_listed == total


def test_every_case_the_watcher_cannot_vouch_for_walks_the_tree(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    total = _total_folders(repo)
    edit = ws / "pkg2" / "sub" / "m2.py"

    # no watcher at all
    edit.write_text("one\n")
    assert repo.snapshot("no watcher").event is not None
    _walked(repo, total, "no watcher")

    monitor = ChangeMonitor(ws, repo.layout.watch, max_history=5).start()
    server = MonitorServer(monitor).start()
    try:
        # started late: the stat cache holds no token of this watcher
        edit.write_text("two\n")
        assert repo.snapshot("late").event is not None
        _walked(repo, total, "no token")
        # now it can vouch
        edit.write_text("three\n")
        assert repo.snapshot("vouched").event is not None
        assert repo.last_scan is not None and repo.last_scan.watcher == "incremental"
        # its history overflowed
        for i in range(8):
            (ws / f"extra{i}.txt").write_text("x\n")
        assert repo.snapshot("overflow").event is not None
        _walked(repo, total + 0, "overflowed")
        # the ignore rules changed: every folder's decisions may change
        (ws / ".gitignore").write_text("build/\n")
        assert repo.snapshot("rules").event is not None
        _walked(repo, total, "ignore rules")
    finally:
        server.close()
        monitor.stop()

    # restarted: a new instance does not know the old token
    monitor = ChangeMonitor(ws, repo.layout.watch).start()
    server = MonitorServer(monitor).start()
    try:
        edit.write_text("four\n")
        assert repo.snapshot("restarted").event is not None
        _walked(repo, total, "restarted")
        # an unknown token (a damaged or foreign stat cache)
        from strata.store.statcache import StatCache

        cache = StatCache(repo.layout.statcache)
        cache.token = f"{monitor.instance}:999999"
        cache.save()
        edit.write_text("five\n")
        assert repo.snapshot("bogus").event is not None
        _walked(repo, total, "unknown token")
        # timeout: the watcher never sees the cookie (its watching thread died)
        monitor.stop()
        edit.write_text("six\n")
        assert repo.snapshot("timeout").event is not None
        _walked(repo, total, "no watcher")
    finally:
        server.close()
        monitor.stop()
    # a watcher killed without cleaning up leaves its socket: nobody answers, the tree is walked
    import socket

    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(repo.layout.watch / "watch.sock"))
    stale.close()
    assert ask(repo.layout.watch, "") is None
    edit.write_text("seven\n")
    assert repo.snapshot("stale socket").event is not None
    _walked(repo, total, "no watcher")
    assert repo.check() == []


def test_only_one_watcher_per_workspace(ws: Path, make_repo: Callable[..., Repository]) -> None:
    from strata.errors import WatcherRunning

    repo = make_repo(ws)
    with (
        ChangeMonitor(ws, repo.layout.watch) as first,
        ChangeMonitor(ws, repo.layout.watch) as second,
    ):
        server = MonitorServer(first).start()
        try:
            with pytest.raises(WatcherRunning):
                MonitorServer(second).start()
        finally:
            server.close()


# -- the command line ----------------------------------------------------------------


#: ``watch --status --json`` when no watcher runs (the suite sets STRATA_NO_DAEMON)
NOT_RUNNING = {
    "running": False,
    "pid": None,
    "capture": None,
    "reason": "turned off by STRATA_NO_DAEMON",
}


def _json(out: str) -> Any:
    return json.loads(out)


def test_watch_daemon_status_snapshot_and_stop(ws: Path, run_cli: Any) -> None:
    _fill(ws)
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    code, out, err = run_cli("watch", "--daemon", "--debounce-ms", "60000", "--json", cwd=ws)
    assert code == 0, err
    started = _json(out)
    assert started["running"] is True
    try:
        code, out, err = run_cli("watch", "--daemon", cwd=ws)
        assert code == 1 and err.startswith("error: a watcher already runs"), err
        code, out, _ = run_cli("watch", "--status", "--json", cwd=ws)
        assert _json(out)["pid"] == started["pid"]
        (ws / "pkg5" / "sub" / "m0.py").write_text("edited\n")
        code, out, err = run_cli("snapshot", "--json", cwd=ws)
        assert code == 0, err
        assert _json(out)["changed_paths"] == ["pkg5/sub/m0.py"]
    finally:
        code, out, err = run_cli("watch", "--stop", "--json", cwd=ws)
    assert code == 0, err
    assert _json(out) == {"schema": 1, "stopped": True, "pid": started["pid"]}
    code, out, _ = run_cli("watch", "--status", "--json", cwd=ws)
    assert _json(out) == {**NOT_RUNNING, "schema": 1}
    code, out, _ = run_cli("watch", "--stop", cwd=ws)
    assert code == 0 and "No watcher runs" in out
    code, _, err = run_cli("watch", "--stop", "--status", cwd=ws)
    assert code == 2 and err.startswith("error: use one of")
    assert run_cli("check", cwd=ws)[0] == 0


def test_watch_records_edits_until_stopped(ws: Path, run_cli: Any) -> None:
    import os
    import signal
    import time

    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("a\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", "watch", "--debounce-ms", "100", "--json"],
        cwd=ws,
        env=run_cli.env({"PYTHONFAULTHANDLER": "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(200):
            if run_cli("watch", "--status", "--json", cwd=ws)[1].find('"running": true') >= 0:
                break
            time.sleep(0.05)
        (ws / "a.txt").write_text("edited by an IDE\n")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert _json(line)["changed_paths"] == ["a.txt"]
    finally:
        os.kill(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = proc.communicate()
            raise AssertionError(f"strata watch did not stop on Ctrl-C:\n{err}") from None
    assert proc.returncode == 0, err
    _, out, _ = run_cli("history", "--json", cwd=ws)
    assert _json(out)[0]["rationale"] == "live capture"


def test_watcher_with_the_repository_outside_the_workspace(
    tmp_path: Path, ws: Path, make_repo: Callable[..., Repository]
) -> None:
    _fill(ws)
    repo = make_repo(ws, store=tmp_path / "store")
    repo.snapshot("start")
    assert not repo.layout.watch.is_relative_to(ws)
    with LiveCapture(repo, debounce_ms=60_000) as capture:
        assert capture.server is not None
        other = make_repo(ws, init=False, seed=4)
        other.snapshot("prime")
        (ws / "pkg7" / "sub" / "m2.py").write_text("outside\n")
        result = other.snapshot("edit")
        assert other.last_scan is not None and other.last_scan.watcher == "incremental"
        assert result.event is not None and list(result.event.files) == ["pkg7/sub/m2.py"]
    assert capture.events == []  # the edit was recorded by 'other' before the capture closed


def _full_walk_tree(repo: Repository) -> str:
    """The workspace's tree as a walk without any cache or watcher finds it."""
    from strata.store.ignore import IgnoreRules
    from strata.store.objects import MemoryObjectStore
    from strata.store.scan import Scanner
    from strata.store.statcache import StatCache

    rules = IgnoreRules.root(defaults=repo.config.ignore_defaults)
    scanner = Scanner(repo.root, MemoryObjectStore(), rules=rules, cache=StatCache(None))
    return scanner.scan().tree


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_snapshots_equal_full_walks_through_random_changes(
    seed: int, watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    import os
    import random
    import shutil

    repo, _ = watched
    ws = repo.root
    other = make_repo(ws, init=False, seed=10 + seed)
    other.snapshot("prime")
    rng = random.Random(seed)

    def folders() -> list[Path]:
        found = [ws]
        for folder, dirs, _ in os.walk(ws):
            dirs[:] = [d for d in dirs if d not in (".strata", "build")]
            found += [Path(folder) / d for d in dirs]
        return sorted(found)

    def files() -> list[Path]:
        return sorted(p for f in folders() for p in f.iterdir() if p.is_file())

    for step in range(40):
        op = rng.choice(["write", "write", "mkdir", "move", "delete", "rmtree", "chmod", "link"])
        where = rng.choice(folders())
        if op == "write":
            (where / f"f{rng.randrange(6)}.txt").write_text(f"{step}\n" * rng.randrange(3))
        elif op == "mkdir":
            (where / f"d{step}" / "inner").mkdir(parents=True)
            (where / f"d{step}" / "inner" / "x.txt").write_text("x\n")
        elif op == "move" and where != ws:
            target = rng.choice(folders())
            if not target.is_relative_to(where):
                where.rename(target / f"m{step}")
        elif op == "delete" and files():
            rng.choice(files()).unlink()
        elif op == "rmtree" and where != ws:
            shutil.rmtree(where)
        elif op == "chmod" and files():
            rng.choice(files()).chmod(rng.choice([0o644, 0o755]))
        elif op == "link":
            link = where / f"l{step}"
            link.symlink_to(f"target{step}")
        if rng.random() < 0.5:
            continue  # several changes before the next snapshot
        other.snapshot(f"step {step}")
        assert other.last_scan is not None
        assert other.last_scan.watcher in ("incremental", "the ignore rules changed")
        assert other.last_scan.tree == _full_walk_tree(other), f"step {step} ({op})"
    other.snapshot("end")
    assert other.last_scan is not None and other.last_scan.tree == _full_walk_tree(other)
    assert other.status().clean
    assert other.check() == []


def test_new_ignore_defaults_make_the_watcher_walk(
    watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    repo, _ = watched
    ws = repo.root
    other = make_repo(ws, init=False, seed=5)
    other.snapshot("prime")
    config = repo.layout.config
    text = config.read_text()
    config.write_text(text.replace('"__pycache__/"', '"__pycache__/", "m1.py"'))
    edited = make_repo(ws, init=False, seed=6)  # reads the new defaults
    result = edited.snapshot("defaults changed")
    assert edited.last_scan is not None
    assert edited.last_scan.watcher == "the ignore rules changed"
    assert result.event is not None
    assert all(f.endswith("m1.py") for f in result.event.files)
    assert len(result.event.files) == FOLDERS
    assert edited.last_scan.tree == _full_walk_tree(edited)


def test_a_watcher_that_does_not_answer_in_time_makes_the_scan_walk(
    ws: Path, make_repo: Callable[..., Repository]
) -> None:
    import socket

    _fill(ws)
    repo = make_repo(ws)
    repo.snapshot("start")
    total = _total_folders(repo)
    (repo.layout.watch / "cookies").mkdir(parents=True)  # the cookie can be written
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(repo.layout.watch / "watch.sock"))
        hung.listen(4)  # connections queue up, nobody ever answers
        (ws / "pkg4" / "sub" / "m0.py").write_text("while hung\n")
        result = repo.snapshot("hung watcher")  # waits ASK_TIMEOUT for an answer, then walks
    assert result.event is not None and list(result.event.files) == ["pkg4/sub/m0.py"]
    _walked(repo, total, "no watcher")


def test_live_capture_beside_a_running_watcher(
    watched: tuple[Repository, ChangeMonitor], make_repo: Callable[..., Repository]
) -> None:
    repo, _ = watched
    ws = repo.root
    with LiveCapture(repo, debounce_ms=200) as capture:
        assert capture.server is None  # the running watcher keeps serving the socket
        subprocess.run(
            [sys.executable, "-c", "open('pkg2/sub/new.py', 'w').write('x = 1\\n')"],
            cwd=ws,
            check=True,
        )
    assert [list(e.files) for e in capture.events] == [["pkg2/sub/new.py"]]


def test_a_killed_watcher_leaves_a_sound_repository(ws: Path, run_cli: Any) -> None:
    import os
    import signal
    import time

    _fill(ws)
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("snapshot", cwd=ws)[0] == 0
    code, out, err = run_cli("watch", "--daemon", "--debounce-ms", "0", "--json", cwd=ws)
    assert code == 0, err
    pid = _json(out)["pid"]
    for i in range(40):  # keep it recording while it is killed
        (ws / "pkg0" / "sub" / f"burst{i}.txt").write_text(f"{i}\n")
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)  # until it is reaped by init
    code, out, err = run_cli("check", cwd=ws)
    assert code == 0, out + err
    assert _json(run_cli("watch", "--status", "--json", cwd=ws)[1]) == {
        **NOT_RUNNING,
        "schema": 1,
    }
    (ws / "after.txt").write_text("after the kill\n")
    code, out, err = run_cli("snapshot", "--json", cwd=ws)
    assert code == 0, err
    assert "after.txt" in _json(out)["changed_paths"]
    code, out, err = run_cli("watch", "--daemon", "--json", cwd=ws)  # a new one starts
    assert code == 0, err
    assert run_cli("watch", "--stop", cwd=ws)[0] == 0


def test_run_watch_records_a_step_for_each_settled_change(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "readme.txt").write_text("hello\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    script = (
        "import pathlib, time\n"
        "for i in range(3):\n"
        "    pathlib.Path(f'step{i}.txt').write_text(f'step {i}\\n')\n"
        "    time.sleep(1)\n"
    )
    argv = ["run", "--watch", "--debounce-ms", "300", "--json", "--", sys.executable, "-c", script]
    code, out, err = run_cli(*argv, cwd=ws)
    assert code == 0, err
    summary = _json(out)
    assert summary["exit_code"] == 0
    _, out, _ = run_cli("history", "--json", cwd=ws)
    live = [e for e in _json(out) if e["rationale"] == "live capture"]
    assert len(live) >= 3
    assert sorted(f for e in live for f in e["files"]) == ["step0.txt", "step1.txt", "step2.txt"]
    assert run_cli("check", cwd=ws)[0] == 0
    # the live steps sit between the run's before and after snapshots
    assert summary["diff"]["files_changed"] == 3


def test_run_watch_needs_the_hash_backend(ws: Path, run_cli: Any, git: Any) -> None:
    git("init", "-q", cwd=ws)
    code, _, err = run_cli("run", "--watch", "--", "true", cwd=ws)
    assert code == 125
    assert err.startswith("error: --watch records steps in Strata's own store")
