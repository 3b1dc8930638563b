"""A group whose process was SIGKILLed is finished and closed by the next command, then undone.

Each test starts a real ``strata`` command (``ask`` against a model server on
127.0.0.1, ``host``, ``run``, ``exec``), kills it with SIGKILL at a point the
test waits for (a model call pending, a command running), then runs the next
command: the group shows as interrupted in ``strata op log``, ``strata check``
passes, and one ``strata undo`` puts back the files, the conversation's head
and the Draft exactly as they were before the group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, as_json, ok, wait_until
from wire_server import WireServer, text, tools


def _start(run_cli: CliRunner, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
    """``strata ARGS`` in a session of its own (no terminal), not waited for."""
    return subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=run_cli.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL strata alone (a command it runs lives on in its own group)."""
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.stderr is not None
    proc.stderr.close()


def _op_log(run_cli: CliRunner, ws: Path) -> list[str]:
    return str(ok(run_cli("op", "log", cwd=ws))).splitlines()


def _ops(run_cli: CliRunner, ws: Path) -> list[dict[str, Any]]:
    return list(as_json(run_cli("op", "log", "--json", cwd=ws)))


# -- a Workshop turn -----------------------------------------------------------------


@pytest.fixture
def served(run_cli: CliRunner, ws: Path, wire: WireServer) -> Path:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.srv]\nadapter = "openai-chat"\nbase_url = "{wire.openai_url}"\n'
            'model = "m"\nretry_delays = [0.01]\n[model]\ndefault = "srv"\n'
        )
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


def _draft(run_cli: CliRunner, ws: Path) -> dict[str, Any]:
    return dict(as_json(run_cli("draft", "status", "--json", cwd=ws)))


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".strata" not in p.relative_to(folder).parts
    }


WRITE_A = tools(("write_file", {"path": "a.txt", "content": "one\n"}))
WRITE_B = ("write_file", {"path": "b.txt", "content": "two\n"})


@pytest.mark.parametrize(
    ("point", "draft_open"),
    [("first_call", False), ("after_step", False), ("mid_stream", True)],
)
def test_a_killed_ask_is_closed_by_the_next_command_and_one_undo_reverts_it(
    run_cli: CliRunner, served: Path, wire: WireServer, point: str, draft_open: bool
) -> None:
    ws = served
    # a whole turn first: the head to come back to (and the Draft it opened, with mine.txt)
    if draft_open:
        wire.queue(tools(("write_file", {"path": "mine.txt", "content": "kept\n"})))
    wire.queue(text("Hi."))
    ok(run_cli("ask", "hello", cwd=ws))
    log_before = as_json(run_cli("chat", "log", "--json", cwd=ws))
    draft_before = _draft(run_cli, ws)
    files_before = _files(Path(draft_before["path"])) if draft_open else {}
    if point == "first_call":
        wire.queue(text("never", headers_delay=20))
        calls = 1
    elif point == "after_step":
        wire.queue(WRITE_A, text("never", headers_delay=20))
        calls = 2
    else:  # the second answer's tool call arrives piece by piece, slowly
        wire.queue(WRITE_A, tools(WRITE_B, chunk=2, chunk_delay=0.4))
        calls = 2
    seen = len(wire.requests)
    proc = _start(run_cli, "ask", "edit the files", cwd=ws)
    wait_until(lambda: len(wire.requests) >= seen + calls, timeout=60)
    if point == "mid_stream":
        time.sleep(0.6)  # a piece or two of the tool call received, the rest to come
    _kill(proc)

    # the next command that writes finishes the turn (an interrupted answer) and closes it
    ok(run_cli("recover", cwd=ws))
    lines = _op_log(run_cli, ws)
    assert "workshop" in lines[0] and "edit the files" in lines[0], lines
    assert "interrupted)" in lines[0], lines
    closing = _ops(run_cli, ws)[0]
    assert closing["command"] == "group close" and closing["details"]["interrupted"] is True
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    last = log["messages"][-1]
    assert last["kind"] == "assistant_message" and last["data"]["interrupted"] is True
    assert log["messages"][-2]["text"] == "edit the files"
    if point != "first_call":  # the step it finished is in the Draft
        assert (Path(_draft(run_cli, ws)["path"]) / "a.txt").read_text() == "one\n"
    ok(run_cli("check", cwd=ws))

    # one undo: the conversation, the Draft and Published as before the ask
    out = ok(run_cli("undo", cwd=ws))
    assert "workshop" in out, out
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    assert log["head"] == log_before["head"]
    assert [m["id"] for m in log["messages"]] == [m["id"] for m in log_before["messages"]]
    draft = _draft(run_cli, ws)
    assert draft["open"] is draft_open
    if draft_open:
        assert _files(Path(draft["path"])) == files_before
        assert files_before == {"a.txt": "original\n", "mine.txt": "kept\n"}
    assert (ws / "a.txt").read_text() == "original\n" and not (ws / "b.txt").exists()
    ok(run_cli("check", cwd=ws))
    # and the Workshop goes on
    wire.queue(text("Back."))
    assert ok(run_cli("ask", "again", cwd=ws)).startswith("Back.")


