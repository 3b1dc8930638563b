"""``strata replay``: run recorded steps again offline and report the first divergence."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from strata.cli.common import emit_json, json_option, open_repo, short


@click.command("replay")
@click.argument("span", metavar="A..B|RUN")
@click.option(
    "--dry-run", is_flag=True, help="List the steps and verify their traces; run nothing."
)
@click.option(
    "--sandbox",
    type=click.Choice(["bwrap", "none"]),
    default="bwrap",
    show_default=True,
    help="Where recorded commands run again: the bubblewrap sandbox with no network, "
    "or 'none' (no isolation: the command can reach the network and the host).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="Stop a replayed command after this long (a divergence).",
)
@click.option(
    "--bind-ro",
    multiple=True,
    metavar="PATH",
    type=click.Path(exists=True),
    help="Show this host path read-only in the sandbox (an agent installed outside the "
    "system folders); repeatable.",
)
@click.option(
    "--env",
    "env_names",
    multiple=True,
    metavar="NAME",
    help="Pass this variable into the sandbox (it clears the environment); repeatable.",
)
@json_option
def replay(
    span: str,
    dry_run: bool,
    sandbox: str,
    timeout: float,
    bind_ro: tuple[str, ...],
    env_names: tuple[str, ...],
    as_json: bool,
) -> None:
    """Rebuild the files at A, re-run every recorded step up to B, compare each with the record.

    A's files are written into a scratch folder and hash-verified. Each agent
    step runs again with its model calls served from the recorded traces (no
    network is used: a call that was not recorded stops the replay, showing
    the expected and the observed request) and its tool calls run for real;
    its files must hash to what the step recorded. Other events are taken as
    recorded. A recorded command ('strata run') runs again in the sandbox
    with no network, its clock (SOURCE_DATE_EPOCH) and hash seed fixed; its
    files and exit code must match. The first divergence is reported (event,
    path, diff) and the command exits 1. Nothing is written to the
    repository.

    RUN (a run id, as 'strata run' prints it) replays that run alone. A run
    recorded with --record-model gets its model calls answered by a proxy
    serving the recorded ones, which never connects anywhere (in the
    sandbox it is the command's only way out): a request that was not
    recorded is refused and reported as the first divergence, naming the
    first field that differs.

    \b
    Example:
      strata replay HEAD~3..HEAD
      strata replay kqxwsh..hjwmmsq --dry-run   # event ids, as 'strata history' shows
      strata replay rzynmxjjtqky --env ANTHROPIC_API_KEY --bind-ro ~/.local  # a run
    """
    from strata.replay.engine import Commands, StepReplay
    from strata.replay.engine import replay as run_replay

    def progress(step: StepReplay) -> None:
        if not as_json:
            detail = f" ({step.detail})" if step.detail else ""
            click.echo(f"{short(step.event_id)} {step.action_type}: {step.status}{detail}")

    with open_repo() as repo:
        from strata.integrations.model_proxy import replaying
        from strata.redaction import known_secrets

        secrets = known_secrets(os.environ, repo.root)
        commands = Commands(
            environ=dict(os.environ),
            sandbox=sandbox,
            timeout_s=timeout,
            model_replay=lambda traces, root, home: replaying(
                traces, root, home=home, secrets=secrets
            ),
            bind_ro=tuple(Path(p) for p in bind_ro),
            env_names=env_names,
        )
        report = run_replay(repo, span, dry_run=dry_run, commands=commands, progress=progress)
    from strata import telemetry

    telemetry.note("replay_ok" if report.divergence is None else "replay_failed", 1)  # metrics
    if as_json:
        emit_json(report.to_json())
    else:
        d = report.divergence
        if d is None and not report.steps:
            click.echo(
                f"Nothing to replay: {short(report.end)} is {short(report.start)} "
                "(a Draft's steps are on its own branch: 'strata agent' prints their range)."
            )
        elif d is None:
            agents = sum(1 for s in report.steps if s.kind == "agent")
            runs = sum(1 for s in report.steps if s.kind == "run")
            digests = sum(1 for s in report.steps if s.kind == "digest")  # digest optimizations
            verb = "verified (dry run)" if dry_run else "reproduced"
            click.echo(
                f"Replay ok: {agents + runs + digests} steps {verb} ({agents} agent steps, "
                f"{runs} commands"
                + (f", {digests} digest optimizations" if digests else "")
                + f") over {len(report.steps)} events."
            )
        else:
            click.echo(f"Replay diverged at {short(d.event_id)} ({d.kind}): {d.detail}")
            if d.diff:
                click.echo(d.diff, nl=not d.diff.endswith("\n"))
    if report.divergence is not None:
        if report.error is not None and not as_json:
            click.echo(f"error: {report.error.message}", err=True)
        sys.exit(1)


COMMANDS = [replay]
