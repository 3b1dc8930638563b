"""The output contract: every command's ``--json`` matches its shipped schema; errors are JSON.

One repository is driven through every command that has ``--json`` (snapshots,
a rewind, branches, bookmarks, runs, a Draft reviewed and published, another
discarded, checkpoints, undo and redo, the ledger's commands); each real output
is validated against ``strata/schemas/cli/<command>.schema.json``.
"""

from __future__ import annotations

import json
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
    s("stats")  # the turns, Drafts, rewinds and model switches above, counted (seed 000)
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
    s.outputs["studio"] = [served_studio(ws, base / "home")]
    return s.outputs


def served_studio(ws: Path, home: Path) -> Any:
    """The line ``strata studio --json`` prints while it serves (the studio then stopped)."""
    from tests.studio_support import studio_process

    with studio_process("studio", "--json", "--no-open", cwd=ws, home=home) as line:
        return json.loads(line)
