"""``strata hook``: coding agents' hooks (Claude Code, Codex CLI, Aider) and their installation.

The recording half starts in :mod:`strata.integrations.fasthook`, before this
module is imported: when the workspace's watcher runs, the snapshot is taken
there and this code never runs. It runs when no watcher answers, and for
Claude Code's PreToolUse, which judges the call.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import emit_json, json_option, make_author, open_repo, warn
from strata.errors import NotARepository, StrataError

if TYPE_CHECKING:
    from strata.core.groups import Group
    from strata.gateway import ApprovalDecision
    from strata.integrations.hooks import Agent, Verdict
    from strata.layout import Layout
    from strata.repo import Repository

# -- recording ---------------------------------------------------------------------------


def _in_workspace() -> bool:
    """Whether the current folder is in a Strata workspace."""
    from strata.layout import find_layout

    try:
        find_layout(Path.cwd())
    except NotARepository:
        return False
    return True


def _snapshot(ctx: click.Context, command: list[str]) -> None:
    """Run ``strata snapshot ...`` (``command``) here, as the command line runs it."""
    from strata.cli.record import snapshot

    snapshot.main(args=command[1:], prog_name="strata snapshot", standalone_mode=False, obj=ctx.obj)


ask_studio_option = click.option(
    "--ask-studio",
    "ask_studio",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Ask on 'strata studio''s Approvals page about a Bash command the policy wants "
    "approved, waiting up to SECONDS for a person's answer (none: refused).",
)


@click.group()
def hook() -> None:
    """Connect a coding agent: its edits recorded, its risky calls refused.

    'strata hook install AGENT' writes the agent's configuration; the agent
    then runs 'strata hook AGENT' itself.

    \b
    Example:
      strata hook install claude-code
      strata hook install codex --dry-run
    """


@hook.command("claude-code")
@click.option(
    "--ask",
    "ask_prompts",
    is_flag=True,
    help="Have Claude Code ask you about a Bash command the policy wants approved "
    "(permissionDecision 'ask') instead of refusing it.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse a medium-risk Bash command the policy wants approved too (by default "
    "Claude Code's own permission rules decide it).",
)
@ask_studio_option
@click.option(
    "--payload",
    hidden=True,
    help="The hook's JSON, instead of stdin (how a watcher is handed the hook).",
)
@click.pass_context
def hook_claude_code(
    ctx: click.Context,
    ask_prompts: bool,
    strict: bool,
    ask_studio: float | None,
    payload: str | None,
) -> None:
    """Answer one Claude Code hook (its JSON on stdin).

    PostToolUse records a snapshot: the tool's name and input are the
    rationale, the session id the author (kind agent); for a file tool only
    the file it names is recorded. Before a writing call (Bash, Edit, Write,
    MultiEdit, NotebookEdit) that may go ahead, PreToolUse first records what
    changed since the last snapshot as yours ("changes made outside the
    agent"), so the agent's event holds only what its call changed and one
    'strata undo' reverses exactly that call. PreToolUse refuses a
    file tool (Edit, Write, MultiEdit, NotebookEdit) writing outside the
    workspace or into .strata, and a Bash command the workspace's command
    policy forbids: exit code 2 with the reason on stderr, which Claude Code
    shows the model. A Bash command the policy wants approved is refused the
    same way when its risk is high (with --ask handed to Claude Code's own
    prompt: permissionDecision "ask", with the reason; with --ask-studio
    SECONDS it waits on the Approvals page of 'strata studio' for a person's
    answer, and is refused when none comes within SECONDS); a medium-risk one
    (make, pytest, git commit…) is left to Claude Code's own permission rules,
    since PostToolUse records it and 'strata undo' reverts it (--strict
    refuses it too, or asks for it with --ask-studio). Each refusal is
    recorded, the session as its author:
    'strata history --action approval' (or --action tool_call for a
    forbidden call) shows the command, its risk, the reason. A Bash call
    that goes ahead is answered with updatedInput: its command run inside
    the workspace profile's confinement (bubblewrap: nothing writable but
    the workspace, never .strata, no network; [gateway] profile = "full"
    lifts it), so the policy holds where the classifier errs.
    UserPromptSubmit records your work so far and opens a group for the
    prompt: the operations of its tool calls, until Stop, are its steps, one
    line in 'strata op log' and one 'strata undo'. Other events, and any
    event outside a Strata workspace, are accepted silently.

    \b
    Example:
      strata hook install claude-code   # writes .claude/settings.local.json to call this
      strata hook install claude-code --ask-studio 300   # approvals in 'strata studio'
      # by hand: echo '{"hook_event_name": "PostToolUse", "session_id": "s1", "cwd": ".",
      #   "tool_name": "Write", "tool_input": {"file_path": "a.txt"}}' | strata hook claude-code
    """
    from strata.integrations import fasthook
    from strata.integrations.hooks import read_payload

    _studiofirst()
    text = payload if payload is not None else fasthook.pending_stdin
    if text is None:
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    message = read_payload(text)
    event = message["hook_event_name"]
    if event in ("UserPromptSubmit", "Stop"):
        _prompt_event(message)
    elif event == "PreToolUse":
        with fails_closed():
            _chdir(message)
            _pre_tool_use(message, ask_prompts=ask_prompts, strict=strict, ask_studio=ask_studio)
    elif event == "PostToolUse":
        _chdir(message)
        _post_tool_use(message)


def _studiofirst() -> None:
    """The agent waits for this hook: a watcher it starts is started once it has answered."""
    from strata.cli import watcher

    watcher.deferred = True


def _prompt_event(payload: dict[str, Any]) -> None:
    """Open (UserPromptSubmit) or close (Stop) the session's prompt group; never refuse.

    Exit 2 would refuse the person's prompt, or keep the agent's turn going: a
    problem is a warning, and the calls of the prompt are then steps of no group.
    """
    cwd = payload.get("cwd")
    try:
        if cwd:
            os.chdir(str(cwd))
        if payload["hook_event_name"] == "UserPromptSubmit":
            _prompt_submitted(payload)
        else:
            _stopped(payload)
    except (StrataError, OSError) as exc:
        why = exc.message if isinstance(exc, StrataError) else str(exc)
        warn(f"strata could not group this prompt's changes: {why}")


def _prompt_submitted(payload: dict[str, Any]) -> None:
    """Open the session's prompt: its tool calls' operations will be steps of one group.

    What changed before the prompt is recorded first as the person's, outside
    the group, so undoing the prompt never takes it.
    """
    from strata.core.core import OUTSIDE_AGENT
    from strata.integrations import claims, prompts
    from strata.layout import find_layout
    from strata.ledger.events import Author

    try:
        layout = find_layout(Path.cwd())
    except NotARepository:
        return
    person = make_author(None, "human")
    text = str(payload.get("prompt") or "").strip()
    session = _session(payload)
    with open_repo(person) as repo:
        repo.snapshot(OUTSIDE_AGENT, author=person, exclude=claims.claimed(layout))
        link = {k: str(payload[k]) for k in ("transcript_path", "turn_id") if payload.get(k)}
        group = repo.new_group(
            "prompt",
            text.splitlines()[0] if text else "(an empty prompt)",
            Author(session, "agent"),
            session_id=session,
            **link,
        )
    prompts.open_prompt(layout, session, group.to_json())


def _stopped(payload: dict[str, Any]) -> None:
    """Close the session's prompt: later operations are steps of no group."""
    from strata.integrations import prompts
    from strata.layout import find_layout

    try:
        layout = find_layout(Path.cwd())
    except NotARepository:
        return
    prompts.close_prompt(layout, _session(payload))


