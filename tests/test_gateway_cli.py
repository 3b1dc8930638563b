"""``strata exec``: the command line of terminal_exec (run with no controlling terminal)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CliRunner, as_json, assert_user_error, ok
from strata import Repository


@pytest.fixture
def cli(tmp_path: Path) -> CliRunner:
    home = tmp_path / "home"
    home.mkdir()
    return CliRunner(home, prefix=("setsid", "-w"))  # a session of its own: no /dev/tty


@pytest.fixture
def ws(tmp_path: Path, cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\n")
    with Repository.init(ws) as repo:
        repo.snapshot("start")
    return ws


def test_low_runs_and_prints_its_output(ws: Path, cli: CliRunner) -> None:
    assert ok(cli("exec", "--", "cat", "notes.txt", cwd=ws)) == "one\n"
    code, out, _ = cli("exec", "--shell", "echo hi && exit 3", cwd=ws)
    assert (code, out) == (3, "hi\n")


def test_no_terminal_and_no_yes_is_denied(ws: Path, cli: CliRunner) -> None:
    err = assert_user_error(cli("exec", "--shell", "rm notes.txt", cwd=ws), says="approval denied")
    assert "no terminal" in err and "--yes" in err
    assert (ws / "notes.txt").exists()
    code, out, err = cli("exec", "--json", "--shell", "rm notes.txt", cwd=ws)
    assert code == 1 and out == ""
    error = json.loads(err.splitlines()[-1])["error"]
    assert error["type"] == "ApprovalDenied" and error["code"] == "approval_denied"
    history = as_json(cli("history", "--action", "approval", "--json", cwd=ws))
    assert [e["action_type"] for e in history] == ["approval_decided", "approval_requested"] * 2
    shown = ok(cli("history", "--action", "approval", cwd=ws))  # why, without --json
    assert "denied by terminal: rm notes.txt — approval needed but there is no terminal" in shown


def test_yes_approves_and_undo_reverts(ws: Path, cli: CliRunner) -> None:
    out = as_json(cli("exec", "--yes", "--json", "--shell", "rm notes.txt", cwd=ws))
    assert out["ran"] and out["decision"] == "prompt" and out["risk"] == "medium"
    assert out["approval"] == {"approved": True, "reason": "approved in advance", "by": "--yes"}
    assert out["changes"] == [
        {"path": "notes.txt", "status": "deleted", "insertions": 0, "deletions": 1}
    ]
    assert not (ws / "notes.txt").exists()
    ok(cli("undo", cwd=ws))
    assert (ws / "notes.txt").read_text() == "one\n"


def test_forbidden_by_profile(ws: Path, cli: CliRunner) -> None:
    code, _, err = cli("exec", "--profile", "read-only", "--yes", "--json", "--", "rm", "x", cwd=ws)
    assert code == 1
    assert json.loads(err.splitlines()[-1])["error"]["code"] == "command_forbidden"
    shown = ok(cli("history", "--action", "tool_call_finished", cwd=ws))
    assert "forbidden: rm x — profile read-only" in shown


def test_config_rules_apply(ws: Path, cli: CliRunner) -> None:
    with open(ws / ".strata" / "config.toml", "a") as f:
        f.write(
            '\n[gateway]\nprofile = "workspace-write"\n\n[[gateway.rules]]\nname = "touch-ok"\n'
            'pattern = ["touch"]\ndecision = "allow"\nmatch = ["touch a"]\n'
        )
    ok(cli("exec", "--", "touch", "made.txt", cwd=ws))
    assert (ws / "made.txt").exists()
    dry = as_json(cli("exec", "--dry-run", "--json", "--", "touch", "x", cwd=ws))
    assert dry["decision"] == "allow" and dry["rule"] == "touch-ok" and dry["ran"] is False
    with open(ws / ".strata" / "config.toml", "a") as f:
        f.write('[[gateway.rules]]\nname = "bad"\npattern = ["ls"]\ndecision = "allow"\n')
        f.write('match = ["cat x"]\n')
    assert_user_error(cli("exec", "--", "ls", cwd=ws), says="gateway rule 2 (bad)")


def test_workspace_required(tmp_path: Path, cli: CliRunner) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    assert_user_error(cli("exec", "--", "ls", cwd=bare), says="workspace required")
    code, _, err = cli("exec", "--json", "--", "ls", cwd=bare)
    assert code == 1
    assert json.loads(err.splitlines()[-1])["error"]["code"] == "workspace_required"


def test_timeout_and_truncation_flags(ws: Path, cli: CliRunner) -> None:
    out = as_json_any(cli("exec", "--json", "--timeout", "0.01", "--", "sleep", "5", cwd=ws))
    assert out["timed_out"] is True and out["exit_code"] is None
    out = as_json_any(cli("exec", "--json", "--max-output", "100", "--", "yes", cwd=ws))
    assert out["truncated"] is True and len(out["stdout"]) == 100


def as_json_any(result: tuple[int, str, str]) -> dict:  # type: ignore[type-arg]
    code, out, err = result
    assert code != 0 and "Traceback" not in err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["exec"], "name the command"),
        (["exec", "--shell", "ls", "--", "ls"], "not both"),
        (["exec", "--timeout", "0", "--", "ls"], "0"),
        (["exec", "--max-output", "0", "--", "ls"], "--max-output"),
    ],
)
def test_usage_errors(tmp_path: Path, cli: CliRunner, args: list[str], says: str) -> None:
    assert_user_error(cli(*args, cwd=tmp_path), code=2, says=says)


def test_empty_shell_string(ws: Path, cli: CliRunner) -> None:
    assert_user_error(cli("exec", "--shell", "  ", cwd=ws), code=2, says="empty")


def test_terminal_prompt_approves(ws: Path, cli: CliRunner) -> None:
    """The prompt appears on the controlling terminal; 'y' approves."""
    master, slave = pty.openpty()
    script = (
        "import os, sys, fcntl, termios; os.setsid(); "
        "fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
        "from strata.cli import main; main(sys.argv[1:])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "exec", "--shell", "rm notes.txt"],
        cwd=ws,
        env=cli.env(),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    shown = b""
    try:
        while b"[y/N]" not in shown:
            shown += os.read(master, 4096)
        os.write(master, b"y\n")
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
    assert proc.returncode == 0, err
    assert b"command:   rm notes.txt" in shown and b"risk:      medium" in shown
    assert not (ws / "notes.txt").exists()


def test_undo_reverts_the_last_change_not_the_records_made_after_it(run_cli, tmp_path) -> None:
    ws = tmp_path / "undo-ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("snapshot", cwd=ws)[0] == 0
    assert run_cli("exec", "--yes", "--", "touch", "y.txt", cwd=ws)[0] == 0
    # only records follow: a read-only command, a refused one, a dry run
    assert run_cli("exec", "--", "cat", "app.py", cwd=ws)[0] == 0
    assert run_cli("exec", "--profile", "read-only", "--", "rm", "app.py", cwd=ws)[0] == 1
    assert run_cli("exec", "--dry-run", "--", "rm", "app.py", cwd=ws)[0] == 0
    code, _, err = run_cli("undo", cwd=ws)
    assert code == 0, err
    assert not (ws / "y.txt").exists()  # the one change, reverted by one undo
    code, _, err = run_cli("redo", cwd=ws)
    assert code == 0, err
    assert (ws / "y.txt").exists()


def test_a_misspelt_gateway_table_is_refused_not_dropped(run_cli, tmp_path) -> None:
    ws = tmp_path / "typo-ws"
    ws.mkdir()
    assert run_cli("init", cwd=ws)[0] == 0
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[gatway]\nprofile = "read-only"\n')
    code, out, err = run_cli("exec", "--dry-run", "--", "rm", "a.txt", cwd=ws)
    assert code == 1 and out == ""
    assert "[gatway], which Strata does not read" in err and "rename it [gateway]" in err


def test_the_cli_offers_exactly_the_gateways_profiles() -> None:
    from strata.cli.common import PROFILE_NAMES
    from strata.gateway.policy import PROFILES

    assert tuple(PROFILES) == PROFILE_NAMES  # kept apart so start-up imports no policy code
