"""``strata run`` begun and ended by the self-started watcher, its command run by the caller.

Each test compares with the whole command line (``STRATA_NO_RESIDENT=1``) in a
twin workspace: same events, same output, same exit code. Real watcher
processes (self-started, stopped at the end: see ``test_autostart``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import AUTO, CliRunner, Person, as_json, gone, ok, wait_until, watchers_below

FULL = {"STRATA_NO_RESIDENT": "1"}
Cli = Callable[..., tuple[int, Any, Any]]


def _workspace(ws: Path, run_cli: CliRunner) -> Path:
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a = 1\n")
    (ws / "notes.txt").write_text("one\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "start", cwd=ws))
    return ws


def _watcher(run_cli: CliRunner, ws: Path) -> dict[str, Any]:
    status: dict[str, Any] = as_json(run_cli("watch", "--status", "--json", cwd=ws))
    return status if status["running"] and status.get("sequence") is not None else {}


def _twins(tmp_path: Path, run_cli: CliRunner, auto: Cli) -> tuple[Path, Path]:
    """Two like workspaces, each with its self-started watcher running."""
    thin, full = _workspace(tmp_path / "thin", run_cli), _workspace(tmp_path / "full", run_cli)
    for ws in (thin, full):
        ok(auto("status", cwd=ws))
        wait_until(lambda ws=ws: _watcher(run_cli, ws))
    return thin, full


IDS = (
    "id",
    "operation_id",
    "run_id",
    "event",
    "snapshot_ref",
    "before_snapshot",
    "after_snapshot",
    "ref",
)


def _ids(*docs: Any) -> list[str]:
    found: list[str] = []

    def walk(doc: Any) -> None:
        if isinstance(doc, dict):
            for key, value in doc.items():
                if key in IDS and isinstance(value, str):
                    found.append(value)
                walk(value)
        elif isinstance(doc, list):
            for item in doc:
                walk(item)

    for doc in docs:
        walk(doc)
    return list(dict.fromkeys(found))


def _normal(text: str, ids: list[str], ws: Path) -> str:
    """``text`` with ids numbered in order of appearance, the workspace path and times masked."""
    text = text.replace(str(ws), "WS")
    for n, value in enumerate(ids):
        text = text.replace(value, f"<id{n}>").replace(value[:12], f"<id{n}>")
    text = re.sub(r'"ts": "[^"]*"', '"ts": T', text)
    return re.sub(r'"duration_ms": \d+', '"duration_ms": D', text)


def _record(run_cli: CliRunner, ws: Path) -> tuple[Any, Any]:
    env = {"STRATA_NO_RESIDENT": "1"}
    history = as_json(run_cli("history", "--json", cwd=ws, env=env))
    ops = as_json(run_cli("op", "log", "--json", cwd=ws, env=env))
    for op in ops:
        op.pop("seq", None)
    return history, ops


def _same_record(run_cli: CliRunner, thin: Path, full: Path) -> None:
    got = []
    for ws in (thin, full):
        history, ops = _record(run_cli, ws)
        ids = _ids(history, ops)
        got.append(_normal(json.dumps([history, ops], indent=1, sort_keys=True), ids, ws))
    assert got[0] == got[1]


RUNS = [
    ("true",),
    ("sh", "-c", "echo out; echo err >&2; exit 1"),
    ("sh", "-c", "echo changed >> notes.txt; mkdir -p new; echo b > new/b.txt; rm -f src/a.py"),
    ("nosuchcmd", "x"),
    ("./notes.txt",),  # exists, not executable
]


def test_a_thin_run_prints_records_and_exits_as_the_whole_command_line(
    tmp_path: Path, run_cli: CliRunner, auto: Cli
) -> None:
    thin, full = _twins(tmp_path, run_cli, auto)
    codes = []
    for argv in RUNS:
        for label in ((), ("--label", "a label", "--author", "bot", "--author-kind", "agent")):
            results = []
            for ws, env in ((thin, AUTO), (full, {**AUTO, **FULL})):
                code, out, err = run_cli("run", *label, "--", *argv, cwd=ws, env=env)
                history, ops = _record(run_cli, ws)
                ids = _ids(history, ops)
                results.append((code, _normal(out, ids, ws), _normal(err, ids, ws)))
            assert results[0] == results[1], argv
            codes.append(results[0][0])
    assert codes == [0, 0, 1, 1, 0, 0, 127, 127, 126, 126]
    _same_record(run_cli, thin, full)
    assert (thin / "new" / "b.txt").read_text() == "b\n"
    # every plain run whose command exists was begun by the watcher, none by the other
    assert _watcher(run_cli, thin)["runs_begun"] == 6
    assert _watcher(run_cli, full)["runs_begun"] == 0
    for ws in (thin, full):
        assert "ok:" in ok(run_cli("check", cwd=ws))


def test_other_forms_of_run_run_the_whole_command_line(
    tmp_path: Path, run_cli: CliRunner, auto: Cli
) -> None:
    thin, full = _twins(tmp_path, run_cli, auto)
    for args in (
        ("--json", "--", "true"),
        ("--capture-patch", "--", "sh", "-c", "echo x >> notes.txt"),
        ("--rollback-on-failure", "--", "sh", "-c", "echo y >> notes.txt; exit 2"),
        ("--strategy", "hash", "--", "true"),
        ("--help",),
    ):
        results = []
        for ws, env in ((thin, AUTO), (full, {**AUTO, **FULL})):
            code, out, err = run_cli("run", *args, cwd=ws, env=env)
            history, ops = _record(run_cli, ws)
            ids = _ids(history, ops)
            results.append((code, _normal(out, ids, ws), _normal(err, ids, ws)))
        assert results[0] == results[1], args
    assert _watcher(run_cli, thin)["runs_begun"] == 0
    _same_record(run_cli, thin, full)
    ok(run_cli("run", "--label", "plain", "--", "true", cwd=thin, env=AUTO))
    assert _watcher(run_cli, thin)["runs_begun"] == 1


def _killed_run(run_cli: CliRunner, ws: Path, env: dict[str, str]) -> None:
    """A run whose strata its own command kills (SIGKILL) after changing a file."""
    script = "echo half > half.txt; kill -KILL $PPID; sleep 0.5"
    code, _out, _err = run_cli("run", "--", "sh", "-c", script, cwd=ws, env=env)
    assert code == -signal.SIGKILL


def test_a_thin_run_killed_midway_is_recovered_as_a_killed_run_is(
    tmp_path: Path, run_cli: CliRunner, auto: Cli
) -> None:
    thin, full = _twins(tmp_path, run_cli, auto)
    for ws, env in ((thin, AUTO), (full, {**AUTO, **FULL})):
        _killed_run(run_cli, ws, env)
        assert list((ws / ".strata" / "runs").glob("*.lease")), "the lease is left behind"
        assert "ok:" in ok(run_cli("check", cwd=ws, env=FULL))
        ok(run_cli("snapshot", "-m", "next", cwd=ws, env=env))  # records the killed run
        assert not list((ws / ".strata" / "runs").glob("*.lease"))
        assert "ok:" in ok(run_cli("check", cwd=ws, env=FULL))
    assert _watcher(run_cli, thin)["runs_begun"] == 1
    _same_record(run_cli, thin, full)
    history, _ = _record(run_cli, thin)
    (run,) = [e for e in history if e["action_type"] == "run"]
    assert run["data"]["recovered"] is True and run["data"]["interrupted"] is True
    assert run["files"] == ["half.txt"]


def test_sigterm_reaches_the_command_of_a_thin_run_as_it_does_a_full_one(
    tmp_path: Path, run_cli: CliRunner, auto: Cli
) -> None:
    thin, full = _twins(tmp_path, run_cli, auto)
    script = (
        "trap 'echo stopped >> notes.txt; exit 7' TERM; touch started; while :; do sleep 0.05; done"
    )
    for ws, env in ((thin, AUTO), (full, {**AUTO, **FULL})):
        proc = subprocess.Popen(
            [sys.executable, "-m", "strata", "run", "--", "sh", "-c", script],
            cwd=ws,
            env=run_cli.env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda ws=ws: (ws / "started").exists())
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 7, err
        (ws / "started").unlink()
    assert _watcher(run_cli, thin)["runs_begun"] == 1
    _same_record(run_cli, thin, full)
    history, _ = _record(run_cli, thin)
    (run,) = [e for e in history if e["action_type"] == "run"]
    assert run["data"]["interrupted"] is True and run["data"]["exit_code"] == 7


def _ask(sock: Path, body: dict[str, Any], *, fd: int | None = None) -> Any:
    """One request on the watcher's socket (``fd`` attached), "go" after "ready"; the last reply."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        data = json.dumps(body).encode() + b"\n"
        if fd is not None:
            socket.send_fds(s, [data], [fd])
        else:
            s.sendall(data)
        reply = json.loads(s.makefile("rb").readline() or b"null")
        if reply and reply.get("ready"):
            s.sendall(b'{"go": true}\n')
            reply = json.loads(s.makefile("rb").readline() or b"null")
        return reply


