"""``strata snapshot`` run by the workspace's watcher (``strata._resident``).

The watcher runs the command in its own process; what the user sees (output,
errors, exit codes, the recorded history) must be exactly what the command
would have done by itself, and a command must never be recorded twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strata.layout import WriteLock, find_layout


def _status(run_cli: Any, ws: Path) -> dict[str, Any]:
    code, out, err = run_cli("watch", "--status", "--json", cwd=ws)
    assert code == 0, err
    status: dict[str, Any] = json.loads(out)
    return status


@pytest.fixture
def served(tmp_path: Path, run_cli: Any) -> Iterator[Callable[[Path], dict[str, Any]]]:
    """``served(ws)`` starts a resident watcher in ``ws``; stopped at the end of the test."""
    started: list[Path] = []

    def start(ws: Path) -> dict[str, Any]:
        code, out, err = run_cli("watch", "--daemon", "--no-capture", "--json", cwd=ws)
        assert code == 0, err
        started.append(ws)
        status: dict[str, Any] = json.loads(out)
        return status

    yield start
    for ws in started:
        run_cli("watch", "--stop", cwd=ws)


def _workspace(root: Path) -> Path:
    root.mkdir()
    for i in range(4):
        (root / f"pkg{i}").mkdir()
        (root / f"pkg{i}" / "mod.py").write_text(f"value = {i}\n")
    return root


STEPS: list[tuple[Callable[[Path], object], list[str], dict[str, str]]] = [
    (lambda ws: (ws / "pkg1" / "mod.py").write_text("value = 1\nmore = 2\n"), ["-m", "edit"], {}),
    (lambda ws: (ws / "née.txt").write_text("ünïcode\n"), ["--json", "-m", "añadido"], {}),
    (lambda ws: (ws / "pkg2" / "mod.py").unlink(), ["--author", "bob", "--json"], {}),
    (lambda ws: None, ["-m", "nothing"], {}),  # nothing changed: no event
    (lambda ws: (ws / "bin.dat").write_bytes(b"\0\1\2" * 100), ["save", "v1"], {}),
    (lambda ws: (ws / "x.txt").write_text("x\n"), ["--json"], {"STRATA_AUTHOR_KIND": "agent"}),
    (lambda ws: (ws / "y.txt").write_text("y\n"), ["--author-kind", "bogus"], {}),
    (lambda ws: None, ["--no-such-option"], {}),
    (lambda ws: None, ["--json"], {"STRATA_AUTHOR_KIND": "zzz"}),
    (lambda ws: None, ["--json"], {"STRATA_NOW": "yesterday"}),
    (lambda ws: None, ["save"], {}),
    (lambda ws: (ws / "pkg3" / "mod.py").write_text("changed\n"), ["--operation", "op1"], {}),
]


def _without_watcher(status: str) -> str:
    """``status`` output without what it says about the watcher (one serves only one side)."""
    if status.startswith("{"):
        body = json.loads(status)
        assert body.pop("watcher")["running"] in (True, False)
        return json.dumps(body)
    lines = status.splitlines(keepends=True)
    assert sum(line.startswith("Watcher: ") for line in lines) == 1, status
    return "".join(line for line in lines if not line.startswith("Watcher: "))


def _run_steps(ws: Path, run_cli: Any) -> list[tuple[int, str, str]]:
    results = []
    for n, (change, args, env) in enumerate(STEPS):
        change(ws)
        code, out, err = run_cli(
            "snapshot", *args, cwd=ws, env={"STRATA_SEED": f"step{n}", **env}, text=False
        )
        results.append((code, out.decode("latin-1"), err.decode("latin-1")))
        if n % 3 == 0:
            change(ws) if n else (ws / "pending.txt").write_text("pending\n")
            for args in (["status"], ["status", "--json"]):
                code, out, err = run_cli(*args, cwd=ws, text=False)
                results.append((code, _without_watcher(out.decode("latin-1")), err.decode()))
    return results


def test_a_resident_snapshot_prints_and_records_what_a_local_one_does(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    local, resident = _workspace(tmp_path / "a"), _workspace(tmp_path / "b")
    for ws in (local, resident):
        assert run_cli("init", "--no-snapshot", cwd=ws, env={"STRATA_SEED": "init"})[0] == 0
        assert run_cli("snapshot", "-m", "start", cwd=ws, env={"STRATA_SEED": "s"})[0] == 0
    served(resident)

    expected = _run_steps(local, run_cli)
    got = _run_steps(resident, run_cli)

    assert [r[0] for r in expected].count(2) == 5  # the five bad invocations
    assert got == expected
    assert any("Unrecorded changes" in r[1] for r in got)
    assert _status(run_cli, resident)["commands_run"] == len(got)
    histories = [run_cli("history", "--json", cwd=ws)[1] for ws in (local, resident)]
    assert json.loads(histories[0]) == json.loads(histories[1])
    assert len(json.loads(histories[1])) > 5
    assert run_cli("check", cwd=resident)[0] == 0


def test_a_served_command_loads_only_what_starts_fast(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", cwd=ws)[0] == 0
    served(ws)
    (ws / "new.txt").write_text("new\n")
    code, out, err = run_cli(
        "snapshot", "-m", "timed", cwd=ws, env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert code == 0 and "Recorded" in out, err
    assert _status(run_cli, ws)["commands_run"] == 1  # the watcher ran it
    loaded = {line.rpartition("|")[2].strip() for line in err.splitlines() if "|" in line}
    assert "strata._resident" in loaded and "strata._wire" in loaded
    # socket's enums, typing, json (and its re) and the rest of Strata cost milliseconds the
    # client never spends
    slow = {"socket", "typing", "array", "selectors", "json", "re", "click", "strata.cli"}
    slow.add("strata.watch.monitor")
    assert loaded & slow == set()


def test_the_installed_command_and_hook_load_neither_re_nor_json(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """The Python launcher pip installs (``bin/strata``) hands a served command over at once.

    pip's generated console script imports ``re`` and the ``json`` module imports it
    too: 6 ms of every command that the client does not need. (Where a C compiler
    was found, ``strata`` is the native client and this launcher is ``strata-py``.)
    """
    script = Path(sys.executable).parent / "strata-py"
    if not script.exists():
        script = script.with_name("strata")
    if not script.exists():
        pytest.skip("strata is not installed beside this Python")
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", cwd=ws)[0] == 0
    served(ws)
    env = {**run_cli.env(), "PYTHONPROFILEIMPORTTIME": "1"}
    (ws / "new.txt").write_text("new\n")
    snap = subprocess.run([script, "snapshot", "-m", "x"], cwd=ws, env=env, capture_output=True)
    post = {
        "session_id": "s1",
        "cwd": str(ws),
        "hook_event_name": "PostToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(ws / "b.txt"), "content": "b\n"},
    }
    (ws / "b.txt").write_text("b\n")
    hook = subprocess.run(
        [script, "hook", "claude-code"],
        input=json.dumps(post).encode(),
        cwd=ws,
        env=env,
        capture_output=True,
    )
    for proc in (snap, hook):
        assert proc.returncode == 0, proc.stderr
        loaded = {ln.rpartition(b"|")[2].strip() for ln in proc.stderr.splitlines() if b"|" in ln}
        assert b"strata._resident" in loaded
        assert loaded & {b"re", b"json", b"click", b"strata.cli"} == set()
    assert _status(run_cli, ws)["commands_run"] == 2  # the watcher ran both
    code, out, err = run_cli("history", "--limit", "1", "--json", cwd=ws)
    assert code == 0, err
    shown = json.dumps({"file_path": str(ws / "b.txt"), "content": "b\n"}, ensure_ascii=False)
    assert json.loads(out)[0]["rationale"] == f"Write {shown}"


def test_each_served_command_warns_of_an_unknown_config_table(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """The watcher runs many commands in one process: each one warns, as it would alone."""
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", cwd=ws)[0] == 0
    with (ws / ".strata" / "config.toml").open("a", encoding="utf-8") as f:
        f.write('\n[policy]\nprofile = "read-only"\n')
    served(ws)
    for n in range(2):
        (ws / f"new{n}.txt").write_text(f"{n}\n")
        code, out, err = run_cli("snapshot", "-m", f"served {n}", cwd=ws)
        assert code == 0 and "Recorded" in out, err
        (warning,) = err.splitlines()
        assert "config.toml: [policy] is not a table" in warning, n
    assert _status(run_cli, ws)["commands_run"] == 2


def test_a_served_snapshot_saves_the_stat_cache_after_answering(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """The asker does not wait for the stat cache's save; the next command finds it saved."""
    from strata.store.statcache import StatCache, forget_memory

    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", cwd=ws)[0] == 0
    served(ws)
    cache = ws / ".strata" / "statcache"
    tokens = []
    for n in range(3):
        (ws / f"new{n}.txt").write_text(f"{n}\n")
        code, out, err = run_cli("snapshot", "-m", f"served {n}", cwd=ws)
        assert code == 0 and "Recorded" in out, err
        assert run_cli("history", "--limit", "1", cwd=ws)[0] == 0  # the next turn: saved by now
        forget_memory()
        saved = StatCache(cache)
        tokens.append(saved.token)
        root = saved.get("")
        assert root is not None and f"new{n}.txt" in root.files  # the new file's stat is kept
    assert _status(run_cli, ws)["commands_run"] == 6
    assert len(set(tokens)) == 3 and all(tokens)  # each save holds the watcher's newer token


