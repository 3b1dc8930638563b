"""What Strata answers an agent's hook: record after a tool call, judge before one.

Claude Code sends each hook a JSON object on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, ``tool_name``,
``tool_input`` and, after the call, ``tool_response``). After a call
(PostToolUse) Strata records a snapshot (see :mod:`strata.integrations.fasthook`).
Before one (PreToolUse) :func:`pre_tool_use` judges it: a file tool (Edit,
Write, MultiEdit, NotebookEdit) may write only inside the workspace and never
into its repository (``.strata``); a Bash command goes through the workspace's
command policy (:mod:`strata.gateway`). A refusal is Claude Code's blocking
answer: exit code 2, the reason on stderr (shown to the model). A command the
policy wants approved is, by default, left to Claude Code's own permission
rules when its risk is medium (it is recorded and one ``strata undo`` away
anyway) and refused when it is high (an agent may run with Claude Code's
permissions bypassed); ``--ask`` hands a high one to Claude Code's own prompt
(``permissionDecision: ask``) and ``--strict`` refuses a medium one too.
The CLI records each refusal with :func:`strata.gateway.record_decision`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import PathError, UsageError
from strata.layout import MARKER

if TYPE_CHECKING:
    from strata.gateway.policy import PolicyDecision

#: Claude Code's tools that write files, and the key of their path in ``tool_input``
FILE_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}


@dataclass(frozen=True)
class Verdict:
    """Whether a tool call may go ahead, and if not why (the text the agent is shown)."""

    allowed: bool
    reason: str = ""
    ask: bool = False
    """Neither allowed nor refused: the user is to be asked (Claude Code's ``ask``)."""
    risk: str = ""
    """The command's risk class (``low``, ``medium``, ``high``), for a Bash command."""
    decision: PolicyDecision | None = None
    """The command policy's decision, for a Bash command it judged (it is recorded)."""


#: judges a shell command started in a folder (the command policy)
CommandPolicy = Callable[[str, Path], Verdict]


ALLOW = Verdict(True)


def read_payload(text: str) -> dict[str, Any]:
    """The hook's JSON object; a clear error for anything else."""
    try:
        payload = json.loads(text)
    except ValueError:
        raise UsageError(
            "the hook's input is not JSON",
            hint="this command reads the JSON Claude Code sends a hook on stdin",
        ) from None
    if not isinstance(payload, dict) or "hook_event_name" not in payload:
        raise UsageError(
            "the hook's input has no hook_event_name",
            hint="this command reads the JSON Claude Code sends a hook on stdin",
        )
    return payload


def check_file_tool(tool: str, tool_input: dict[str, Any], *, root: Path, cwd: Path) -> Verdict:
    """Refuse a file tool's write outside the workspace ``root`` or into its repository."""
    from strata.sandbox.paths import workspace_relative

    target = tool_input.get(FILE_TOOLS[tool])
    if not isinstance(target, str) or not target:
        return ALLOW  # the agent's own validation says what is missing
    try:
        rel = workspace_relative(target, cwd=cwd, root=root)
    except PathError:
        return Verdict(
            False,
            f"strata: {tool} of {target} refused: it is outside the workspace {root}, "
            "where Strata records every change; write inside it",
        )
    if rel == MARKER or rel.startswith(MARKER + "/"):
        return Verdict(
            False, f"strata: {tool} of {target} refused: {MARKER} is Strata's own repository"
        )
    return ALLOW


def pre_tool_use(
    payload: dict[str, Any], *, root: Path, policy: CommandPolicy | None = None
) -> Verdict:
    """Judge a PreToolUse message for the workspace ``root``.

    File tools must stay inside the workspace; ``Bash`` commands are judged by
    ``policy`` (allowed when there is none); any other tool is allowed.
    """
    tool = str(payload.get("tool_name") or "")
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return ALLOW
    cwd = Path(str(payload.get("cwd") or root))
    if tool in FILE_TOOLS:
        return check_file_tool(tool, tool_input, root=root, cwd=cwd)
    if tool == "Bash" and policy is not None:
        command = tool_input.get("command")
        if isinstance(command, str) and command.strip():
            return policy(command, cwd)
    return ALLOW


def gateway_policy(decide: Callable[..., Any]) -> CommandPolicy:
    """The command policy of a workspace's gateway (``Gateway.decide``) as a hook's judge.

    ``allow`` allows, ``forbid`` refuses, ``prompt`` asks the user.
    """

    def judge(command: str, cwd: Path) -> Verdict:
        decision = decide(command, cwd=cwd)
        why = f"strata: {decision.risk}-risk command: {decision.reason}"
        if decision.decision == "allow":
            return ALLOW
        if decision.decision == "forbid":
            return Verdict(
                False,
                why + " (forbidden by the workspace's [gateway] policy)",
                risk=str(decision.risk),
                decision=decision,
            )
        return Verdict(
            False,
            why + " (needs approval: ask the user to run it, or to approve it with "
            "'strata exec --shell ...' in a terminal)",
            ask=True,
            risk=str(decision.risk),
            decision=decision,
        )

    return judge