# -- a host run, a run, an exec ----------------------------------------------------------


def test_a_killed_host_run_is_closed_and_one_undo_reverts_it(
    run_cli: CliRunner, ws: Path, wire: WireServer
) -> None:
    (ws / "guide.md").write_text("# Server\n\nThe server listens on port 8421.\n")
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.srv]\nadapter = "openai-chat"\nbase_url = "{wire.openai_url}"\n'
            'model = "m"\nretry_delays = [0.01]\n'
        )
    ok(run_cli("snapshot", "-m", "before", cwd=ws))
    plan = {
        "goal": "write the port down",
        "tasks": [
            {"kind": "terminal_exec", "title": "one", "command": "echo 1 > one.txt"},
            {"kind": "terminal_exec", "title": "two", "command": "echo 2 > two.txt"},
        ],
    }
    wire.queue(
        tools(("local_kb_retrieval", {"query": "server port", "k": None})),
        tools(("create_plan", plan)),
        text("never", headers_delay=20),  # the answer after both tasks: killed waiting for it
    )
    seen = len(wire.requests)
    proc = _start(run_cli, "host", "write two files", "--model", "srv", "--yes", cwd=ws)
    wait_until(lambda: len(wire.requests) >= seen + 3, timeout=60)
    _kill(proc)
    assert (ws / "one.txt").read_text() == "1\n" and (ws / "two.txt").read_text() == "2\n"

    out = ok(run_cli("recover", cwd=ws))
    assert out.startswith("closed host 'write two files': its process had died"), out
    assert "nothing to recover" not in out
    lines = _op_log(run_cli, ws)
    assert lines[0].split()[3] == "host" and "interrupted)" in lines[0], lines
    assert sum("host" in line for line in lines) == 1, lines
    ok(run_cli("check", cwd=ws))
    out = ok(run_cli("undo", cwd=ws))
    assert "host" in out, out
    assert not (ws / "one.txt").exists() and not (ws / "two.txt").exists()
    assert (ws / "guide.md").exists()
    ok(run_cli("check", cwd=ws))