def _prompt_of(
    layout: Layout, payload: dict[str, Any], agent: Agent | None = None
) -> dict[str, Any] | None:
    from strata.integrations import prompts

    return prompts.current(layout, _session(payload, agent))


def _session(payload: dict[str, Any], agent: Agent | None = None) -> str:
    """The agent's session: the author of its calls' events (the agent's name when none)."""
    return str(payload.get("session_id") or (agent.name if agent else "claude-code"))


def _targets(payload: dict[str, Any], root: Path, agent: Agent | None = None) -> list[str] | None:
    """The workspace paths a file tool's call names (none outside); None for another tool."""
    from strata.integrations.hooks import CLAUDE_CODE
    from strata.sandbox.paths import workspace_relative

    agent = agent or CLAUDE_CODE
    named = agent.named_paths(str(payload.get("tool_name")), payload.get("tool_input"))
    if named is None:
        return None
    found = []
    for target in named:
        try:
            rel = workspace_relative(target, cwd=Path.cwd(), root=root)
        except StrataError:
            continue  # outside the workspace: PreToolUse refused it
        if rel:
            found.append(rel)
    return list(dict.fromkeys(found))


def _post_tool_use(payload: dict[str, Any], agent: Agent | None = None) -> None:
    """Record a tool call's change as the agent's snapshot (the session its author).

    A file tool's snapshot records only the files it names (Codex's patch:
    the files the patch names), and releases the claims PreToolUse put on
    them; any other tool's records every change but the files other calls
    have claimed (:mod:`strata.integrations.claims`).
    """
    from strata.cli.plain import record_snapshot
    from strata.integrations import claims
    from strata.integrations.fasthook import tool_rationale
    from strata.layout import find_layout

    try:
        layout = find_layout(Path.cwd())
    except NotARepository:
        return  # hooks installed for every project: nothing to do outside a workspace
    tool = str(payload.get("tool_name") or "tool")
    session = _session(payload, agent)
    rationale = tool_rationale(tool, payload.get("tool_input", {}))
    group = _prompt_of(layout, payload, agent)
    targets = _targets(payload, layout.workspace, agent)
    if targets is not None:
        if not targets:
            return  # nothing written in the workspace
        try:
            record_snapshot(
                None, rationale, None, "project", session, "agent", False,
                echo=click.echo, paths=[str(layout.workspace / t) for t in targets],
                group=group,
            )  # fmt: skip
        finally:
            for target in targets:
                claims.release(layout, session, target)
        return
    record_snapshot(
        None, rationale, None, "project", session, "agent", False,
        echo=click.echo, exclude=claims.claimed(layout), group=group,
    )  # fmt: skip