def test_help_debug_and_other_commands_are_never_sent_to_the_watcher(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", cwd=ws)[0] == 0
    served(ws)
    assert run_cli("snapshot", "--help", cwd=ws)[0] == 0
    assert run_cli("--debug", "snapshot", cwd=ws)[0] == 0
    assert run_cli("ledger", "head", cwd=ws)[0] == 0
    assert run_cli("run", "--", "true", cwd=ws)[0] == 0  # runs a child: in the caller
    assert run_cli("snapshot", cwd=ws, env={"STRATA_DEBUG": "1"})[0] == 0
    assert run_cli("status", cwd=ws, env={"STRATA_NO_RESIDENT": "1"})[0] == 0
    assert _status(run_cli, ws)["commands_run"] == 0
    (ws / "new.txt").write_text("new\n")
    code, out, err = run_cli("-C", str(ws / "pkg0"), "snapshot", "--json", cwd=tmp_path)
    assert code == 0 and json.loads(out)["changed_paths"] == ["new.txt"], err
    assert _status(run_cli, ws)["commands_run"] == 0
    (ws / "pkg0" / "deeper.txt").write_text("deeper\n")
    code, out, err = run_cli("snapshot", "--json", cwd=ws / "pkg0")  # found from a subfolder
    assert code == 0 and json.loads(out)["changed_paths"] == ["pkg0/deeper.txt"], err
    assert _status(run_cli, ws)["commands_run"] == 1


def _wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def _opened(pid: int, path: Path) -> bool:
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(path) for fd in os.listdir(folder))
    except OSError:
        return False


