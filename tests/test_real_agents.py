"""The real coding agents with Strata: Claude Code's hooks and MCP, Codex CLI's hooks and run.

Each test drives the real binary ``scripts/agents`` installs (npm's
``@anthropic-ai/claude-code`` and ``@openai/codex``, pinned) against a scripted
model endpoint on 127.0.0.1 (``tests/agent_endpoints.py``): the script is what
the model "decides", the agent does it for real, and the test looks where a
user would: the files, ``strata history``, ``strata undo``, the run's diff.
Codex's hooks are Strata's own (``strata hook install codex``); the last test
pins the hook protocol of the pinned Codex that they speak. Under CI a missing
agent fails the test; nothing here is skipped there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_endpoints import (
    AnthropicEndpoint,
    Patch,
    ResponsesEndpoint,
    Shell,
    ToolCall,
    agent_binary,
    agent_env,
    trust_codex_hooks,
)
from conftest import CliRunner, as_json, ok

#: the strata of the interpreter running the tests: the one the agents' hooks must run
STRATA = Path(sys.executable).parent / "strata"


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    assert STRATA.is_file(), f"the agents run {STRATA}: install Strata in this environment"
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("x = 1\n")
    ok(run_cli("init", cwd=ws))
    return ws


def _history(run_cli: CliRunner, ws: Path, *args: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = as_json(run_cli("history", "--json", *args, cwd=ws))
    return events


# -- Claude Code ---------------------------------------------------------------------


def _claude(
    run_cli: CliRunner,
    ws: Path,
    endpoint: AnthropicEndpoint,
    *args: str,
) -> dict[str, Any]:
    """Run ``claude -p … --output-format json`` in ``ws``; its result object.

    strata is not on its PATH: the hooks and the MCP server are named by absolute path.
    """
    claude = agent_binary("claude")
    env = agent_env(
        run_cli.env(),
        PATH="/usr/bin:/bin",
        ANTHROPIC_BASE_URL=endpoint.url,
        ANTHROPIC_API_KEY="sk-ant-test",
    )
    proc = subprocess.run(
        [str(claude), "-p", "go ahead", "--output-format", "json", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    assert result["is_error"] is False, result
    return result


def test_claude_code_hooks_refuse_rm_rf_and_record_each_change_alone(
    workspace: Path, run_cli: CliRunner
) -> None:
    """A new workspace (``strata init && strata hook install claude-code``, strata not
    on Claude Code's PATH), then a session whose model asks for ``rm -rf src``, a
    Bash edit and a Write: the first is refused and recorded, the other two are one
    event each, steps of the prompt's one operation, that ``strata undo --step``
    reverses one at a time, the first one included."""
    installed = as_json(run_cli("hook", "install", "claude-code", "--json", cwd=workspace))
    settings = Path(installed["path"])  # the user's local settings, or the shared ones
    assert settings.is_relative_to(workspace / ".claude") and installed["changed"], installed
    assert "hook claude-code" in settings.read_text()

    script = [
        [Shell("rm -rf src")],
        [Shell("sed -i s/1/9/ src/app.py")],
        [ToolCall("Write", {"file_path": str(workspace / "notes.txt"), "content": "todo\n"})],
    ]
    with AnthropicEndpoint(script) as api:
        # Claude Code's own rules allow both tools: what refuses is Strata's hook
        result = _claude(run_cli, workspace, api, "--allowedTools", "Bash,Write")
        refused, edited, written = api.tool_results()
    session = result["session_id"]

    # the refusal: nothing removed, the model told why, the decision in the ledger
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"
    assert refused.startswith("error: ") and "high-risk command" in refused, refused
    assert "rm -rf src" in refused
    assert not edited.startswith("error: ") and not written.startswith("error: ")
    decided = [
        e for e in _history(run_cli, workspace, "--action", "approval")
        if e["action_type"] == "approval_decided"
    ]  # fmt: skip
    assert len(decided) == 1, decided
    assert decided[0]["author"] == {"name": session, "kind": "agent"}
    assert decided[0]["data"]["command"] == "rm -rf src"
    assert decided[0]["data"]["approved"] is False

    # each change is an event of the session's own, holding only what the call changed,
    # that 'strata undo --step' reverses alone; the prompt is one operation of both
    events = _history(run_cli, workspace, "--author", session, "--action", "snapshot")
    changes = [(e["rationale"].split(" ", 1)[0], e["files"]) for e in events]
    assert changes == [("Write", ["notes.txt"]), ("Bash", ["src/app.py"])], changes
    assert {e["operation_id"] for e in events} == {events[0]["operation_id"]}  # the prompt's
    log = ok(run_cli("op", "log", cwd=workspace))
    assert "prompt" in log and "go ahead" in log, log
    ok(run_cli("undo", "--step", cwd=workspace))
    assert not (workspace / "notes.txt").exists()
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"
    ok(run_cli("undo", cwd=workspace))  # the rest of the prompt: its first change
    assert (workspace / "src" / "app.py").read_text() == "x = 1\n"
    assert settings.exists()  # the person's own change stays


def test_claude_code_prompt_is_undone_whole(workspace: Path, run_cli: CliRunner) -> None:
    """One prompt, two tool calls: one ``strata undo`` puts back everything it did."""
    ok(run_cli("hook", "install", "claude-code", cwd=workspace))
    ok(run_cli("snapshot", "-m", "hooks installed", cwd=workspace))
    script = [
        [Shell("sed -i s/1/9/ src/app.py")],
        [ToolCall("Write", {"file_path": str(workspace / "notes.txt"), "content": "todo\n"})],
    ]
    with AnthropicEndpoint(script) as api:
        _claude(run_cli, workspace, api, "--allowedTools", "Bash,Write")
    assert (workspace / "notes.txt").exists()
    undone = as_json(run_cli("undo", "--json", cwd=workspace))
    assert undone["group"]["kind"] == "prompt" and undone["group"]["title"] == "go ahead"
    assert not (workspace / "notes.txt").exists()
    assert (workspace / "src" / "app.py").read_text() == "x = 1\n"
    assert as_json(run_cli("status", "--json", cwd=workspace))["clean"] is True
    ok(run_cli("redo", cwd=workspace))
    assert (workspace / "notes.txt").read_text() == "todo\n"
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"


def test_claude_code_bash_runs_confined_where_the_classifier_lets_it_through(
    workspace: Path, run_cli: CliRunner
) -> None:
    """Code piped into a shell is medium: the hook leaves it to Claude Code's own rules
    (which allow Bash here), so the classifier lets it through. PreToolUse answers with
    ``updatedInput``: the command runs inside Strata's confinement, where the write
    outside the workspace, and the write into .strata, fail; the write inside lands."""
    ok(run_cli("hook", "install", "claude-code", cwd=workspace))
    outside = workspace.parent / "outside.txt"
    outside.write_text("the host's\n")
    config = workspace / ".strata" / "config.toml"
    before = config.read_text()
    hidden = "echo pwned > ../outside.txt; echo '[gateway]' >> .strata/config.toml; echo 9 > in.txt"
    script = [[Shell(f"echo {json.dumps(hidden)} | sh")]]
    with AnthropicEndpoint(script) as api:
        _claude(run_cli, workspace, api, "--allowedTools", "Bash")
        (result,) = api.tool_results()
    assert outside.read_text() == "the host's\n", result
    assert config.read_text() == before, result
    assert (workspace / "in.txt").read_text() == "9\n", result
    assert "Read-only file system" in result or "Permission denied" in result, result


def test_claude_code_calls_stratas_mcp_tools(workspace: Path, run_cli: CliRunner) -> None:
    """``claude mcp add strata -- strata -C WS mcp`` as the docs say; the model takes a
    snapshot through the server and reads it back with the history tool."""
    claude = agent_binary("claude")
    env = agent_env(run_cli.env(), PATH="/usr/bin:/bin")
    added = subprocess.run(
        [str(claude), "mcp", "add", "strata", "--", str(STRATA), "-C", str(workspace), "mcp"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    (workspace / "src" / "app.py").write_text("x = 2\n")

    script = [
        [ToolCall("mcp__strata__snapshot", {"message": "before the refactor"})],
        [ToolCall("mcp__strata__history", {"limit": 1})],
    ]
    with AnthropicEndpoint(script) as api:
        tools = "mcp__strata__snapshot,mcp__strata__history"
        _claude(run_cli, workspace, api, "--allowedTools", tools)
        snapshot, history = api.tool_results()

    newest = _history(run_cli, workspace, "--limit", "1")[0]
    assert newest["action_type"] == "snapshot"
    assert newest["rationale"] == "before the refactor"
    assert newest["author"] == {"name": "mcp", "kind": "agent"}
    assert newest["files"] == ["src/app.py"]
    assert json.loads(snapshot)["event_id"] == newest["id"]
    assert json.loads(history)[0]["id"] == newest["id"]  # the model read it back


# -- Codex CLI -----------------------------------------------------------------------


def _codex_home(tmp_path: Path, endpoint: ResponsesEndpoint, extra: str = "") -> Path:
    """A CODEX_HOME whose model provider is ``endpoint`` (Responses API, streamed)."""
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        # gpt-5.5: a model Codex knows, so it offers its apply_patch tool
        'model = "gpt-5.5"\n'
        'model_provider = "scripted"\n'
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{endpoint.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n' + extra
    )
    return home


def _codex_env(run_cli: CliRunner, tmp_path: Path, codex_home: Path) -> dict[str, str]:
    # TMPDIR away from CODEX_HOME's folder: Codex makes no helper links (its sandbox's
    # codex-linux-sandbox) under the temporary folder, and its sandbox fails without them
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return agent_env(
        run_cli.env(),
        PATH=f"{STRATA.parent}:/usr/bin:/bin",
        CODEX_HOME=str(codex_home),
        OPENAI_API_KEY="sk-test",
        TMPDIR=str(tmp),
    )


def test_codex_under_strata_run_records_its_shell_edit_and_patch(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    """``strata run -- codex exec …`` with Codex's own sandbox on (workspace-write):
    the run's diff shows what Codex's shell and apply_patch tools changed."""
    codex = agent_binary("codex")
    script = [
        [Shell("sed -i s/1/9/ src/app.py")],
        [Patch("*** Begin Patch\n*** Add File: NOTES.md\n+# Notes\n*** End Patch\n")],
    ]
    with ResponsesEndpoint(script) as api:
        env = _codex_env(run_cli, tmp_path, _codex_home(tmp_path, api))
        code, out, err = run_cli(
            "run", "--json", "--label", "codex", "--",
            str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write",
            "tidy up",
            cwd=workspace, env=env,
        )  # fmt: skip
        shell, patch = api.tool_results()
    assert code == 0, err
    assert "Process exited with code 0" in shell, shell
    assert "Success" in patch, patch
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"
    assert (workspace / "NOTES.md").read_text() == "# Notes\n"

    # Codex's own output shares stdout with the run's JSON
    run, _ = json.JSONDecoder().raw_decode(out[out.index('{\n  "schema"') :])
    assert run["exit_code"] == 0 and run["diff"]["changed_paths"] == ["NOTES.md", "src/app.py"]
    diff = ok(run_cli("diff", f"{run['run_id']}~1", run["run_id"], cwd=workspace))
    assert "-x = 1\n+x = 9\n" in diff and "+# Notes\n" in diff, diff


def test_codex_hooks_refuse_rm_r_and_record_each_call_alone(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    """``strata init && strata hook install codex`` (the project's hooks, trusted as
    Codex's /hooks trusts them; strata not on Codex's PATH), the person's edit, then a
    session with Codex's own sandbox on whose model asks for ``rm -r src`` (which Codex
    runs: its own rules reject ``rm -rf``, not this), a shell edit and an apply_patch:
    the first is refused and recorded; the person's edit is their own event; each call
    is an event of the session's holding only what it changed (the patch's: its file,
    not what the person typed meanwhile), which ``strata undo`` reverses one at a time."""
    codex = agent_binary("codex")
    app = workspace / "src" / "app.py"
    app.write_text("x = 2\n")  # the person's edit, not recorded yet
    installed = as_json(
        run_cli(
            "hook", "install", "codex", "--json",
            cwd=workspace, env={"PATH": f"{codex.parent}:/usr/bin:/bin"},
        )
    )  # fmt: skip
    hooks_json = workspace / ".codex" / "hooks.json"
    assert installed["path"] == str(hooks_json) and installed["form"] == "hooks"
    assert installed["codex"] == "0.171.0"
    assert any("/hooks" in note for note in installed["notes"])
    # the person types while the patch is applied: a hook of the person's own, beside
    # Strata's PreToolUse (Codex runs both at once and waits for both), writes a file
    # once Strata's has answered
    hooks = json.loads(hooks_json.read_text())
    typing = {"type": "command", "command": "sleep 2; echo typed > draft.txt"}
    hooks["hooks"]["PreToolUse"].append({"matcher": "apply_patch", "hooks": [typing]})
    hooks_json.write_text(json.dumps(hooks))

    script = [
        [Shell("rm -r src")],
        [Shell("sed -i s/2/3/ src/app.py")],
        [Patch("*** Begin Patch\n*** Add File: NOTES.md\n+# Notes\n*** End Patch\n")],
    ]
    trusted = f'[projects."{workspace}"]\ntrust_level = "trusted"\n'
    with ResponsesEndpoint(script) as api:
        env = _codex_env(run_cli, tmp_path, _codex_home(tmp_path, api, trusted))
        env["PATH"] = "/usr/bin:/bin"  # no strata: the hooks name it in full
        trust_codex_hooks(codex, cwd=workspace, env=env)
        proc = subprocess.run(
            [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write",
             "tidy up"],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=90,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        refused, edited, patched = api.tool_results()

    # the refusal: nothing removed, the model told why, the decision in the ledger
    assert refused.startswith("Command blocked by PreToolUse hook: strata: high-risk command")
    assert "rm -r src" in refused
    assert "Process exited with code 0" in edited and "Success" in patched, (edited, patched)
    assert app.read_text() == "x = 3\n"
    assert (workspace / "NOTES.md").read_text() == "# Notes\n"
    (decided,) = [
        e for e in _history(run_cli, workspace, "--action", "approval")
        if e["action_type"] == "approval_decided"
    ]  # fmt: skip
    session = decided["author"]["name"]
    assert decided["author"]["kind"] == "agent" and decided["data"]["by"] == "strata hook codex"
    assert decided["data"]["command"] == "rm -r src" and decided["data"]["approved"] is False

    # the person's edit: their own event, before the session's first change
    snapshots = _history(run_cli, workspace, "--action", "snapshot")
    person = snapshots[2]
    assert person["author"]["kind"] == "human", snapshots
    assert person["rationale"] == "changes made outside the agent"
    assert "src/app.py" in person["files"] and ".codex/hooks.json" in person["files"]
    # each call an event of the session's, holding only what it changed
    mine = [(e["rationale"].split(" ", 1)[0], e["files"]) for e in snapshots[:2]]
    assert mine == [("apply_patch", ["NOTES.md"]), ("Bash", ["src/app.py"])], snapshots
    assert all(e["author"] == {"name": session, "kind": "agent"} for e in snapshots[:2])
    assert (workspace / "draft.txt").exists()
    assert not any("draft.txt" in e["files"] for e in snapshots if e["author"]["name"] == session)

    # the prompt is one operation: --step reverses its last call, undo the rest of it
    ops = as_json(run_cli("op", "log", "--json", cwd=workspace))
    assert ops[0]["group"]["kind"] == "prompt" and ops[0]["group"]["title"] == "tidy up"
    ok(run_cli("undo", "--step", cwd=workspace))
    assert not (workspace / "NOTES.md").exists() and app.read_text() == "x = 3\n"
    assert (workspace / "draft.txt").exists()
    ok(run_cli("undo", cwd=workspace))
    assert app.read_text() == "x = 2\n"  # the person's edit stays


#: a Codex hook that logs what it is sent and refuses a command naming refused.txt
CODEX_HOOK = """
import json, pathlib, sys
payload = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(payload) + "\\n")
if "refused.txt" in json.dumps(payload.get("tool_input")):
    print("strata test: not that one", file=sys.stderr)
    sys.exit(2)