#: the longest a refusal waits for the write lock to record itself (another command may
#: be writing): past it the refusal stands unrecorded, with a warning
RECORD_WAIT_S = 2.0

#: the longest the record of a person's changes before an agent's call waits for the write
#: lock (another agent's call may be recording); past it the call is refused
OUTSIDE_WAIT_S = 30.0

#: who judged a call, as recorded in the gateway's events
HOOK_NAME = "strata hook claude-code"


def _pre_tool_use(
    payload: dict[str, Any],
    *,
    ask_prompts: bool,
    strict: bool,
    agent: Agent | None = None,
    ask_studio: float | None = None,
) -> None:
    """Judge a PreToolUse call; a refusal exits 2 (the agent's blocking answer).

    A refusal, and a call handed to Claude Code's own prompt, is recorded in the
    ledger as the gateway records its decisions (:func:`strata.gateway.record_decision`).
    A writing call that goes ahead first records the person's unrecorded work;
    Claude Code's Bash command is then answered with ``updatedInput``: the
    command run inside the gateway's confinement.
    """
    from strata.integrations.hooks import CLAUDE_CODE
    from strata.layout import find_layout

    agent = agent or CLAUDE_CODE
    try:
        layout = find_layout(Path.cwd())
    except NotARepository:
        return  # not a Strata workspace: nothing here to protect
    verdict = _judge(
        payload, layout, agent, ask_prompts=ask_prompts, strict=strict, ask_studio=ask_studio
    )
    if verdict is None:
        return
    if payload.get("tool_name") in agent.writing_tools:
        _record_outside(payload, layout, agent)
    if ask_studio is not None or not (
        verdict.ask and ask_prompts and (strict or verdict.risk != "medium")
    ):
        # (handed to Claude Code's prompt: that answer carried its confinement already)
        _confine(payload, verdict, layout, agent)


def _judge(
    payload: dict[str, Any],
    layout: Layout,
    agent: Agent,
    *,
    ask_prompts: bool,
    strict: bool,
    ask_studio: float | None = None,
) -> Verdict | None:
    """Judge a call and answer the agent (a refusal exits 2); the verdict when it may go ahead.

    Judged from config.toml alone: the repository is opened only to record a
    refusal (most calls are allowed, and the agent waits for this hook).
    """
    from strata.gateway.policy import configured_policy
    from strata.integrations.hooks import pre_tool_use
    from strata.layout import load_config

    root = layout.workspace
    try:
        policy = configured_policy(load_config(layout).raw, layout.config, root)
    except StrataError as exc:
        # the agent runs the tool when a hook fails any other way: a call that cannot be
        # judged (a broken [gateway] policy) is refused, not let through
        hint = f" ({exc.hint})" if exc.hint else ""
        click.echo(f"strata: cannot judge the command: {exc.message}{hint}", err=True)
        sys.stdout.flush()
        raise SystemExit(2) from None
    verdict = pre_tool_use(payload, root=root, policy=policy, agent=agent, repo=layout.repo)
    if _answer(
        payload, verdict, ask_prompts=ask_prompts, strict=strict, agent=agent, layout=layout,
        ask_studio=ask_studio,
    ):  # fmt: skip
        return verdict
    return None


def _confine(payload: dict[str, Any], verdict: Verdict, layout: Layout, agent: Agent) -> None:
    """Answer Claude Code's Bash call with its command run inside the gateway's confinement.

    Codex runs its shell commands in a sandbox of its own (kept on); its
    hook's answer has no input to replace.
    """
    from strata.integrations.hooks import confined_input

    if agent.name != "claude-code" or payload.get("tool_name") != agent.shell_tool:
        return
    tool_input = payload.get("tool_input")
    if verdict.gateway is None or not isinstance(tool_input, dict):
        return
    updated = confined_input(
        tool_input, verdict.gateway, root=layout.workspace, cwd=Path.cwd(), repo=layout.repo
    )
    if updated is None:
        return
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": updated}}
    click.echo(json.dumps(answer))
    sys.stdout.flush()


