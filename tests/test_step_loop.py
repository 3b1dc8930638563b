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


def test_digest_optimize_asks_a_model_repeating_a_tool_call_for_the_digest(
    run_cli, ws: Path
) -> None:
    """After the warning the optimizer asks for the digest with no tool; one still calling fails."""
    _workspace(run_cli, ws, _repeat("list_files", {}, [{"text": "# Digest"}]))
    code, _, err = run_cli("digest", "optimize", "--model", "bot", cwd=ws)
    assert code == 1 and "Traceback" not in err
    assert "answered with a tool call when asked for the digest" in err
    shown = as_json(run_cli("digest", "show", "--json", cwd=ws))
    assert shown["source"] == "placeholder"


# -- one vocabulary for a step ------------------------------------------------------------

#: the fields every recorded step carries in ``data.step``, whichever loop took it
STEP_FIELDS = {"loop", "step", "provider", "adapter", "model", "finish_reason", "tool_calls"}


def test_every_loop_records_its_steps_in_one_vocabulary(run_cli, ws: Path) -> None:
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
    retrieve = {"tool_calls": [{"name": "local_kb_retrieval", "arguments": {"query": "a"}}]}
    listing = {"tool_calls": [{"name": "list_files", "arguments": {}}]}
    _workspace(run_cli, ws, [read, {"text": "done"}])
    ok(run_cli("agent", "--model", "bot", "read a.txt", cwd=ws))
    (ws / "bot.yaml").write_text(yaml.safe_dump({"responses": [retrieve, {"text": "a"}]}))
    ok(run_cli("host", "what is in a?", "--model", "bot", "--yes", cwd=ws))
    (ws / "bot.yaml").write_text(yaml.safe_dump({"responses": [listing, {"text": "# Digest"}]}))
    ok(run_cli("digest", "optimize", "--model", "bot", cwd=ws))
    history = as_json(run_cli("history", "--json", "--limit", "100", cwd=ws))
    events = list(reversed(history["events"] if isinstance(history, dict) else history))
    steps = [e for e in events if "step" in e["data"]]
    by_loop: dict[str, list[dict[str, Any]]] = {}
    for event in steps:
        by_loop.setdefault(event["data"]["step"]["loop"], []).append(event)
    assert sorted(by_loop) == ["agent", "digest", "host"]
    for loop, recorded in by_loop.items():
        for event in recorded:
            assert set(event["data"]["step"]) >= STEP_FIELDS, (loop, event["data"])
            assert event["action_type"] == ("draft_revision" if loop == "agent" else "agent_step")
    assert [e["data"]["step"]["tool_calls"] for e in by_loop["host"]] == [
        ["local_kb_retrieval"],
        [],
    ]
    assert not any(e["action_type"] in ("host_step", "digest_optimize") for e in events)


def test_steps_recorded_by_earlier_versions_are_read_alike() -> None:
    from strata.agent.step import recorded_step
    from strata.digest.optimize import is_optimize
    from strata.ids import EventId
    from strata.ledger.events import Author, Event

    def old(action: str, data: dict[str, Any]) -> Event:
        bot = Author("bot", "agent")
        return Event(EventId("evt_1"), "2026-01-01T00:00:00.000Z", bot, action, data=data)

    fields = {"step": 2, "provider": "bot", "adapter": "scripted", "model": "m"}
    revision = old("draft_revision", {"agent": {**fields, "tool_calls": 1}})
    phase = old("draft_revision", {"rpi": {**fields, "phase": "plan", "item": None}})
    host = old("host_step", {"host": {"run": "host_1", **fields, "tool_calls": ["x"]}})
    digest = old("digest_optimize", {"digest": {"key": "k", "scan": "s", "digest": "d"}})
    assert [recorded_step(e)["loop"] for e in (revision, phase, host, digest)] == [  # type: ignore[index]
        "agent",
        "rpi",
        "host",
        "digest",
    ]
    assert recorded_step(phase)["phase"] == "plan"  # type: ignore[index]
    assert recorded_step(old("draft_revision", {"workshop": {}})) is None
    assert not is_optimize(digest)  # no traces
    assert is_optimize(Event(**{**digest.__dict__, "artifacts": ("t",)}))
