"""``strata snapshot`` in its plain form, run without the command-line parser.

A snapshot with no watcher to hand it to costs the interpreter's start, the
imports and the walk; the parser (click, and the command modules it builds)
is about 10 ms of that. ``strata snapshot``, ``strata snapshot -m MESSAGE``
and ``strata snapshot --message MESSAGE`` (a MESSAGE not starting with
``-``) are therefore run here, by :func:`record_snapshot`, the function the
``snapshot`` command itself calls, so both print the same and record the
same. Anything else goes to the parser as before: another option,
``--json``, ``--help``, a ``STRATA_NOW`` or ``STRATA_AUTHOR_KIND`` the
parser would refuse (its error names the command's help), ``NO_COLOR`` on a
terminal (the parser turns a warning's colour off), shell completion.
Errors are reported by :func:`strata.cli.fail_for`, the CLI's one mapping
of errors to output and exit codes; warnings by
:func:`strata.cli.common.warn`. Neither this module nor
:mod:`strata.cli.common` imports click until one of those needs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from strata.cli.common import (
    AUTHOR_KINDS,
    State,
    emit_json,
    make_author,
    new_command,
    open_repo,
    rel_path,
    short,
    warn,
)
from strata.diff.display import printable

if TYPE_CHECKING:
    from strata.core.groups import Group


def plain_message(args: list[str]) -> str | None:
    """The message of a plain ``snapshot`` with these arguments; None for any other form."""
    if not args:
        return ""
    if len(args) == 2 and args[0] in ("-m", "--message") and not args[1].startswith("-"):
        return args[1]
    return None


def try_plain(args: list[str]) -> None:
    """Run ``strata snapshot ARGS`` and exit when ARGS are a plain form; else return."""
    message = plain_message(args)
    if message is None or _parser_needed():
        return
    argv = ["snapshot", *args]
    new_command()
    state = State(debug=os.environ.get("STRATA_DEBUG") == "1")
    try:
        record_snapshot(None, message, None, "project", None, None, False, echo=_echo)
    except (Exception, KeyboardInterrupt) as exc:
        from strata.cli import fail_for

        if isinstance(exc, EOFError | KeyboardInterrupt):
            # as the parser does first (click's Command.main): closes the terminal's ^C echo
            sys.stderr.write("\n")
        fail_for(exc, argv, state)
    sys.exit(0)


def _group(raw: dict[str, Any] | None) -> Group | None:
    if raw is None:
        return None
    from strata.core.groups import Group

    return Group.from_json(raw)


def _parser_needed() -> bool:
    """Whether the environment asks for what only the parser does (see the module doc)."""
    env = os.environ
    if env.get("_STRATA_COMPLETE") or (env.get("NO_COLOR") and sys.stderr.isatty()):
        return True
    if (env.get("STRATA_AUTHOR_KIND") or "human") not in AUTHOR_KINDS:
        return True
    now = env.get("STRATA_NOW")
    if now:
        try:
            int(now)
        except ValueError:
            return True
    from strata.cli.observe import endpoint_from

    return endpoint_from(env, os.getcwd()) is not None  # a traced snapshot: the parser's path


def _echo(text: str) -> None:
    """``click.echo(text)`` for the plain ASCII lines a snapshot prints."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def record_snapshot(
    bookmark: str | None,
    message: str,
    operation: str | None,
    scope: str,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
    *,
    echo: Callable[[str], object],
    paths: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    group: dict[str, Any] | None = None,
) -> None:
    """What ``strata snapshot`` (and ``snapshot save NAME``) does and prints.

    ``paths`` are as typed (relative to the current folder): only they are
    recorded; the changes below ``exclude`` (workspace paths) are not. ``group``
    (an agent's prompt, as :meth:`strata.core.groups.Group.to_json` gives it) makes
    the snapshot one of its steps.
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo, repo.grouped(_group(group)):
        stored = [rel_path(repo, p) for p in paths] if paths else None
        result = repo.snapshot(
            message,
            author=who,
            operation=operation,
            scope=scope,
            bookmark=bookmark,
            paths=stored,
            exclude=exclude,
        )
    if as_json:  # the warnings are in the JSON
        emit_json(result.to_json())
        return
    for w in result.warnings:
        warn(w)
    if result.event is None:
        where = f" in {', '.join(printable(p) for p in paths)}" if paths else ""
        echo(f"Nothing changed{where} since HEAD; no snapshot recorded.")
        if bookmark is not None:
            echo(
                f"(no bookmark {printable(bookmark)} made: "
                "bookmark HEAD with 'strata bookmark add')"
            )
        return
    d = result.diff
    assert d is not None
    echo(
        f"Recorded {short(result.event.id)} (snapshot {short(result.snapshot_id)}): "
        f"{d.files_changed} file{'s' if d.files_changed != 1 else ''} changed, "
        f"+{d.insertions} -{d.deletions}" + (f", bookmarked as {bookmark}" if bookmark else "")
    )
