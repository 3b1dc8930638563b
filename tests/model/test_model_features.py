"""Research -> Plan -> Implement, the host, the digest's optimizer and ``kb ask`` on a real model.

SmolLM2-135M behind llama.cpp's server (``model_server.py``; ``scripts/dev
test-model`` installs both). The model is tiny and the machine may be busy:
each test bounds every answer (``max_tokens``) and asserts what such a model
can be asked to do and what Strata records of it (a phase file written, a
host run recorded with its steps, a digest optimization with its recorded
result, a kb answer with its citations), never the quality of the answers.
A command a tiny model can fail (a plan without a checklist, a host run out
of steps) may exit 1, with a one-line error and nothing half recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from model_server import ModelServer, local_config, serving

from conftest import as_json, ok

pytestmark = pytest.mark.model

#: the longest answer asked of the model (a test of several calls stays short)
MAX_TOKENS = 96
#: seconds one call may take on a machine whose cores are shared
TIMEOUT = 600


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    with serving(tmp_path_factory.mktemp("server") / "server.log") as server:
        yield server


def workspace(run_cli, ws: Path, server: ModelServer, **options: Any) -> Path:
    """A recorded workspace of two small notes, its default model the local server."""
    (ws / "README.md").write_text("# Shop\n\nA shopping list kept in notes.txt.\n")
    (ws / "notes.txt").write_text("milk\neggs\nThe shop opens at nine.\n")
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[model]\ndefault = "local"\n')
        config.write(local_config(server.url, timeout=TIMEOUT, max_tokens=MAX_TOKENS, **options))
    return ws


def one_line_error(err: str) -> None:
    """A failure the model caused is reported on one line, never as a traceback."""
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error: ")], err


def test_ask_rpi_writes_its_phase_files_and_records_the_turn(
    run_cli, ws: Path, model_server: ModelServer
) -> None:
    """``ask --rpi`` through the compatibility flow (a tiny model's best path, and a short prompt).

    The research phase always ends after one answer (the model cannot call a
    tool), so ``research.md`` is written; the plan needs a checklist the tiny
    model may not write: then the turn fails with WorkshopPlanMissing, saying so.
    """
    workspace(run_cli, ws, model_server, tools="none")
    code, _, err = run_cli(
        "ask", "--rpi", "Add bread to the list in notes.txt.", cwd=ws, timeout=3 * TIMEOUT
    )
    assert "[research]" in err  # the phases are shown as they start
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    answer = log["messages"][-1]
    assert answer["kind"] == "assistant_message" and answer["data"]["rpi"] is True
    assert answer["data"]["compat"]["flow"] == "compatibility"
    rpi = ws / ".strata" / "workshop" / log["conversation"] / "_rpi"
    research = (rpi / "research.md").read_text()
    assert research.strip()  # the phase file the model's answer was written to
    if code == 0:
        assert (rpi / "plan.md").read_text().startswith("# Plan")
        assert (rpi / "summary.md").read_text().strip()
    else:
        one_line_error(err)
        assert answer["data"]["error"]["type"] in ("WorkshopPlanMissing", "ProposalRefused"), err
    ok(run_cli("check", cwd=ws))


def test_host_records_its_run_and_steps(run_cli, ws: Path, model_server: ModelServer) -> None:
    """The host through the compatibility flow: one plain answer, no tool call to generate.

    With native tool calls llama.cpp's ``chatml-function-calling`` generates a
    tool call's arguments past ``max_tokens`` (3,184 tokens measured, then a
    3,172-token prompt): minutes a step on a shared machine.
    """
    workspace(run_cli, ws, model_server, tools="none")
    code, out, err = run_cli(
        "host",
        "--max-steps",
        "2",
        "--json",
        "When does the shop open?",
        cwd=ws,
        timeout=3 * TIMEOUT,
    )
    assert code in (0, 1), err
    result = json.loads(out)
    assert result["provider"] == "local" and result["steps"]
    assert result["status"] in ("answered", "completed", "failed", "max_steps")
    # every model call is a trace, linked from the step's recorded event
    history = as_json(run_cli("history", "--json", "--limit", "100", cwd=ws))
    events = {e["id"]: e for e in (history["events"] if isinstance(history, dict) else history)}
    for step in result["steps"]:
        assert step["traces"]
        assert events[step["event_id"]]["artifacts"] == step["traces"]
        assert events[step["event_id"]]["data"]["step"]["loop"] == "host"
    assert result["started_event_id"] in events and result["finished_event_id"] in events
    ok(run_cli("check", cwd=ws))


def test_digest_optimize_records_its_result_and_replays_it(
    run_cli, ws: Path, model_server: ModelServer
) -> None:
    """Through the compatibility flow: one plain answer, the digest.

    With native tool calls llama-cpp-python's ``chatml-function-calling``
    may generate a tool call's arguments until the context is full (3,497
    tokens measured, then HTTP 400), whatever ``max_tokens`` says.
    """
    workspace(run_cli, ws, model_server, tools="none")
    (ws / "TODO.md").write_text("- buy bread\n")  # unrecorded: the optimization saves it first
    code, out, err = run_cli("digest", "optimize", "--json", cwd=ws, timeout=TIMEOUT * 3)
    if code != 0:  # the model may loop on its two tools: stopped, said on one line
        one_line_error(err)
        pytest.fail(f"digest optimize failed: {err}")
    result = json.loads(out)
    assert result["digest"].strip() and result["traces"]
    assert result["finish_reason"] in ("stop", "length")
    shown = run_cli("digest", "show", cwd=ws)
    assert shown[0] == 0 and result["digest"].strip()[:40] in shown[1]
    history = as_json(run_cli("history", "--json", "--limit", "100", cwd=ws))
    listed = history["events"] if isinstance(history, dict) else history
    events = {e["id"]: e for e in listed}
    assert events[result["event_id"]]["artifacts"] == result["traces"]
    # the recorded calls answer the replay (no network): the same digest
    span = f"{listed[-1]['id']}..{result['anchor_event_id']}"  # the oldest, newest first
    report = as_json(run_cli("replay", span, "--json", cwd=ws, timeout=TIMEOUT))
    assert report["ok"] is True, report["first_divergence"]
    assert [s["kind"] for s in report["steps"]][-1] == "digest"
    ok(run_cli("check", cwd=ws))


def test_kb_ask_answers_with_citations(run_cli, ws: Path, model_server: ModelServer) -> None:
    workspace(run_cli, ws, model_server)
    ok(run_cli("kb", "index", cwd=ws))
    result = as_json(
        run_cli("kb", "ask", "--json", "When does the shop open?", cwd=ws, timeout=TIMEOUT)
    )
    assert result["answer"] and result["answer"].strip()
    assert result["provider"] == "local" and result["traces"]
    cited = [c["path"] for c in result["citations"]]
    assert "notes.txt" in cited  # the passage holding the answer, cited by path and lines
    history = as_json(run_cli("history", "--json", "--action", "kb_ask", cwd=ws))
    [event] = history["events"] if isinstance(history, dict) else history
    assert event["id"] == result["event_id"] and event["artifacts"] == result["traces"]
    assert "notes.txt" in " ".join(event["data"]["kb"]["citations"])
    code, out, _ = run_cli("kb", "ask", "When does the shop open?", cwd=ws, timeout=TIMEOUT)
    assert code == 0 and "Sources:" in out and "notes.txt" in out
