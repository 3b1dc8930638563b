"""The compatibility flow: a model without tool calling edits the Draft through a JSON proposal.

The model is a real HTTP server on 127.0.0.1 (``tests/wire_server.py``,
OpenAI Chat Completions) that answers with prose and a fenced JSON proposal,
never with a tool call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import as_json, ok
from strata import Repository
from strata.errors import ProposalRefused
from strata.providers import Retry
from strata.providers.base import TextDelta
from strata.providers.compat import CompatProvider, parse_proposal
from strata.providers.openai import OpenAIChat
from wire_server import WireServer, status, text


def proposal(*files: tuple[str, str], reply: str = "Here is the change.", **extra: Any) -> str:
    body: dict[str, Any] = {
        "no_changes": not files,
        "files": [{"path": p, "content": c, "summary": f"writes {p}"} for p, c in files],
        **extra,
    }
    return f"{reply}\n\n```json\n{json.dumps(body)}\n```\n"


def chat_provider(url: str) -> OpenAIChat:
    return OpenAIChat(
        name="local",
        model="m",
        base_url=url,
        api_key="sk-test",
        retry=Retry(sleep=lambda seconds: None),
    )


def configure(ws: Path, url: str, tools: str) -> None:
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.local]\nadapter = "openai-chat"\nmodel = "m"\nbase_url = "{url}"\n'
            f'tools = "{tools}"\nretry_delays = []\n[model]\ndefault = "local"\n'
        )


@pytest.fixture
def compat_ws(run_cli, ws: Path) -> Path:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    return ws


def test_a_proposal_lands_in_the_draft_and_replays_offline(
    run_cli, compat_ws: Path, wire: WireServer
) -> None:
    configure(compat_ws, wire.openai_url, "none")
    files = (("a.txt", "changed\n"), ("notes/new.md", "# New\n\nbody ü\n"))
    wire.queue(text(proposal(*files, reply="I rewrote a.txt and added notes.")))
    code, out, err = run_cli("ask", "rewrite a.txt and add notes", cwd=compat_ws)
    assert code == 0, err
    assert "I rewrote a.txt and added notes." in out and "```" not in out
    # the model was asked without tools, told the schema, and asked only once
    assert len(wire.requests) == 1
    body = wire.requests[0].body
    assert "tools" not in body and '"no_changes"' in body["messages"][0]["content"]
    draft = as_json(run_cli("draft", "status", "--json", cwd=compat_ws))
    folder = Path(draft["path"])
    assert (folder / "a.txt").read_bytes() == b"changed\n"
    assert (folder / "notes/new.md").read_bytes() == "# New\n\nbody ü\n".encode()
    assert (compat_ws / "a.txt").read_text() == "original\n"  # Published untouched
    answer = as_json(run_cli("chat", "log", "--json", cwd=compat_ws))["messages"][-1]
    recorded = answer["data"]["compat"]
    assert recorded["flow"] == "compatibility"
    assert [f["path"] for f in recorded["proposal"]["files"]] == ["a.txt", "notes/new.md"]
    assert recorded["proposal"]["files"][1]["summary"] == "writes notes/new.md"
    # the recorded proposal replays byte for byte with no model (the server is stopped)
    wire.__exit__(None, None, None)
    steps = as_json(run_cli("history", "--json", "--action", "draft_revision", cwd=compat_ws))
    tip = (steps["events"] if isinstance(steps, dict) else steps)[0]["id"]
    report = as_json(run_cli("replay", f"{draft['base_event_id']}..{tip}", "--json", cwd=compat_ws))
    assert report["ok"] is True and report["first_divergence"] is None
    assert [s["status"] for s in report["steps"]] == ["same"] * len(report["steps"])


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (proposal(("../escape.txt", "x")), "outside the workspace"),
        (proposal(("/etc/passwd", "x")), "is absolute"),
        (proposal(("a.txt", "ok\n"), (".strata/config.toml", "x")), "inside .strata"),
        (proposal(("a.txt", "x"), extra=1), "breaks the proposal schema"),
        ('Sure.\n```json\n{"no_changes": false, "files": [\n```\n', "not valid JSON"),
        ('Sure.\n```json\n{"no_changes": false', "not closed"),
    ],
)
def test_an_invalid_proposal_is_refused_whole_and_nothing_is_applied(
    run_cli, compat_ws: Path, wire: WireServer, answer: str, says: str
) -> None:
    configure(compat_ws, wire.openai_url, "none")
    wire.queue(text(answer))
    code, _, err = run_cli("ask", "change things", cwd=compat_ws)
    assert code == 1 and "Traceback" not in err
    assert "proposal was refused, nothing was applied" in err and says in err
    assert as_json(run_cli("draft", "status", "--json", cwd=compat_ws))["open"] is False
    assert not (compat_ws.parent / "escape.txt").exists()
    assert (compat_ws / "a.txt").read_text() == "original\n"


def test_a_server_that_refuses_tools_is_answered_through_the_compatibility_flow(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    wire.queue(
        status(400, "this model does not support tools"),
        text(proposal(("b.txt", "from a model without tools\n"), reply="Wrote b.txt.")),
    )
    w = repo.workshop(provider=chat_provider(wire.openai_url))
    streamed: list[str] = []
    turn = w.send(
        "write b.txt",
        on_event=lambda e: streamed.append(e.text) if isinstance(e, TextDelta) else None,
    )
    assert "tools" in wire.requests[0].body and "tools" not in wire.requests[1].body
    assert turn.assistant_message.text == "Wrote b.txt."
    assert "".join(streamed).strip() == "Wrote b.txt."  # the reply streams, the proposal does not
    draft = repo.draft(create=False)
    assert (draft.path / "b.txt").read_bytes() == b"from a model without tools\n"
    assert turn.assistant_message.data["compat"]["flow"] == "compatibility"


def test_no_changes_opens_no_draft(repo: Repository, wire: WireServer) -> None:
    wire.queue(text(proposal(reply="a.txt says original.")))
    w = repo.workshop(provider=CompatProvider(chat_provider(wire.openai_url)))
    turn = w.send("what is in a.txt?")
    assert turn.assistant_message.text == "a.txt says original."
    assert turn.draft_revision is None and not repo.layout.draft_state.exists()


def test_a_tools_setting_other_than_the_three_is_refused(run_cli, compat_ws: Path) -> None:
    configure(compat_ws, "http://127.0.0.1:9/v1", "maybe")
    code, _, err = run_cli("ask", "hello", cwd=compat_ws)
    assert code == 1 and "tools of [providers.local] is 'maybe'" in err


def test_the_same_proposal_parses_the_same_and_a_bare_answer_proposes_nothing() -> None:
    text_ = proposal(("x/y.txt", "1\n"), ("./z.txt", "2\n"))
    first, second = parse_proposal(text_), parse_proposal(text_)
    assert first == second and first.id == second.id
    assert [f.path for f in first.files] == ["x/y.txt", "z.txt"]
    assert parse_proposal("Just an answer.").no_changes
    with pytest.raises(ProposalRefused, match="twice"):
        parse_proposal(proposal(("a", "1"), ("./a", "2")))


# -- a provider that stays down offers a model switch ------------------------------------------


def test_a_provider_that_fails_after_its_retries_offers_the_configured_models(
    run_cli, compat_ws: Path, wire: WireServer, tmp_path: Path
) -> None:
    configure(compat_ws, wire.openai_url, "native")
    (tmp_path / "backup.yaml").write_text("- text: Answered by the backup.\n")
    with open(compat_ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'[providers.backup]\nadapter = "scripted"\nscript = "{tmp_path / "backup.yaml"}"\n'
        )
    wire.queue(*[status(503, "overloaded")] * 4)
    code, _, err = run_cli("ask", "--json", "hello", cwd=compat_ws)
    assert code == 1
    error = json.loads(err.strip().splitlines()[-1])["error"]
    assert error["type"] == "ProviderUnavailable"
    assert "backup:scripted" in error["alternatives"] and "local:m" not in error["alternatives"]
    code, _, err = run_cli("ask", "hello again", cwd=compat_ws)
    assert code == 1 and "switch model: strata ask --model" in err and "backup:scripted" in err
    # the switch it offers works
    code, out, err = run_cli("ask", "--model", "backup", "hello", cwd=compat_ws)
    assert code == 0 and "Answered by the backup." in out


def test_models_shows_how_each_provider_edits_files(run_cli, compat_ws: Path) -> None:
    configure(compat_ws, "http://127.0.0.1:9/v1", "none")
    listed = as_json(run_cli("models", "--json", cwd=compat_ws))["providers"]
    tools = {p["name"]: p["tools"] for p in listed}
    assert tools["local"] == "none" and tools["openai"] == "native"


def test_tools_auto_switches_to_the_flow_when_the_server_refuses_tools(
    run_cli, compat_ws: Path, wire: WireServer
) -> None:
    configure(compat_ws, wire.openai_url, "auto")
    wire.queue(
        status(400, "tools param requires --jinja flag"),
        text(proposal(("c.txt", "auto\n"), reply="Wrote c.txt.")),
    )
    code, out, err = run_cli("ask", "write c.txt", cwd=compat_ws)
    assert code == 0 and "Wrote c.txt." in out, err
    assert "tools" in wire.requests[0].body and "tools" not in wire.requests[1].body
    folder = Path(as_json(run_cli("draft", "status", "--json", cwd=compat_ws))["path"])
    assert (folder / "c.txt").read_bytes() == b"auto\n"


def test_a_write_the_edit_bounds_refuse_is_named_in_the_answer(
    run_cli, compat_ws: Path, wire: WireServer
) -> None:
    configure(compat_ws, wire.openai_url, "none")
    with open(compat_ws / ".strata" / "config.toml", "a") as config:
        config.write("[edits]\nmax_file_bytes = 16\n")
    wire.queue(text(proposal(("small.txt", "ok\n"), ("big.txt", "x" * 100), reply="Two files.")))
    code, out, err = run_cli("ask", "write two files", cwd=compat_ws)
    assert code == 0, err
    assert "Two files." in out and "Not written:" in out and "big.txt" in out
    folder = Path(as_json(run_cli("draft", "status", "--json", cwd=compat_ws))["path"])
    assert (folder / "small.txt").read_bytes() == b"ok\n" and not (folder / "big.txt").exists()


# -- Research -> Plan -> Implement through the flow --------------------------------------------


def rpi_answers(*, research: str = "notes: a.txt holds one line.") -> list[Any]:
    """The four answers of an RPI turn of one item, from a model without tool calling."""
    return [
        text(research),
        text("- [ ] Rewrite a.txt\n"),
        text(proposal(("a.txt", "rewritten\n"), reply="DONE: rewrote a.txt.")),
        text("I rewrote a.txt; it is in the Draft."),
    ]


@pytest.mark.parametrize("tools", ["none", "auto"])
def test_ask_rpi_runs_every_phase_through_the_flow_and_replays_offline(
    run_cli, compat_ws: Path, wire: WireServer, tools: str
) -> None:
    configure(compat_ws, wire.openai_url, tools)
    refused = [status(400, "tools param requires --jinja flag")] if tools == "auto" else []
    # research and plan may not write: their answers are read whole, a fenced block
    # of code in the notes included, and no proposal is asked of them
    notes = "a.txt holds:\n```text\noriginal\n```\nNothing else."
    wire.queue(*refused, *rpi_answers(research=notes))
    code, out, err = run_cli("ask", "--rpi", "rewrite a.txt", cwd=compat_ws)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("[")][:2] == [
        "[research]",
        "[plan]",
    ]
    assert "I rewrote a.txt" in out
    bodies = wire.bodies[len(refused) :]
    assert len(bodies) == 4  # one call a phase: the writes' step is answered by the reply
    assert all("tools" not in body for body in bodies)
    research, plan, implement, summary = (b["messages"][0]["content"] for b in bodies)
    assert '"no_changes"' not in research and '"no_changes"' not in plan
    assert "may not change files" in research and "may not change files" in plan
    assert '"no_changes"' not in summary and "may not change files" not in summary
    assert '"no_changes"' in implement
    log = as_json(run_cli("chat", "log", "--json", cwd=compat_ws))
    state = compat_ws / ".strata" / "workshop" / log["conversation"] / "_rpi"
    assert "```text\noriginal\n```" in (state / "research.md").read_text()
    assert "- [x] 1. Rewrite a.txt" in (state / "plan.md").read_text()
    answer = log["messages"][-1]["data"]
    assert answer["rpi"] is True and answer["compat"]["flow"] == "compatibility"
    assert [f["path"] for f in answer["compat"]["proposal"]["files"]] == ["a.txt"]
    draft = as_json(run_cli("draft", "status", "--json", cwd=compat_ws))
    assert (Path(draft["path"]) / "a.txt").read_bytes() == b"rewritten\n"
    assert (compat_ws / "a.txt").read_text() == "original\n"
    # the recorded proposal rewrites the same bytes with the server stopped
    wire.__exit__(None, None, None)
    steps = as_json(run_cli("history", "--json", "--action", "draft_revision", cwd=compat_ws))
    tip = (steps["events"] if isinstance(steps, dict) else steps)[0]["id"]
    report = as_json(run_cli("replay", f"{draft['base_event_id']}..{tip}", "--json", cwd=compat_ws))
    assert report["ok"] is True, report["first_divergence"]


def test_ask_rpi_falls_back_to_the_flow_when_the_server_refuses_tools(
    repo: Repository, wire: WireServer
) -> None:
    """With ``tools = "native"`` (the default) an RPI turn is asked again through the flow."""
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    wire.queue(status(400, "this model does not support tools"), *rpi_answers())
    turn = repo.workshop(provider=chat_provider(wire.openai_url)).send("rewrite a.txt", rpi=True)
    assert turn.assistant_message.text == "I rewrote a.txt; it is in the Draft."
    assert "tools" in wire.bodies[0] and all("tools" not in b for b in wire.bodies[1:])
    assert turn.assistant_message.data["compat"]["flow"] == "compatibility"
    assert (repo.draft(create=False).path / "a.txt").read_bytes() == b"rewritten\n"


def test_a_proposal_where_the_phase_may_not_write_is_not_applied(
    repo: Repository, wire: WireServer
) -> None:
    """A tiny model proposes files while researching: its notes keep its prose, nothing written."""
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    eager = proposal(("a.txt", "too early\n"), reply="a.txt must change.")
    wire.queue(*rpi_answers(research=eager))
    w = repo.workshop(provider=CompatProvider(chat_provider(wire.openai_url)))
    turn = w.send("rewrite a.txt", rpi=True)
    assert turn.assistant_message.text == "I rewrote a.txt; it is in the Draft."
    assert (repo.draft(create=False).path / "a.txt").read_bytes() == b"rewritten\n"
    plan_request = wire.bodies[1]["messages"][-1]["content"]
    assert "a.txt must change." in plan_request  # the research notes the plan was given


def test_the_flow_fits_prompts_to_the_models_context_window() -> None:
    """A provider answering through the flow keeps its context window and output limit."""
    from strata.providers.config import open_provider
    from strata.providers.window import context_window, input_budget

    table = {
        "adapter": "openai-chat",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "tools": "none",
        "context_window": 4096,
        "max_tokens": 256,
    }
    provider = open_provider("local", config={"providers": {"local": table}}, environ={})
    assert isinstance(provider, CompatProvider)
    assert context_window(provider) == 4096
    assert input_budget(provider, 4096) == 4096 - 256 - 128