@pytest.mark.parametrize("command", ["run", "exec"])
def test_a_killed_run_or_exec_is_one_closed_group_and_one_undo_reverts_it(
    run_cli: CliRunner, ws: Path, command: str
) -> None:
    (ws / "a.txt").write_text("mine\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("snapshot", "-m", "mine", cwd=ws))
    before = len(_op_log(run_cli, ws))
    script = "echo new > new.txt; echo more >> a.txt; touch started; sleep 60"
    args = ["run", "--"] if command == "run" else ["exec", "--yes", "--"]
    proc = _start(run_cli, *args, "sh", "-c", script, cwd=ws)
    wait_until(lambda: (ws / "started").exists(), timeout=60)
    _kill(proc)

    # the next command ends what strata left running, records the run in its group, closes it
    (closed,) = as_json(run_cli("recover", "--json", cwd=ws))["groups"]
    lines = _op_log(run_cli, ws)
    assert len(lines) == before + 1, lines
    assert lines[0].split()[3] == command and "interrupted)" in lines[0], lines
    group = [o for o in _ops(run_cli, ws) if (o.get("group") or {}).get("kind") == command]
    assert len({o["group"]["id"] for o in group}) == 1
    assert group[0]["command"] == "group close"
    assert (closed["kind"], closed["id"]) == (command, group[0]["group"]["id"])
    assert closed["closed_by"] == group[0]["id"] and closed["error"] is None
    ok(run_cli("check", cwd=ws))
    out = ok(run_cli("undo", cwd=ws))
    assert command in out, out
    assert not (ws / "new.txt").exists() and not (ws / "started").exists()
    assert (ws / "a.txt").read_text() == "mine\n"
    ok(run_cli("check", cwd=ws))


def test_a_lease_left_in_the_workshop_folder_by_an_older_version_is_finished(
    run_cli: CliRunner, served: Path, wire: WireServer
) -> None:
    """Before groups had their folder, a turn's lease was kept in REPO/workshop/."""
    ws = served
    wire.queue(text("never", headers_delay=20))
    seen = len(wire.requests)
    proc = _start(run_cli, "ask", "edit the files", cwd=ws)
    wait_until(lambda: len(wire.requests) >= seen + 1, timeout=60)
    _kill(proc)
    repo = ws / ".strata"
    (lease,) = (repo / "groups").glob("*.lease")
    lease.rename(repo / "workshop" / lease.name)
    ok(run_cli("recover", cwd=ws))
    assert not list((repo / "workshop").glob("*.lease"))
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    assert log["messages"][-1]["data"]["interrupted"] is True
    assert "interrupted)" in _op_log(run_cli, ws)[0]
    ok(run_cli("undo", cwd=ws))
    assert as_json(run_cli("chat", "log", "--json", cwd=ws))["messages"] == []
    assert json.dumps(_draft(run_cli, ws)["open"]) == "false"


def test_a_workshop_rewind_is_one_group_and_one_undo_reverts_it(
    run_cli: CliRunner, served: Path, wire: WireServer
) -> None:
    ws = served
    wire.queue(WRITE_A, text("Set."))
    turn = as_json(run_cli("ask", "--json", "set a.txt", cwd=ws))
    before = len(_op_log(run_cli, ws))
    first = turn["user_message"]["id"]
    ok(run_cli("chat", "rewind", first[:10], cwd=ws))  # the Draft's end and the chat rewind
    lines = _op_log(run_cli, ws)
    assert len(lines) == before + 1, lines
    assert lines[0].split()[3] == "workshop" and f"rewind to {first[:10]}" in lines[0], lines
    ops = _ops(run_cli, ws)
    steps = [o for o in ops if (o.get("group") or {}).get("id") == ops[0]["group"]["id"]]
    assert steps[0]["command"] == "chat rewind" and len(steps) > 1, steps
    assert _draft(run_cli, ws)["open"] is False
    ok(run_cli("undo", cwd=ws))
    draft = _draft(run_cli, ws)
    assert draft["open"] is True and (Path(draft["path"]) / "a.txt").read_text() == "one\n"
    assert (
        as_json(run_cli("chat", "log", "--json", cwd=ws))["head"] == turn["assistant_message"]["id"]
    )
    ok(run_cli("check", cwd=ws))


def test_a_lease_its_finisher_cannot_read_never_blocks_the_next_write(
    run_cli: CliRunner, ws: Path
) -> None:
    """A damaged Workshop lease (its finisher fails): the lease goes, the command goes on."""
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    group = {"id": "grp1", "kind": "workshop", "title": "lost", "author": {"name": "t"}}
    lease = {"kind": "workshop_turn", "group": group, "pending": {"command": "chat rewind"}}
    groups = ws / ".strata" / "groups"
    groups.mkdir()
    (groups / "turn_x.lease").write_text(json.dumps(lease))
    code, _, err = run_cli("snapshot", "-m", "two", cwd=ws)
    assert code == 0 and "Traceback" not in err, err
    assert not list(groups.glob("*.lease"))
    # no step of the group was ever recorded: nothing to close, the lease just goes
    assert not [o for o in _ops(run_cli, ws) if o["command"] == "group close"]
    ok(run_cli("check", cwd=ws))
