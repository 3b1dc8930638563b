"""Hooks run with ``--ask-studio``: a command that needs approval waits on the studio's page.

A real studio server; the hook is the real ``strata hook`` process, fed the
message Claude Code (or Codex) sends; the person's decision is posted to the
studio's Approvals page over HTTP, as the page's button does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import CliRunner, as_json, ok
from strata.studio import Studio, running

COMMAND = "rm -rf build"


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    root = tmp_path / "ws"
    (root / "build").mkdir(parents=True)
    (root / "build" / "out.o").write_text("object\n")
    ok(run_cli("init", cwd=root))
    return root


@pytest.fixture
def studio(workspace: Path) -> Iterator[Studio]:
    with running([workspace]) as served:
        yield served


@pytest.fixture
def page(studio: Studio) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as client:
        assert client.get(f"/?token={studio.token}").status_code == 303  # the cookie
        yield client


def message(event: str, ws: Path, command: str = COMMAND, tool: str = "Bash") -> str:
    return json.dumps(
        {
            "session_id": "s-studio",
            "transcript_path": str(ws.parent / "t.jsonl"),
            "cwd": str(ws),
            "hook_event_name": event,
            "tool_name": tool,
            "tool_input": {"command": command},
        }
    )


def start_hook(run_cli: CliRunner, ws: Path, text: str, *args: str) -> subprocess.Popen[str]:
    hook = subprocess.Popen(
        [sys.executable, "-m", "strata", "hook", *args],
        cwd=ws,
        env=run_cli.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert hook.stdin is not None
    hook.stdin.write(text)
    hook.stdin.close()
    hook.stdin = None  # (communicate() would flush it)
    return hook


def answer_on_the_page(
    page: httpx.Client, studio: Studio, hook: subprocess.Popen[str], answer: str
) -> str:
    """Wait for the request on the Approvals page, then answer it as its button does."""
    import re

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and hook.poll() is None:
        shown = page.get("/w/0/approvals").text
        found = re.search(r'name="id" value="([0-9a-f]+)"', shown)
        if found:
            assert COMMAND in shown and "high" in shown  # the command and its risk class
            form = {"csrf": studio.guard.csrf, "id": found.group(1), "answer": answer}
            if answer == "deny":
                form["reason"] = "not now"
            posted = page.post("/w/0/approvals/answer", data=form)
            assert posted.status_code == 200, posted.text
            return found.group(1)
        time.sleep(0.1)
    out, err = hook.communicate(timeout=5)
    raise AssertionError(f"no request reached the page: {out!r} {err!r}")


def decisions(run_cli: CliRunner, ws: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = as_json(
        run_cli("history", "--action", "approval", "--json", cwd=ws)
    )
    return [e for e in found if e["action_type"] == "approval_decided"]


def test_a_claude_code_call_approved_on_the_studios_page_goes_ahead_confined(
    workspace: Path, run_cli: CliRunner, studio: Studio, page: httpx.Client
) -> None:
    hook = start_hook(
        run_cli, workspace, message("PreToolUse", workspace), "claude-code", "--ask-studio", "60"
    )
    answer_on_the_page(page, studio, hook, "approve")
    out, err = hook.communicate(timeout=30)
    assert hook.returncode == 0, err
    answer = json.loads(out)["hookSpecificOutput"]
    assert "permissionDecision" not in answer  # not handed to Claude Code's prompt
    assert answer["updatedInput"]["command"].endswith(f"-c '{COMMAND}'")  # runs confined
    decided = decisions(run_cli, workspace)[0]
    assert decided["data"]["approved"] is True and decided["data"]["by"] == "studio"
    assert decided["data"]["command"] == COMMAND
    assert decided["author"] == {"name": "s-studio", "kind": "agent"}
    assert not list((studio.workspaces[0].repo.layout.repo / "approvals" / "pending").iterdir())


def test_a_call_denied_on_the_studios_page_is_refused_with_the_reason(
    workspace: Path, run_cli: CliRunner, studio: Studio, page: httpx.Client
) -> None:
    hook = start_hook(
        run_cli, workspace, message("PreToolUse", workspace), "claude-code", "--ask-studio", "60"
    )
    answer_on_the_page(page, studio, hook, "deny")
    out, err = hook.communicate(timeout=30)
    assert hook.returncode == 2 and out == ""  # Claude Code's blocking answer
    assert "denied" in err and "not now" in err
    decided = decisions(run_cli, workspace)[0]
    assert decided["data"]["approved"] is False and decided["data"]["reason"] == "not now"
    assert (workspace / "build" / "out.o").exists()


def test_no_answer_in_time_refuses_and_withdraws_the_request(
    workspace: Path, run_cli: CliRunner
) -> None:
    started = time.monotonic()
    hook = start_hook(
        run_cli, workspace, message("PreToolUse", workspace), "claude-code", "--ask-studio", "1"
    )
    _, err = hook.communicate(timeout=30)
    assert hook.returncode == 2 and "no answer within 1 s" in err, err
    assert time.monotonic() - started >= 1
    decided = decisions(run_cli, workspace)[0]
    assert decided["data"]["approved"] is False and "no answer" in decided["data"]["reason"]
    queue = workspace / ".strata" / "approvals" / "pending"
    assert not list(queue.iterdir())  # nothing left waiting on the page


def test_a_low_risk_call_and_other_events_never_wait(workspace: Path, run_cli: CliRunner) -> None:
    low = message("PreToolUse", workspace, "ls build")
    code = subprocess.run(
        [sys.executable, "-m", "strata", "hook", "claude-code", "--ask-studio", "60"],
        input=low, cwd=workspace, env=run_cli.env(), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert code.returncode == 0 and "updatedInput" in code.stdout, code.stderr
    (workspace / "notes.txt").write_text("agent\n")
    post = json.loads(message("PostToolUse", workspace, "touch notes.txt"))
    post["tool_response"] = {"success": True}
    done = subprocess.run(
        [sys.executable, "-m", "strata", "hook", "claude-code", "--ask-studio=60"],
        input=json.dumps(post), cwd=workspace, env=run_cli.env(), capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    newest = as_json(run_cli("history", "--limit", "1", "--json", cwd=workspace))[0]
    assert newest["author"]["kind"] == "agent" and newest["files"] == ["notes.txt"]


def test_codex_asks_once_per_call_on_the_studios_page(
    workspace: Path, run_cli: CliRunner, studio: Studio, page: httpx.Client
) -> None:
    hook = start_hook(
        run_cli, workspace, message("PreToolUse", workspace), "codex", "--ask-studio", "60"
    )
    answer_on_the_page(page, studio, hook, "approve")
    _, err = hook.communicate(timeout=30)
    assert hook.returncode == 0, err
    # Codex then asks PermissionRequest for the same call: approved already, not asked again
    started = time.monotonic()
    again = subprocess.run(
        [sys.executable, "-m", "strata", "hook", "codex", "--ask-studio", "60"],
        input=message("PermissionRequest", workspace), cwd=workspace, env=run_cli.env(),
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 20
    # another command's PermissionRequest is asked (here: no answer in time, refused)
    other = subprocess.run(
        [sys.executable, "-m", "strata", "hook", "codex", "--ask-studio", "0.5"],
        input=message("PermissionRequest", workspace, "rm -rf src"), cwd=workspace,
        env=run_cli.env(), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert other.returncode == 2 and "no answer within" in other.stderr


def test_install_writes_the_option_and_a_time_out_past_it(
    workspace: Path, run_cli: CliRunner
) -> None:
    ok(run_cli("hook", "install", "claude-code", "--ask-studio", "300", cwd=workspace))
    settings = json.loads((workspace / ".claude" / "settings.local.json").read_text())
    entries = [h for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert entries and all(h["command"].endswith(" --ask-studio 300") for h in entries)
    assert all(h["timeout"] == 330 for h in entries)  # Claude Code's 60 s would kill the wait
    ok(run_cli("hook", "install", "claude-code", cwd=workspace))  # without it again
    settings = json.loads((workspace / ".claude" / "settings.local.json").read_text())
    entries = [h for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert all(h["command"].endswith("hook claude-code") and "timeout" not in h for h in entries)
    ok(run_cli("hook", "install", "codex", "--ask-studio", "120", cwd=workspace))
    hooks = json.loads((workspace / ".codex" / "hooks.json").read_text())["hooks"]
    entries = [h for groups in hooks.values() for g in groups for h in g["hooks"]]
    assert all(h["command"].endswith("hook codex --ask-studio 120") for h in entries)
    code, _, err = run_cli("hook", "install", "aider", "--ask-studio", "5", cwd=workspace)
    assert code == 2 and "--ask-studio is for the hooks of claude-code and codex" in err


def test_with_a_watcher_only_the_call_that_may_wait_runs_outside_it(
    workspace: Path, run_cli: CliRunner
) -> None:
    """The watcher serves the workspace's commands one at a time: a wait of minutes there
    would hold every other agent's hooks, so a Bash PreToolUse is judged in the hook's own
    process; every other event is still handed to the watcher."""
    code, _, err = run_cli("watch", "--daemon", "--no-capture", "--json", cwd=workspace)
    assert code == 0, err
    try:
        (workspace / "notes.txt").write_text("agent\n")
        post = json.loads(message("PostToolUse", workspace, "touch notes.txt"))
        post["tool_response"] = {"success": True}
        env = run_cli.env({"STRATA_NO_DAEMON": ""})
        args = [sys.executable, "-m", "strata", "hook", "claude-code", "--ask-studio", "1"]
        done = subprocess.run(
            args, input=json.dumps(post), cwd=workspace, env=env, capture_output=True,
            text=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        served = as_json(run_cli("watch", "--status", "--json", cwd=workspace))["commands_run"]
        assert served == 1  # the watcher recorded it
        refused = subprocess.run(
            args, input=message("PreToolUse", workspace), cwd=workspace, env=env,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert refused.returncode == 2 and "no answer within 1 s" in refused.stderr
        status = as_json(run_cli("watch", "--status", "--json", cwd=workspace))
        assert status["commands_run"] == served  # judged (and waited) outside the watcher
    finally:
        run_cli("watch", "--stop", cwd=workspace)


def test_a_hook_stopped_while_it_waits_refuses_and_leaves_nothing_waiting(
    workspace: Path, run_cli: CliRunner
) -> None:
    """Claude Code stops a hook past its time-out: the call is refused, the page is cleared."""
    import signal

    hook = start_hook(
        run_cli, workspace, message("PreToolUse", workspace), "claude-code", "--ask-studio", "60"
    )
    pending = workspace / ".strata" / "approvals" / "pending"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (pending.is_dir() and any(pending.iterdir())):
        time.sleep(0.05)
    assert any(pending.iterdir()), "the request never reached the queue"
    hook.send_signal(signal.SIGTERM)
    out, _ = hook.communicate(timeout=30)
    assert hook.returncode == 2 and out == ""
    assert not any(pending.iterdir())
