"""Commands that move files: ``rewind`` and ``restore``."""

from __future__ import annotations

import click

from strata.cli.common import (
    author_options,
    complete_ref,
    emit_json,
    force_option,
    json_option,
    make_author,
    open_repo,
    rel_path,
    short,
    warn,
)
from strata.diff.display import printable


def _report(result: object, verb: str, as_json: bool, new_branch: str | None = None) -> None:
    from strata.repo import RewindResult

    assert isinstance(result, RewindResult)
    if as_json:
        emit_json(result.to_json())
        return
    if result.auto_save is not None:
        click.echo(
            f"Auto-saved unrecorded work as {short(result.auto_save.id)} "
            f"('strata rewind {short(result.auto_save.id)}' brings it back)"
        )
    target = result.target.event.id if result.target.event else result.target.snapshot_id
    if result.event is None and result.auto_save is None and verb == "Rewound to":
        click.echo(f"Already at {short(target)} with nothing unrecorded: nothing to do")
        return
    n = len(result.restored_paths)
    click.echo(f"{verb} {short(target)}: {n} path{'s' if n != 1 else ''} written or removed")
    if result.next_branch is not None and result.next_branch == new_branch:
        click.echo(f"The next snapshot will start the new branch {printable(result.next_branch)}")
    elif result.next_branch is not None:
        click.echo(
            f"HEAD is not a branch tip: the next snapshot will start branch {result.next_branch}"
        )
    for p in result.skipped_paths:
        warn(
            f"left {p} untouched: it holds content that was not recorded "
            "(ignored, unreadable, over [snapshot] max_file_size, or changed meanwhile); "
            "snapshot it, then run this again "
            "to replace it"
        )


@click.command()
@click.argument("ref", shell_complete=complete_ref)
@click.option(
    "--branch",
    "new_branch",
    metavar="NAME",
    help="Name the branch that the next snapshot from here starts.",
)
@author_options
@force_option
@json_option
def rewind(
    ref: str,
    new_branch: str | None,
    author: str | None,
    author_kind: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Move HEAD and the workspace files to REF.

    Unrecorded changes are first saved as an auto_save event, so a rewind
    never loses work: rewind to the auto-save (or 'strata undo') to get them
    back. Only paths that differ are written; ignored files are never
    touched. Branch tips do not move: the next snapshot from an earlier point
    starts a new branch (named by --branch, or generated); rewind says which
    ('next_branch' in --json), and so does 'strata status'.

    \b
    Example:
      strata rewind HEAD~2
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        result = repo.rewind(ref, author=who, branch=new_branch, force=force)
    _report(result, "Rewound to", as_json, new_branch)


@click.command()
@click.argument("ref", shell_complete=complete_ref)
@click.argument("paths", nargs=-1, required=True)
@author_options
@force_option
@json_option
def restore(
    ref: str,
    paths: tuple[str, ...],
    author: str | None,
    author_kind: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Put PATHS back as they were at REF; HEAD stays (or moves to an auto-save).

    Unrecorded changes are auto-saved first, as with rewind, and HEAD moves
    to that auto-save; the restored files are then unrecorded changes
    against it, for 'strata snapshot' to record (or 'strata undo' to reverse).

    \b
    Example:
      strata restore HEAD~1 -- src/app.py docs/
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        rels = [rel_path(repo, p) for p in paths]
        result = repo.restore(ref, rels, author=who, force=force)
    _report(result, "Restored from", as_json)


COMMANDS = [rewind, restore]
