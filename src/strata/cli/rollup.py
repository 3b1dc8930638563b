"""``strata rollup``: sum up an oversized operation as one event, and take it back."""

from __future__ import annotations

from typing import Any

import click

from strata.cli.common import emit_list, emit_one, json_option, open_repo, short
from strata.diff.display import printable


@click.group()
def rollup() -> None:
    """Roll up an operation of many events into one summary event (non-destructive).

    \b
    Example:
      strata rollup propose
      strata rollup apply 3f9kq2
      strata rollup revert 7hx2
    """


@rollup.command()
@click.option("--min-events", type=click.IntRange(min=2), default=200, show_default=True)
@click.option("--idle-minutes", type=click.IntRange(min=0), default=10, show_default=True)
@json_option
def propose(min_events: int, idle_minutes: int, as_json: bool) -> None:
    """List operations worth rolling up (many events, or idle with snapshots).

    \b
    Example:
      strata rollup propose --min-events 50 --json
    """
    with open_repo() as repo:
        found = repo.rollup_candidates(min_events=min_events, idle_ms=idle_minutes * 60_000)
    emit_list(found, as_json=as_json, empty="No operation to roll up.", line=_candidate)


def _candidate(c: Any) -> str:
    data = c.to_json()
    return (
        f"{data['operation_id']}  {data['event_count']} events, {len(data['files'])} files"
        f"  {printable(c.reason)}"
    )


@rollup.command()
@click.argument("operation_id")
@json_option
def apply(operation_id: str, as_json: bool) -> None:
    """Record the rollup of OPERATION_ID: its composed patch and an index of its events.

    \b
    Example:
      strata rollup apply 01j9x2
    """
    with open_repo() as repo:
        event = repo.rollup(operation_id)
    count = event.data["rollup"]["event_count"]
    text = f"Rolled up {count} events of {operation_id}: event {short(event.id)}"
    emit_one(event.to_json(), as_json=as_json, text=lambda: text)


@rollup.command()
@click.argument("rollup_id")
@json_option
def revert(rollup_id: str, as_json: bool) -> None:
    """Withdraw a rollup: its operation's events are listed one by one again.

    \b
    Example:
      strata rollup revert 7hx2
    """
    with open_repo() as repo:
        event = repo.rollup_revert(rollup_id)
    text = f"Withdrew rollup {short(str(event.data['rollup_event_id']))}"
    emit_one(event.to_json(), as_json=as_json, text=lambda: text)


COMMANDS = [rollup]
