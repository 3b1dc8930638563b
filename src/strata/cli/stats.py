"""``strata stats``: the Workshop's local usage statistics (seed 000), read from the ledger."""

from __future__ import annotations

import click

from strata.cli.common import emit_json, json_option, open_repo


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.items()) or "none"


@click.command("stats")
@json_option
def stats(as_json: bool) -> None:
    """Show how the Workshop and its Drafts have been used here, from the ledger.

    Workshop turns and conversations; Drafts opened, published and
    discarded, and their revisions; undo use (undos per turn) and how many
    messages each chat rewind went back; model switches and the models that
    answered; failed turns by reason (provider, validation, disk,
    interrupted, other) and by error type. Everything is counted from the
    events already in the ledger: nothing is stored apart and nothing is
    sent anywhere.

    \b
    Example:
      strata stats
      strata stats --json | jq .stats.failures.by_category
    """
    from strata.workbench.stats import workshop_stats

    with open_repo(start_watcher=False) as repo:
        found = workshop_stats(repo)
    if as_json:
        emit_json({"schema": 1, "stats": found.to_json(), "sent_anywhere": False})
        return
    data = found.to_json()
    drafts, undo, models, failures = data["drafts"], data["undo"], data["models"], data["failures"]
    rate = "-" if undo["undos_per_turn"] is None else f"{undo['undos_per_turn']:g}"
    distances = {f"{k} back": v for k, v in undo["rewind_distances"].items()}
    lines = [
        ("turns", f"{found.turns} in {found.conversations} conversation(s)"),
        ("failed turns", f"{found.failed_turns} ({found.interrupted_turns} interrupted)"),
        (
            "drafts",
            f"{drafts['opened']} opened, {drafts['published']} published, "
            f"{drafts['discarded']} discarded, {drafts['revisions']} revisions",
        ),
        ("undo", f"{undo['undos']} undo(s), {undo['redos']} redo(s), {rate} per turn"),
        ("chat rewinds", f"{undo['chat_rewinds']} ({_counts(distances)})"),
        ("model switches", str(models["switches"])),
        ("answers by model", _counts(models["answers_by_model"])),
        ("failure reasons", _counts(failures["by_category"])),
        ("failure types", _counts(failures["by_type"])),
    ]
    for name, value in lines:
        click.echo(f"{name:<17} {value}")
    click.echo("computed from the ledger; nothing is sent anywhere")


COMMANDS = [stats]
