"""``strata recover``: finish, or give up, what an interrupted command left."""

from __future__ import annotations

import click

from strata.cli.common import emit_json, json_option, open_repo


@click.command("recover")
@click.option(
    "--abandon",
    is_flag=True,
    help="Give up journals that cannot finish: record what they did not reach, "
    "leave the files as they are.",
)
@json_option
def recover(abandon: bool, as_json: bool) -> None:
    """Finish the changes an interrupted rewind, restore or publish left half-done.

    It also closes, as interrupted, the operation groups (an agent's prompt,
    a run, an exec, a host run) whose process died, and says which.

    Every command tries this first; when a journal cannot be finished (an
    object is missing, a folder cannot be written) reading commands still
    work and writing ones refuse. Fix the cause and run 'strata recover', or
    give up with '--abandon': the operation is recorded with the paths it did
    not reach, the files stay as they are (see 'strata status'), and the
    journal is kept in .strata/journal/abandoned/.

    \b
    Example:
      strata recover             # finish what a crash left
      strata recover --abandon   # give up a change that cannot finish
    """
    with open_repo() as repo:
        done = repo.recover(abandon=abandon)
        groups = repo.closed_groups
    if as_json:
        emit_json({"journals": [item.to_json() for item in done], "groups": groups})
        return
    if not done and not groups:
        click.echo("nothing to recover")
    for group in groups:
        line = f"closed {group['kind']} {group['title']!r}: its process had died"
        line += f" (recorded as interrupted by operation {group['closed_by']})"
        if group["error"]:
            line += f"; could not finish it: {group['error']}"
        click.echo(line)
    for item in done:
        if item.finished:
            line = f"finished {item.command} ({item.journal})"
            if item.skipped:
                line += f"; left as they were: {', '.join(item.skipped)}"
        else:
            line = f"abandoned {item.command} ({item.journal}): {item.problem}"
            if item.skipped:
                line += f"; not reached: {', '.join(item.skipped)}"
            line += f"; kept in {item.kept}"
        click.echo(line)


COMMANDS = [recover]
