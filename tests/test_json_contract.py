"""The output contract: every command's ``--json`` matches its shipped schema; errors are JSON.

One repository is driven through every command that has ``--json`` (snapshots,
a rewind, branches, bookmarks, runs, a Draft reviewed and published, another
discarded, checkpoints, undo and redo, the ledger's commands); each real output
is validated against ``strata/schemas/cli/<command>.schema.json``.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest

from conftest import CliRunner
from strata.cli import cli, load_all

SCHEMAS = resources.files("strata.schemas").joinpath("cli")


def json_commands() -> dict[str, click.Command]:
    """Every command (full name) that has a ``--json`` option, found in the click group."""
    found: dict[str, click.Command] = {}

    def visit(prefix: str, command: click.Command) -> None:
        if prefix and any("--json" in p.opts for p in command.params):  # not strata --json
            found[prefix] = command
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                visit(f"{prefix} {name}".strip(), sub)

    load_all()
    visit("", cli)
    return found


def schema_for(command: str) -> dict[str, Any]:
    text = SCHEMAS.joinpath(f"{command.replace(' ', '-')}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(command: str, value: Any) -> None:
    jsonschema.Draft202012Validator(schema_for(command)).validate(value)


# -- one repository through every command ------------------------------------------


class Session:
    """Runs commands with ``--json`` in one workspace and keeps each output by command."""

    def __init__(self, run_cli: CliRunner, ws: Path) -> None:
        self.run_cli = run_cli
        self.ws = ws
        self.outputs: dict[str, list[Any]] = {}

    def __call__(self, command: str, *args: str) -> Any:
        code, out, err = self.run_cli(*command.split(), "--json", *args, cwd=self.ws)
        assert code == 0, f"strata {command} {' '.join(args)} exited {code}: {err}"
        value = json.loads(out)
        self.outputs.setdefault(command, []).append(value)
        return value


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    base = tmp_path_factory.mktemp("contract")
    (base / "home").mkdir()
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    (ws / "src").mkdir()
    (ws / "src" / "b.py").write_text("print('b')\n")
    s = Session(CliRunner(base / "home"), ws)

    s("init", "--no-snapshot")
    first = s("snapshot", "-m", "first")
    (ws / "a.txt").write_text("one\ntwo\n")
    s("status")
    s("diff", "HEAD")
    s("diff", "HEAD", "--format", "auto")
    s("snapshot save", "second", "-m", "second")
    s("snapshot")  # unchanged: no event
    s("history")
    s("history", "--group-by", "operation", "--expand")
    s("history", "--semantic-block", "src/b.py::<module>")
    manifest = s("cat", "HEAD")
    tree = s("cat", manifest["tree"])
    s("cat", tree["entries"][0]["id"][:12])
    s("check")
    s("du")
    s("gc", "--dry-run")
    s("repack")
    s("export", "HEAD~1", str(base / "exported"))

    s("rewind", first["event_id"], "--branch", "retry")
    (ws / "c.txt").write_text("c\n")
    s("snapshot", "-m", "on retry")
    s("restore", "second", "--", "a.txt")
    s("branch create", "side", "HEAD")
    s("branch list")
    s("branch switch", "side")
    s("branch switch", "main")
    s("branch delete", "side")

    s("bookmark add", "good", "HEAD")
    s("bookmark move", "good", "HEAD~1")
    s("bookmark rename", "good", "known-good")
    s("bookmark lock", "known-good")
    s("bookmark list")
    s("bookmark unlock", "known-good")
    s("bookmark delete", "known-good")

    s("run", "--", sys.executable, "-c", "open('ran.txt', 'w').write('ran')")
    s("op log", "--limit", "5")
    s("undo")
    s("redo")
    s("run", "--result", "smoke", "--", sys.executable, "-c", "pass")
    listed = s("results list")
    s("results show", listed[0]["event_id"][:8])
    candidates = s("rollup propose", "--min-events", "3")
    rolled = s("rollup apply", candidates[0]["operation_id"])
    s("rollup revert", rolled["id"][:10])
    s("branch create", "attempt", "HEAD")
    (ws / "m.json").write_text('{"x": 1}\n')
    s("snapshot", "-m", "main side")
    s("branch switch", "attempt")
    (ws / "n.json").write_text('{"y": 1}\n')
    s("snapshot", "-m", "attempt side")
    s("branch switch", "main")
    s("compare", "main", "attempt")
    s("merge", "main", "attempt", "--policy", "semantic")

    s("draft start")
    s("draft status")
    s("draft dismiss")  # issue 31: the reminder's Dismiss
    s("draft run", "--sandbox", "none", "--", "sh", "-c", "echo drafted > d.txt")
    s("run", "--draft", "--sandbox", "none", "--", "sh", "-c", "echo more >> d.txt")
    s("review")
    s("preflight", "--sandbox", "none", "--check", "test -f d.txt")
    published = s("publish", "--preflight")
    s("draft status")  # none open
    s("draft start")
    s("draft rewind", "base")  # issue 13
    s("discard")

    s("checkpoint create", "-m", "known good")
    s("checkpoint list")
    s("checkpoint restore", published["checkpoint_id"])

    s("watch", "--status")
    s("watch", "--stop")
    s("recover")  # nothing to recover: an empty list
    s("exec", "--", "cat", "a.txt")  # the tool gateway: a low command runs without asking

    (ws / "agent.yaml").write_text(
        "responses:\n"
        "  - tool_calls: [{name: write_file, arguments: {path: e.txt, content: 'e'}}]\n"
        "  - text: done\n"
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.demo]\nadapter = "scripted"\nscript = "agent.yaml"\n')
    agent = s("agent", "--model", "demo", "write e.txt")
    span = f"{s('draft status')['base_event_id']}..{agent['steps'][-1]['event_id']}"
    s("replay", span)
    s("replay", span, "--dry-run")
    s("metrics")  # the replays above, measured (seed 004 §10)
    s("discard")

    # the workspace digest
    (ws / "digest.yaml").write_text("responses:\n  - text: '# Digest'\n")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.digester]\nadapter = "scripted"\nscript = "digest.yaml"\n')
    s("digest scan")
    s("digest show")
    store = str(base / "overrides")
    s("digest set", "--scope", "global", "--tag", "team", "--store", store, "curated")
    optimized = s("digest optimize", "--model", "digester")
    s("replay", f"{optimized['anchor_event_id']}~1..{optimized['anchor_event_id']}")
    s("digest show", "--tag", "team", "--store", store)
    s("digest clear")
    s("digest show", "--tag", "team", "--store", store)

    s("ledger head")
    s("ledger verify")
    s("ledger index rebuild")
    s("ledger convert", "--to", "jsonl")
    # the Git sync (issue 29): to a bare repository named in the config, pushed, imported back
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(f'\n[sync]\nrepository = "{base / "mirror.git"}"\n')
    oldest = s("op log")[-1]["id"]
    s("vcs commit", "--operation", oldest)
    s("bookmark add", "shared", "HEAD")
    s("vcs sync")
    s("vcs verify")
    s("vcs tag", "shared")
    subprocess.run(["git", "init", "-q", "--bare", str(base / "team.git")], check=True)
    mirror = f"--git-dir={base / 'mirror.git'}"
    subprocess.run(["git", mirror, "remote", "add", "team", str(base / "team.git")], check=True)
    s("vcs push", "team")
    s("bookmark share", "shared", "team")
    s("vcs fetch", "team")
    s("import", "git:team/strata/main")
    # the audit bundle (issue 29)
    s("bundle export", str(base / "audit.tar.zst"))
    s("bundle verify", str(base / "audit.tar.zst"))
    s("bundle replay", str(base / "audit.tar.zst"), str(base / "as-recorded"))
    s("models")
    s("hook install", "claude-code", "--dry-run")  # agent hooks (issue 14)
    # the knowledge base (strata kb)
    s("kb index")
    s("kb search", "one")
    s("kb ask", "one")

    # the Workshop (issue 13): a scripted model kept outside the workspace
    (base / "shop.yaml").write_text(
        "- tool_calls: [{name: write_file, arguments: {path: w.txt, content: hi}}]\n"
        "- text: Wrote w.txt.\n"
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(f'\n[providers.shop]\nadapter = "scripted"\nscript = "{base / "shop.yaml"}"\n')
    s("chat model", "shop")
    s("ask", "write w.txt")
    log = s("chat log")
    s("chat regenerate")
    s("chat rewind", log["messages"][0]["id"])
    s("chat new", "another")
    s("chat list")
    if s("draft status")["open"]:
        s("discard")
    s("chat restore", "--yes", s("checkpoint list")[0]["id"])  # a card's Restore
    s("stats")  # the Workshop's local telemetry (issue 31)
    # the host loop (seed 001): a retrieval, a plan with one task, a summary
    (ws / "host.yaml").write_text(
        "responses:\n"
        "  - tool_calls: [{name: local_kb_retrieval, arguments: {query: one, k: 2}}]\n"
        "  - tool_calls: [{name: create_plan, arguments: {goal: look, tasks: "
        "[{kind: terminal_exec, title: list, command: ls}]}}]\n"
        "  - text: 'Listed [1].'\n"
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.hoster]\nadapter = "scripted"\nscript = "host.yaml"\n')
    s("host", "--model", "hoster", "list the files")
    return s.outputs


@pytest.mark.parametrize("command", sorted(json_commands()))
def test_json_output_matches_its_schema(command: str, outputs: dict[str, list[Any]]) -> None:
    assert command in outputs, f"the contract scenario never runs 'strata {command} --json'"
    for value in outputs[command]:
        validate(command, value)
        if isinstance(value, dict):
            assert value["schema"] == 1
        else:
            assert isinstance(value, list) and all(isinstance(v, dict) for v in value)


def test_every_json_command_has_a_schema_and_every_schema_a_command() -> None:
    commands = json_commands()
    assert {"history", "bookmark add", "ledger index rebuild", "run"} <= set(commands)
    shipped = {
        entry.name.removesuffix(".schema.json").replace("-", " ")
        for entry in SCHEMAS.iterdir()
        if entry.name.endswith(".schema.json")
    }
    assert shipped - {"error"} == set(commands)
    for name in shipped:
        schema = schema_for(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema.get("additionalProperties", True) is not False, name


def test_a_schema_refuses_a_renamed_key(outputs: dict[str, list[Any]]) -> None:
    """The schemas list required keys: output that loses one does not validate."""
    status = dict(outputs["status"][0])
    status["head"] = status.pop("head_event_id")
    with pytest.raises(jsonschema.ValidationError, match="head_event_id"):
        validate("status", status)


def test_scenario_outputs_tell_a_consistent_story(outputs: dict[str, list[Any]]) -> None:
    """The same thing has the same key everywhere: an event id made is an event id read back."""
    first = outputs["snapshot"][0]
    rewind = outputs["rewind"][0]
    assert rewind["target_event_id"] == first["event_id"]
    marks = outputs["bookmark list"][0]
    assert {m["name"]: m["locked"] for m in marks} == {"known-good": True, "second": False}
    undo = outputs["undo"][0]
    redo = outputs["redo"][0]
    assert redo["redone_operation_id"] == undo["undone_operation_id"]  # the run, again
    ops = outputs["op log"][0]
    assert ops[0]["command"] == "run" and undo["undone_operation_id"] == ops[0]["id"]
    assert outputs["draft status"][1] == {"schema": 1, "open": False}


# -- errors ----------------------------------------------------------------------------


@pytest.fixture
def recorded(ws: Path, run_cli: CliRunner) -> Path:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("snapshot", cwd=ws)[0] == 0
    return ws


def error_of(result: tuple[int, str, str], *, exit: int) -> dict[str, Any]:
    code, out, err = result
    assert code == exit, f"exit {code}: {err}"
    assert out == ""
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    value: dict[str, Any] = json.loads(last)
    validate("error", value)
    body: dict[str, Any] = value["error"]
    return body


def test_unknown_ref_is_a_json_error_exiting_1(recorded: Path, run_cli: CliRunner) -> None:
    error = error_of(run_cli("diff", "nosuchref", "--json", cwd=recorded), exit=1)
    assert error["type"] == "UnknownRef"
    assert "nosuchref" in error["message"] and error["hint"]
    code, out, err = run_cli("diff", "nosuchref", cwd=recorded)
    assert code == 1 and out == ""
    assert err.startswith("error: unknown ref 'nosuchref'\nhint: ")


def test_a_bad_argument_is_a_usage_error_exiting_2(recorded: Path, run_cli: CliRunner) -> None:
    error = error_of(run_cli("bookmark", "add", "0123abcd", "--json", cwd=recorded), exit=2)
    assert error["type"] == "UsageError" and "looks like an id" in error["message"]
    code, _, err = run_cli("bookmark", "add", "0123abcd", cwd=recorded)
    assert code == 2 and err.startswith("error: bookmark name '0123abcd' looks like an id")


@pytest.mark.parametrize(
    "args",
    [
        ["diff", "--json"],  # a missing argument
        ["history", "--no-such-option", "--json"],
        ["history", "--limit", "0", "--json"],  # a bad value
        ["--json", "nosuchcommand"],
        ["bookmark", "--json"],
    ],
    ids=["missing-argument", "unknown-option", "bad-value", "unknown-command", "group-option"],
)
def test_parser_errors_are_json_when_json_was_given(
    recorded: Path, run_cli: CliRunner, args: list[str]
) -> None:
    error = error_of(run_cli(*args, cwd=recorded), exit=2)
    assert error["type"] == "UsageError"


def test_parser_errors_are_lines_without_json(recorded: Path, run_cli: CliRunner) -> None:
    code, out, err = run_cli("diff", cwd=recorded)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "error: Missing argument 'A'.",
        "hint: see 'strata diff --help'",
    ]


def test_a_missing_run_command_exits_127(recorded: Path, run_cli: CliRunner) -> None:
    error = error_of(run_cli("run", "--json", "--", "/nonexistent", cwd=recorded), exit=127)
    assert error["type"] == "CommandNotFound" and "/nonexistent" in error["message"]
    code, _, err = run_cli("run", "--", "/nonexistent", cwd=recorded)
    assert code == 127 and err.startswith("error: command not found: /nonexistent")


def test_a_run_usage_error_exits_125_as_json(recorded: Path, run_cli: CliRunner) -> None:
    error = error_of(run_cli("run", "--json", cwd=recorded), exit=125)
    assert error["type"] == "UsageError"


def test_json_after_the_run_separator_belongs_to_the_command(
    recorded: Path, run_cli: CliRunner
) -> None:
    code, _, err = run_cli("run", "--", "/nonexistent", "--json", cwd=recorded)
    assert code == 127 and err.startswith("error: command not found")


def test_outside_a_workspace_the_error_is_json(tmp_path: Path, run_cli: CliRunner) -> None:
    error = error_of(run_cli("status", "--json", cwd=tmp_path), exit=1)
    assert error["type"] == "NotARepository" and error["hint"]


# -- help and colour --------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["bookmark"]], ids=["strata", "strata-bookmark"])
def test_no_arguments_prints_the_help_and_exits_0(
    tmp_path: Path, run_cli: CliRunner, args: list[str]
) -> None:
    code, out, err = run_cli(*args, cwd=tmp_path)
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: strata {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND")
    assert "Commands:" in out


def _on_a_terminal(run_cli: CliRunner, cwd: Path, no_color: bool, *args: str) -> bytes:
    """Run strata with stdout and stderr on a pseudo-terminal; return what it printed."""
    env = run_cli.env()
    env.pop("NO_COLOR")
    if no_color:
        env["NO_COLOR"] = "1"  # set and not empty (no-color.org)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "strata", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
        )
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert proc.wait(timeout=60) == 0, output
    finally:
        os.close(leader)
    return output


def test_no_color_turns_colour_off_on_a_terminal(recorded: Path, run_cli: CliRunner) -> None:
    coloured = _on_a_terminal(run_cli, recorded, False, "history", "--no-pager")
    assert b"\x1b[" in coloured, "history colours event ids on a terminal"
    plain = _on_a_terminal(run_cli, recorded, True, "history", "--no-pager")
    assert b"\x1b[" not in plain
    assert plain.split()[0] == coloured.split(b"\x1b[33m")[1][:12]