"""


def test_codex_runs_project_hooks_once_trusted_and_a_hook_refuses_with_exit_2(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    """What Strata's Codex hooks (issue 25, item 4) will stand on, as the pinned Codex
    does it: hooks in the project's .codex/hooks.json in Claude Code's format run only
    once trusted (a project of the user's trust, then each hook's hash); each gets its
    event's JSON on stdin; exit 2 with a reason on stderr refuses a tool call and the
    model is told the reason."""
    codex = agent_binary("codex")
    log = tmp_path / "hooks.jsonl"
    (tmp_path / "hook.py").write_text(CODEX_HOOK)
    command = {"type": "command", "command": f"{sys.executable} {tmp_path / 'hook.py'} {log}"}
    events = {
        "UserPromptSubmit": [{"hooks": [command]}],
        "PreToolUse": [{"matcher": "Bash|apply_patch", "hooks": [command]}],
        "PostToolUse": [{"matcher": "Bash|apply_patch", "hooks": [command]}],
        "Stop": [{"hooks": [command]}],
    }
    (workspace / ".codex").mkdir()
    (workspace / ".codex" / "hooks.json").write_text(json.dumps({"hooks": events}))
    script = [[Shell("touch refused.txt")], [Shell("sed -i s/1/9/ src/app.py")]]
    # the project trusted as 'codex exec --trust' records it
    trusted = f'[projects."{workspace}"]\ntrust_level = "trusted"\n'

    with ResponsesEndpoint(script) as api:
        env = _codex_env(run_cli, tmp_path, _codex_home(tmp_path, api, trusted))

        def codex_exec() -> list[str]:
            proc = subprocess.run(
                [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write",
                 "tidy up"],
                cwd=workspace, env=env, capture_output=True, text=True, timeout=60,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            return api.tool_results()

        # a new hook does not run, silently: the command it would refuse runs
        codex_exec()
        assert (workspace / "refused.txt").exists() and not log.exists()
        (workspace / "refused.txt").unlink()
        (workspace / "src" / "app.py").write_text("x = 1\n")

        keys = trust_codex_hooks(codex, cwd=workspace, env=env)
        hooks_json = workspace / ".codex" / "hooks.json"
        assert keys == sorted(
            f"{hooks_json}:{event}:0:0"
            for event in ("pre_tool_use", "post_tool_use", "stop", "user_prompt_submit")
        )
        api.requests.clear()
        refused, edited = codex_exec()
    assert not (workspace / "refused.txt").exists()
    assert refused.startswith("Command blocked by PreToolUse hook: strata test: not that one")
    assert "Process exited with code 0" in edited
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"

    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(p["hook_event_name"], p.get("tool_input")) for p in sent] == [
        ("UserPromptSubmit", None),
        ("PreToolUse", {"command": "touch refused.txt"}),
        ("PreToolUse", {"command": "sed -i s/1/9/ src/app.py"}),
        ("PostToolUse", {"command": "sed -i s/1/9/ src/app.py"}),
        ("Stop", None),
    ]
    common = {"session_id", "turn_id", "transcript_path", "cwd", "hook_event_name", "model"}
    assert all(common <= set(p) and p["cwd"] == str(workspace) for p in sent), sent
    assert {p["session_id"] for p in sent} == {sent[0]["session_id"]}
    prompt, pre, _, post, stop = sent
    assert prompt["prompt"] == "tidy up"
    assert pre["tool_name"] == "Bash" and pre["tool_use_id"]
    assert post["tool_use_id"] != pre["tool_use_id"] and "tool_response" in post
    assert stop["last_assistant_message"] == "done" and stop["stop_hook_active"] is False
