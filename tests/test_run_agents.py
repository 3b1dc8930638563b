"""Real agents in a Draft: --agent presets, a hidden program, --sandbox none, editable installs.

Each test drives ``strata run --draft`` through the CLI with the real bubblewrap;
a small script in the sandbox stands in for the agent and reports what it sees.
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from agent_endpoints import (
    AnthropicEndpoint,
    ResponsesEndpoint,
    Shell,
    ToolCall,
    agent_binary,
    agent_env,
)
from conftest import CliRunner, assert_user_error, ok
from strata.sandbox.bwrap import sandbox_problem

pytestmark = pytest.mark.sandbox

PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = sandbox_problem()
    if problem is not None:
        if os.environ.get("CI") or "not installed" in problem:
            pytest.fail(f"the sandbox tests need bubblewrap: {problem}")
        pytest.skip(problem)
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is needed inside the sandbox")


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README").write_text("a project\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "start", cwd=ws))
    return ws


#: the stand-in agent: reads and rewrites its configuration as Claude Code does
AGENT = textwrap.dedent(
    """
    import json, os, pathlib
    home = pathlib.Path.home()
    seen = {
        "settings": (home / ".claude" / "settings.json").read_text(),
        "projects_copied": (home / ".claude" / "projects").exists(),
        "codex": (home / ".codex").exists(),
        "key": os.environ.get("ANTHROPIC_API_KEY"),
        "other_secret": os.environ.get("SOME_SECRET"),
        "proxy": os.environ.get("HTTPS_PROXY"),
    }
    # Claude Code rewrites ~/.claude.json at every start, through a lock and a temp file
    (home / ".claude.json.lock").mkdir()
    (home / ".claude.json.tmp").write_text('{"numStartups": 2}')
    os.replace(home / ".claude.json.tmp", home / ".claude.json")
    (home / ".claude" / "todos").mkdir()
    (home / ".claude" / "settings.json").write_text("changed")
    print(json.dumps(seen))
    """
)


def test_agent_preset_gives_a_throwaway_config_copy_keys_and_api_hosts(
    workspace: Path, run_cli: CliRunner
) -> None:
    home = run_cli.home
    (home / ".claude" / "projects").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"model": "opus"}')
    (home / ".claude" / "projects" / "old-session.jsonl").write_text("history\n")
    (home / ".claude.json").write_text('{"numStartups": 1}')
    (workspace / "agent.py").write_text(AGENT)
    ok(run_cli("snapshot", "-m", "agent", cwd=workspace))
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}

    code, out, err = run_cli(
        "run", "--draft", "--agent", "claude", "--", PYTHON, "agent.py",
        cwd=workspace, env={"ANTHROPIC_API_KEY": "sk-test", "SOME_SECRET": "s3cret"},
    )  # fmt: skip
    assert code == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {
        "settings": '{"model": "opus"}',
        "projects_copied": False,  # session logs stay out of the copy
        "codex": False,
        "key": "sk-test",  # the agent's key variable, and no other
        "other_secret": None,
        "proxy": "http://127.0.0.1:3128",  # its API hosts, through the allow-list
    }
    # the host's configuration is exactly as it was: the agent wrote a copy
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert after == before
    assert not (home / ".claude.json.lock").exists()

    # the run is recorded with its network policy
    history = json.loads(ok(run_cli("history", "--json", "--limit", "1", cwd=workspace)))
    text = json.dumps(history)
    assert "allow=api.anthropic.com" in text


def test_agent_preset_refuses_other_hosts_naming_the_allowed_ones(
    workspace: Path, run_cli: CliRunner
) -> None:
    (workspace / "get.py").write_text(
        "import urllib.request, urllib.error\n"
        "try:\n"
        "    urllib.request.urlopen('http://example.com/', timeout=10)\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code, exc.read().decode())\n"
    )
    ok(run_cli("snapshot", "-m", "get", cwd=workspace))
    code, out, err = run_cli(
        "run", "--draft", "--agent", "codex", "--", PYTHON, "get.py", cwd=workspace
    )
    assert code == 0, err
    assert out.startswith("403 strata: example.com:80 is not on the sandbox's network allow-list")
    assert "allowed: api.openai.com, auth.openai.com, chatgpt.com" in out
    assert "run again with --net allow=example.com" in err  # the agent's hosts come with --agent


def test_a_program_the_sandbox_cannot_see_names_the_folder_to_expose(
    workspace: Path, run_cli: CliRunner
) -> None:
    tools = run_cli.home / ".local"
    (tools / "bin").mkdir(parents=True)
    agent = tools / "bin" / "my-agent"
    agent.write_text("#!/bin/sh\necho agent ran\n")
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    path = f"{tools / 'bin'}:/usr/bin:/bin"

    ok(run_cli("draft", "start", cwd=workspace))
    result = run_cli("run", "--draft", "--", "my-agent", cwd=workspace, env={"PATH": path})
    err = assert_user_error(result, code=127, says="command not found: my-agent")
    assert err.splitlines()[1].endswith(f"expose its folder with --bind-ro {tools}")
    assert "execvp" not in err

    code, out, err = run_cli(
        "run", "--draft", "--bind-ro", str(tools), "--", "my-agent", cwd=workspace,
        env={"PATH": path},
    )  # fmt: skip
    assert code == 0, err
    assert out == "agent ran\n"


def _editable_venv(prefix: Path, source: Path) -> None:
    """A Python environment with ``myproj`` installed editable from ``source`` (PEP 660)."""
    dist = prefix / "lib" / "python3.11" / "site-packages" / "myproj-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "direct_url.json").write_text(
        json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}})
    )


def test_sandbox_none_runs_in_the_draft_and_warns_of_an_editable_install(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _editable_venv(venv, workspace)
    code, out, err = run_cli(
        "run", "--draft", "--sandbox", "none", "--", "pwd",
        cwd=workspace, env={"VIRTUAL_ENV": str(venv)},
    )  # fmt: skip
    assert code == 0, err
    info = json.loads(ok(run_cli("draft", "status", "--json", cwd=workspace)))
    assert Path(out.strip()) == Path(info["path"])  # the Draft is the working folder
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        f"strata: warning: myproj is installed editable from {workspace.resolve()} (Published): "
        "Python commands here import Published's code, not the Draft's; "
        "run in the sandbox (drop --sandbox none) to use the Draft's"
    ]

    elsewhere = tmp_path / "other-venv"
    _editable_venv(elsewhere, tmp_path / "some-other-project")
    code, out, err = run_cli(
        "run", "--draft", "--sandbox", "none", "--", "true",
        cwd=workspace, env={"VIRTUAL_ENV": str(elsewhere)},
    )  # fmt: skip
    assert code == 0, err
    assert "warning" not in err


def test_unknown_agent_is_refused(workspace: Path, run_cli: CliRunner) -> None:
    code, _out, err = run_cli("run", "--draft", "--agent", "gpt", "--", "true", cwd=workspace)
    assert code == 125
    assert "Invalid value for '--agent'" in err and "Traceback" not in err


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _hint(result: tuple[int, str, str]) -> str:
    code, _out, err = result
    assert code == 127, err
    lines = err.splitlines()
    assert lines[-2].startswith("error: command not found") and "execvp" not in err, err
    assert lines[-1].startswith("hint: "), err
    return lines[-1]


@pytest.mark.slow
def test_agents_installed_in_the_home_get_a_hint_that_works_at_once(
    workspace: Path, run_cli: CliRunner
) -> None:
    """The two usual layouts: a launcher link in ~/.local/bin to a versioned binary
    (Claude Code's installer), and npm's PREFIX/bin link into PREFIX/lib with a
    '#!/usr/bin/env node' script whose node is in the same hidden prefix (nvm)."""
    home = run_cli.home
    _executable(workspace / "tool" / "run.js", "#!/usr/bin/env mynode\n")
    ok(run_cli("snapshot", "-m", "tool", cwd=workspace))
    ok(run_cli("draft", "start", cwd=workspace))
    # ~/.local/bin/claude -> ~/.local/share/claude/versions/2.0.1
    binary = home / ".local" / "share" / "claude" / "versions" / "2.0.1"
    _executable(binary, "#!/bin/sh\necho native agent ran\n")
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "claude").symlink_to(binary)
    # ~/.nvm/versions/node/v20/bin/codex -> ../lib/node_modules/codex/cli.js, run by its node
    prefix = home / ".nvm" / "versions" / "node" / "v20"
    _executable(prefix / "bin" / "mynode", '#!/bin/sh\necho "node agent ran: $(basename "$1")"\n')
    _executable(prefix / "lib" / "node_modules" / "codex" / "cli.js", "#!/usr/bin/env mynode\n")
    (prefix / "bin" / "codex").symlink_to("../lib/node_modules/codex/cli.js")
    env = {"PATH": f"{home / '.local' / 'bin'}:{prefix / 'bin'}:/usr/bin:/bin"}

    hint = _hint(run_cli("run", "--draft", "--", "claude", cwd=workspace, env=env))
    expose = f"--bind-ro {home / '.local' / 'bin'} --bind-ro {binary.parent}"
    assert hint.endswith(f"expose its folders with {expose}"), hint
    code, out, err = run_cli(
        "run", "--draft", *expose.split(), "--", "claude", cwd=workspace, env=env
    )
    assert (code, out) == (0, "native agent ran\n"), err

    hint = _hint(run_cli("run", "--draft", "--", "codex", cwd=workspace, env=env))
    assert hint.endswith(f"expose its folder with --bind-ro {prefix}"), hint
    code, out, err = run_cli(
        "run", "--draft", "--bind-ro", str(prefix), "--", "codex", cwd=workspace, env=env
    )
    assert (code, out) == (0, "node agent ran: codex\n"), err

    # npm's local install: node_modules/.bin/aider -> ../aider/cli.js, whose native
    # binary is a sibling package: the whole node_modules is needed
    modules = home / "tools" / "node_modules"
    _executable(modules / "aider-linux-x64" / "aider-native", "#!/bin/sh\necho native\n")
    native = modules / "aider-linux-x64" / "aider-native"
    _executable(modules / "aider" / "cli.js", f"#!/bin/sh\n{native}\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "aider").symlink_to("../aider/cli.js")
    npm_env = {"PATH": f"{modules / '.bin'}:/usr/bin:/bin"}
    hint = _hint(run_cli("run", "--draft", "--", "aider", cwd=workspace, env=npm_env))
    assert hint.endswith(f"expose its folder with --bind-ro {modules}"), hint
    code, out, err = run_cli(
        "run", "--draft", "--bind-ro", str(modules), "--", "aider", cwd=workspace, env=npm_env
    )
    assert (code, out) == (0, "native\n"), err

    # the script is visible but its interpreter is not: named, not "env: No such file"
    hint = _hint(run_cli("run", "--draft", "--", "./tool/run.js", cwd=workspace, env=env))
    assert "./tool/run.js runs mynode: mynode is" in hint
    assert hint.endswith(f"expose its folder with --bind-ro {prefix}"), hint
    # a path the Draft does not have
    hint = _hint(run_cli("run", "--draft", "--", "./tool/gone.js", cwd=workspace, env=env))
    assert hint == f"hint: the sandbox shows no ./tool/gone.js (at {workspace}/tool/gone.js)"


# -- the real Claude Code ------------------------------------------------------------


@pytest.mark.slow
def test_real_claude_code_edits_the_draft_through_the_allow_list(
    workspace: Path, run_cli: CliRunner
) -> None:
    """Claude Code itself (the npm package's binary scripts/agents installs, or
    $STRATA_TEST_CLAUDE) with a scripted Anthropic API on the host's 127.0.0.1."""
    claude = agent_binary("claude")
    real = Path(os.path.realpath(claude))
    (run_cli.home / ".claude.json").write_text("{}")
    write = ToolCall(
        "Write", {"file_path": str(workspace / "hello.txt"), "content": "written by Claude Code\n"}
    )
    with AnthropicEndpoint([[write]]) as api:
        code, out, err = run_cli(
            "run", "--draft", "--agent", "claude", f"--net=allow=localhost:{api.port}",
            "--env", "ANTHROPIC_BASE_URL", "--bind-ro", str(claude.parent),
            "--bind-ro", str(real.parent.parent), "--",
            "claude", "-p", "write hello.txt", "--allowedTools", "Write",
            cwd=workspace, timeout=120,
            env=agent_env(
                run_cli.env(),
                PATH=f"{claude.parent}:/usr/bin:/bin",
                ANTHROPIC_API_KEY="sk-ant-test",
                ANTHROPIC_BASE_URL=f"http://localhost:{api.port}",
            ),
        )  # fmt: skip
        paths = [r.path for r in api.requests]
    assert code == 0, err
    assert out.strip() == "done"
    assert paths and all(path.startswith("/v1/messages") for path in paths)
    assert not (workspace / "hello.txt").exists()  # Published is untouched
    review = ok(run_cli("review", cwd=workspace))
    assert "A hello.txt" in review and "+written by Claude Code" in review
    assert (run_cli.home / ".claude.json").read_text() == "{}"  # Claude wrote its copy


@pytest.mark.slow
def test_real_codex_edits_the_draft_with_its_own_sandbox_off(
    workspace: Path, run_cli: CliRunner
) -> None:
    """Codex CLI (scripts/agents' npm install, or $STRATA_TEST_CODEX) in the Draft with
    a scripted Responses API on 127.0.0.1. Codex's own sandbox is bubblewrap too, which
    cannot start inside Strata's (no nested user namespace: ENOSPC), so it runs with
    --sandbox danger-full-access there: Strata's sandbox is the one that confines it."""
    codex = agent_binary("codex")
    (run_cli.home / ".codex").mkdir()
    config = run_cli.home / ".codex" / "config.toml"
    with ResponsesEndpoint([[Shell("sed -i s/project/Codex/ README")]]) as api:
        config.write_text(
            'model = "gpt-5.5"\nmodel_provider = "scripted"\n[model_providers.scripted]\n'
            f'name = "scripted"\nbase_url = "http://localhost:{api.port}/v1"\n'
            'wire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
        )
        before = config.read_text()
        code, out, err = run_cli(
            "run", "--draft", "--agent", "codex", f"--net=allow=localhost:{api.port}",
            "--bind-ro", str(codex.parent.parent), "--",
            "codex", "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
            "edit the README",
            cwd=workspace, timeout=120,
            env=agent_env(
                run_cli.env(), PATH=f"{codex.parent}:/usr/bin:/bin", OPENAI_API_KEY="sk-test"
            ),
        )  # fmt: skip
        [edited] = api.tool_results()
    assert code == 0, err
    assert out.strip() == "done"
    assert "Process exited with code 0" in edited, edited
    assert (workspace / "README").read_text() == "a project\n"  # Published is untouched
    review = ok(run_cli("review", cwd=workspace))
    assert "-a project" in review and "+a Codex" in review, review
    assert config.read_text() == before  # Codex had a copy of its configuration


def test_a_killed_runs_config_copy_is_removed_by_the_next(tmp_path: Path) -> None:
    """The throwaway home holds copies of credentials: one left by a Strata killed with
    SIGKILL (its pid gone) is removed when the next run makes its own."""
    import subprocess

    from strata.sandbox.agents import private_home

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f"strata-agent-home-{gone.pid}-x1"
    (stale / ".claude").mkdir(parents=True)
    (stale / ".claude" / ".credentials.json").write_text("secret")
    alive = tmp_path / f"strata-agent-home-{os.getpid()}-x2"  # a run still going
    alive.mkdir()
    other = tmp_path / "strata-agent-home-notapid"
    other.mkdir()
    made = private_home(folder=tmp_path)
    assert made.name.startswith(f"strata-agent-home-{os.getpid()}-")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert not stale.exists()
    assert alive.exists() and other.exists()
