"""The step loop's guard: every agent-like command stops a model that repeats one tool call.

`strata agent`, `strata ask`, `strata ask --rpi`, `strata host` and `strata digest optimize`
are all the one step loop of `strata.agent.step`: at the third identical call the model is
warned (its next request says so), the fifth is not run and the command fails with one error
line. A scripted model that would go on afterwards (writing a file) is never asked again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import as_json, ok

WARNED = "Warning: you called {tool} with the same arguments 3 times"


def _repeat(tool: str, arguments: dict[str, Any], after: list[dict[str, Any]]) -> list[Any]:
    """Five identical calls (the fourth request must carry the warning), then ``after``."""
    same = {"tool_calls": [{"name": tool, "arguments": arguments}]}
    return [same, same, same, {**same, "expect": WARNED.format(tool=tool)}, same, *after]


def _workspace(run_cli, ws: Path, responses: list[Any]) -> Path:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    (ws / "bot.yaml").write_text(yaml.safe_dump({"responses": responses}))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            '\n[providers.bot]\nadapter = "scripted"\nscript = "bot.yaml"\n'
            '[model]\ndefault = "bot"\n'
        )
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


def _stopped(result: tuple[int, str, str], tool: str) -> str:
    code, _, err = result
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    error = [line for line in err.splitlines() if line.startswith("error: ")]
    assert error == [
        f"error: the agent called {tool} with the same arguments 5 times in a row of its "
        f"last tool calls, so {error[0].split(' so ')[-1]}"
    ], err
    return err


WRITE_B = [
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}}]},
    {"text": "done"},
]


def _draft_files(run_cli, ws: Path) -> set[str]:
    status = as_json(run_cli("draft", "status", "--json", cwd=ws))
    return {p.name for p in Path(status["path"]).iterdir()} if status["open"] else set()


def test_strata_agent_stops_a_model_repeating_a_tool_call(run_cli, ws: Path) -> None:
    _workspace(run_cli, ws, _repeat("read_file", {"path": "a.txt"}, WRITE_B))
    err = _stopped(run_cli("agent", "--model", "bot", "read a.txt", cwd=ws), "read_file")
    assert "so the run was stopped" in err
    assert "b.txt" not in _draft_files(run_cli, ws)
    # the four steps before the repeat are kept as Draft revisions
    history = as_json(run_cli("history", "--json", "--author-kind", "agent", cwd=ws))
    events = history["events"] if isinstance(history, dict) else history
    steps = [e for e in events if e["rationale"].startswith("agent step")]
    assert len(steps) == 4


def test_ask_stops_a_model_repeating_a_tool_call(run_cli, ws: Path) -> None:
    _workspace(run_cli, ws, _repeat("read_file", {"path": "a.txt"}, WRITE_B))
    err = _stopped(run_cli("ask", "read a.txt", cwd=ws), "read_file")
    assert "so the turn was stopped" in err and "/model" in err
    assert "b.txt" not in _draft_files(run_cli, ws)
    log = ok(run_cli("chat", "log", cwd=ws))
    assert "[failed: the agent called read_file" in log


def test_ask_rpi_stops_a_model_repeating_a_tool_call(run_cli, ws: Path) -> None:
    _workspace(run_cli, ws, _repeat("read_file", {"path": "a.txt"}, WRITE_B))
    err = _stopped(run_cli("ask", "--rpi", "read a.txt", cwd=ws), "read_file")
    assert "so the turn was stopped" in err
    assert "b.txt" not in _draft_files(run_cli, ws)
    assert not list((ws / ".strata" / "workshop").glob("*/_rpi/research.md"))


def test_host_stops_a_model_repeating_a_tool_call(run_cli, ws: Path) -> None:
    plan = {
        "tool_calls": [
            {
                "name": "create_plan",
                "arguments": {
                    "goal": "write b",
                    "tasks": [{"kind": "terminal_exec", "title": "b", "command": "echo b > b.txt"}],
                },
            }
        ]
    }
    query = {"query": "what is in a", "k": None}
    _workspace(run_cli, ws, _repeat("local_kb_retrieval", query, [plan, {"text": "done"}]))
    err = _stopped(
        run_cli("host", "what is in a?", "--model", "bot", "--yes", cwd=ws), "local_kb_retrieval"
    )
    assert "so the run was stopped" in err
    assert not (ws / "b.txt").exists()
    history = as_json(run_cli("history", "--action", "host", "--json", cwd=ws))
    finished = [e for e in history if e["action_type"] == "host_run_finished"]
    assert finished and finished[0]["data"]["host"]["status"] == "error"


def test_digest_optimize_stops_a_model_repeating_a_tool_call(run_cli, ws: Path) -> None:
    _workspace(run_cli, ws, _repeat("list_files", {}, [{"text": "# Digest"}]))
    _stopped(run_cli("digest", "optimize", "--model", "bot", cwd=ws), "list_files")
    shown = as_json(run_cli("digest", "show", "--json", cwd=ws))
    assert shown["source"] == "placeholder"