def _record_outside(payload: dict[str, Any], layout: Layout, agent: Agent | None = None) -> None:
    """Record what changed since the last snapshot as the person's, before the agent's call.

    So the agent's own snapshot (PostToolUse) holds only what its call changed.
    A file tool first claims its files, and the files other calls have claimed
    are left out (:mod:`strata.integrations.claims`): they are those agents'.
    When this cannot be recorded the call is refused (exit 2): letting it run
    would fold the person's changes into the agent's event.
    """
    from strata.core.core import OUTSIDE_AGENT
    from strata.integrations import claims

    person = make_author(None, "human")
    try:
        targets = _targets(payload, layout.workspace, agent) or []
        for target in targets:
            claims.claim(layout, _session(payload, agent), target)
        group = _prompt_of(layout, payload, agent)
        with open_repo(person) as repo, repo.grouped(_as_group(group)):
            repo.lock.timeout = OUTSIDE_WAIT_S
            # the files other calls are writing are theirs; this call's files are not written yet
            others = [p for p in claims.claimed(layout) if p not in targets]
            repo.snapshot(OUTSIDE_AGENT, author=person, exclude=others)
    except (StrataError, OSError) as exc:
        why = exc.message if isinstance(exc, StrataError) else str(exc)
        hint = f" ({exc.hint})" if isinstance(exc, StrataError) and exc.hint else ""
        click.echo(
            f"strata: refused: the workspace could not be recorded before this call, so the "
            f"call's changes could not be told apart from earlier ones: {why}{hint}",
            err=True,
        )
        sys.stdout.flush()
        raise SystemExit(2) from None


def _as_group(raw: dict[str, Any] | None) -> Group | None:
    from strata.core.groups import Group

    return Group.from_json(raw) if raw is not None else None


def _answer(
    payload: dict[str, Any],
    verdict: Verdict,
    *,
    ask_prompts: bool,
    strict: bool,
    agent: Agent | None = None,
    layout: Layout | None = None,
    ask_studio: float | None = None,
) -> bool:
    """Give the agent the hook's answer to a judged call, and record a refusal or a prompt.

    True when the call may go ahead (allowed, approved on the studio's page,
    or left to the agent or its user).
    """
    if verdict.allowed:
        return True
    if verdict.ask and verdict.risk == "medium" and not strict:
        return True  # the agent's own permission rules decide; its changes are recorded
    if verdict.ask and ask_studio is not None and layout is not None:
        studio = _ask_studio(payload, verdict, layout, ask_studio, agent)
        if studio.approved:
            _record(payload, verdict, "approved", reason=studio.reason, by=studio.by, agent=agent)
            return True
        click.echo(f"strata: {verdict.risk}-risk command denied: {studio.reason}", err=True)
        sys.stdout.flush()
        try:
            _record(payload, verdict, "denied", reason=studio.reason, by=studio.by, agent=agent)
        finally:
            raise SystemExit(2)  # any other exit lets the agent run the tool
    if verdict.ask and ask_prompts:
        answer: dict[str, Any] = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "ask",
                "permissionDecisionReason": verdict.reason,
            }
        }
        tool_input = payload.get("tool_input")
        if verdict.gateway is not None and layout is not None and isinstance(tool_input, dict):
            from strata.integrations.hooks import confined_input

            updated = confined_input(
                tool_input, verdict.gateway, root=layout.workspace, cwd=Path.cwd(),
                repo=layout.repo,
            )  # fmt: skip
            if updated is not None:  # approved, it still runs confined
                answer["hookSpecificOutput"]["updatedInput"] = updated
        click.echo(json.dumps(answer))
        sys.stdout.flush()
        _record(payload, verdict, "asked", by="Claude Code's permission prompt")
        return True
    click.echo(verdict.reason, err=True)
    sys.stdout.flush()
    try:
        if verdict.ask:
            if verdict.risk == "medium":
                how = "(--strict)"
            elif agent is None or agent.name == "claude-code":
                how = "(--ask hands it to Claude Code)"
            else:
                how = f"({agent.name}'s hook cannot hand it to a prompt)"
            why = f"the hook refuses a {verdict.risk}-risk command that needs approval {how}"
            _record(payload, verdict, "denied", reason=why, agent=agent)
        else:
            _record(payload, verdict, "forbidden", agent=agent)
    finally:
        # exit 2 whatever happened above: any other exit lets the agent run the tool
        raise SystemExit(2)


