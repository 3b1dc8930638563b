"""``strata mcp`` through a server started ahead: the same session, without the imports.

The first ``strata mcp`` of a workspace starts a prestarted server in the
background; later ones hand it their streams and it forks a child that runs
the command line's ``strata mcp``. Driven by the MCP SDK's own client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import CliRunner, ok

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Iterator[Path]:
    # a folder whose socket path is past sun_path's 108 bytes, wherever the tests run
    root = tmp_path / ("long-folder-name-" * 6) / "ws"
    root.mkdir(parents=True)
    assert len(os.fsencode(root / ".strata" / "watch" / "mcp.sock")) > 108
    (root / "app.py").write_text("print('v1')\n")
    ok(run_cli("init", cwd=root))
    yield root
    stop(root)
    run_cli("watch", "--stop", cwd=root)


def env(run_cli: CliRunner, **extra: str) -> dict[str, str]:
    found = run_cli.env({"STRATA_NO_DAEMON": "", "STRATA_AUTHOR_KIND": "agent", **extra})
    found.pop("STRATA_NOW")  # a server lives long: a frozen clock would repeat itself
    return found


def prestarted(root: Path) -> int | None:
    """The pid of the workspace's prestarted server, once its socket is there."""
    folder = root / ".strata" / "watch"
    if not (folder / "mcp.sock").exists():
        return None
    return int((folder / "mcp.pid").read_text())


def wait_for_prestarted(root: Path) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = prestarted(root)
        if pid is not None:
            return pid
        time.sleep(0.1)
    raise AssertionError("no prestarted server came up")


def stop(root: Path) -> None:
    pid = prestarted(root)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)


def session(
    root: Path, run_cli: CliRunner, body: Callable[[Client], Awaitable[None]], **extra: str
) -> str:
    """Run one MCP session with ``body``; what ``strata mcp`` wrote on stderr."""
    log = root.parent / "stderr.txt"
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "strata", "mcp"], cwd=root, env=env(run_cli, **extra)
    )

    async def main() -> None:
        with open(log, "w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                await body(client)

    anyio.run(main)
    return log.read_text()


def text(result: Any) -> str:
    return str(result.content[0].text)


def test_a_later_session_is_served_by_the_prestarted_server_as_the_first_was(
    workspace: Path, run_cli: CliRunner
) -> None:
    seen: dict[str, Any] = {}

    def look(key: str) -> Callable[[Client], Awaitable[None]]:
        async def body(client: Client) -> None:
            seen[f"{key} tools"] = sorted(t.name for t in (await client.list_tools()).tools)
            (workspace / "app.py").write_text(f"print('{key}')\n")
            snap = await client.call_tool("snapshot", {"message": f"by {key}"})
            assert not snap.is_error, text(snap)
            bad = await client.call_tool("show", {"ref": "HEAD", "path": "../outside"})
            seen[f"{key} error"] = (bad.is_error, text(bad))

        return body

    cold = session(
        workspace, run_cli, look("cold"), STRATA_AUTHOR="first", PYTHONPROFILEIMPORTTIME="1"
    )
    assert "mcp.server" in cold  # this one imported the library itself
    wait_for_prestarted(workspace)
    warm = session(
        workspace, run_cli, look("warm"), STRATA_AUTHOR="second", PYTHONPROFILEIMPORTTIME="1"
    )
    # nothing of the library, of Strata's server or of its tools imported again
    assert "mcp." not in warm and "strata.gateway" not in warm, warm
    assert seen["warm tools"] == seen["cold tools"]
    assert seen["warm error"] == seen["cold error"] and seen["warm error"][0]
    events = json.loads(ok(run_cli("history", "--limit", "2", "--json", cwd=workspace)))
    # each session recorded as its own asker (its environment), in its folder
    assert [(e["rationale"], e["author"]["name"]) for e in events] == [
        ("by warm", "second"),
        ("by cold", "first"),
    ]


def test_a_session_whose_asker_is_killed_ends_too(workspace: Path, run_cli: CliRunner) -> None:
    session(workspace, run_cli, lambda client: client.list_tools())  # type: ignore[arg-type,return-value]
    server = wait_for_prestarted(workspace)
    asker = subprocess.Popen(
        [sys.executable, "-m", "strata", "mcp"], cwd=workspace, env=env(run_cli),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    children: list[str] = []
    while time.monotonic() < deadline and not children:
        path = Path(f"/proc/{server}/task/{server}/children")
        children = path.read_text().split()
        time.sleep(0.05)
    assert children, "the session did not go to the prestarted server"
    asker.kill()  # as a client stopping its server would
    asker.communicate()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{children[0]}").exists():
        status = Path(f"/proc/{children[0]}/status").read_text()
        if "State:\tZ" in status:
            break
        time.sleep(0.05)
    gone = (
        not Path(f"/proc/{children[0]}").exists()
        or "State:\tZ" in Path(f"/proc/{children[0]}/status").read_text()
    )
    assert gone, "the session outlived its asker"


def test_a_dead_or_foreign_prestarted_server_is_passed_over(
    workspace: Path, run_cli: CliRunner
) -> None:
    session(workspace, run_cli, lambda client: client.list_tools())  # type: ignore[arg-type,return-value]
    server = wait_for_prestarted(workspace)
    key = workspace / ".strata" / "watch" / "mcp.key"
    key.write_text("not-the-key")  # a request with the wrong key is refused, then served here

    async def body(client: Client) -> None:
        assert not (await client.call_tool("status", {})).is_error

    session(workspace, run_cli, body)
    os.kill(server, signal.SIGKILL)  # gone, its socket left behind
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{server}").exists():
        time.sleep(0.05)
    assert (workspace / ".strata" / "watch" / "mcp.sock").exists()
    session(workspace, run_cli, body)  # served here all the same


def test_nothing_is_prestarted_without_the_daemon(workspace: Path, run_cli: CliRunner) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "strata", "mcp"], cwd=workspace,
        env={**env(run_cli), "STRATA_NO_DAEMON": "1"},
    )  # fmt: skip

    async def main() -> None:
        async with Client(server) as client:
            await client.list_tools()

    anyio.run(main)
    time.sleep(1)
    assert prestarted(workspace) is None