def test_a_watcher_killed_mid_snapshot_is_reported_and_nothing_is_recorded_twice(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    pid = served(ws)["pid"]
    (ws / "edited.txt").write_text("edited\n")
    layout = find_layout(ws)
    with WriteLock(layout.lock):  # the watcher's snapshot waits for it
        client = subprocess.Popen(
            [sys.executable, "-m", "strata", "snapshot", "-m", "killed"],
            cwd=ws,
            env=run_cli.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _wait_until(lambda: _opened(pid, Path(os.path.realpath(layout.lock))))
        os.kill(pid, signal.SIGKILL)
        out, err = client.communicate(timeout=60)
    assert client.returncode == 1
    assert out == b""
    assert err.decode().startswith(f"error: the watcher (pid {pid}) stopped while running")
    assert run_cli("check", cwd=ws)[0] == 0
    code, out, _ = run_cli("history", "--json", cwd=ws)
    assert [e["rationale"] for e in json.loads(out)].count("killed") == 0
    code, out, err = run_cli("snapshot", "-m", "again", "--json", cwd=ws)  # no watcher: local
    assert code == 0 and json.loads(out)["changed_paths"] == ["edited.txt"], err


def test_a_watcher_stopped_mid_snapshot_finishes_it_first(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    ws = _workspace(tmp_path / "ws")
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    assert run_cli("snapshot", "-m", "start", cwd=ws)[0] == 0
    pid = served(ws)["pid"]
    (ws / "edited.txt").write_text("edited\n")
    layout = find_layout(ws)

    def strata(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "strata", *args],
            cwd=ws,
            env=run_cli.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    with WriteLock(layout.lock):
        client = strata("snapshot", "-m", "during stop", "--json")
        _wait_until(lambda: _opened(pid, Path(os.path.realpath(layout.lock))))
        stopper = strata("watch", "--stop")
        _wait_until(lambda: not (layout.watch / "watch.sock").exists())  # it is stopping
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err
    assert json.loads(out)["changed_paths"] == ["edited.txt"]
    stopper.communicate(timeout=60)
    assert stopper.returncode == 0
    out = run_cli("history", "--json", cwd=ws)[1]
    assert [e["rationale"] for e in json.loads(out)].count("during stop") == 1
    assert run_cli("check", cwd=ws)[0] == 0


#: (change to make first, command) run in both workspaces; the served commands beyond snapshot
SERVED_STEPS: list[tuple[Callable[[Path], object], list[str]]] = [
    (lambda ws: (ws / "pkg1" / "mod.py").write_text("value = 11\n"), ["snapshot", "-m", "two"]),
    (lambda ws: None, ["diff", "HEAD~1", "HEAD"]),
    (lambda ws: (ws / "pkg0" / "mod.py").write_text("dirty\n"), ["diff", "HEAD", "--json"]),
    (lambda ws: None, ["diff", "HEAD", "--stat"]),
    (lambda ws: None, ["history", "--json"]),
    (lambda ws: None, ["checkpoint", "list", "--json"]),
    (lambda ws: None, ["diff", "HEAD", "no/such/file"]),
    (lambda ws: None, ["bookmark", "add", "mark", "HEAD~1", "--json"]),
    (lambda ws: None, ["bookmark", "list"]),
    (lambda ws: None, ["branch", "list", "--json"]),
    (lambda ws: None, ["rewind", "mark", "--json"]),
    (lambda ws: None, ["status"]),
    (lambda ws: None, ["undo", "--json"]),
    (lambda ws: None, ["redo"]),
    (lambda ws: (ws / "pkg2" / "mod.py").unlink(), ["restore", "HEAD", "--", "pkg2/mod.py"]),
    (lambda ws: None, ["op", "log", "--json"]),
    (lambda ws: None, ["rewind", "nowhere"]),
    (lambda ws: None, ["check", "--json"]),
]


def test_served_readers_and_rewinds_print_and_do_what_local_ones_do(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    local, resident = _workspace(tmp_path / "a"), _workspace(tmp_path / "b")
    for ws in (local, resident):
        assert run_cli("init", "--no-snapshot", cwd=ws, env={"STRATA_SEED": "init"})[0] == 0
        assert run_cli("snapshot", "-m", "start", cwd=ws, env={"STRATA_SEED": "s"})[0] == 0
    served(resident)

    def steps(ws: Path) -> list[tuple[int, str, str]]:
        results = []
        for n, (change, args) in enumerate(SERVED_STEPS):
            change(ws)
            code, out, err = run_cli(*args, cwd=ws, env={"STRATA_SEED": f"x{n}"}, text=False)
            out, err = out.decode(), err.decode()
            if args[0] == "status":
                out = _without_watcher(out)
            results.append((code, out.replace(str(ws), "WS"), err.replace(str(ws), "WS")))
        return results

    expected, got = steps(local), steps(resident)
    assert [code for code, _, _ in expected].count(0) == len(SERVED_STEPS) - 2
    assert got == expected
    assert _status(run_cli, resident)["commands_run"] == len(SERVED_STEPS)
    from conftest import read_manifest

    assert read_manifest(local) == read_manifest(resident)


def test_a_served_rewind_leaves_the_watcher_and_the_stat_cache_up_to_date(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """After a served rewind the next scan knows every file written, and sees every edit after.

    Once the asker has its answer the watcher reads what the rewind wrote
    into the stat cache, so the next rewind's auto-save hashes nothing again.
    """
    from strata.store.statcache import StatCache, forget_memory

    ws = _workspace(tmp_path / "ws")
    for i in range(30):
        (ws / "pkg0" / f"f{i}.txt").write_text(f"one {i}\n")
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    assert run_cli("snapshot", "-m", "one", cwd=ws)[0] == 0
    code, out, _ = run_cli("history", "--json", "--limit", "1", cwd=ws)
    one = json.loads(out)[0]["id"]
    for i in range(30):
        (ws / "pkg0" / f"f{i}.txt").write_text(f"two {i}\n")
    assert run_cli("snapshot", "-m", "two", cwd=ws)[0] == 0
    served(ws)

    code, out, err = run_cli("rewind", one, cwd=ws)
    assert code == 0, err
    assert all((ws / "pkg0" / f"f{i}.txt").read_text() == f"one {i}\n" for i in range(30))
    assert _status(run_cli, ws)["commands_run"] == 1  # the rewind was served

    def settled() -> bool:
        forget_memory()
        files = StatCache(ws / ".strata" / "statcache").get("pkg0")
        known = files.files if files is not None else {}
        return all(
            f"f{i}.txt" in known
            and known[f"f{i}.txt"][4] == (ws / "pkg0" / f"f{i}.txt").stat().st_ino
            for i in range(30)
        )

    deadline = time.monotonic() + 20
    while not settled():
        assert time.monotonic() < deadline, "the stat cache was never brought up to date"
        time.sleep(0.05)

    code, out, err = run_cli("status", "--json", cwd=ws)
    assert code == 0, err
    assert json.loads(out)["clean"] is True
    (ws / "pkg0" / "f3.txt").write_text("edited right after the rewind\n")  # same size or not
    (ws / "pkg0" / "f4.txt").write_text("one 9\n")  # same size as before
    code, out, err = run_cli("snapshot", "--json", "-m", "after", cwd=ws)
    assert code == 0, err
    assert sorted(json.loads(out)["changed_paths"]) == ["pkg0/f3.txt", "pkg0/f4.txt"]
    assert run_cli("check", cwd=ws)[0] == 0


def _two_states(ws: Path, run_cli: Any, files: int) -> tuple[str, str]:
    """Record ``files`` files twice over with other content; the ids of the two snapshots."""
    ids = []
    for state in ("one", "two"):
        for i in range(files):
            (ws / "pkg0" / f"f{i}.txt").write_text(f"{state} {i}\n" * 100)
        if state == "one":
            assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
        assert run_cli("snapshot", "-m", state, cwd=ws)[0] == 0
        out = run_cli("history", "--json", "--limit", "1", cwd=ws)[1]
        ids.append(json.loads(out)[0]["id"])
    return ids[0], ids[1]


def _trash_idle(ws: Path, seconds: float) -> None:
    with (ws / ".strata" / "config.toml").open("a") as config:
        config.write(f"\n[watch]\ntrash_idle = {seconds}\n")


def _trash(ws: Path) -> list[str]:
    trash = ws / ".strata" / "trash"
    return sorted(os.listdir(trash)) if trash.exists() else []


def _wait_for_empty_trash(ws: Path, within: float, why: str) -> float:
    """Wait until the trash is empty; return how long it took."""
    start = time.monotonic()
    while _trash(ws):
        assert time.monotonic() - start < within, why
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_served_rewind_leaves_the_replaced_files_until_the_workspace_is_quiet(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """The watcher deletes what a rewind replaced once nothing happened for [watch] trash_idle.

    Not at once (deleting many files slows creating many for a while after:
    the next rewind would pay for it); ``strata du`` counts the trash; a
    change in the workspace puts the deletion off again.
    """
    ws = _workspace(tmp_path / "ws")
    one, _two = _two_states(ws, run_cli, 20)
    _trash_idle(ws, 3)
    served(ws)

    code, out, err = run_cli("rewind", one, cwd=ws)
    assert code == 0, err
    assert _status(run_cli, ws)["commands_run"] == 1  # the rewind was served
    assert len(_trash(ws)) == 20  # the replaced files wait
    code, out, err = run_cli("du", "--json", cwd=ws)
    assert code == 0, err
    held = sum((ws / ".strata" / "trash" / name).stat().st_size for name in _trash(ws))
    assert json.loads(out)["kinds"]["trash"] == held > 20 * 600
    assert run_cli("status", cwd=ws)[0] == 0  # a request: quiet from here
    time.sleep(1.5)
    (ws / "pkg1" / "new.txt").write_text("a change: quiet from here\n")
    time.sleep(2)  # 3.5 s after the status, 2 s after the change
    assert len(_trash(ws)) == 20, "the trash was emptied while the workspace was not quiet"
    took = _wait_for_empty_trash(ws, 15, "the trash was never emptied once the workspace was quiet")
    assert took < 10
    code, out, err = run_cli("du", "--json", cwd=ws)
    assert json.loads(out)["kinds"]["trash"] == 0
    assert all((ws / "pkg0" / f"f{i}.txt").read_text() == f"one {i}\n" * 100 for i in range(20))
    assert run_cli("check", cwd=ws)[0] == 0


def test_a_stopping_watcher_empties_the_trash(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """Before ``strata watch --stop`` returns: the workspace may be deleted right after."""
    ws = _workspace(tmp_path / "ws")
    one, _two = _two_states(ws, run_cli, 2000)  # (its deletion takes a while)
    _trash_idle(ws, 600)
    served(ws)
    assert run_cli("rewind", one, cwd=ws)[0] == 0
    assert len(_trash(ws)) == 2000
    assert run_cli("watch", "--stop", cwd=ws)[0] == 0
    assert _trash(ws) == [], "the watcher stopped and left the trash full"


def test_what_a_killed_watcher_left_in_the_trash_is_deleted_later(
    tmp_path: Path, run_cli: Any, served: Callable[[Path], dict[str, Any]]
) -> None:
    """A watcher killed with the trash full: the repository is sound, the next one empties it.

    The trash is never workspace content: the workspace is clean, as rewound.
    A rewind run without a watcher empties it at once too.
    """
    ws = _workspace(tmp_path / "ws")
    one, two = _two_states(ws, run_cli, 10)
    _trash_idle(ws, 1)
    pid = served(ws)["pid"]
    assert run_cli("rewind", one, cwd=ws)[0] == 0
    os.kill(pid, signal.SIGKILL)
    assert len(_trash(ws)) == 10
    code, out, err = run_cli("check", cwd=ws, env={"STRATA_NO_DAEMON": "1"})
    assert code == 0, out + err
    code, out, err = run_cli("status", "--json", cwd=ws, env={"STRATA_NO_DAEMON": "1"})
    assert code == 0, err
    assert json.loads(out)["clean"] is True
    assert len(_trash(ws)) == 10

    served(ws)  # finds the leftovers, deletes them once quiet
    _wait_for_empty_trash(ws, 15, "the next watcher never deleted the leftovers")
    assert run_cli("rewind", two, cwd=ws)[0] == 0  # (served: leaves its own)
    assert len(_trash(ws)) == 10
    assert run_cli("watch", "--stop", cwd=ws)[0] == 0
    assert _trash(ws) == [], "the watcher stopped and left the trash full"
    (ws / ".strata" / "trash" / "left-by-a-killed-process").write_text("x\n")
    code, out, err = run_cli("rewind", one, cwd=ws, env={"STRATA_NO_DAEMON": "1"})
    assert code == 0, err
    assert _trash(ws) == []  # no watcher: emptied at once, leftovers too
    assert run_cli("check", cwd=ws, env={"STRATA_NO_DAEMON": "1"})[0] == 0