def _ask_studio(
    payload: dict[str, Any], verdict: Verdict, layout: Layout, seconds: float, agent: Agent | None
) -> ApprovalDecision:
    """Wait up to ``seconds`` for a person's answer on the studio's Approvals page.

    The request (risk, command, reason, rule, the workspace's state) waits in
    the repository's approval queue (:class:`strata.gateway.ApprovalQueue`)
    and is withdrawn when answered or timed out; no answer is a denial.
    """
    from strata.gateway import ApprovalQueue, ApprovalRequest, ask, queued_approver, state_summary

    state: dict[str, Any] = {}
    try:
        with _open(payload, agent) as repo:
            state = state_summary(repo.status())
    except (StrataError, OSError):
        pass  # asked without the state rather than not at all
    decision = verdict.decision
    request = ApprovalRequest(
        command=_command(payload),
        risk=verdict.risk or (decision.risk if decision else "high"),
        reason=decision.reason if decision is not None else verdict.reason,
        workspace=str(layout.workspace),
        state=state,
        cwd=str(Path.cwd()),
        rule=decision.rule if decision is not None else None,
    )
    import signal

    def stopped(signum: int, frame: object) -> None:
        raise SystemExit(2)  # stopped by the agent (its hook's time-out): refused, withdrawn

    previous = signal.signal(signal.SIGTERM, stopped)
    try:
        return ask(queued_approver(ApprovalQueue.of(layout.repo), timeout_s=seconds), request)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _command(payload: dict[str, Any]) -> str:
    """The call as its approval shows it: a Bash command as typed, another tool and its input."""
    from strata.integrations.fasthook import tool_rationale

    tool = str(payload.get("tool_name") or "tool")
    tool_input = payload.get("tool_input")
    if tool == "Bash" and isinstance(tool_input, dict):
        return str(tool_input.get("command"))
    return tool_rationale(tool, tool_input)


def _open(payload: dict[str, Any], agent: Agent | None = None) -> Repository:
    """The workspace's repository, with the agent's session as the author (kind agent)."""
    from strata.cli.common import open_repo
    from strata.ledger.events import Author

    return open_repo(Author(_session(payload, agent), "agent"), start_watcher=False)


def _record(
    payload: dict[str, Any],
    verdict: Verdict,
    outcome: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    agent: Agent | None = None,
) -> None:
    """Record the hook's answer to a call (the repository is opened for it).

    A failure to record is a warning on stderr, never a change of answer;
    the write lock is waited for :data:`RECORD_WAIT_S` at most. ``reason``
    is why it was refused (default: the verdict's); ``by`` who judged it
    (default: the agent's hook).
    """
    import sqlite3

    from strata.gateway.exec import record_decision

    tool = str(payload.get("tool_name") or "tool")
    command = _command(payload)
    try:
        with _open(payload, agent) as repo:
            repo.lock.timeout = RECORD_WAIT_S
            record_decision(
                repo,
                command,
                outcome=outcome,
                reason=(reason or verdict.reason).removeprefix("strata: "),
                by=by or (agent.hook_name if agent else HOOK_NAME),
                decision=verdict.decision,
                tool=tool,
                cwd=Path.cwd(),
                gateway=verdict.gateway,
            )
    except (StrataError, OSError, sqlite3.Error) as exc:
        message = exc.message if isinstance(exc, StrataError) else str(exc)
        click.echo(f"strata: (this answer was not recorded: {message})", err=True)


