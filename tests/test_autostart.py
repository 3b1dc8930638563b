"""The watcher that starts itself: the first command in a workspace starts it.

Real watcher processes: each test turns the suite's ``STRATA_NO_DAEMON=1``
off for its own commands and, whatever happens, stops (or kills) every
watcher it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import strata
from conftest import (
    AUTO,
    CliRunner,
    as_json,
    assert_user_error,
    gone,
    ok,
    wait_until,
    watchers_below,
)
from strata.layout import WriteLock, find_layout
from strata.watch.monitor import file_system_type, unwatchable


def _workspace(ws: Path, run_cli: CliRunner, config: str = "") -> Path:
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "start", cwd=ws))
    if config:
        with open(ws / ".strata" / "config.toml", "a", encoding="utf-8") as f:
            f.write(config)
    return ws


def _running(run_cli: CliRunner, ws: Path) -> dict[str, Any]:
    status: dict[str, Any] = as_json(run_cli("watch", "--status", "--json", cwd=ws))
    return status if status["running"] and status.get("sequence") is not None else {}


def test_the_first_command_starts_one_watcher_that_serves_the_next_ones(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    assert watchers_below(tmp_path) == []  # the suite's default: none
    ok(run_cli("status", cwd=ws))
    assert watchers_below(tmp_path) == []
    # a burst of first commands at once: one watcher in the end
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "strata", "history"],
            cwd=ws,
            env=run_cli.env(AUTO),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    status = wait_until(lambda: _running(run_cli, ws))
    assert status["capture"] is False and status["commands_run"] == 0
    time.sleep(0.5)  # any watcher started twice has met the pid file by now
    assert watchers_below(tmp_path) == [status["pid"]]
    (ws / "src" / "b.py").write_text("b = 2\n")
    out = as_json(auto("snapshot", "--json", "-m", "served", cwd=ws))
    assert out["changed_paths"] == ["src/b.py"]
    for args in (
        ["diff", "HEAD~1", "HEAD", "--json"],
        ["history", "--json"],
        ["bookmark", "list"],
    ):
        ok(auto(*args, cwd=ws))
    assert _running(run_cli, ws)["commands_run"] == 4
    # a command whose output is a whole file runs in the caller
    assert ok(auto("show", "HEAD:src/b.py", cwd=ws)) == "b = 2\n"
    assert _running(run_cli, ws)["commands_run"] == 4
    said = as_json(auto("status", "--json", cwd=ws))["watcher"]
    assert said == {"running": True, "pid": status["pid"], "capture": False, "reason": None}
    assert f"Watcher: pid {status['pid']} serves this workspace." in ok(auto("status", cwd=ws))
    assert watchers_below(tmp_path) == [status["pid"]]
    ok(run_cli("check", cwd=ws))


def test_off_switches_and_help_start_no_watcher(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli, "\n[watch]\nauto = false\n")
    ok(auto("snapshot", cwd=ws))
    ok(auto("status", cwd=ws))
    said = as_json(auto("status", "--json", cwd=ws))["watcher"]
    assert said == {
        "running": False,
        "pid": None,
        "capture": None,
        "reason": "turned off in config.toml ([watch] auto = false)",
    }
    other = _workspace(tmp_path / "other", run_cli)
    ok(auto("snapshot", "--help", cwd=other))
    ok(auto("--version", cwd=other))
    ok(run_cli("snapshot", cwd=other, env={"STRATA_NO_DAEMON": "1"}))
    assert "STRATA_NO_DAEMON" in ok(run_cli("status", cwd=other))
    time.sleep(1.0)  # a watcher started by any of them would have taken its pid file
    assert watchers_below(tmp_path) == []
    assert not (other / ".strata" / "watch" / "watch.pid").exists()
    # a bad value: no watcher starts, status says why, the watcher command refuses in one
    # line; recording goes on (a mistake in [watch] must not leave a change unrecorded)
    for name, setting, says in (
        ("bad", 'auto = "yes"', "watch.auto is not true or false"),
        ("bad2", "idle_timeout = -1", "watch.idle_timeout"),
        ("bad4", 'trash_idle = "soon"', "watch.trash_idle is not a number of seconds"),
        # a misspelt setting is refused, not ignored (it would leave the watcher on)
        ("bad3", "auot = false", "watch.auot is not a setting"),
    ):
        bad = _workspace(tmp_path / name, run_cli, f"\n[watch]\n{setting}\n")
        reason = as_json(auto("status", "--json", cwd=bad))["watcher"]["reason"]
        assert reason.startswith("not started: config.toml: ") and says in reason
        (bad / "new.txt").write_text("recorded all the same\n")
        ok(auto("snapshot", "-m", "still recorded", cwd=bad))
        assert_user_error(auto("watch", "--auto", cwd=bad), says=says)
    time.sleep(1.0)
    assert watchers_below(tmp_path) == []


def test_an_idle_watcher_exits_and_the_next_command_starts_another(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli, "\n[watch]\nidle_timeout = 1.5\n")
    ok(auto("status", cwd=ws))
    first = wait_until(lambda: _running(run_cli, ws))["pid"]
    for _ in range(6):  # busy: requests and changes keep it alive
        (ws / "src" / "a.py").write_text(f"a = {time.monotonic()}\n")
        time.sleep(0.5)
    assert not gone(first)
    wait_until(lambda: gone(first), timeout=15)
    watch = ws / ".strata" / "watch"
    assert not (watch / "watch.sock").exists() and not (watch / "watch.key").exists()
    assert "idle" in (watch / "watch.log").read_text()
    ok(auto("status", cwd=ws))
    second = wait_until(lambda: _running(run_cli, ws))["pid"]
    assert second != first


@pytest.mark.parametrize("change", ["moved", "removed", "store-claimed", "strata-updated"])
def test_a_watcher_exits_when_what_it_serves_goes_away(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]], change: str
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("status", cwd=ws))
    pid = wait_until(lambda: _running(run_cli, ws))["pid"]
    version_file = Path(strata.__file__).parent / "_version.py"
    before = version_file.stat()
    try:
        if change == "moved":
            ws.rename(tmp_path / "elsewhere")
        elif change == "removed":
            shutil.rmtree(ws)
        elif change == "store-claimed":
            config = ws / ".strata" / "config.toml"
            text = config.read_text().replace(str(ws), str(tmp_path / "another"))
            config.write_text(text)
        else:  # a newer Strata installed over this one
            os.utime(version_file, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        wait_until(lambda: gone(pid), timeout=15)
    finally:
        os.utime(version_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    if change == "strata-updated":
        assert "Strata was updated" in (ws / ".strata" / "watch" / "watch.log").read_text()
        ok(auto("status", cwd=ws))  # and the next command starts the new one
        assert wait_until(lambda: _running(run_cli, ws))["pid"] != pid


def test_a_killed_watcher_leaves_nothing_the_next_command_trips_on(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("snapshot", "-m", "first", cwd=ws))
    pid = wait_until(lambda: _running(run_cli, ws))["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid))
    watch = ws / ".strata" / "watch"
    assert (watch / "watch.sock").exists()  # what it left behind
    (ws / "src" / "after.py").write_text("after\n")
    out = as_json(auto("snapshot", "--json", cwd=ws))
    assert out["changed_paths"] == ["src/after.py"]
    second = wait_until(lambda: _running(run_cli, ws))["pid"]
    assert second != pid
    (ws / "src" / "later.py").write_text("later\n")
    out = as_json(auto("snapshot", "--json", cwd=ws))
    assert out["changed_paths"] == ["src/later.py"]
    assert _running(run_cli, ws)["commands_run"] == 1
    ok(run_cli("check", cwd=ws))


def test_strata_watch_takes_over_and_captures_while_serving(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("status", cwd=ws))
    served = wait_until(lambda: _running(run_cli, ws))["pid"]
    try:
        started = as_json(run_cli("watch", "--daemon", "--debounce-ms", "100", "--json", cwd=ws))
        assert started["pid"] != served and started["capture"] is True
        assert gone(served) or wait_until(lambda: gone(served))
        (ws / "src" / "live.py").write_text("live\n")

        def captured() -> bool:
            events = as_json(run_cli("history", "--json", cwd=ws))
            return any(e["rationale"] == "live capture" for e in events)

        wait_until(captured)
        # the capturing watcher runs commands for the command line too
        (ws / "src" / "served.py").write_text("served\n")
        out = as_json(auto("snapshot", "--json", "-m", "by hand", cwd=ws))
        assert "src/served.py" in out["changed_paths"] or out["changed_paths"] == []
        assert _running(run_cli, ws)["commands_run"] >= 1
        # a second capturing watcher is refused
        assert_user_error(run_cli("watch", "--daemon", cwd=ws), says="already runs")
    finally:
        ok(run_cli("watch", "--stop", cwd=ws))
    events = as_json(run_cli("history", "--json", cwd=ws))
    assert sum(e["rationale"] == "by hand" for e in events) <= 1
    ok(run_cli("check", cwd=ws))


def test_a_second_asker_waits_for_the_watcher_instead_of_starting_strata(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("snapshot", cwd=ws))
    wait_until(lambda: _running(run_cli, ws))
    (ws / "src" / "b.py").write_text("b\n")
    layout = find_layout(ws)

    def client(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "strata", *args],
            cwd=ws,
            env=run_cli.env(AUTO),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    with WriteLock(layout.lock):  # the served snapshot waits for it; status waits its turn
        first = client("snapshot", "--json", "-m", "first")
        time.sleep(1.0)
        second = client("status", "--json")
        time.sleep(3.0)  # longer than an asker waits for "ready"
        assert first.poll() is None and second.poll() is None
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert json.loads(out)["changed_paths"] == ["src/b.py"]
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert json.loads(out)["watcher"]["running"] is True
    assert _running(run_cli, ws)["commands_run"] == 2


def test_a_network_file_system_gets_no_watcher(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        f"server:/export {tmp_path} nfs4 rw,vers=4.2 0 0\n"
        f"tmpfs {tmp_path}/ws\\040other tmpfs rw 0 0\n"
    )
    assert file_system_type(ws, mounts) == "nfs4"
    assert unwatchable(ws, mounts=mounts) == "the workspace is on a network file system (nfs4)"
    (tmp_path / "ws other").mkdir()
    assert file_system_type(tmp_path / "ws other", mounts) == "tmpfs"
    assert unwatchable(tmp_path / "ws other", mounts=mounts) is None


def test_strata_run_starts_the_watcher_too(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("run", "--", "true", cwd=ws))
    status = wait_until(lambda: _running(run_cli, ws))
    assert status["capture"] is False
    (ws / "src" / "c.py").write_text("c\n")
    out = as_json(auto("snapshot", "--json", cwd=ws))
    assert out["changed_paths"] == ["src/c.py"]
    assert _running(run_cli, ws)["commands_run"] == 1


def test_a_capturing_watcher_records_steps_while_it_serves_commands(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli, "\n[watch]\ncapture = true\n")
    ok(auto("status", cwd=ws))
    assert wait_until(lambda: _running(run_cli, ws))["capture"] is True
    ok(run_cli("watch", "--stop", cwd=ws))
    # steps recorded at once, each while a command runs for the command line
    ok(run_cli("watch", "--daemon", "--debounce-ms", "0", cwd=ws))
    layout = find_layout(ws)
    try:
        for i in range(12):
            (ws / "src" / f"step{i}.py").write_text(f"{i}\n")
            if i % 3:
                events = as_json(auto("history", "--json", cwd=ws))
                assert isinstance(events, list)  # nothing of the capture's output mixed in
                continue
            # a served snapshot and a step both wait for the write lock: whichever goes
            # first, the snapshot's output is its own
            with WriteLock(layout.lock):
                client = subprocess.Popen(
                    [sys.executable, "-m", "strata", "snapshot", "--json"],
                    cwd=ws,
                    env=run_cli.env(AUTO),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                time.sleep(0.5)
            out, err = client.communicate(timeout=60)
            assert client.returncode == 0, err
            assert json.loads(out)["changed_paths"] in ([], [f"src/step{i}.py"]), out
        assert _running(run_cli, ws)["commands_run"] == 12

        def all_recorded() -> bool:
            # each step file by a live step, or by a served snapshot that went first
            events = as_json(run_cli("history", "--json", cwd=ws))
            live = {f for e in events if e["rationale"] == "live capture" for f in e["files"]}
            files = {f for e in events for f in e["files"] if "step" in f}
            return files == {f"src/step{i}.py" for i in range(12)} and len(live) >= 8

        wait_until(all_recorded)
    finally:
        ok(run_cli("watch", "--stop", cwd=ws))
    log = (ws / ".strata" / "watch" / "watch.log").read_text()
    assert log.count("Recorded ") >= 1  # the steps were reported in the watcher's own log
    ok(run_cli("check", cwd=ws))


def test_the_watcher_of_a_git_backed_workspace_exits_once_init_gives_it_a_repository(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]], git: Any
) -> None:
    ws = tmp_path / "gitws"
    ws.mkdir()
    git("init", "-q", "-b", "main", cwd=ws)
    (ws / "a.txt").write_text("one\n")
    git("add", "-A", cwd=ws)
    git("commit", "-qm", "first", cwd=ws)
    # a run in a plain git work tree keeps its store in .git/strata and starts a watcher there
    ok(auto("run", "--", "sh", "-c", "echo two >> a.txt", cwd=ws))
    old = wait_until(lambda: watchers_below(tmp_path))
    assert (ws / ".git" / "strata" / "repo").is_dir()
    # 'strata init' gives the workspace a repository of its own: the old watcher serves
    # nothing any more and goes; the new one is the only one left
    ok(auto("init", cwd=ws))
    ok(auto("status", cwd=ws))
    wait_until(lambda: all(gone(pid) for pid in old), timeout=15)
    new = wait_until(lambda: _running(run_cli, ws))["pid"]
    assert new not in old
    assert watchers_below(tmp_path) == [new]
    log = (ws / ".git" / "strata" / "repo" / "watch" / "watch.log").read_text()
    assert "the workspace now uses another repository" in log


def test_a_watcher_that_does_not_answer_is_named_and_not_waited_for_twice(
    tmp_path: Path, run_cli: CliRunner, auto: Callable[..., tuple[int, Any, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("status", cwd=ws))
    pid = wait_until(lambda: _running(run_cli, ws))["pid"]
    (ws / "src" / "late.py").write_text("late\n")
    os.kill(pid, signal.SIGSTOP)
    try:
        # the command runs by itself, reads the whole tree (the edit is seen) and says why
        out = as_json(auto("status", "--json", cwd=ws))
        assert out["watcher"] == {
            "running": False,
            "pid": pid,
            "capture": None,
            "reason": f"pid {pid} does not answer: stopped or stuck",
        }
        assert "src/late.py" in json.dumps(out)
        said = ok(auto("status", cwd=ws))
        assert f"Watcher: none (pid {pid} does not answer: stopped or stuck)" in said
        snap = as_json(auto("snapshot", "--json", cwd=ws))
        assert snap["changed_paths"] == ["src/late.py"]
        # 'watch --status' says the same (it called the stopped watcher running)
        asked = as_json(auto("watch", "--status", "--json", cwd=ws))
        assert asked["running"] is False
        assert asked["reason"] == f"pid {pid} does not answer: stopped or stuck"
    finally:
        os.kill(pid, signal.SIGCONT)
    assert _running(run_cli, ws)["commands_run"] == 0  # it ran none of them
    ok(run_cli("check", cwd=ws))
