"""`strata agent`: model calls whose tool calls edit the Draft, each step recorded with its traces,
and `strata replay` of those steps, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import as_json, assert_user_error, ok
from strata import Repository
from strata.agent import tools as agent_tools
from strata.providers.trace import Trace
from wire_server import status, text, tools

SCRIPT = {
    "responses": [
        {
            "expect": "greeting",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}],
        },
        {
            "expect": "# Notes",  # the tool result: the file as it is
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {
                        "path": "README.md",
                        "old": "# Notes",
                        "new": "# Notes\n\nHello!",
                    },
                },
                {"name": "write_file", "arguments": {"path": "src/hello.txt", "content": "hi\n"}},
            ],
        },
        {"text": "Added a greeting.", "stream": 4},
    ]
}


def _workspace(run_cli, ws: Path, script: dict | None = None, extra: str = "") -> Path:
    (ws / "README.md").write_text("# Notes\n")
    ok(run_cli("init", cwd=ws))
    (ws / "agent.yaml").write_text(yaml.safe_dump(script or SCRIPT))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.demo]\nadapter = "scripted"\nscript = "agent.yaml"\n' + extra)
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


def _events(run_cli, ws: Path) -> list[dict]:
    history = as_json(run_cli("history", "--json", "--limit", "100", cwd=ws))
    return history["events"] if isinstance(history, dict) else history


def _base(run_cli, ws: Path) -> str:
    return next(e["id"] for e in _events(run_cli, ws) if e["rationale"] == "base")


def test_an_agent_edits_the_draft_step_by_step_and_records_every_call(run_cli, ws):
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    assert result["stopped"] == "done" and result["text"] == "Added a greeting."
    assert [s["tool_calls"] for s in result["steps"]] == [
        ["read_file"],
        ["edit_file", "write_file"],
        [],
    ]
    # Published is untouched; the Draft has both edits
    assert (ws / "README.md").read_text() == "# Notes\n"
    review = as_json(run_cli("review", "--json", cwd=ws))
    assert {f["path"] for f in review["files"]} == {"README.md", "src/hello.txt"}
    # each step is a Draft revision linking its traces: the model call first, then the tools
    events = {e["id"]: e for e in _events(run_cli, ws)}
    with Repository.open(ws) as repo:
        for step in result["steps"]:
            event = events[step["event_id"]]
            assert event["action_type"] == "draft_revision"
            assert event["author"] == {"name": "agent", "kind": "agent", "version": "scripted"}
            assert event["artifacts"] == step["traces"]
            assert event["data"]["step"]["step"] == step["step"]
            traces = [Trace.decode(repo.objects.get(t), name=t) for t in step["traces"]]
            assert [t.event_type for t in traces] == ["llm_call"] + ["tool_call"] * len(
                step["tool_calls"]
            )
            assert [t.tool for t in traces[1:]] == step["tool_calls"]
    # the first model call saw the prompt; the second saw the file the tool read
    with Repository.open(ws) as repo:
        second = Trace.decode(repo.objects.get(result["steps"][1]["traces"][0]), name="t")
    assert second.request["messages"][-1] == {
        "role": "tool",
        "content": "# Notes\n",
        "tool_call_id": second.request["messages"][-2]["tool_calls"][0]["id"],
        "name": "read_file",
    }
    ok(run_cli("check", cwd=ws))  # every trace is verified with the objects


def test_gc_keeps_the_traces_the_ledger_names(run_cli, ws):
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    ok(run_cli("gc", "--grace", "0", cwd=ws))
    ok(run_cli("check", cwd=ws))
    tip = result["steps"][-1]["event_id"]
    assert as_json(run_cli("replay", f"{_base(run_cli, ws)}..{tip}", "--json", cwd=ws))["ok"]


def test_the_recorded_steps_replay_offline_to_the_same_files(run_cli, ws):
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    (ws / "agent.yaml").unlink()  # no provider can answer any more: only the traces can
    tip = result["steps"][-1]["event_id"]
    report = as_json(run_cli("replay", f"{_base(run_cli, ws)}..{tip}", "--json", cwd=ws))
    assert report["ok"] is True
    assert [(s["kind"], s["status"]) for s in report["steps"]] == [("agent", "same")] * 3
    # through the publish too: the Draft's steps come before it
    ok(run_cli("publish", cwd=ws))
    report = as_json(run_cli("replay", f"{_base(run_cli, ws)}..HEAD", "--json", cwd=ws))
    assert report["ok"] is True
    assert [s["kind"] for s in report["steps"]] == ["agent", "agent", "agent", "recorded"]


def _recorded_session(run_cli, ws: Path) -> tuple[Repository, str]:
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    span = f"{_base(run_cli, ws)}..{result['steps'][-1]['event_id']}"
    return Repository.open(ws), span


def test_a_tool_that_now_returns_something_else_is_the_first_divergence(run_cli, ws, monkeypatch):
    repo, span = _recorded_session(run_cli, ws)
    spec, read = agent_tools.TOOLS["read_file"]

    def shouting(folder, arguments):
        found = read(folder, arguments)
        return agent_tools.ToolResult(found.text.upper(), found.is_error)

    monkeypatch.setitem(agent_tools.TOOLS, "read_file", (spec, shouting))
    with repo:
        report = repo.replay(span)
    d = report.divergence
    assert d is not None and d.kind == "tool_result" and d.path == "README.md"
    assert "# NOTES" in d.detail and "# Notes" in d.detail
    assert [s.status for s in report.steps] == ["diverged"]


def test_a_tool_that_now_writes_something_else_diverges_at_that_path_with_its_diff(
    run_cli, ws, monkeypatch
):
    repo, span = _recorded_session(run_cli, ws)
    spec, write = agent_tools.TOOLS["write_file"]

    def sloppy(folder, arguments):
        # the same length, so the tool's answer is the same: only the files differ
        return write(folder, {**arguments, "content": arguments["content"].upper()})

    monkeypatch.setitem(agent_tools.TOOLS, "write_file", (spec, sloppy))
    with repo:
        report = repo.replay(span)
    d = report.divergence
    assert d is not None and d.kind == "tree" and d.path == "src/hello.txt"
    assert "-hi" in d.diff and "+HI" in d.diff
    assert [s.status for s in report.steps] == ["same", "diverged"]


def test_a_request_that_differs_from_the_recorded_one_is_an_unrecorded_call(
    run_cli, ws, monkeypatch
):
    repo, span = _recorded_session(run_cli, ws)
    spec, run = agent_tools.TOOLS["list_files"]
    changed = type(spec)(spec.name, "List the files (now described differently).", spec.parameters)
    monkeypatch.setitem(agent_tools.TOOLS, "list_files", (changed, run))
    with repo:
        report = repo.replay(span)
    d = report.divergence
    assert d is not None and d.kind == "unrecorded_call"
    assert "tools[0].description" in d.diff and "now described differently" in d.diff
    assert report.error is not None and "unrecorded call" in report.error.message


def test_a_replayed_step_may_not_reach_the_network(run_cli, ws, monkeypatch, wire):
    repo, span = _recorded_session(run_cli, ws)
    spec, read = agent_tools.TOOLS["read_file"]

    def phoning(folder, arguments):
        import urllib.request

        try:
            urllib.request.urlopen(wire.openai_url + "/models", timeout=5).read()
        except Exception as exc:
            return agent_tools.ToolResult(f"blocked: {exc}", True)
        return read(folder, arguments)

    monkeypatch.setitem(agent_tools.TOOLS, "read_file", (spec, phoning))
    with repo:
        report = repo.replay(span)
    d = report.divergence
    assert d is not None and d.kind == "tool_result"
    assert "replay denies it" in d.detail
    assert wire.requests == []  # nothing reached the server


def test_a_corrupt_trace_stops_the_replay_with_one_line(run_cli, ws):
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    trace = result["steps"][1]["traces"][0]
    obj = ws / ".strata" / "objects" / trace[:2] / trace[2:]
    obj.chmod(0o644)
    import zstandard

    obj.write_bytes(zstandard.ZstdCompressor().compress(b'{"format": "strata-trace"}'))
    span = f"{_base(run_cli, ws)}..{result['steps'][-1]['event_id']}"
    for extra in ((), ("--dry-run",)):
        code, out, err = run_cli("replay", span, *extra, cwd=ws)
        # the steps before it were reported on stdout; the error is one line
        assert code == 1 and err.startswith(f"error: trace {trace} is corrupt"), err
        assert "Traceback" not in err and len(err.splitlines()) <= 2
        assert "same" in out or "verified" in out


# -- a provider that fails: one line, nothing half-recorded --------------------------------


def _served(run_cli, ws: Path, wire) -> Path:
    extra = (
        f'[providers.srv]\nadapter = "openai-chat"\nbase_url = "{wire.openai_url}"\n'
        'model = "m"\nretry_delays = [0.01, 0.01]\n'
    )
    return _workspace(run_cli, ws, extra=extra)


def _revisions(run_cli, ws: Path) -> int:
    return sum(1 for e in _events(run_cli, ws) if e["action_type"] == "draft_revision")


def test_an_unreachable_provider_is_one_line_and_records_no_step(run_cli, ws, wire):
    _workspace(
        run_cli,
        ws,
        extra='[providers.gone]\nadapter = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m"\nretry_delays = [0.01]\n',
    )
    before = _revisions(run_cli, ws)
    code, _, err = run_cli("agent", "--model", "gone", "do it", cwd=ws)
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "gone:" in lines[0] and "(not retried)" in lines[0]
    # nothing listens at that local port: no retry is announced, none is waited for
    assert "nothing listens at 127.0.0.1:9" in lines[0] and "attempt 2" not in err
    assert _revisions(run_cli, ws) == before  # only the Draft's start, no step


def test_a_failing_provider_announces_each_retry_and_fails_in_one_line(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(status(503, "overloaded"), status(503, "overloaded"), status(503, "overloaded"))
    before = _revisions(run_cli, ws)
    code, _, err = run_cli("agent", "--model", "srv", "do it", cwd=ws)
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "srv:" in lines[0] and "3 attempts" in lines[0]
    assert "attempt 2 of 3" in err and "attempt 3 of 3" in err  # each retry was announced
    assert len(wire.requests) == 3
    assert _revisions(run_cli, ws) == before


def test_a_refused_key_is_one_line_and_not_retried(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(status(401, "invalid api key"))
    before = _revisions(run_cli, ws)
    assert_user_error(run_cli("agent", "--model", "srv", "do it", cwd=ws), says="srv:")
    assert len(wire.requests) == 1
    assert _revisions(run_cli, ws) == before


def test_a_malformed_stream_is_one_line(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(text("hello there", malformed=True))
    assert_user_error(run_cli("agent", "--model", "srv", "do it", cwd=ws), says="not JSON")


def test_invalid_tool_arguments_fail_the_step_and_keep_the_steps_before(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(
        tools(("write_file", {"path": "a.txt", "content": "one\n"})),
        tools(("write_file", '{"path": "b.txt", "content": ')),  # cut JSON
    )
    before = _revisions(run_cli, ws)
    code, out, err = run_cli("agent", "--model", "srv", "do it", cwd=ws)
    assert code == 1 and err.startswith("error: srv: the model called 'write_file'"), err
    assert "not a JSON object" in err and "Traceback" not in err
    assert out.startswith("step 1: write_file")  # the step before it was reported
    assert _revisions(run_cli, ws) == before + 1  # the first step, not the second
    review = as_json(run_cli("review", "--json", cwd=ws))
    assert [f["path"] for f in review["files"]] == ["a.txt"]


def test_the_profile_reaches_the_wire_and_the_trace_holds_what_was_sent(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(tools(("list_files", {})), text("nothing to do"))
    result = as_json(run_cli("agent", "--model", "srv", "--json", "look around", cwd=ws))
    first, second = wire.bodies
    assert first["tool_choice"] == "required" and second["tool_choice"] == "auto"
    assert first["parallel_tool_calls"] is False
    assert first["tools"][0]["function"]["strict"] is True
    with Repository.open(ws) as repo:
        trace = Trace.decode(repo.objects.get(result["steps"][0]["traces"][0]), name="t")
    assert trace.wire_request == first


def test_tool_choice_names_the_tool_the_first_step_must_call(run_cli, ws, wire):
    _served(run_cli, ws, wire)
    wire.queue(tools(("write_file", {"path": "a.txt", "content": "x"})), text("done"))
    ok(run_cli("agent", "--model", "srv", "--tool-choice", "write_file", "write", cwd=ws))
    first, second = wire.bodies
    assert first["tool_choice"] == {"type": "function", "function": {"name": "write_file"}}
    assert second["tool_choice"] == "auto"
    assert_user_error(
        run_cli("agent", "--model", "srv", "--tool-choice", "rm_rf", "x", cwd=ws),
        code=2,
        says="unknown tool 'rm_rf'",
    )


def test_tools_cannot_leave_the_draft(run_cli, ws):
    outside = ws.parent / "outside.txt"
    evil = ws.parent / "decoy-etc" / "evil"  # an absolute path outside, never the host's
    evil.parent.mkdir()
    script = {
        "responses": [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "../outside.txt", "content": "x"}},
                    {"name": "write_file", "arguments": {"path": str(evil), "content": "x"}},
                    {"name": "read_file", "arguments": {"path": ".strata/config.toml"}},
                    {"name": "write_file", "arguments": {"path": "link/x", "content": "x"}},
                ]
            },
            {"text": "done"},
        ]
    }
    _workspace(run_cli, ws, script=script)
    (ws / "link").symlink_to(ws.parent)
    ok(run_cli("snapshot", "-m", "link", cwd=ws))
    result = as_json(run_cli("agent", "--model", "demo", "--json", "escape", cwd=ws))
    assert not outside.exists() and not (ws.parent / "x").exists() and not evil.exists()
    with Repository.open(ws) as repo:
        results = [
            Trace.decode(repo.objects.get(t), name=t).response
            for t in result["steps"][0]["traces"][1:]
        ]
    assert all(r["is_error"] for r in results), results


def test_unknown_provider_and_empty_prompt_are_one_line_errors(run_cli, ws):
    _workspace(run_cli, ws)
    assert_user_error(run_cli("agent", "--model", "nosuch", "x", cwd=ws), says="nosuch")
    assert_user_error(run_cli("agent", "--model", "demo", "  ", cwd=ws), code=2, says="empty")


@pytest.mark.parametrize("secret", ["sk-proj-abcdefghijklmnop1234567890", "jane@example.com"])
def test_secrets_in_the_prompt_never_reach_the_store(run_cli, ws, secret):
    _workspace(run_cli, ws, script={"responses": [{"text": "ok"}]})
    ok(run_cli("agent", "--model", "demo", f"use {secret} please", cwd=ws))
    with Repository.open(ws) as repo:
        for oid in repo.objects.ids():
            assert secret.encode() not in repo.objects.get(oid)


def test_the_json_of_a_session(run_cli, ws):
    _workspace(run_cli, ws)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    assert set(result) == {
        "schema",
        "session",
        "draft_id",
        "provider",
        "model",
        "stopped",
        "text",
        "steps",
    }
    assert json.dumps(result)  # plain JSON throughout


def test_a_step_interrupted_between_its_tool_calls_leaves_the_draft_as_it_was(
    run_cli, ws, monkeypatch
):
    script = {
        "responses": [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "one.txt", "content": "1"}}
                ]
            },
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "two.txt", "content": "2"}},
                    {
                        "name": "edit_file",
                        "arguments": {"path": "README.md", "old": "#", "new": "##"},
                    },
                ]
            },
        ]
    }
    _workspace(run_cli, ws, script=script)
    spec, _ = agent_tools.TOOLS["edit_file"]

    def interrupted(folder, arguments):
        raise KeyboardInterrupt  # Ctrl-C after the step's first write

    monkeypatch.setitem(agent_tools.TOOLS, "edit_file", (spec, interrupted))
    from strata.providers.config import open_provider

    with Repository.open(ws) as repo:
        provider = open_provider("demo", config=repo.config.raw, environ={}, root=ws)
        steps = []
        with pytest.raises(KeyboardInterrupt):
            repo.run_agent(provider, "write", on_step=steps.append)
        assert [s.tool_calls for s in steps] == [("write_file",)]  # the first step only
        draft = repo.draft(create=False)
        assert (draft.path / "one.txt").read_text() == "1"
        assert not (draft.path / "two.txt").exists()  # the half step's write is undone
        assert draft.tip().id == steps[0].event_id
        review = draft.review()  # records the Draft: nothing unrecorded was left behind
        assert [f.path for f in review.diff.files] == ["one.txt"]


# -- traces encrypted at rest ----------------------------------------------------------------


def test_traces_encrypted_at_rest_replay_with_the_key_and_stop_clearly_without(
    run_cli, ws, tmp_path
):
    from pyrage import x25519

    key = x25519.Identity.generate()
    keyfile = tmp_path / "keys" / "traces.key"  # outside the repository and the workspace
    keyfile.parent.mkdir()
    keyfile.write_text(f"# created: now\n{key}\n")
    table = f'[traces]\nrecipients = ["{key.to_public()}"]\nidentity = "{keyfile}"\n'
    _workspace(run_cli, ws, extra=table)
    result = as_json(run_cli("agent", "--model", "demo", "--json", "Add a greeting", cwd=ws))
    traces = [t for step in result["steps"] for t in step["traces"]]
    assert traces
    with Repository.open(ws) as repo:
        for oid in traces:
            stored = repo.objects.get(oid)
            # what is on disk is age ciphertext: no request, response or file content in it
            assert stored.startswith(b"age-encryption.org/v1")
            for plain in (b"greeting", b"# Notes", b"Hello!", b"README.md", b"llm_call"):
                assert plain not in stored
    for path in (ws / ".strata" / "objects").rglob("*"):
        if path.is_file():
            assert b"Add a greeting" not in path.read_bytes()
    tip = result["steps"][-1]["event_id"]
    span = f"{_base(run_cli, ws)}..{tip}"
    (ws / "agent.yaml").unlink()  # only the traces can answer
    assert as_json(run_cli("replay", span, "--json", cwd=ws))["ok"] is True
    # the key gone: one line saying what is missing, no traceback
    keyfile.rename(tmp_path / "elsewhere.key")
    code, _, err = run_cli("replay", span, cwd=ws)
    assert code == 1 and "is encrypted at rest and cannot be read" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    # a key kept inside the workspace is refused: it would protect nothing
    inside = ws / "traces.key"
    (tmp_path / "elsewhere.key").rename(inside)
    config = ws / ".strata" / "config.toml"
    config.write_text(config.read_text().replace(str(keyfile), str(inside)))
    assert_user_error(run_cli("replay", span, cwd=ws), code=2, says="outside")
    # the mistake stops what reads traces, never recording the files
    (ws / "notes.txt").write_text("still recorded\n")
    ok(run_cli("snapshot", "-m", "still recorded", cwd=ws))
