"""``strata agent``: run a model on a task, its edits landing in the Draft, every call recorded."""

from __future__ import annotations

import sys

import click

from strata.cli.common import (
    emit_json,
    json_option,
    model_option,
    open_model,
    open_repo,
    short,
)


@click.command("agent")
@click.argument("prompt")
@model_option()
@click.option(
    "--max-steps",
    type=click.IntRange(min=1, max=200),
    default=8,
    show_default=True,
    help="Stop after this many model calls.",
)
@click.option(
    "--tool-choice",
    default=None,
    metavar="TOOL",
    help="A tool the first step must call (list_files, read_file, write_file, edit_file); "
    "for servers that cannot force 'some tool' (llama.cpp).",
)
@click.option("--agent-id", default="agent", show_default=True, help="Names the agent in traces.")
@json_option
def agent(
    prompt: str,
    model: str | None,
    max_steps: int,
    tool_choice: str | None,
    agent_id: str,
    as_json: bool,
) -> None:
    """Run an agent on PROMPT: its file edits land in the Draft, one revision per step.

    Each step is one model call and the tool calls it asks for (list_files,
    read_file, write_file, edit_file), run on the Draft's files only. Every
    request, streamed answer, tool call and result is recorded (secrets
    redacted) as traces linked from the step's Draft revision, so
    'strata replay' can run the steps again with no network. Review the Draft
    with 'strata review', then 'strata publish' or 'strata discard'.

    \b
    Example:
      strata agent --model local "Add a greeting to README.md"
      strata review
      strata replay BASE..TIP         # the ids 'strata history' shows
    """
    from strata.agent.loop import StepRecord

    with open_repo() as repo:
        provider, secrets = open_model(repo, model)
        streamed = not as_json and sys.stdout.isatty()

        def on_text(text: str) -> None:
            if streamed:
                click.echo(text, nl=False)

        def on_step(step: StepRecord) -> None:
            if as_json:
                return
            if streamed and step.text:
                click.echo()
            calls = ", ".join(step.tool_calls) or "no tool call"
            click.echo(f"step {step.step + 1}: {calls} -> revision {short(step.event_id)}")

        result = repo.run_agent(
            provider,
            prompt,
            max_steps=max_steps,
            agent_id=agent_id,
            tool_choice=tool_choice,
            secrets=secrets,
            on_text=on_text,
            on_step=on_step,
        )
        base = repo.draft(create=False).base.id
    if as_json:
        emit_json(result.to_json())
        return
    if result.text and not streamed:
        click.echo(result.text)
    if result.stopped == "max_steps":
        click.echo(f"Stopped after {max_steps} steps (--max-steps).", err=True)
    span = f"{short(base)}..{short(result.steps[-1].event_id)}"
    click.echo(
        f"Draft {result.draft_id}: {len(result.steps)} steps recorded (session "
        f"{result.session}); 'strata review' shows them, 'strata replay {span}' runs them "
        "again offline."
    )


COMMANDS = [agent]