def test_strata_dash_c_mcp_from_elsewhere_is_served_too(
    workspace: Path, run_cli: CliRunner
) -> None:
    """``claude mcp add strata -- strata -C WS mcp``: the client starts it from its own folder."""

    async def body(client: Client) -> None:
        status = json.loads(text(await client.call_tool("status", {})))
        assert status["changes"] == []

    session(workspace, run_cli, body)
    wait_for_prestarted(workspace)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "strata", "-C", str(workspace), "mcp"],
        cwd=workspace.parent, env=env(run_cli, PYTHONPROFILEIMPORTTIME="1"),
    )  # fmt: skip
    log = workspace.parent / "elsewhere.txt"

    async def main() -> None:
        with open(log, "w") as errlog:
            async with Client(stdio_client(server, errlog=errlog)) as client:
                await body(client)

    anyio.run(main)
    assert "strata.gateway" not in log.read_text()  # the prestarted server's child ran it


def test_a_prestarted_server_makes_way_when_the_installed_strata_changes(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    """A reinstall keeps the version number: the files, not the version, tell the build."""
    import shutil

    import strata

    installed = tmp_path / "site"
    shutil.copytree(
        Path(strata.__file__).parent, installed / "strata",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    here = {"PYTHONPATH": str(installed)}

    async def body(client: Client) -> None:
        assert not (await client.call_tool("status", {})).is_error

    session(workspace, run_cli, body, **here)
    first = wait_for_prestarted(workspace)
    warm = session(workspace, run_cli, body, PYTHONPROFILEIMPORTTIME="1", **here)
    assert "mcp." not in warm  # served by the server started ahead
    with open(installed / "strata" / "_wire.py", "a") as f:
        f.write("# reinstalled\n")  # same version, another build
    cold = session(workspace, run_cli, body, PYTHONPROFILEIMPORTTIME="1", **here)
    assert "mcp.server" in cold  # refused by the old server: this session loaded the new code
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{first}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{first}").exists(), "the old build's server still runs"
    second = wait_for_prestarted(workspace)  # the cold session started one of the new build
    assert second != first
    again = session(workspace, run_cli, body, PYTHONPROFILEIMPORTTIME="1", **here)
    assert "mcp." not in again


def test_the_watcher_starts_the_mcp_server_ahead_of_a_workspace_that_uses_mcp(
    workspace: Path, run_cli: CliRunner
) -> None:
    """The day's first ``strata`` command starts the watcher; its first MCP session is warm."""
    daemon = {"STRATA_NO_DAEMON": ""}
    ok(run_cli("watch", "--daemon", "--no-capture", cwd=workspace, env=daemon))
    time.sleep(3.5)  # past the watcher's delay: nothing registers strata's MCP server here
    assert prestarted(workspace) is None
    ok(run_cli("watch", "--stop", cwd=workspace))
    registration = {"mcpServers": {"strata": {"command": "/opt/bin/strata", "args": ["mcp"]}}}
    (workspace / ".mcp.json").write_text(json.dumps(registration))  # claude mcp add -s project
    ok(run_cli("watch", "--daemon", "--no-capture", cwd=workspace, env=daemon))
    wait_for_prestarted(workspace)

    async def body(client: Client) -> None:
        assert not (await client.call_tool("status", {})).is_error

    warm = session(workspace, run_cli, body, PYTHONPROFILEIMPORTTIME="1")
    assert "mcp." not in warm  # the first session was served by the server started ahead


def test_a_workspace_that_served_an_mcp_session_gets_its_server_started_ahead(
    workspace: Path, run_cli: CliRunner
) -> None:
    async def body(client: Client) -> None:
        assert not (await client.call_tool("status", {})).is_error

    session(workspace, run_cli, body)
    first = wait_for_prestarted(workspace)
    stop(workspace)  # the next day: neither it nor the watcher runs
    run_cli("watch", "--stop", cwd=workspace)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and prestarted(workspace) is not None:
        time.sleep(0.05)
    assert prestarted(workspace) is None
    ok(run_cli("status", cwd=workspace, env={"STRATA_NO_DAEMON": ""}))  # starts the watcher
    assert wait_for_prestarted(workspace) != first