def _request(ws: Path, op: str, argv: list[str], **more: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "op": op,
        "argv": argv,
        "cwd": str(ws),
        "env": {"PATH": os.environ.get("PATH", ""), "STRATA_AUTHOR": "x", "HOME": str(ws)},
        "umask": 0o022,
        "fsencoding": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
        "tty": [False, False],
        "encoding": [["utf-8", "strict"], ["utf-8", "strict"]],
        **more,
    }


def test_the_watcher_begins_and_ends_runs_only_for_its_own_command_line(
    tmp_path: Path, run_cli: CliRunner, auto: Cli
) -> None:
    ws = _workspace(tmp_path / "ws", run_cli)
    ok(auto("status", cwd=ws))
    wait_until(lambda: _watcher(run_cli, ws))
    sock = ws / ".strata" / "watch" / "watch.sock"
    key = (ws / ".strata" / "watch" / "watch.key").read_text().strip()
    begin = _request(ws, "run_begin", ["run", "--", "true"])
    # without the key (as a sandboxed command, which cannot read the repository)
    assert not _ask(sock, begin)["ok"]
    # an end for a run this watcher did not begin, with a file descriptor or without
    outcome = {"exit_code": 0, "signal": None, "interrupted": False, "duration_ms": 1}
    end = _request(ws, "run_end", ["run", "--", "true"], key=key, run_id="x" * 20, outcome=outcome)
    with open(ws / "notes.txt", "rb") as f:
        reply = _ask(sock, end, fd=f.fileno())
    assert not reply["ok"] and "did not begin" in reply["reason"], reply
    # a real begin: the lease comes with the answer; an end without it is refused
    reply = _ask(sock, {**begin, "key": key})
    assert reply["ok"] and reply["begun"], reply
    run_id = reply["run_id"]
    reply = _ask(sock, {**end, "run_id": run_id})
    assert not reply["ok"] and "lease" in reply["reason"], reply
    assert _watcher(run_cli, ws)["runs_begun"] == 1
    history = as_json(run_cli("history", "--json", cwd=ws, env=FULL))
    assert not [e for e in history if e["action_type"] == "run"]
    # the asker that held the lease is gone: the run is recorded as interrupted
    ok(run_cli("snapshot", "-m", "next", cwd=ws, env=AUTO))
    history = as_json(run_cli("history", "--json", cwd=ws, env=FULL))
    (run,) = [e for e in history if e["action_type"] == "run"]
    assert run["operation_id"] == run_id and run["data"]["recovered"] is True
    assert "ok:" in ok(run_cli("check", cwd=ws, env=FULL))