@hook.command("codex", context_settings={"ignore_unknown_options": True})
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse a medium-risk Bash command the policy wants approved too (by default "
    "Codex's own approval and sandbox decide it).",
)
@ask_studio_option
@click.option(
    "--payload",
    hidden=True,
    help="The hook's JSON, instead of stdin (how a watcher is handed the hook).",
)
@click.argument("message", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook_codex(
    ctx: click.Context,
    strict: bool,
    ask_studio: float | None,
    payload: str | None,
    message: tuple[str, ...],
) -> None:
    """Answer one Codex CLI lifecycle hook (its JSON on stdin), as Claude Code's are answered.

    Codex (0.124 and later) sends PreToolUse, PermissionRequest, PostToolUse,
    UserPromptSubmit and Stop the JSON Claude Code sends; its shell tool is
    Bash, its file tool apply_patch (the patch in tool_input.command).
    PreToolUse judges the call: a Bash command as 'strata hook claude-code'
    judges it (a high-risk or forbidden one refused; a medium-risk one left
    to Codex's own approval and sandbox, unless --strict), an apply_patch
    writing outside the workspace or into .strata refused; a refusal is exit
    code 2 with the reason on stderr, which Codex tells the model, and is
    recorded; with --ask-studio SECONDS a command that needs approval waits
    for a person's answer on the Approvals page of 'strata studio' instead
    (refused when none comes within SECONDS; the PermissionRequest of a call
    approved there is not asked again). Before a call that goes ahead, what
    changed since the last snapshot is recorded as yours. PostToolUse records the call's change as
    the session's (kind agent); an apply_patch's event holds only the files
    its patch names. PermissionRequest (Codex about to ask for approval)
    refuses what PreToolUse refuses. UserPromptSubmit records your work so
    far and opens a group for the prompt (its calls' operations, until Stop,
    are one line in 'strata op log' and one 'strata undo'), as for Claude
    Code; any other event is accepted (exit 0). Codex runs any other exit
    code's tool, so every refusal, and any failure to judge, exits 2.

    With a JSON argument (Codex's older 'notify' program), an
    agent-turn-complete message records a snapshot of the turn (the prompt
    as the rationale, the thread as the author).

    \b
    Example:
      strata hook install codex   # writes .codex/hooks.json to call this
      # by hand: echo '{"hook_event_name": "PostToolUse", "session_id": "s1", "cwd": ".",
      #   "tool_name": "Bash", "tool_input": {"command": "make"}}' | strata hook codex
      strata hook codex '{"type": "agent-turn-complete", "input-messages": ["fix it"]}'
    """
    if message:
        _codex_notify(ctx, message)
        return
    from strata.integrations import fasthook
    from strata.integrations.hooks import read_payload

    _studiofirst()
    text = payload if payload is not None else fasthook.pending_stdin
    if text is None:
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    hook_message = read_payload(text)
    event = hook_message["hook_event_name"]
    if event in ("PreToolUse", "PermissionRequest"):
        _codex_judge(
            hook_message, strict=strict, before_call=event == "PreToolUse", ask_studio=ask_studio
        )
    elif event == "PostToolUse":
        from strata.integrations.hooks import CODEX

        _chdir(hook_message)
        _post_tool_use(hook_message, CODEX)
    elif event in ("UserPromptSubmit", "Stop"):  # one operation per prompt, as Claude Code's
        _prompt_event(hook_message)
    # the rest: accepted (exit 0); never exit 2 for a prompt or a stop, which would refuse
    # the prompt (UserPromptSubmit) or keep the turn going (Stop)


def _chdir(payload: dict[str, Any]) -> None:
    """Go to the hook's ``cwd`` (where the agent runs)."""
    cwd = payload.get("cwd")
    if cwd:
        try:
            os.chdir(str(cwd))
        except (OSError, ValueError):  # (a NUL byte in it)
            raise click.UsageError(f"the hook's cwd {cwd!r} is not a folder") from None


def _codex_judge(
    payload: dict[str, Any], *, strict: bool, before_call: bool, ask_studio: float | None = None
) -> None:
    """Judge a Codex call (PreToolUse, or PermissionRequest); refuse it with exit 2.

    Codex runs the tool when its hook exits any way but 2, so anything that
    goes wrong here (a folder that is gone, a repository that cannot be
    read) refuses the call, with the reason on stderr. Before the call
    (``before_call``) one that goes ahead first records the person's work;
    a permission request only judges (its PreToolUse has recorded it).
    """
    from strata.integrations.hooks import CODEX
    from strata.layout import find_layout

    with fails_closed():
        _chdir(payload)
        if before_call:
            _pre_tool_use(
                payload, ask_prompts=False, strict=strict, agent=CODEX, ask_studio=ask_studio
            )
            return
        try:
            layout = find_layout(Path.cwd())
        except NotARepository:
            return  # not a Strata workspace: nothing here to protect
        if ask_studio is not None and _approved_in_studio(payload, CODEX):
            return  # its PreToolUse was approved on the studio's page: not asked twice
        _judge(payload, layout, CODEX, ask_prompts=False, strict=strict, ask_studio=ask_studio)


#: how recent an approval given on the studio's page must be to answer Codex's
#: PermissionRequest of the same call (its PreToolUse asked it moments before)
APPROVAL_REUSE_S = 600.0


def _approved_in_studio(payload: dict[str, Any], agent: Agent) -> bool:
    """Whether the session's newest approval of this very command was given in the studio, lately.

    Codex asks PermissionRequest after PreToolUse for the same call; the
    person answered the first on the studio's page.
    """
    from datetime import datetime

    command = _command(payload)
    try:
        with _open(payload, agent) as repo:
            decided = repo.history(action="approval_decided", limit=20)
            now_ms = repo.clock()  # (the clock the events were stamped with)
    except (StrataError, OSError):
        return False
    session = _session(payload, agent)
    for event in decided:
        if event.author.name != session or event.data.get("command") != command:
            continue
        try:
            when_ms = datetime.fromisoformat(event.ts.replace("Z", "+00:00")).timestamp() * 1000
        except ValueError:
            return False
        recent = now_ms - when_ms <= APPROVAL_REUSE_S * 1000
        return bool(event.data.get("approved")) and event.data.get("by") == "studio" and recent
    return False


@contextmanager
def fails_closed() -> Iterator[None]:
    """Refuse the call (exit 2, the reason on stderr) on anything that keeps it from being judged.

    An agent runs the tool when its hook exits any way but 2: an error, an
    unreadable configuration, a folder that is gone, a bug of Strata's must
    refuse, never let the call through.
    """
    try:
        yield
    except SystemExit:
        raise  # the answer given: 2 refuses
    except BaseException as exc:  # anything else would let the call run
        if isinstance(exc, click.ClickException):
            why = exc.format_message()
        elif isinstance(exc, StrataError):
            why = exc.message + (f" ({exc.hint})" if exc.hint else "")
        else:
            why = f"{type(exc).__name__}: {exc}"
        click.echo(f"strata: refused: this call could not be judged: {why}", err=True)
        sys.stdout.flush()
        raise SystemExit(2) from None


def _codex_notify(ctx: click.Context, message: tuple[str, ...]) -> None:
    """Record a snapshot after a Codex turn (the ``notify`` program of a Codex without hooks).

    Codex runs it with the turn's JSON as the last argument; an
    agent-turn-complete message records a snapshot (the prompt as the
    rationale, the thread as the author), anything else is ignored.
    """
    from strata.integrations import fasthook

    command, cwd = fasthook.parse("codex", list(message), "")
    if command is None:
        return
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            raise click.UsageError(f"the turn's cwd {cwd} is not a folder") from None
    if _in_workspace():
        _snapshot(ctx, command)


@hook.command("aider", context_settings={"ignore_unknown_options": True})
@click.argument("files", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hook_aider(ctx: click.Context, files: tuple[str, ...]) -> None:
    """Record a snapshot after Aider edited FILES (Aider's lint command).

    Always exits 0, so Aider never takes a problem of Strata's for a lint
    error to fix; a problem is printed as a warning.

    \b
    Example:
      strata hook aider src/app.py
    """
    from strata.integrations import fasthook

    try:
        _snapshot(ctx, fasthook.aider_snapshot(list(files)))
    except StrataError as exc:
        warn(f"strata could not record Aider's edit: {exc.message}")


# -- installing --------------------------------------------------------------------------


@hook.command("install")
@click.argument("agent", type=click.Choice(["claude-code", "codex", "aider"]))
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="The configuration file to change (default: the agent's own, see below).",
)
@click.option(
    "--shared",
    is_flag=True,
    help="claude-code: write the project's .claude/settings.json (committed, for everyone) "
    "instead of your own .claude/settings.local.json.",
)
@click.option(
    "--user",
    is_flag=True,
    help="codex: your own hooks for every project ($CODEX_HOME/hooks.json, or "
    "~/.codex/hooks.json) instead of the project's .codex/hooks.json.",
)
@click.option(
    "--notify",
    is_flag=True,
    help="codex: Codex's notify program in ~/.codex/config.toml (a snapshot after every "
    "turn, nothing refused), for a Codex without hooks (before 0.124; chosen by itself "
    "when 'codex --version' is older).",
)
@click.option(
    "--ask-studio",
    "ask_studio",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="claude-code, codex: the hooks ask on 'strata studio''s Approvals page about a "
    "command that needs approval, waiting up to SECONDS (their time-out set to SECONDS + 30).",
)
@click.option("--dry-run", is_flag=True, help="Show the change; write nothing.")
@json_option
def hook_install(
    agent: str,
    config_path: str | None,
    shared: bool,
    user: bool,
    notify: bool,
    ask_studio: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write AGENT's configuration so it runs Strata's hooks; print the diff.

    claude-code: .claude/settings.local.json of the workspace, yours alone
    (--shared: .claude/settings.json, the project's), with PreToolUse and
    PostToolUse hooks. codex: .codex/hooks.json of the workspace (--user:
    $CODEX_HOME/hooks.json, or ~/.codex/hooks.json), with PreToolUse,
    PermissionRequest and PostToolUse hooks for its Bash and apply_patch
    tools; Codex runs them once you trust them (the project when Codex asks,
    then each hook in Codex's /hooks). A Codex older than 0.124 (by 'codex
    --version'), or --notify, gets the notify program in
    $CODEX_HOME/config.toml or ~/.codex/config.toml instead. aider:
    .aider.conf.yml of the workspace (auto-commits off, Strata as the lint
    command). --ask-studio SECONDS has the hooks of claude-code and codex
    ask on the Approvals page of 'strata studio' about a command that needs
    approval (refused when no one answers within SECONDS). The hooks run
    this strata by its absolute path, so they work from any PATH (a venv's
    strata is not on the agent's). Other settings are kept; installing again
    changes nothing (an earlier install's entry is pointed at this strata);
    a setting of yours Strata would have to replace is refused, named.
    --config PATH must be in a folder that exists (only the agent's own
    folder at its default place, such as .claude/, is made when missing).

    \b
    Example:
      strata hook install claude-code
      strata hook install claude-code --shared
      strata hook install codex
      strata hook install codex --user --dry-run --json
      strata hook install claude-code --ask-studio 300
    """
    from strata.integrations.install import default_path, plan
    from strata.layout import find_layout

    if shared and agent != "claude-code":
        raise click.UsageError("--shared is for claude-code (its project settings)")
    if (user or notify) and agent != "codex":
        raise click.UsageError(f"--{'user' if user else 'notify'} is for codex")
    if ask_studio is not None and (agent == "aider" or notify):
        raise click.UsageError("--ask-studio is for the hooks of claude-code and codex")
    form, version = agent, None
    notes: list[str] = []
    if agent == "codex":
        form, notes, version = _codex_form(notify=notify)
    codex_home = os.environ.get("CODEX_HOME")
    in_workspace = form in ("claude-code", "aider") or (form == "codex" and not user)
    if not in_workspace:
        default: Path | None = default_path(
            form, workspace=Path.cwd(), home=Path.home(), codex_home=codex_home, user=user
        )
    elif config_path is None:
        with open_repo(start_watcher=False) as repo:
            root = repo.root
        default = default_path(form, workspace=root, home=Path.home(), shared=shared)
    else:
        try:
            default = default_path(
                form,
                workspace=find_layout(Path.cwd()).workspace,
                home=Path.home(),
                shared=shared,
            )
        except NotARepository:
            default = None  # no workspace: no default place either
    path = Path(config_path).absolute() if config_path is not None else default
    assert path is not None
    # only the agent's own folder at its default place is made when missing: a mistyped
    # --config path would otherwise get a file no agent reads
    # (Claude Code's own folder holds both its files: settings.json and settings.local.json)
    own = default is not None and path.parent.resolve() == default.parent.resolve()
    own = own and (agent != "claude-code" or path.name in ("settings.json", "settings.local.json"))
    own = own or (default is not None and path.resolve() == default.resolve())
    if ask_studio is not None and form == "codex-notify":
        raise click.UsageError("--ask-studio needs Codex's hooks (Codex 0.124 or later)")
    change = plan(form, path, program=strata_program(), make_folder=own, ask_studio=ask_studio)
    if not dry_run:
        change.apply()
    if form == "codex":
        notes += _codex_hook_notes(path, user=user, codex_home=codex_home)
    if as_json:
        extra: dict[str, Any] = {}
        if agent == "codex":
            shown = ".".join(map(str, version)) if version else None
            extra = {"form": "notify" if form == "codex-notify" else "hooks", "codex": shown}
        emit_json({**change.to_json(), "dry_run": dry_run, **extra, "notes": notes})
        return
    if not change.changed:
        click.echo(f"{path} already runs Strata's hooks for {agent}; nothing changed.")
    else:
        click.echo(change.diff(), nl=False)
        if dry_run:
            click.echo(f"Would write {path} (--dry-run: nothing written).")
        else:
            click.echo(f"Wrote {path}.")
    for note in notes:
        click.echo(note)


def _codex_form(*, notify: bool) -> tuple[str, list[str], tuple[int, int, int] | None]:
    """What to install for the Codex on PATH: hooks, or its notify program; notes; its version.

    Codex runs lifecycle hooks since 0.124; an older one (``codex --version``)
    gets the notify program. When no codex answers, the hooks are installed.
    """
    from strata.integrations.install import CODEX_HOOKS_SINCE, codex_version

    version = codex_version()
    shown = ".".join(map(str, version)) if version else ""
    since = ".".join(map(str, CODEX_HOOKS_SINCE[:2]))
    if notify:
        return "codex-notify", [], version
    if version is not None and version < CODEX_HOOKS_SINCE:
        return (
            "codex-notify",
            [
                f"Codex {shown} runs no lifecycle hooks (Codex {since} and later do): installed "
                "its notify program, a snapshot after every turn (no risky command refused); "
                "install again after updating Codex."
            ],
            version,
        )
    if version is None:
        return (
            "codex",
            [
                f"No codex answers on PATH: installed the lifecycle hooks of Codex {since} and "
                "later; for an older Codex, install with --notify (a snapshot after every turn)."
            ],
            version,
        )
    return "codex", [], version


def _codex_hook_notes(path: Path, *, user: bool, codex_home: str | None) -> list[str]:
    """How to have Codex run the hooks at ``path`` (it runs none it has not been told to trust)."""
    from strata.integrations.install import codex_notify_installed, default_path

    where = "start codex" if user else f"start codex in {path.parent.parent} and trust the project"
    notes = [
        f"Codex runs these hooks only once you trust them: {where}, then review and "
        "trust Strata's hooks when Codex asks, or with /hooks (again after each change)."
    ]
    config = default_path(
        "codex-notify", workspace=Path.cwd(), home=Path.home(), codex_home=codex_home
    )
    if codex_notify_installed(config):
        notes.append(
            f"{config} still has Strata's notify (an earlier install): remove that line, "
            "or each turn is recorded again as a whole."
        )
    return notes


def strata_program() -> str:
    """The absolute path of the ``strata`` command of the environment running this one.

    The environment's scripts folder holds it (the native client, or the
    Python launcher); else the ``strata`` found on ``PATH``; else this
    process's own launcher.
    """
    import shutil
    import sysconfig

    scripts = Path(sysconfig.get_path("scripts"))
    for name in ("strata", "strata-py"):
        if os.access(scripts / name, os.X_OK):
            return str((scripts / name).absolute())
    found = shutil.which("strata")
    if found:
        return str(Path(found).absolute())
    return str(Path(sys.argv[0]).absolute())


COMMANDS = [hook]
