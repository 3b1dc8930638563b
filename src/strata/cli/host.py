"""``strata host``: seed 001's host answers a request from the knowledge base, or plans and acts.

The model streams its text on stdout; what it does (searches, plans, tasks)
is shown as activity lines on stderr, and the passages it cites follow its
answer. A command a task runs goes through the gateway's policy and
approval gate (approval asked on ``/dev/tty``; ``--yes`` approves in
advance). Exit 0 when the run answered or completed every task; 1 when a
task failed or the step cap was reached (the JSON is printed either way).
"""

from __future__ import annotations

import os
import sys

import click

from strata.cli.common import (
    command_timeout_option,
    emit_json,
    json_option,
    make_author,
    model_option,
    open_model,
    open_repo,
    profile_option,
    warn,
)
from strata.errors import NotARepository, WorkspaceRequired


@click.command("host")
@click.argument("request")
@model_option(
    "The provider (and model) of the host; default $STRATA_MODEL or [model] default of config.toml."
)
@click.option("--yes", "-y", is_flag=True, help="Approve in advance the commands that ask.")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1, max=100),
    default=8,
    show_default=True,
    help="The most model calls of the run.",
)
@command_timeout_option("Seconds each terminal task may run before its process group is killed.")
@profile_option("The gateway's policy profile (default: config.toml's [gateway] profile).")
@click.option(
    "--no-index",
    is_flag=True,
    help="Search the knowledge base as indexed; do not index the working tree first.",
)
@json_option
def host(
    request: str,
    model: str | None,
    yes: bool,
    max_steps: int,
    timeout_s: float,
    profile: str | None,
    no_index: bool,
    as_json: bool,
) -> None:
    """Answer REQUEST from the workspace's knowledge base, or plan tasks and carry them out.

    The host model searches the knowledge base (local_kb_retrieval) until it
    has enough context, then either answers, citing passages as [n], or
    emits a plan of capability tasks: terminal_exec (a shell command through
    the gateway's policy and approval gate), docx, excel. Tasks run in order
    and each change is recorded ('strata undo' reverts the last task). Every
    model call is recorded as a trace; the run, its steps, plans and tasks
    are events ('strata history --action host'). With --json the output
    holds the trace ids and the activity lines.

    \b
    Example:
      strata host "which port does the server listen on?"
      strata host "run the tests and write the failures to failures.txt" --yes
      strata host --model local "summarise the README" --json
    """
    from strata.gateway import approve_all, terminal_approver
    from strata.host import Activity

    try:
        repo = open_repo(make_author(None, None))
    except NotARepository:
        raise WorkspaceRequired(os.getcwd()) from None
    with repo:
        provider, secrets = open_model(repo, model)

        def text(delta: str) -> None:
            sys.stdout.write(delta)
            sys.stdout.flush()

        def activity(line: Activity) -> None:
            if line.kind != "answer":
                click.echo(f"· {line.text}", err=True)

        result = repo.host(
            request,
            provider=provider,
            approver=approve_all() if yes else terminal_approver("/dev/tty"),
            profile=profile,
            max_steps=max_steps,
            timeout_s=timeout_s,
            index=not no_index,
            secrets=secrets,
            on_text=None if as_json else text,
            on_activity=None if as_json else activity,
        )
    if as_json:
        emit_json(result.to_json())
    else:
        if result.answer and not result.answer.endswith("\n"):
            click.echo()
        if result.citations:
            click.echo("\nSources:")
            for n in result.citations:
                click.echo(f"[{n}] {result.passages[n - 1].citation}")
        failed = [t for t in result.tasks if t.status == "failed"]
        for t in failed:
            warn(f"task {t.label} failed: {(t.error or {}).get('message', '')}")
        if result.status == "max_steps":
            warn(f"stopped after {max_steps} model calls without a final answer (--max-steps)")
    if not result.ok:
        raise click.exceptions.Exit(1)


COMMANDS = [host]