def test_another_user_cannot_begin_a_run(
    tmp_path: Path, run_cli: CliRunner, auto: Cli, unprivileged: Person
) -> None:
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("connecting as another user needs root to switch users")
    base = Path(tempfile.mkdtemp(prefix="strata-thin-", dir="/tmp"))
    try:
        _another_user_is_refused(base, run_cli, auto, unprivileged)
    finally:
        for pid in watchers_below(base):
            os.kill(pid, signal.SIGTERM)
        for pid in watchers_below(base):
            wait_until(lambda pid=pid: gone(pid), timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def _another_user_is_refused(base: Path, run_cli: CliRunner, auto: Cli, other: Person) -> None:
    base.chmod(0o755)
    ws = _workspace(base / "ws", run_cli)
    ok(auto("status", cwd=ws))
    wait_until(lambda: _watcher(run_cli, ws))
    for folder in (ws, ws / ".strata", ws / ".strata" / "watch"):
        folder.chmod(0o755)
    sock = ws / ".strata" / "watch" / "watch.sock"
    sock.chmod(0o777)  # as a lax umask would leave it
    key = (ws / ".strata" / "watch" / "watch.key").read_text().strip()
    script = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        "s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "print(s.makefile().readline())\n"
    )
    body = json.dumps(_request(ws, "run_begin", ["run", "--", "true"], key=key))
    done = other.run([sys.executable, "-I", "-c", script, str(sock), body])
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert not reply["ok"] and "another user" in reply["reason"], reply
    assert _watcher(run_cli, ws)["runs_begun"] == 0
