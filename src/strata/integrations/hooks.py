"""What Strata answers an agent's hook: record after a tool call, judge before one.

Claude Code and Codex CLI send each hook the same JSON object on stdin
(``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``,
``tool_name``, ``tool_input`` and, after the call, ``tool_response``); both
call their shell tool ``Bash``. What differs is how each names the files a
call writes: an :class:`Agent` says it (Claude Code's file tools name one
path each; Codex's ``apply_patch`` names its files in the patch,
:func:`patch_paths`). After a call (PostToolUse) Strata records a snapshot
(see :mod:`strata.integrations.fasthook`). Before one (PreToolUse; Codex's
PermissionRequest too) :func:`pre_tool_use` judges it for either agent: a
file tool may write only inside the workspace and never into its repository
(``.strata``); a Bash command goes through the workspace's command policy
(:mod:`strata.gateway`). A refusal is Claude Code's blocking
answer: exit code 2, the reason on stderr (shown to the model). A command the
policy wants approved is, by default, left to Claude Code's own permission
rules when its risk is medium (it is recorded and one ``strata undo`` away
anyway) and refused when it is high (an agent may run with Claude Code's
permissions bypassed); ``--ask`` hands a high one to Claude Code's own prompt
(``permissionDecision: ask``) and ``--strict`` refuses a medium one too.
The CLI records each refusal with :func:`strata.gateway.record_decision`.
Codex has no ``ask`` answer in PreToolUse: there a high-risk command is
refused, a medium one left to Codex's own approval and sandbox.

The judgement is the gateway's one decision (:func:`strata.gateway.decision.decide`);
:func:`verdict_of` only words it for the agent. A Claude Code Bash call that
goes ahead is answered with :func:`confined_input`: its command run inside
the profile's confinement (bubblewrap), so the policy holds where the
classifier errs. Codex's shell commands stay in Codex's own sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import UsageError

if TYPE_CHECKING:
    from strata.gateway.decision import GatewayDecision
    from strata.gateway.policy import Policy, PolicyDecision

#: Claude Code's tools that write files, and the key of their path in ``tool_input``
FILE_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}

#: the lines of Codex's ``apply_patch`` format that name a file (``*** Move to:`` follows an
#: ``*** Update File:`` and names where the file goes)
PATCH_BEGIN, PATCH_END = "*** Begin Patch", "*** End Patch"
PATCH_FILE_HEADERS = ("*** Add File: ", "*** Delete File: ", "*** Update File: ")
PATCH_MOVE = "*** Move to: "


def patch_paths(patch: str) -> list[str]:
    """The paths an ``apply_patch`` patch writes, as named in it (a moved file: both).

    Read as Codex reads the patch (its ``apply-patch`` parser): the hunks
    between ``*** Begin Patch`` and ``*** End Patch`` (anything around them,
    such as a heredoc, is passed over); a hunk's header may be padded with
    spaces; an updated file's body is its lines up to the next line starting
    with ``*`` (an added file's, its ``+`` lines), so a header-like line
    inside a body names nothing. A line Codex would refuse is passed over
    rather than ending the reading: more paths are judged, never fewer.
    """
    lines = [line.removesuffix("\r") for line in patch.split("\n")]
    starts = [i for i, line in enumerate(lines) if line.strip() == PATCH_BEGIN]
    if starts:
        lines = lines[starts[0] + 1 :]
        ends = [i for i, line in enumerate(lines) if line.strip() == PATCH_END]
        if ends:
            lines = lines[: ends[-1]]
    found: list[str] = []
    i = 0
    while i < len(lines):
        header = lines[i].strip()
        i += 1
        kind = next((h for h in PATCH_FILE_HEADERS if header.startswith(h)), None)
        if kind is None:
            continue
        found.append(header[len(kind) :])
        if kind.startswith("*** Update"):
            if i < len(lines) and lines[i].startswith(PATCH_MOVE):
                found.append(lines[i][len(PATCH_MOVE) :])
                i += 1
            while i < len(lines) and not lines[i].startswith("*"):
                i += 1
    return list(dict.fromkeys(p for p in found if p))


def _claude_code_paths(tool: str, tool_input: dict[str, Any]) -> list[str]:
    target = tool_input.get(FILE_TOOLS[tool])
    return [target] if isinstance(target, str) and target else []


def _codex_paths(tool: str, tool_input: dict[str, Any]) -> list[str]:
    patch = tool_input.get("command")  # apply_patch's hooks: the patch as its "command"
    if isinstance(patch, list):  # an argv (["apply_patch", PATCH]) from an older shell tool
        patch = next((w for w in reversed(patch) if isinstance(w, str) and PATCH_BEGIN in w), None)
    if isinstance(patch, str):
        return patch_paths(patch)
    # a permission request may carry the patch's changes by path instead
    return [path for path, change in tool_input.items() if isinstance(change, dict)]


@dataclass(frozen=True)
class Agent:
    """How one agent names its tools and the paths they write: what differs between agents.

    Everything else (the judgement, the records before and after a call) is
    the same for every agent.
    """

    name: str
    """The agent as ``strata hook NAME`` knows it; the author of a message without a session."""
    writing_tools: tuple[str, ...]
    """The tools that may change files: the person's work is recorded before their call."""
    file_tools: tuple[str, ...]
    """The writing tools that write only the paths they name (the others may change anything)."""
    _paths: Callable[[str, dict[str, Any]], list[str]]
    shell_tool: str = "Bash"
    """The tool whose command the command policy judges (both agents call theirs Bash)."""

    @property
    def hook_name(self) -> str:
        """Who judged a call, as the gateway's records name it."""
        return f"strata hook {self.name}"

    def named_paths(self, tool: str, tool_input: object) -> list[str] | None:
        """The paths a file tool's call names, as given; None for a tool that is no file tool."""
        if tool not in self.file_tools:
            return None
        return self._paths(tool, tool_input) if isinstance(tool_input, dict) else []


CLAUDE_CODE = Agent(
    "claude-code",
    writing_tools=("Bash", *FILE_TOOLS),
    file_tools=tuple(FILE_TOOLS),
    _paths=_claude_code_paths,
)
CODEX = Agent(
    "codex",
    writing_tools=("Bash", "apply_patch"),
    file_tools=("apply_patch",),
    _paths=_codex_paths,
)


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
    gateway: GatewayDecision | None = None
    """The gateway's whole decision (its confinement too), when it judged the call."""


ALLOW = Verdict(True)


def verdict_of(decision: GatewayDecision) -> Verdict:
    """The gateway's decision as a hook's verdict: the text the agent is shown with it."""
    if decision.answer == "allow":
        return Verdict(True, risk=decision.risk, decision=decision.policy, gateway=decision)
    if decision.policy is None:  # a path refused, or a command that could not be judged
        reason = decision.reason
        if not reason.startswith("strata: "):
            reason = f"strata: refused: {reason}"
        return Verdict(False, reason, risk=decision.risk, gateway=decision)
    why = f"strata: {decision.risk}-risk command: {decision.reason}"
    if decision.answer == "refuse":
        return Verdict(
            False,
            why + " (forbidden by the workspace's [gateway] policy)",
            risk=decision.risk,
            decision=decision.policy,
            gateway=decision,
        )
    return Verdict(
        False,
        why + " (needs approval: ask the user to run it, or to approve it with "
        "'strata exec --shell ...' in a terminal)",
        ask=True,
        risk=decision.risk,
        decision=decision.policy,
        gateway=decision,
    )


def read_payload(text: str) -> dict[str, Any]:
    """The hook's JSON object; a clear error for anything else."""
    try:
        payload = json.loads(text)
    except ValueError:
        raise UsageError(
            "the hook's input is not JSON",
            hint="this command reads the JSON the agent sends a hook on stdin",
        ) from None
    if not isinstance(payload, dict) or "hook_event_name" not in payload:
        raise UsageError(
            "the hook's input has no hook_event_name",
            hint="this command reads the JSON the agent sends a hook on stdin",
        )
    return payload


def check_path(
    tool: str, target: str, *, root: Path, cwd: Path, repo: Path | None = None
) -> Verdict:
    """Refuse a file tool's write of ``target`` outside the workspace ``root`` or into .strata.

    The gateway's path rule (:func:`strata.gateway.decision.decide`): judged as
    written and again with every symlink on the way resolved.
    """
    from strata.gateway.decision import Call, decide
    from strata.gateway.policy import load_policy

    call = Call(tool, paths=(target,), cwd=cwd)
    return verdict_of(decide(load_policy(None, workspace=root), call, repository=repo))


def pre_tool_use(
    payload: dict[str, Any],
    *,
    root: Path,
    policy: Policy | None = None,
    agent: Agent = CLAUDE_CODE,
    repo: Path | None = None,
) -> Verdict:
    """Judge a tool call ``agent`` is about to make (PreToolUse) in the workspace ``root``.

    The call is put to the gateway (:func:`strata.gateway.decision.decide`)
    under ``policy`` (default: the default policy): each path a file tool
    names must be inside the workspace (a Codex patch's files, a Claude Code
    Write's file; none named: the agent's own validation says what is
    missing); the shell tool's command is judged by the policy; any other
    tool is allowed.
    """
    from strata.gateway.decision import Call, decide
    from strata.gateway.policy import load_policy

    tool = str(payload.get("tool_name") or "")
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return ALLOW
    cwd = Path(str(payload.get("cwd") or root))
    policy = policy if policy is not None else load_policy(None, workspace=root)
    paths = agent.named_paths(tool, tool_input)
    if paths is not None:
        if not paths:
            return ALLOW
        return verdict_of(decide(policy, Call(tool, paths=tuple(paths), cwd=cwd), repository=repo))
    if tool == agent.shell_tool:
        command = tool_input.get("command")
        if isinstance(command, str) and command.strip():
            return verdict_of(decide(policy, Call("shell", command, cwd=cwd), repository=repo))
    return ALLOW


def confined_input(
    tool_input: dict[str, Any],
    decision: GatewayDecision,
    *,
    root: Path,
    cwd: Path,
    repo: Path | None = None,
) -> dict[str, Any] | None:
    """The shell tool's input with its command run inside the gateway's confinement.

    What Claude Code's PreToolUse answers as ``updatedInput``: the command
    becomes a bubblewrap command line running it with ``bash -c`` under the
    decision's :class:`~strata.sandbox.confine.Confinement`, so what the
    policy promises (nothing written but the workspace, never ``.strata``, no
    network) holds even when the classifier let a harmful command through.
    None when the profile is ``full`` (not confined).
    """
    import shlex
    import shutil

    from strata.sandbox.confine import confined_command

    command = tool_input.get("command")
    if not decision.confinement.confined or not isinstance(command, str):
        return None
    shell = shutil.which("bash") or "/bin/sh"
    argv = confined_command(
        [shell, "-c", command],
        confinement=decision.confinement,
        workspace=root,
        cwd=cwd,
        repository=repo,
    )
    return {**tool_input, "command": shlex.join(argv)}
