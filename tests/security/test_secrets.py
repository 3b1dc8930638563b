"""Secrets never reach the ledger: what a hook, a run or a snapshot's message says is redacted.

Each test writes a secret where an agent would (a command's arguments, the
environment, a message) and then reads every byte of the repository folder's
ledger: the secret must be nowhere, while the workspace's own files keep it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CliRunner, as_json, ok

ANTHROPIC = "sk-ant-api03-Zx9Qw8Er7Ty6Ui5Op4As3Df2"
OPENAI = "sk-proj-Pl1Ok2Ij3Uh4Yg5Tf6Rd7Es8"
SERVICE = "svc-4f9a1c77e2b84d10"  # looks like nothing: known only from the environment


def ledger_bytes(ws: Path) -> bytes:
    """Every byte the repository keeps about events: the ledger and its sidecars."""
    repo = ws / ".strata"
    return b"".join(
        p.read_bytes() for p in repo.rglob("*") if p.is_file() and p.name.startswith("ledger")
    ) + b"".join(p.read_bytes() for p in (repo / "ledger").rglob("*") if p.is_file())


@pytest.fixture(params=["sqlite", "jsonl"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    ok(run_cli("init", "--ledger", request.param, cwd=ws))
    return ws


def test_a_hooks_command_and_the_environments_secrets_are_redacted(
    workspace: Path, run_cli: CliRunner
) -> None:
    command = (
        f'curl -H "x-api-key: {ANTHROPIC}" https://api.example.test && '
        f"OPENAI_API_KEY={OPENAI} python deploy.py --token {SERVICE}"
    )
    env = {"DEPLOY_SERVICE_TOKEN": SERVICE}
    for event in ("PreToolUse", "PostToolUse"):
        payload = {
            "session_id": "s1",
            "cwd": str(workspace),
            "hook_event_name": event,
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
        if event == "PostToolUse":
            (workspace / "app.py").write_text(f"KEY = '{OPENAI}'\n")  # the agent's own edit
        proc = subprocess.run(
            [sys.executable, "-m", "strata", "hook", "claude-code"],
            input=json.dumps(payload),
            cwd=workspace,
            env=run_cli.env(env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
    ok(
        run_cli(
            "snapshot",
            "-m",
            f"rotated DB_PASSWORD=hunter2hunter2 {SERVICE}",
            cwd=workspace,
            env=env,
        )
    )
    recorded = ledger_bytes(workspace)
    for secret in (ANTHROPIC, OPENAI, SERVICE, "hunter2hunter2"):
        assert secret.encode() not in recorded, secret
    (event,) = [
        e
        for e in as_json(run_cli("history", "--json", cwd=workspace))
        if e["author"]["kind"] == "agent"
    ]
    assert "[REDACTED:api-key]" in event["rationale"]
    assert "[REDACTED:secret]" in event["rationale"]  # the environment's value
    assert "curl -H" in event["rationale"]  # the rest of the command is kept
    # the workspace's files are the user's: kept byte for byte, in the file and its snapshot
    assert (workspace / "app.py").read_text() == f"KEY = '{OPENAI}'\n"
    assert ok(run_cli("show", "HEAD:app.py", cwd=workspace)) == f"KEY = '{OPENAI}'\n"
    assert ok(run_cli("check", cwd=workspace))


def test_a_runs_command_line_is_redacted(workspace: Path, run_cli: CliRunner) -> None:
    script = "open('out.txt', 'w').write('done')"
    ok(run_cli("run", "--", sys.executable, "-c", script, f"--api-key={ANTHROPIC}", cwd=workspace))
    assert ANTHROPIC.encode() not in ledger_bytes(workspace)
    assert (workspace / "out.txt").read_text() == "done"


#: a value that looks like nothing: known only from the .env file the agent read
FROM_FILE = "plain-looking-4c1d9e"


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_values_from_the_workspaces_env_and_key_files_are_redacted(
    workspace: Path, run_cli: CliRunner, agent: str
) -> None:
    """A git-ignored .env and a key file the agent read: their values, pasted into its
    commands, reach no record (hook and Codex records alike); the files stay as they are."""
    (workspace / ".gitignore").write_text(".env\n")
    env_file = f"OPENAI_API_KEY={OPENAI}\nexport STRIPE_LIVE='{FROM_FILE}'\n"
    (workspace / ".env").write_text(env_file)
    (workspace / "deploy").mkdir()
    (workspace / "deploy" / "service.key").write_text(f"{ANTHROPIC}\n")
    command = f"deploy --stripe {FROM_FILE} --key {ANTHROPIC} && echo OPENAI_API_KEY={OPENAI}"
    for event in ("PreToolUse", "PostToolUse"):
        payload = {
            "session_id": "s1",
            "cwd": str(workspace),
            "hook_event_name": event,
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
        if event == "PostToolUse":
            (workspace / "app.py").write_text("x = 2\n")
        proc = subprocess.run(
            [sys.executable, "-m", "strata", "hook", agent],
            input=json.dumps(payload), cwd=workspace, env=run_cli.env(), capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    # a refused call's record too
    refused = {
        "session_id": "s1",
        "cwd": str(workspace),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"rm -rf / --token {FROM_FILE}"},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "strata", "hook", agent],
        input=json.dumps(refused), cwd=workspace, env=run_cli.env(), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    recorded = ledger_bytes(workspace)
    for secret in (FROM_FILE, OPENAI, ANTHROPIC):
        assert secret.encode() not in recorded, secret
    rationales = " ".join(
        str(e["rationale"]) + json.dumps(e["data"])
        for e in as_json(run_cli("history", "--json", cwd=workspace))
    )
    assert "--stripe [REDACTED:secret]" in rationales, rationales
    assert (workspace / ".env").read_text() == env_file  # the user's file, untouched


def test_the_secret_files_an_agent_may_read_are_known(tmp_path: Path) -> None:
    """Environment files' values and key files' lines, at the root and one folder down."""
    from strata.redaction import Redactor, file_secrets

    (tmp_path / ".env.local").write_text(f"# a comment line\nexport STRIPE_LIVE='{FROM_FILE}'\n")
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "tls.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2x9\n-----END CERTIFICATE-----\n"
    )
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / ".env").write_text("DEEP=too-deep-to-look-at\n")
    (tmp_path / ".strata").mkdir()
    (tmp_path / ".strata" / "x.key").write_text("strata-own-file\n")
    found = file_secrets(tmp_path)
    assert FROM_FILE in found and "MIIBszCCAVmgAwIBAgIUQ2x9" in found
    assert "too-deep-to-look-at" not in found and "strata-own-file" not in found
    assert not any(v.startswith("#") or v.startswith("-----") for v in found)
    said = Redactor(found).text(f"psql --password {FROM_FILE}")
    assert said == "psql --password [REDACTED:secret]"
