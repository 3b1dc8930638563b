"""``strata mcp`` driven by the official MCP SDK's own client, over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import CliRunner, as_json, ok

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402


def _env(run_cli: CliRunner) -> dict[str, str]:
    env = run_cli.env({"STRATA_AUTHOR": "claude", "STRATA_AUTHOR_KIND": "agent"})
    env.pop("STRATA_NOW")  # a server lives long: a frozen clock would repeat itself
    return env


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("print('v1')\n")
    ok(run_cli("init", "--no-snapshot", cwd=root))
    ok(run_cli("snapshot", "-m", "v1", cwd=root))
    return root


def stdio(workspace: Path, run_cli: CliRunner) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "strata", "mcp"], cwd=workspace, env=_env(run_cli)
    )


def drive(server: Any, body: Callable[[Client], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        async with Client(server, **options) as client:
            await body(client)

    anyio.run(main)


def text(result: Any) -> str:
    return str(result.content[0].text)


def test_stdio_tools_return_the_cli_json(workspace: Path, run_cli: CliRunner) -> None:
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"snapshot", "status", "diff", "history", "rewind", "restore", "show"} <= names
        assert {"draft_start", "draft_run", "review", "publish", "discard"} <= names
        assert {"checkpoint_list", "checkpoint_restore"} <= names
        (workspace / "app.py").write_text("print('v2')\n")
        status = json.loads(text(await client.call_tool("status", {})))
        assert [c["path"] for c in status["changes"]] == ["app.py"]
        snap = await client.call_tool("snapshot", {"message": "edited by the agent"})
        assert not snap.is_error
        seen["snapshot"] = json.loads(text(snap))
        seen["history"] = json.loads(text(await client.call_tool("history", {"limit": 5})))
        shown = json.loads(
            text(await client.call_tool("show", {"ref": "HEAD~1", "path": "app.py"}))
        )
        assert shown["text"] == "print('v1')\n"
        seen["diff"] = json.loads(
            text(await client.call_tool("diff", {"a": "HEAD~1", "b": "HEAD"}))
        )
        back = json.loads(text(await client.call_tool("rewind", {"ref": "HEAD~1"})))
        assert back["restored_paths"] == ["app.py"]

    drive(stdio(workspace, run_cli), body)
    assert seen["snapshot"]["schema"] == 1 and seen["snapshot"]["changed_paths"] == ["app.py"]
    # the same JSON the CLI prints
    history = as_json(run_cli("history", "--limit", "5", "--json", cwd=workspace))
    assert seen["history"] == history[1:]  # the rewind came after
    top = seen["history"][0]
    assert top["rationale"] == "edited by the agent"
    assert top["author"] == {"name": "claude", "kind": "agent"}
    first, second = seen["history"][1]["id"], seen["history"][0]["id"]
    assert seen["diff"] == as_json(run_cli("diff", first, second, "--json", cwd=workspace))
    assert (workspace / "app.py").read_text() == "print('v1')\n"


def test_stdio_errors_are_tool_errors_with_the_message(workspace: Path, run_cli: CliRunner) -> None:
    async def body(client: Client) -> None:
        bad = await client.call_tool("rewind", {"ref": "no-such-ref"})
        assert bad.is_error
        assert "unknown ref 'no-such-ref'" in text(bad)
        assert "Traceback" not in text(bad)
        none = await client.call_tool("review", {})
        assert none.is_error and "no Draft is open" in text(none)
        missing = await client.call_tool("restore", {"ref": "HEAD", "paths": ["nope.txt"]})
        assert missing.is_error and "nope.txt" in text(missing)

    drive(stdio(workspace, run_cli), body)
    assert len(as_json(run_cli("history", "--json", cwd=workspace))) == 1  # nothing recorded


def test_a_model_may_not_lift_the_drafts_sandbox(workspace: Path, run_cli: CliRunner) -> None:
    """``draft_run`` with ``sandbox: none`` or ``net: allow`` from a tool call is refused."""

    async def body(client: Client) -> None:
        assert not (await client.call_tool("draft_start", {})).is_error
        for lifted in ({"sandbox": "none"}, {"net": "allow"}):
            ran = await client.call_tool(
                "draft_run", {"command": ["sh", "-c", "echo x > escaped.txt"], **lifted}
            )
            assert ran.is_error and "a tool call may not run" in text(ran)
            assert 'profile = "full"' in text(ran)  # what the workspace's owner may set

    drive(stdio(workspace, run_cli), body)
    draft = Path(as_json(run_cli("draft", "status", "--json", cwd=workspace))["path"])
    assert not (draft / "escaped.txt").exists()


def test_stdio_resources_and_the_draft_round_trip(workspace: Path, run_cli: CliRunner) -> None:
    with open(workspace / ".strata" / "config.toml", "a") as config:
        config.write('\n[gateway]\nprofile = "full"\n')  # the owner lets the Draft run unsandboxed

    async def body(client: Client) -> None:
        history = await client.read_resource("strata://history")
        events = json.loads(history.contents[0].text)
        assert events[0]["rationale"] == "v1"
        started = json.loads(text(await client.call_tool("draft_start", {})))
        assert started["open"] is True
        draft = Path(started["path"])
        ran = await client.call_tool(
            "draft_run",
            {
                "command": ["sh", "-c", "echo drafted > new.txt; echo out-of-band"],
                "sandbox": "none",
            },
        )
        assert not ran.is_error, text(ran)
        run = json.loads(text(ran))
        assert run["exit_code"] == 0 and run["revision_event_id"]
        assert "out-of-band" in run["output"] and run["output_truncated"] is False
        assert (draft / "new.txt").is_file() and not (workspace / "new.txt").exists()
        missing = await client.call_tool(
            "draft_run", {"command": ["no-such-program-here"], "sandbox": "none"}
        )
        assert missing.is_error and "command not found: no-such-program-here" in text(missing)
        review = json.loads(text(await client.call_tool("review", {})))
        assert [f["path"] for f in review["files"]] == ["new.txt"]
        published = await client.call_tool(
            "publish", {"message": "ship it", "expect": review["draft_snapshot_id"]}
        )
        assert not published.is_error, text(published)
        diff = await client.read_resource("strata://diff/HEAD~1/HEAD")
        assert "new.txt" in diff.contents[0].text
        checkpoints = json.loads(text(await client.call_tool("checkpoint_list", {})))
        assert checkpoints and checkpoints[0]["kind"]

    drive(stdio(workspace, run_cli), body)
    assert (workspace / "new.txt").read_text() == "drafted\n"


# -- streamable HTTP -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(workspace: Path, run_cli: CliRunner, tmp_path: Path) -> Iterator[tuple[str, str]]:
    port = _free_port()
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strata",
            "mcp",
            "--transport",
            "http",
            "--port",
            str(port),
            "--token-file",
            str(token_file),
        ],
        cwd=workspace,
        env=_env(run_cli),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", "s3cret-token"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


def over_http(url: str, headers: dict[str, str], body: Callable[[Client], Awaitable[None]]) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await body(client)

    anyio.run(main)


def test_http_needs_the_token(http_server: tuple[str, str], workspace: Path) -> None:
    import httpx2

    url, token = http_server
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
        answer = httpx2.post(url, json=hello, headers=headers, timeout=10)
        assert answer.status_code == 401, headers
        assert answer.json()["error"] == "unauthorized"

    async def status(client: Client) -> None:
        await client.call_tool("status", {})

    with pytest.raises(BaseException) as caught:
        over_http(url, {}, status)
    assert "MCPError" in repr(caught.value)  # the SDK's client was refused

    async def body(client: Client) -> None:
        (workspace / "app.py").write_text("print('over http')\n")
        snap = json.loads(text(await client.call_tool("snapshot", {"message": "http"})))
        assert snap["changed_paths"] == ["app.py"]

    over_http(url, {"Authorization": f"Bearer {token}"}, body)


def test_http_token_file_errors(run_cli: CliRunner, workspace: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, _, err = run_cli("mcp", "--transport", "http", "--token-file", str(empty), cwd=workspace)
    assert code == 2 and "token file" in err and "empty" in err and "Traceback" not in err
    code, _, err = run_cli(
        "mcp", "--transport", "http", "--token-file", str(tmp_path / "nope"), cwd=workspace
    )
    assert code == 2 and "cannot read the token file" in err


def test_http_port_in_use_is_a_clear_error(
    run_cli: CliRunner, workspace: Path, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run_cli(
            "mcp",
            "--transport",
            "http",
            "--port",
            str(port),
            "--token-file",
            str(token),
            cwd=workspace,
        )
    assert code == 2 and out == ""
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}") and "--port" in err


@pytest.mark.parametrize(
    "args",
    [
        ("--port", "9000"),
        ("--transport", "stdio", "--port", "8765"),  # the default port, given: still a mistake
        ("--token-file", "token"),
    ],
    ids=["port", "stdio-port", "token-file"],
)
def test_http_options_without_http_are_a_usage_error(
    run_cli: CliRunner, workspace: Path, args: tuple[str, ...]
) -> None:
    # silently serving stdio would leave the user's client waiting on a port nobody opened
    code, out, err = run_cli("mcp", *args, cwd=workspace)
    assert code == 2 and out == ""
    first = err.splitlines()[0]
    assert first.startswith(f"error: {args[-2]} is for the HTTP server: add --transport http")
    assert "Traceback" not in err


def test_host_is_refused_with_where_the_server_listens(run_cli: CliRunner, workspace: Path) -> None:
    """There is no --host (127.0.0.1 only): the error says so instead of suggesting --port."""
    code, out, err = run_cli("mcp", "--transport", "http", "--host", "0.0.0.0", cwd=workspace)
    assert code == 2 and out == ""
    assert err.splitlines()[0].startswith("error: there is no --host: the HTTP server listens")
    assert "127.0.0.1" in err and "--port" not in err


def test_outside_a_workspace_is_a_clear_error(run_cli: CliRunner, tmp_path: Path) -> None:
    code, _, err = run_cli("mcp", cwd=tmp_path, env={"HOME": os.fspath(tmp_path)})
    assert code == 1 and err.startswith("error: ") and "Traceback" not in err


# -- exec: the gateway's policy, approvals through MCP elicitation ---------------------------


def answering(action: str, approve: bool | None, asked: list[str]) -> Any:
    import mcp.types as types

    async def callback(context: Any, params: Any) -> Any:
        asked.append(params.message)
        content = None if approve is None else {"approve": approve}
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return callback


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28's input_required; a request
def test_exec_asks_the_client_and_runs_when_approved(
    workspace: Path, run_cli: CliRunner, mode: str
) -> None:
    asked: list[str] = []

    async def body(client: Client) -> None:
        result = await client.call_tool("exec", {"command": "rm app.py"})
        assert not result.is_error, text(result)
        ran = json.loads(text(result))
        assert ran["decision"] == "prompt" and ran["approval"]["approved"] is True
        assert ran["approval"]["by"] == "mcp" and ran["exit_code"] == 0

    drive(
        stdio(workspace, run_cli),
        body,
        elicitation_callback=answering("accept", True, asked),
        mode=mode,
    )
    assert len(asked) == 1 and "rm app.py" in asked[0] and "medium" in asked[0]
    assert not (workspace / "app.py").exists()
    approvals = as_json(run_cli("history", "--action", "approval", "--json", cwd=workspace))
    assert approvals  # the request and the decision are in the ledger


def test_exec_denied_through_the_client_runs_nothing(workspace: Path, run_cli: CliRunner) -> None:
    import mcp.types as types

    answers = [("accept", False), ("decline", None), ("cancel", None)]
    asked: list[str] = []

    async def callback(context: Any, params: Any) -> Any:
        asked.append(params.message)
        action, approve = answers[len(asked) - 1]
        content = None if approve is None else {"approve": approve}
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    async def body(client: Client) -> None:
        for says in ("denied through the MCP client", "chose decline", "chose cancel"):
            result = await client.call_tool("exec", {"command": "rm app.py"})
            assert result.is_error
            assert "approval denied" in text(result) and says in text(result)

    drive(stdio(workspace, run_cli), body, elicitation_callback=callback)
    assert len(asked) == 3
    assert (workspace / "app.py").read_text() == "print('v1')\n"


@pytest.mark.parametrize("approve", [True, False])
def test_exec_without_elicitation_is_asked_on_the_studios_page_with_ask_studio(
    approve: bool, workspace: Path, run_cli: CliRunner
) -> None:
    import threading
    import time

    from strata import Repository
    from strata.gateway import ApprovalDecision, ApprovalQueue

    queue = ApprovalQueue.of(Repository.open(workspace).layout.repo)
    seen: list[str] = []

    def answer_from_the_studio() -> None:  # what the studio's Approvals page does
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for waiting in queue.pending():
                seen.append(waiting.request["command"])
                queue.answer(waiting.id, ApprovalDecision(approve, "answered", "studio"))
                return
            time.sleep(0.05)

    answerer = threading.Thread(target=answer_from_the_studio)
    answerer.start()
    server = stdio(workspace, run_cli)
    server.args = [*server.args, "--ask-studio", "30"]

    async def body(client: Client) -> None:
        result = await client.call_tool("exec", {"command": "rm app.py"})
        if approve:
            assert not result.is_error, text(result)
            assert json.loads(text(result))["approval"]["by"] == "studio"
        else:
            assert result.is_error and "approval denied" in text(result)

    drive(server, body)
    answerer.join()
    assert seen == ["rm app.py"]
    assert (workspace / "app.py").exists() is not approve


def test_exec_without_elicitation_is_denied_with_the_reason(
    workspace: Path, run_cli: CliRunner
) -> None:
    async def body(client: Client) -> None:
        result = await client.call_tool("exec", {"command": "rm app.py"})
        assert result.is_error
        assert "approval denied" in text(result) and "does not support elicitation" in text(result)
        low = await client.call_tool("exec", {"command": "cat app.py"})
        assert not low.is_error  # what needs no approval runs without asking
        ran = json.loads(text(low))
        assert ran["decision"] == "allow" and ran["risk"] == "low" and ran["approval"] is None
        assert ran["exit_code"] == 0 and ran["stdout"] == "print('v1')\n"

    drive(stdio(workspace, run_cli), body)
    assert (workspace / "app.py").exists()


def test_exec_forbidden_by_the_policy_never_asks(workspace: Path, run_cli: CliRunner) -> None:
    with open(workspace / ".strata" / "config.toml", "a") as config:
        config.write('\n[gateway]\nprofile = "read-only"\n')
    asked: list[str] = []

    async def body(client: Client) -> None:
        result = await client.call_tool("exec", {"command": "rm app.py"})
        assert result.is_error and "command forbidden by the policy" in text(result)

    drive(stdio(workspace, run_cli), body, elicitation_callback=answering("accept", True, asked))
    assert asked == [] and (workspace / "app.py").exists()


def test_the_agents_file_tools_work_on_the_draft(workspace: Path, run_cli: CliRunner) -> None:
    """``draft_list_files``/``draft_read_file``/``draft_write_file``/``draft_edit_file``: the
    agent's tool set, offered over MCP; each change is a Draft revision, Published untouched."""

    async def body(client: Client) -> None:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"draft_list_files", "draft_read_file", "draft_write_file", "draft_edit_file"} <= (
            names
        )
        assert {"status", "exec", "draft_run"} <= names  # the server's own tools stay
        closed = await client.call_tool("draft_read_file", {"path": "app.py"})
        assert closed.is_error and "no Draft" in text(closed)
        assert not (await client.call_tool("draft_start", {})).is_error
        listed = await client.call_tool("draft_list_files", {})
        assert text(listed) == "app.py"
        wrote = await client.call_tool(
            "draft_write_file", {"path": "notes.txt", "content": "hello\n"}
        )
        assert text(wrote) == "wrote 6 bytes to notes.txt"
        edited = await client.call_tool(
            "draft_edit_file", {"path": "app.py", "old": "v1", "new": "v2"}
        )
        assert not edited.is_error, text(edited)
        assert text(await client.call_tool("draft_read_file", {"path": "app.py"})) == (
            "print('v2')\n"
        )
        missing = await client.call_tool("draft_read_file", {"path": "nope.txt"})
        assert missing.is_error and "nope.txt does not exist" in text(missing)
        outside = await client.call_tool("draft_write_file", {"path": "../x", "content": "x"})
        assert outside.is_error

    drive(stdio(workspace, run_cli), body)
    draft = Path(as_json(run_cli("draft", "status", "--json", cwd=workspace))["path"])
    assert (draft / "notes.txt").read_text() == "hello\n"
    assert (workspace / "app.py").read_text() == "print('v1')\n"
    assert not (workspace / "notes.txt").exists()
    assert not (workspace.parent / "x").exists()
    events = as_json(run_cli("history", "--json", "--author", "claude", cwd=workspace))
    rationales = [e["rationale"] for e in events]
    assert "mcp: write_file" in rationales and "mcp: edit_file" in rationales
