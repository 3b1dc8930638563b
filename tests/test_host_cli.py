"""``strata host``: the command line of the host loop (seed 001)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CliRunner, assert_user_error

PLAN = (
    "responses:\n"
    "  - tool_calls: [{name: local_kb_retrieval, arguments: {query: server port, k: null}}]\n"
    "  - tool_calls:\n"
    "      - name: create_plan\n"
    "        arguments:\n"
    "          goal: write the port down\n"
    "          tasks: [{kind: terminal_exec, title: write it, command: 'echo 8421 > port.txt'}]\n"
    "  - text: 'Port 8421 [1], written to port.txt.'\n"
    "    stream: 6\n"
)


@pytest.fixture
def run_cli(tmp_path: Path) -> CliRunner:
    home = tmp_path / "home"
    home.mkdir()
    return CliRunner(home, prefix=("setsid", "-w"))  # a session of its own: no /dev/tty


@pytest.fixture
def ws(tmp_path: Path, run_cli: CliRunner) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "guide.md").write_text("# Server\n\nThe server listens on port 8421.\n")
    assert run_cli("init", cwd=root)[0] == 0
    return root


def script(ws: Path, text: str) -> None:
    (ws / "bot.yaml").write_text(text)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.bot]\nadapter = "scripted"\nscript = "bot.yaml"\n')


def test_host_plans_runs_and_prints_the_answer_and_its_sources(
    ws: Path, run_cli: CliRunner
) -> None:
    script(ws, PLAN)
    code, out, err = run_cli("host", "which port? write it down", "--model", "bot", "--yes", cwd=ws)
    assert code == 0, err
    assert out.startswith("Port 8421 [1], written to port.txt.\n\nSources:\n[1] guide.md:1-3@")
    assert "· planned 1 task: 1.1 terminal_exec: write it" in err
    assert "· finished task 1.1 (terminal_exec): write it; 1 file changed" in err
    assert (ws / "port.txt").read_text() == "8421\n"
    code, out, _ = run_cli("history", "--action", "host", "--json", cwd=ws)
    assert [e["action_type"] for e in json.loads(out)][::-1] == [
        "host_run_started",
        "agent_step",
        "agent_step",
        "plan_created",
        "task_started",
        "task_finished",
        "agent_step",
        "host_run_finished",
    ]
    assert run_cli("undo", cwd=ws)[0] == 0
    assert not (ws / "port.txt").exists()


def test_json_holds_trace_ids_and_activity_lines(ws: Path, run_cli: CliRunner) -> None:
    script(ws, PLAN)
    code, out, err = run_cli("host", "which port?", "--model", "bot", "--yes", "--json", cwd=ws)
    assert code == 0, err
    result = json.loads(out)
    assert result["schema"] == 1 and result["status"] == "completed"
    assert len(result["traces"]) == 5  # three model calls, a retrieval, a task
    assert all(len(t) == 64 for t in result["traces"])  # object ids, to 'strata cat'
    assert [a["kind"] for a in result["activity"]] == [
        "retrieval",
        "plan",
        "task_started",
        "task_finished",
        "answer",
    ]
    assert result["activity"][3]["traces"] == result["plans"][0]["tasks"][0]["traces"]
    assert result["citations"][0]["n"] == 1 and result["citations"][0]["path"] == "guide.md"
    code, out, _ = run_cli("cat", result["traces"][0], cwd=ws)
    assert code == 0 and "llm_call" in out


def test_a_denied_command_exits_1_and_says_why(ws: Path, run_cli: CliRunner) -> None:
    script(
        ws,
        "responses:\n"
        "  - tool_calls: [{name: create_plan, arguments: {goal: g, tasks: "
        "[{kind: terminal_exec, title: delete, command: 'rm guide.md'}]}}]\n"
        "  - text: 'The deletion was denied.'\n",
    )
    # no terminal (setsid: a session of its own) and no --yes: the approval is denied
    code, out, err = run_cli("host", "delete the guide", "--model", "bot", cwd=ws)
    assert code == 1 and "Traceback" not in err
    assert out.startswith("The deletion was denied.")
    assert "warning: task 1.1 failed: approval denied" in err
    assert (ws / "guide.md").exists()


def test_the_step_cap_exits_1(ws: Path, run_cli: CliRunner) -> None:
    script(
        ws,
        "responses:\n"
        "  - tool_calls: [{name: local_kb_retrieval, arguments: {query: a, k: 1}}]\n"
        "  - tool_calls: [{name: local_kb_retrieval, arguments: {query: b, k: 1}}]\n",
    )
    code, out, _ = run_cli("host", "x", "--model", "bot", "--max-steps", "1", "--json", cwd=ws)
    assert code == 1 and json.loads(out)["status"] == "max_steps"


def test_bad_input_is_one_clear_error(ws: Path, run_cli: CliRunner, tmp_path: Path) -> None:
    assert_user_error(run_cli("host", "x", "--model", "nobody", cwd=ws), says="nobody")
    script(ws, "responses:\n  - text: hi\n")
    assert_user_error(run_cli("host", " ", "--model", "bot", cwd=ws), code=2, says="empty")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert_user_error(run_cli("host", "x", cwd=elsewhere), says="workspace required")


def test_help_has_an_example(run_cli: CliRunner, tmp_path: Path) -> None:
    code, out, _ = run_cli("host", "--help", cwd=tmp_path)
    assert code == 0 and "Example:" in out and 'strata host "' in out


def test_a_provider_failure_ends_the_run_recorded_and_exits_1(ws: Path, run_cli: CliRunner) -> None:
    script(ws, "responses:\n  - tool_calls: [{name: local_kb_retrieval, arguments: {query: a}}]\n")
    code, out, err = run_cli("host", "x", "--model", "bot", cwd=ws)
    assert code == 1 and "Traceback" not in err
    assert "error: bot: the script" in err and "all were served" in err
    code, out, _ = run_cli("history", "--action", "host_run_finished", "--json", cwd=ws)
    (ended,) = json.loads(out)
    # the first call, its retrieval, and the failed call, whose trace keeps the error
    assert ended["data"]["host"]["status"] == "error" and len(ended["artifacts"]) == 3
    code, out, _ = run_cli("cat", ended["artifacts"][2], cwd=ws)
    assert code == 0 and "all were served" in out


TWO_TASKS = (
    "responses:\n"
    "  - tool_calls:\n"
    "      - name: create_plan\n"
    "        arguments:\n"
    "          goal: write two files\n"
    "          tasks:\n"
    "            - {kind: terminal_exec, title: one, command: 'echo 1 > one.txt'}\n"
    "            - {kind: terminal_exec, title: two, command: 'echo 2 > two.txt'}\n"
    "  - text: 'Wrote one.txt and two.txt.'\n"
)


def test_a_host_run_is_one_operation_and_one_undo_reverts_it(ws: Path, run_cli: CliRunner) -> None:
    script(ws, TWO_TASKS)
    assert run_cli("snapshot", "-m", "before", cwd=ws)[0] == 0
    code, _, err = run_cli("host", "write two files", "--model", "bot", "--yes", cwd=ws)
    assert code == 0, err
    assert (ws / "one.txt").read_text() == "1\n" and (ws / "two.txt").read_text() == "2\n"
    code, out, _ = run_cli("op", "log", cwd=ws)
    kinds = [line.split()[3] for line in out.splitlines()]
    assert code == 0 and kinds[0] == "host" and kinds.count("host") == 1, out
    assert "write two files" in out.splitlines()[0], out
    code, out, _ = run_cli("op", "log", "--json", cwd=ws)
    steps = [o for o in json.loads(out) if (o.get("group") or {}).get("kind") == "host"]
    assert len(steps) > 2  # the run's events and both tasks' runs
    assert len({o["group"]["id"] for o in steps}) == 1
    assert run_cli("undo", cwd=ws)[0] == 0
    assert not (ws / "one.txt").exists() and not (ws / "two.txt").exists()
    assert (ws / "guide.md").exists()
    assert run_cli("check", cwd=ws)[0] == 0
