"""Commands over refs and operations: ``branch``, ``bookmark``, ``op log``, ``undo``, ``redo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import (
    LIMIT_MAX,
    complete_bookmark,
    complete_branch,
    complete_ref,
    emit_json,
    force_option,
    json_option,
    open_repo,
    short,
)
from strata.diff.display import printable

if TYPE_CHECKING:
    from strata.core.results_ops import OperationRecord
    from strata.repo import Repo


@click.group()
def branch() -> None:
    """List, create, switch and delete branches.

    A branch is a named line of state events. Rewinding and then recording
    starts a new branch, so the abandoned future stays reachable.

    \b
    Example:
      strata branch create experiment HEAD~2
      strata branch switch experiment
    """


@branch.command("list")
@json_option
def branch_list(as_json: bool) -> None:
    """List branches and where they point.

    \b
    Example:
      strata branch list --json
    """
    with open_repo() as repo:
        view = repo.view()
    rows: list[dict[str, Any]] = [
        {"name": name, "tip_event_id": tip, "head": name == view.head_branch}
        for name, tip in sorted(view.branches.items())
    ]
    if view.head_branch not in view.branches:
        rows.append({"name": view.head_branch, "tip_event_id": None, "head": True})
    if as_json:
        emit_json(
            {"head": {"branch": view.head_branch, "event_id": view.head_event}, "branches": rows}
        )
        return
    for row in rows:
        mark = "*" if row["head"] else " "
        where = short(row["tip_event_id"]) if row["tip_event_id"] else "(no events yet)"
        click.echo(f"{mark} {printable(row['name']):<20} {printable(where)}")
    if view.starting_branch:
        click.echo(
            f"HEAD is at {short(view.head_event)}: the next snapshot starts {view.head_branch}"
        )
    elif view.detached:
        click.echo(
            f"HEAD is at {short(view.head_event)}, behind the tip of {printable(view.head_branch)}:"
        )
        click.echo("  the next snapshot starts a new branch")


@branch.command("create")
@click.argument("name")
@click.argument("ref", default="HEAD", shell_complete=complete_ref)
@json_option
def branch_create(name: str, ref: str, as_json: bool) -> None:
    """Create branch NAME at REF (default HEAD); HEAD does not move.

    \b
    Example:
      strata branch create before-refactor HEAD~3
    """
    with open_repo() as repo:
        tip = repo.branch_create(name, ref)
    if as_json:
        emit_json({"name": name, "tip_event_id": tip})
    else:
        click.echo(f"Created branch {printable(name)} at {short(tip)}")


@branch.command("switch")
@click.argument("name", shell_complete=complete_branch)
@force_option
@json_option
def branch_switch(name: str, force: bool, as_json: bool) -> None:
    """Move HEAD and the files to the tip of branch NAME.

    Unrecorded work is auto-saved first, as with rewind.

    \b
    Example:
      strata branch switch main
    """
    with open_repo() as repo:
        result = repo.branch_switch(name, force=force)
    if as_json:
        emit_json(result.to_json())
        return
    if result.auto_save is not None:
        click.echo(f"Auto-saved unrecorded work as {short(result.auto_save.id)}")
    click.echo(
        f"On branch {printable(name)}: {len(result.restored_paths)} paths written or removed"
    )


@branch.command("delete")
@click.argument("name", shell_complete=complete_branch)
@json_option
def branch_delete(name: str, as_json: bool) -> None:
    """Delete the name NAME; its events stay in the ledger.

    \b
    Example:
      strata branch delete experiment
    """
    with open_repo() as repo:
        tip = repo.branch_delete(name)
    if as_json:
        emit_json({"name": name, "tip_event_id": tip, "deleted": True})
    else:
        click.echo(
            f"Deleted branch {name} (was {short(tip)}; "
            f"'strata branch create {name} {short(tip)}' restores it)"
        )


@click.group()
def bookmark() -> None:
    """Name points in history; a locked bookmark cannot move or be deleted.

    \b
    Example:
      strata bookmark add tests-pass
      strata bookmark lock tests-pass
      strata rewind tests-pass
    """


def _bookmark(action: str, name: str, as_json: bool, **kwargs: str | None) -> None:
    with open_repo() as repo:
        result = repo.bookmark(action, name, **kwargs)  # type: ignore[arg-type]
    if as_json:
        emit_json(result.to_json())
        return
    verbs = {
        "add": "Added",
        "move": "Moved",
        "rename": "Renamed",
        "lock": "Locked",
        "unlock": "Unlocked",
        "delete": "Deleted",
    }
    target = f" at {short(result.target)}" if result.target else ""
    click.echo(f"{verbs[action]} bookmark {printable(result.name)}{target}")


@bookmark.command("add")
@click.argument("name")
@click.argument("ref", default="HEAD", shell_complete=complete_ref)
@json_option
def bookmark_add(name: str, ref: str, as_json: bool) -> None:
    """Bookmark REF (default HEAD) as NAME.

    \b
    Example:
      strata bookmark add release-1 HEAD~1
    """
    _bookmark("add", name, as_json, ref=ref)


@bookmark.command("move")
@click.argument("name", shell_complete=complete_bookmark)
@click.argument("ref", shell_complete=complete_ref)
@json_option
def bookmark_move(name: str, ref: str, as_json: bool) -> None:
    """Point bookmark NAME at REF.

    \b
    Example:
      strata bookmark move release-1 HEAD
    """
    _bookmark("move", name, as_json, ref=ref)


@bookmark.command("rename")
@click.argument("old", shell_complete=complete_bookmark)
@click.argument("new")
@json_option
def bookmark_rename(old: str, new: str, as_json: bool) -> None:
    """Rename bookmark OLD to NEW.

    \b
    Example:
      strata bookmark rename release-1 v1.0
    """
    _bookmark("rename", old, as_json, new_name=new)


@bookmark.command("lock")
@click.argument("name", shell_complete=complete_bookmark)
@json_option
def bookmark_lock(name: str, as_json: bool) -> None:
    """Lock bookmark NAME so it cannot move or be deleted.

    \b
    Example:
      strata bookmark lock v1.0
    """
    _bookmark("lock", name, as_json)


@bookmark.command("unlock")
@click.argument("name", shell_complete=complete_bookmark)
@json_option
def bookmark_unlock(name: str, as_json: bool) -> None:
    """Unlock bookmark NAME.

    \b
    Example:
      strata bookmark unlock v1.0
    """
    _bookmark("unlock", name, as_json)


@bookmark.command("delete")
@click.argument("name", shell_complete=complete_bookmark)
@json_option
def bookmark_delete(name: str, as_json: bool) -> None:
    """Delete bookmark NAME (the events it named stay).

    \b
    Example:
      strata bookmark delete v1.0
    """
    _bookmark("delete", name, as_json)


@bookmark.command("share")
@click.argument("name", shell_complete=complete_bookmark)
@click.argument("remote", default="origin")
@json_option
def bookmark_share(name: str, remote: str, as_json: bool) -> None:
    """Push bookmark NAME to REMOTE as the tag strata/NAME, with the history it needs.

    The Git sync runs first (see 'strata vcs'); a teammate then runs
    'strata import git:REMOTE/strata/BRANCH' and finds the bookmark as REMOTE/NAME.

    \b
    Example:
      strata bookmark share reviewed origin
    """
    from strata.sync.git import share_bookmark

    with open_repo() as repo, repo.writing():
        result = share_bookmark(repo, name, remote)
    if as_json:
        emit_json(result)
    else:
        click.echo(f"Shared {printable(name)} with {printable(remote)} as {result['tag']}")


@bookmark.command("list")
@json_option
def bookmark_list(as_json: bool) -> None:
    """List bookmarks.

    \b
    Example:
      strata bookmark list --json
    """
    with open_repo() as repo:
        marks = repo.view().bookmarks
    if as_json:
        emit_json(
            [
                {"name": n, "target_event_id": b.target, "locked": b.locked}
                for n, b in sorted(marks.items())
            ]
        )
        return
    if not marks:
        click.echo("No bookmarks.")
    for name, mark in sorted(marks.items()):
        click.echo(
            f"{printable(name):<24} {short(mark.target)}{'  (locked)' if mark.locked else ''}"
        )


@click.group()
def op() -> None:
    """The operation log: every command that changed the repository.

    \b
    Example:
      strata op log --limit 10
    """


@op.command("log")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="Show at most N lines (a group of steps is one line; with --json, N operations).",
)
@click.option(
    "--expand",
    is_flag=True,
    help="Show each step of a group (an agent's prompt) under its line.",
)
@json_option
def op_log(limit: int | None, expand: bool, as_json: bool) -> None:
    """List operations, newest first (undo and redo appear as operations too).

    The steps of one user action (an agent's prompt, each tool call an
    operation) are one line, with the prompt's first line and the number of
    steps; --expand lists the steps under it. A group whose process was
    killed is closed by the next command that writes (a "group close" step)
    and shows "interrupted". --json lists every operation, each step with its
    "group".

    \b
    Example:
      strata op log --limit 5
      strata op log --expand
    """
    with open_repo() as repo:
        if as_json:
            ops = repo.operations(limit=min(limit, LIMIT_MAX) if limit else None)
            emit_json([o.to_json() for o in ops])
            return
        lines = _op_lines(repo, limit)
    for steps in lines:
        if len(steps) == 1 and not steps[0].group:
            click.echo(_op_line(steps[0]))
            continue
        group = steps[0].group or {}
        title = printable(str(group.get("title") or "")).splitlines()[0:1]
        who = printable(str((group.get("author") or {}).get("name") or "?"))
        count = f"{len(steps)} step{'s' if len(steps) != 1 else ''}"
        if any(s.command == "group close" for s in steps):  # closed by the next writer
            count += ", interrupted"
        click.echo(
            f"{click.style(short(str(group.get('id'))), fg='yellow')} "
            f"{steps[-1].ts[:19].replace('T', ' ')} {group.get('kind')!s:<15} {who} "
            f"({count}) {title[0] if title else ''}".rstrip()
        )
        if expand:
            for step in steps:
                click.echo("    " + _op_line(step))


def _op_lines(repo: Repo, limit: int | None) -> list[list[OperationRecord]]:
    """The newest ``limit`` lines of ``op log``: a group of steps is one line.

    Operations are read in growing batches until ``limit`` whole lines are
    known, so a limit never cuts a group short or counts its steps as lines.
    """
    batch = limit * 8 if limit else LIMIT_MAX
    while True:
        ops = repo.operations(limit=min(batch, LIMIT_MAX))
        lines: list[list[OperationRecord]] = []
        for o in ops:
            key = (o.group or {}).get("id")
            if key and lines and (lines[-1][0].group or {}).get("id") == key:
                lines[-1].append(o)
            else:
                lines.append([o])
        if limit is None or len(lines) > limit or len(ops) < batch or batch >= LIMIT_MAX:
            return lines[:limit] if limit else lines
        batch *= 4


def _op_line(o: OperationRecord) -> str:
    """One operation as ``strata op log`` shows it."""
    details = o.details
    extra = ""
    if "undid" in details:
        extra = f" (reverses {short(details['undid'])})"
    elif "redid" in details:
        extra = f" (re-applies {short(details['redid'])})"
    return (
        f"{click.style(short(o.id), fg='yellow')} {o.ts[:19].replace('T', ' ')} "
        f"{o.command:<15} {printable(o.author.name)}{extra}"
    )


@click.command()
@click.option(
    "--step",
    is_flag=True,
    help="Reverse only the last step of an agent's prompt, not the whole prompt.",
)
@json_option
def undo(step: bool, as_json: bool) -> None:
    """Reverse the last operation by appending its inverse (nothing is erased).

    Refs go back, and files too when the operation changed them;
    unrecorded work is auto-saved first. Run it again to undo the one before.
    When the last operation is a step of an agent's prompt (Claude Code's
    hooks group each prompt's tool calls), the whole prompt is reversed: what
    the agent changed goes back, your own edits stay; --step reverses only
    the last tool call.

    \b
    Example:
      strata undo && strata undo     # reverses the last two operations
      strata undo --step             # only the agent's last tool call
    """
    with open_repo() as repo:
        result = repo.undo(step=step)
    if as_json:
        emit_json(result.to_json())
    else:
        # a Workshop operation or a Draft rewind is done again, not redone
        again = result.command.startswith("chat ") or result.command == "draft rewind"
        hint = "do it again to re-apply it" if again else "'strata redo' re-applies it"
        what = (
            f"run {short(result.run_id)}"  # the id the run printed
            if result.run_id and result.command == "run"
            else f"{result.command} {short(result.undid)}"
        )
        if result.group:
            kind, title = result.group.get("kind", "group"), str(result.group.get("title") or "")
            first = printable(title.splitlines()[0]) if title else ""
            what = f"{kind} {short(str(result.group.get('id')))}" + (f" '{first}'" if first else "")
        click.echo(f"Undid {what} ({hint})")


@click.command()
@json_option
def redo(as_json: bool) -> None:
    """Re-apply the operation the last undo reversed.

    \b
    Example:
      strata undo && strata redo
    """
    with open_repo() as repo:
        result = repo.redo()
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(f"Redid {result.command} {short(result.redid)}")


COMMANDS = [branch, bookmark, op, undo, redo]
