"""Commands that record: ``init`` and ``snapshot``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from strata.cli.common import author_options, emit_json, init_repo, json_option, short, warn
from strata.cli.plain import record_snapshot
from strata.diff.display import printable

F = TypeVar("F", bound=Callable[..., Any])


@click.command()
@click.argument("path", default=".", type=click.Path(file_okay=False))
@click.option(
    "--store",
    type=click.Path(file_okay=False),
    help="Keep the repository in this folder outside the workspace "
    "(the workspace gets a small .strata pointer file).",
)
@click.option(
    "--ledger",
    default="sqlite",
    metavar="sqlite|jsonl|postgresql://...",
    help="How the ledger is stored: SQLite (default), JSON lines with a sidecar index, "
    "or a PostgreSQL database several workspaces share (its URL).",
)
@click.option(
    "--objects",
    type=click.Path(file_okay=False),
    help="With a PostgreSQL ledger: keep file contents in this folder, shared with the "
    "other workspaces of the ledger (a network file system).",
)
@click.option(
    "--no-snapshot",
    is_flag=True,
    help="Record nothing yet (by default init records the folder as it is).",
)
@json_option
def init(
    path: str,
    store: str | None,
    ledger: str,
    objects: str | None,
    no_snapshot: bool,
    as_json: bool,
) -> None:
    """Start recording the folder PATH (default: the current folder).

    The repository lives in PATH/.strata, or in --store DIR outside the
    workspace, where an agent running 'rm -rf .strata' or 'git clean -fdx'
    cannot delete the history. Running init again changes nothing.

    A new repository first records the folder as it is (a snapshot by you),
    so the first change an agent makes can be undone like any other;
    --no-snapshot skips it.

    In a git work tree, init imports the runs that 'strata run' recorded
    there before (kept inside .git), so 'strata history' shows them, and
    with --store adds the .strata pointer file to .git/info/exclude.

    Several workspaces may record into one PostgreSQL ledger; give each the
    same --objects folder so that each can read what the others recorded.
    A workspace joining a ledger starts at the tip of its main branch.

    \b
    Example:
      strata init
      strata init ~/project --store ~/.strata-stores/project
      strata init --ledger postgresql://team@db.example/strata   # a shared ledger
      strata init --ledger postgresql://team@db.example/strata --objects /mnt/team/objects
    """
    repo, result = init_repo(path, store, ledger, snapshot=not no_snapshot, objects=objects)
    with repo:
        if as_json:
            emit_json(result.to_json())
            return
        if result.created:
            click.echo(
                f"Initialized strata workspace {printable(str(repo.root))} "
                f"(repository {printable(str(repo.layout.repo))})"
            )
        else:
            click.echo(
                f"{printable(str(repo.root))} is already a strata workspace "
                f"(repository {printable(str(repo.layout.repo))})"
            )
        first = result.snapshot
        if first is not None and first.event is not None:
            for w in first.warnings:
                warn(w)
            files = first.diff.files_changed if first.diff else 0
            click.echo(
                f"Recorded the folder as it is: {short(first.event.id)} "
                f"({files} file{'s' if files != 1 else ''})"
            )
        imported = result.imported
        if imported.events:
            from strata.layout import GIT_HIDDEN_REPO

            click.echo(
                f"Imported {imported.runs} git-backed run{'s' if imported.runs != 1 else ''} "
                f"({imported.events} events) recorded in {repo.root / GIT_HIDDEN_REPO}"
            )
            for name, new_name in imported.branches.items():
                if name != new_name:
                    click.echo(f"  their branch {printable(name)} is {printable(new_name)} here")
        if result.git_exclude:
            click.echo(f"The .strata pointer file is excluded from git in {result.git_exclude}")


def _snapshot_options(func: F) -> F:
    func = json_option(func)
    func = author_options(func)
    func = click.option(
        "--scope",
        type=click.Choice(["line", "block", "file", "project"]),
        default="project",
        help="The action_scope of the change.",
    )(func)
    func = click.option(
        "--operation",
        metavar="ID",
        help="Group this event with others of one semantic operation (any id you choose).",
    )(func)
    func = click.option(
        "--path",
        "paths",
        multiple=True,
        metavar="PATH",
        help="Record only PATH (a file or folder; repeatable); other changes stay unrecorded.",
    )(func)
    return click.option(
        "-m", "--message", default="", help="Why: the rationale recorded with the event."
    )(func)


class _SnapshotGroup(click.Group):
    """``snapshot`` and its ``save`` sub-command; a bare word is taken for a message meant."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            import shlex

            raise click.UsageError(
                f"strata snapshot takes its message with -m: "
                f"strata snapshot -m {shlex.quote(args[0])}"
            )
        return super().resolve_command(ctx, args)


@click.group(cls=_SnapshotGroup, invoke_without_command=True)
@_snapshot_options
@click.pass_context
def snapshot(ctx: click.Context, /, **options: Any) -> None:
    """Record the workspace as it is now ('snapshot save NAME' also bookmarks it).

    Only files whose size or timestamps changed since the last snapshot are
    read again. When nothing changed, no event is written. With --path, only
    the named files and folders are recorded (what one tool call changed);
    the rest stays unrecorded for a later snapshot.

    \b
    Example:
      strata snapshot -m "tests pass" --author alice
      strata snapshot --operation rename-user --scope block -m "step 1 of 3"
      strata snapshot --path src/app.py -m "Edit src/app.py" --author-kind agent
    """
    if ctx.invoked_subcommand is not None:
        return
    _record(None, **options)


@snapshot.command("save")
@click.argument("name")
@_snapshot_options
def snapshot_save(name: str, **options: Any) -> None:
    """Record the workspace and bookmark it as NAME in one step.

    \b
    Example:
      strata snapshot save before-upgrade -m "known good"
    """
    _record(name, **options)


def _record(
    bookmark: str | None,
    *,
    message: str,
    paths: tuple[str, ...],
    operation: str | None,
    scope: str,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
) -> None:
    record_snapshot(
        bookmark,
        message,
        operation,
        scope,
        author,
        author_kind,
        as_json,
        echo=click.echo,
        paths=paths or None,
    )


COMMANDS = [init, snapshot]
