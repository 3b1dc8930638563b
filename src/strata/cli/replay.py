"""``strata replay``: run recorded steps again offline and report the first divergence."""

from __future__ import annotations

import sys

import click

from strata.cli.common import emit_json, json_option, open_repo, short


@click.command("replay")
@click.argument("span", metavar="A..B")
@click.option(
    "--dry-run", is_flag=True, help="List the steps and verify their traces; run nothing."
)
@json_option
def replay(span: str, dry_run: bool, as_json: bool) -> None:
    """Rebuild the files at A, re-run every recorded step up to B, compare each with the record.

    A's files are written into a scratch folder and hash-verified. Each agent
    step runs again with its model calls served from the recorded traces (no
    network is used: a call that was not recorded stops the replay, showing
    the expected and the observed request) and its tool calls run for real;
    its files must hash to what the step recorded. Other events are taken as
    recorded. The first divergence is reported (event, path, diff) and the
    command exits 1. Nothing is written to the repository.

    \b
    Example:
      strata replay HEAD~3..HEAD
      strata replay 3f2a9c..8b1d04 --dry-run
    """
    from strata.replay.engine import StepReplay
    from strata.replay.engine import replay as run_replay

    def progress(step: StepReplay) -> None:
        if not as_json:
            detail = f" ({step.detail})" if step.detail else ""
            click.echo(f"{short(step.event_id)} {step.action_type}: {step.status}{detail}")

    with open_repo() as repo:
        report = run_replay(repo, span, dry_run=dry_run, progress=progress)
    if as_json:
        emit_json(report.to_json())
    else:
        d = report.divergence
        if d is None:
            agent_steps = sum(1 for s in report.steps if s.kind == "agent")
            verb = "verified" if dry_run else "reproduced"
            click.echo(f"Replay ok: {agent_steps} agent steps {verb}, {len(report.steps)} events.")
        else:
            click.echo(f"Replay diverged at {short(d.event_id)} ({d.kind}): {d.detail}")
            if d.diff:
                click.echo(d.diff, nl=not d.diff.endswith("\n"))
    if report.divergence is not None:
        if report.error is not None and not as_json:
            click.echo(f"error: {report.error.message}", err=True)
        sys.exit(1)


COMMANDS = [replay]
