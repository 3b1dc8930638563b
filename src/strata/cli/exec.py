"""``strata exec``: one command through the risk policy and the approval gate (terminal_exec).

Approval is asked on the terminal (``/dev/tty``); ``--yes`` approves in
advance; with neither (no terminal: a pipeline, CI, an agent) a command that
needs approval is denied with a reason that says so. The gateway's refusals
(``approval_denied``, ``command_forbidden``, ``workspace_required``) exit 1;
with ``--json`` the error object carries their ``code`` too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from strata.cli.common import (
    author_options,
    command_timeout_option,
    emit_json,
    json_option,
    make_author,
    open_repo,
    profile_option,
)
from strata.errors import (
    CommandForbidden,
    GatewayError,
    NotARepository,
    UsageError,
    WorkspaceRequired,
)
from strata.schemas import versioned

#: what stays of a command's output on the terminal when it printed more
_SHOWN = 64 * 1024


@click.command(
    "exec",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--shell",
    "shell_string",
    metavar="COMMAND",
    default=None,
    help="Run this shell string (bash) instead of the argv after '--'.",
)
@click.option("--yes", "-y", is_flag=True, help="Approve the command in advance if it asks.")
@click.option(
    "--ask-studio",
    "ask_studio",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Ask in 'strata studio' (Approvals) instead of the terminal; wait this long.",
)
@command_timeout_option("Seconds before the command's whole process group is killed.")
@click.option(
    "--max-output",
    type=click.IntRange(min=1),
    default=1 << 20,
    show_default=True,
    help="Bytes of output kept (stdout and stderr together); more kills the command.",
)
@profile_option(
    "The policy profile (default: config.toml's [gateway] profile, else workspace-write)."
)
@click.option(
    "--cwd",
    "cwd",
    default=None,
    help="The folder of the workspace the command starts in (default: the current one).",
)
@click.option(
    "--dry-run", is_flag=True, help="Only print what the policy decides; run and record nothing."
)
@author_options
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_(
    shell_string: str | None, command: tuple[str, ...], as_json: bool, **options: Any
) -> None:
    """Run a command in the workspace through the risk policy and the approval gate.

    The command is parsed with a shell parser and put in a risk class: low
    (read-only: ls, cat, git status…) runs; medium (rm, mv, a redirect, git
    push, curl, package installs, unknown programs) and high (rm -rf, dd,
    git push --force, curl | sh, writes outside the workspace, unparseable
    input) ask for approval under the default profile (see docs/gateway.md
    for profiles and the [gateway] rules of config.toml). The command runs
    confined by the profile of config.toml (bubblewrap): under
    workspace-write it may write the workspace but not .strata, under
    read-only nothing, and no network unless [gateway] network = "allow";
    only profile = "full" in config.toml lifts it (--profile may only make it
    stricter). Right before an
    approved command a snapshot is taken, so 'strata undo' reverts it. The
    run, its diff and every approval are recorded ('strata history --action
    approval').

    \b
    Example:
      strata exec -- ls -la
      strata exec --shell "rm -rf build && make" --yes
      strata exec --dry-run --shell "curl -s https://x.sh | sh"
      strata exec --ask-studio 300 -- rm -rf build   # answered in 'strata studio'
    """
    if shell_string is not None and command:
        raise UsageError("give either --shell \"COMMAND\" or a command after '--', not both")
    if shell_string is None and not command:
        raise UsageError("name the command to run after '--' (or give --shell \"COMMAND\")")
    target: str | list[str] = shell_string if shell_string is not None else list(command)
    try:
        _exec(target, as_json=as_json, **options)
    except (GatewayError, WorkspaceRequired) as exc:
        if not as_json:
            raise
        body = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
        body["code"] = exc.code
        sys.stderr.write(json.dumps(versioned({"error": body}), ensure_ascii=False) + "\n")
        raise click.exceptions.Exit(exc.exit_code) from None


def _exec(
    target: str | list[str],
    *,
    yes: bool,
    ask_studio: float | None,
    timeout_s: float,
    max_output: int,
    profile: str | None,
    cwd: str | None,
    dry_run: bool,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
) -> None:
    from strata.gateway import ApprovalQueue, approve_all, queued_approver, terminal_approver

    who = make_author(author, author_kind)
    try:
        repo = open_repo(who)
    except NotARepository:
        raise WorkspaceRequired(str(Path.cwd())) from None
    with repo:
        start = Path.cwd() / cwd if cwd is not None else Path.cwd()  # relative: to here
        if yes:
            approver = approve_all()
        elif ask_studio is not None:
            approver = queued_approver(ApprovalQueue.of(repo.layout.repo), timeout_s=ask_studio)
        else:
            approver = terminal_approver("/dev/tty")
        gateway = repo.gateway(profile=profile, approver=approver, author=who)
        if dry_run:
            verdict = gateway.judge(target, cwd=start)
            decision = verdict.policy
            if decision is None:  # not judged in time, or at all: what running it would say
                text = target if isinstance(target, str) else " ".join(target)
                raise CommandForbidden(text, verdict.reason)
            if as_json:
                emit_json({"dry_run": True, **decision.to_json(), "ran": False})
                return
            click.echo(f"{decision.decision}: {decision.reason}")
            return
        result = gateway.exec(
            target,
            timeout_s=timeout_s,
            max_output=max_output,
            cwd=start,
            env=dict(os.environ),
        )
    if as_json:
        emit_json({"dry_run": False, **result.to_json(), "ran": True})
    else:
        sys.stdout.write(result.stdout[-_SHOWN:])
        sys.stdout.flush()
        sys.stderr.write(result.stderr[-_SHOWN:])
        notes = []
        if result.timed_out:
            notes.append(f"timed out after {timeout_s:g} s (its process group was killed)")
        if result.truncated:
            notes.append(f"output passed {max_output} bytes: truncated, the command was killed")
        if result.changes:
            from strata.layout import find_layout

            # undo moves Published, which waits while a Draft is open (the Workshop's too)
            draft_open = find_layout(Path.cwd()).draft_state.exists()
            undo = (
                "'strata undo' reverts it once the open Draft is published or discarded"
                if draft_open
                else "'strata undo' reverts it"
            )
            notes.append(
                f"{len(result.changes)} file{'s' if len(result.changes) != 1 else ''} changed "
                f"(run {result.run_id}; {undo})"
            )
        for note in notes:
            click.echo(f"strata: {note}", err=True)
    if result.exit_code != 0:
        raise click.exceptions.Exit(124 if result.exit_code is None else result.exit_code)


COMMANDS = [exec_]
