"""Run hooks of the OpenAI Agents SDK that record every tool call: :class:`StrataHooks`.

::

    from agents import Runner
    from strata.integrations.openai_agents import StrataHooks

    result = await Runner.run(agent, "tidy the README", hooks=StrataHooks("project"))

After each tool call of the run (a function tool, a shell, a patch...), the
workspace is recorded as a snapshot by the agent that called it (its name,
of kind ``agent``), with the tool's name and arguments as the rationale
(``write_file {"path": "a.txt", …}``, long strings clipped) and the call's id
in its data. A call that changed nothing records nothing. Before each call,
what changed since the last snapshot is recorded as the person's (``changes
made outside the agent``), so the agent's event holds only what its call
changed and ``strata undo`` reverses exactly that call.

An agent's tool calls run one at a time while hooked (the SDK would run the
calls of one model answer side by side), so each call's event holds its own
files. A call that fails without an answer frees its turn when its agent next
asks the model.
The snapshots are taken in a worker thread, so the event loop never waits for
the disk.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from strata.core.core import OUTSIDE_AGENT
from strata.errors import ExtraNotInstalled
from strata.integrations.fasthook import tool_rationale
from strata.ledger.events import Author
from strata.repo import Repository

try:
    from agents import Agent, RunContextWrapper, RunHooks, Tool
except ImportError as exc:  # the extra is not installed
    raise ExtraNotInstalled(
        "strata.integrations.openai_agents", "openai-agents", (exc.name or "agents").split(".")[0]
    ) from None

__all__ = ["StrataHooks"]


def _call(context: RunContextWrapper[Any], tool: Tool) -> tuple[str, str, object]:
    """The call's id (empty when the SDK gives none), the tool's name and its arguments."""
    name = str(getattr(context, "tool_name", None) or tool.name)
    raw = getattr(context, "tool_arguments", None)
    arguments: object = {}
    if isinstance(raw, str) and raw:
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = raw
    return str(getattr(context, "tool_call_id", "") or ""), name, arguments


def _key(context: RunContextWrapper[Any], tool: Tool) -> str:
    """What tells one call from the others running beside it."""
    call_id, name, _ = _call(context, tool)
    return call_id or f"{name}:{id(context)}"


class StrataHooks(RunHooks[Any]):
    """Run hooks that snapshot the workspace after every tool call, by the agent that made it.

    ``workspace`` is an open :class:`~strata.Repository` or the path of a
    workspace (opened here, and closed by :meth:`close`). Pass the hooks to
    ``Runner.run``, ``Runner.run_sync`` or ``Runner.run_streamed``
    (``hooks=``); one instance may serve many runs.
    """

    def __init__(self, workspace: Repository | str | os.PathLike[str]) -> None:
        self.owns_repo = not isinstance(workspace, Repository)
        self.repo = (
            workspace if isinstance(workspace, Repository) else Repository.open(Path(workspace))
        )
        #: the turn of each agent (by event loop): one call of an agent at a time
        self.turns: dict[tuple[asyncio.AbstractEventLoop, int], asyncio.Lock] = {}
        #: the calls in progress: the turn each one holds
        self.running: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

    def close(self) -> None:
        """Close the repository when these hooks opened it."""
        if self.owns_repo:
            self.repo.close()

    def _release(self, key: str) -> None:
        held = self.running.pop(key, None)
        if held is not None and held[1].locked():
            held[1].release()

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        """Free the turn of a call of ``agent`` that failed (it never reached on_tool_end).

        The agent asks its model only once all its calls have ended.
        """
        turn = self.turns.get((asyncio.get_running_loop(), id(agent)))
        for key, (_, held) in list(self.running.items()):
            if held is turn:
                self._release(key)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Wait for this call's turn; record the person's unrecorded work as theirs."""
        loop = asyncio.get_running_loop()
        turn = self.turns.setdefault((loop, id(agent)), asyncio.Lock())
        await turn.acquire()
        # another agent's call still running (an agent used as a tool runs inside one):
        # what is unrecorded may be that call's, not the person's
        alone = not any(where is loop for where, _ in self.running.values())
        key = _key(context, tool)
        self.running[key] = (loop, turn)
        if alone:
            try:
                await asyncio.to_thread(self.repo.snapshot, OUTSIDE_AGENT, author=self.repo.person)
            except BaseException:
                self._release(key)
                raise

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """Record what the call changed, by ``agent``; then let its next call run."""
        call_id, name, arguments = _call(context, tool)
        try:
            await asyncio.to_thread(
                self.repo.snapshot,
                tool_rationale(name, arguments),
                author=Author(agent.name or "agent", "agent"),
                data={"tool": name, **({"tool_call_id": call_id} if call_id else {})},
            )
        finally:
            self._release(_key(context, tool))
