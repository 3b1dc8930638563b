"""``strata digest``: the workspace digest (seed 003): scan, show, set, clear, optimize.

The session slice lives in the repository's private folder
(``REPO/digest/sessions/<session>.json``); the overrides store (the GLOBAL
scope) is a user-level folder: ``--store DIR``, else
``$XDG_CONFIG_HOME/strata/overrides``, else ``~/.config/strata/overrides``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from strata.cli.common import (
    emit_json,
    json_option,
    model_option,
    open_model,
    open_repo,
    short,
    warn,
)

if TYPE_CHECKING:
    from strata.digest import WorkspaceDigest
    from strata.repo import Repository

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_KEY = "workspace-digest"  # strata.digest.DEFAULT_KEY, kept here so --help loads nothing


def default_store() -> Path | None:
    """The user-level overrides store (in ``$XDG_CONFIG_HOME``, else ``~/.config``)."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "strata" / "overrides"
    home = os.environ.get("HOME")
    if home:
        return Path(home) / ".config" / "strata" / "overrides"
    return None


def _key_options(func: F) -> F:
    func = click.option(
        "--session",
        default="default",
        show_default=True,
        help="The session whose digest slice is read or written.",
    )(func)
    return click.option(
        "--key",
        default=DEFAULT_KEY,
        show_default=True,
        help="The digest's section key (^[a-z0-9][a-z0-9._-]{0,63}$ once lower-cased).",
    )(func)


def _store_options(*, tag_help: str, tag_default: str | None = None) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        func = click.option(
            "--store",
            "store",
            type=click.Path(file_okay=False),
            default=None,
            help="The overrides store's folder (default $XDG_CONFIG_HOME/strata/overrides, "
            "else ~/.config/strata/overrides).",
        )(func)
        return click.option("--tag", default=tag_default, help=tag_help)(func)

    return decorate


def _scope_option(func: F) -> F:
    return click.option(
        "--scope",
        type=click.Choice(["session", "global"]),
        default="session",
        show_default=True,
        help="session: this session's slice; global: the overrides store, under --tag.",
    )(func)


def _store(store: str | None) -> Path | None:
    return Path(store) if store else default_store()


@dataclass(frozen=True)
class _Target:
    """What ``set``, ``clear`` and ``optimize`` write: the session's digest or a tag's override."""

    key: str
    session: str
    scope: str
    tag: str | None
    store: str | None

    def digest(self, repo: Repository) -> WorkspaceDigest:
        """The session's digest, with the overrides store when the scope is global."""
        folder = _store(self.store) if self.scope == "global" else None
        return repo.digest(session=self.session, overrides=folder)

    def to_json(self) -> dict[str, Any]:
        """The target as the commands' JSON reports it."""
        return {
            "key": self.key.strip().lower(),
            "scope": self.scope,
            "session": self.session,
            "tag": self.tag,
        }


def _target_options(*, tag_help: str) -> Callable[[F], F]:
    """The options naming a :class:`_Target`, handed to the command as its argument ``target``."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def command(
            *args: Any,
            key: str,
            session: str,
            scope: str,
            tag: str | None,
            store: str | None,
            **kwargs: Any,
        ) -> Any:
            return func(*args, target=_Target(key, session, scope, tag, store), **kwargs)

        return _key_options(_scope_option(_store_options(tag_help=tag_help)(command)))  # type: ignore[return-value]

    return decorate


@click.group("digest")
def digest() -> None:
    """The workspace digest: a task-agnostic summary reused by prompts.

    A prompt gets the session's newest digest, else the override stored
    under the tag, else a placeholder asking the model to explore first.

    \b
    Example:
      strata digest scan                 # what the workspace shows
      strata digest optimize --model local
      strata digest show
    """


@digest.command("scan")
@json_option
def scan(as_json: bool) -> None:
    """Scan the workspace: README, build and test commands, layout, languages, entry points.

    Only files Strata records are looked at (ignored files are never read);
    the same files give the same output, byte for byte.

    \b
    Example:
      strata digest scan
      strata digest scan --json | jq .commands
    """
    with open_repo() as repo:
        result = repo.digest().scan()
    if as_json:
        emit_json(result.to_json())
        return
    click.echo(result.to_markdown(), nl=False)


@digest.command("show")
@_key_options
@_store_options(
    tag_help="The override tag read when the session has no digest "
    "(default $STRATA_DIGEST_TAG or 'latest').",
)
@json_option
def show(key: str, session: str, tag: str | None, store: str | None, as_json: bool) -> None:
    """Print the digest a prompt gets: session, else override, else the placeholder.

    \b
    Example:
      strata digest show
      strata digest show --tag team --json
    """
    tag = tag or os.environ.get("STRATA_DIGEST_TAG") or "latest"
    folder = _store(store)
    with open_repo() as repo:
        resolved = repo.digest(session=session, overrides=folder, tag=tag).show(key)
    if as_json:
        emit_json({**resolved.to_json(), "store": str(folder) if folder else None})
        return
    for warning in resolved.warnings:
        warn(warning)
    click.echo(resolved.render(), nl=False)


def _read_text(text: str | None, file: str | None) -> str:
    from strata.errors import UsageError

    if (text is None) == (file is None):
        raise UsageError("give the digest as TEXT or with --file PATH ('-' reads stdin), not both")
    if text is not None:
        return text
    assert file is not None
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{file} is not UTF-8 text") from None


@digest.command("set")
@click.argument("text", required=False)
@click.option("--file", "file", default=None, metavar="PATH", help="Read the digest from PATH.")
@_target_options(tag_help="The override tag written (needed with --scope global).")
@json_option
def set_(text: str | None, file: str | None, target: _Target, as_json: bool) -> None:
    """Store a digest you wrote: in the session, or (--scope global) as the tag's override.

    The text is stored exactly as given (template tokens such as ${x} stay).

    \b
    Example:
      strata digest set --file DIGEST.md
      strata digest set --scope global --tag team "Run tests with: make test"
    """
    from strata.digest import Scope

    body = _read_text(text, file)
    with open_repo() as repo:
        path = target.digest(repo).set(
            body, key=target.key, scope=Scope(target.scope), tag=target.tag
        )
    out = target.to_json()
    if as_json:
        emit_json({**out, "path": str(path)})
        return
    where = (
        f"override {target.tag!r}" if target.scope == "global" else f"session {target.session!r}"
    )
    click.echo(f"Digest {out['key']} stored in {where} ({path}).")


@digest.command("clear")
@_target_options(tag_help="The override tag removed (needed with --scope global).")
@json_option
def clear(target: _Target, as_json: bool) -> None:
    """Remove the session's digest (or, with --scope global, the tag's override).

    \b
    Example:
      strata digest clear
      strata digest clear --scope global --tag team
    """
    from strata.digest import Scope

    with open_repo() as repo:
        removed = target.digest(repo).clear(
            key=target.key, scope=Scope(target.scope), tag=target.tag
        )
    out = target.to_json()
    if as_json:
        emit_json({**out, "removed": removed})
        return
    click.echo(f"Removed {removed} digest{'s' if removed != 1 else ''} of {out['key']}.")


@digest.command("optimize")
@model_option()
@click.option(
    "--focus",
    default=None,
    metavar="TEXT",
    help="Files, subsystems or workflows the digest should cover first.",
)
@_target_options(tag_help="The override tag written (needed with --scope global).")
@json_option
def optimize(model: str | None, focus: str | None, target: _Target, as_json: bool) -> None:
    """Ask a model to condense the scan into the digest, and keep it.

    Unrecorded work is auto-saved first, so the scan is of a recorded tree;
    the model call is recorded as a trace linked from an agent_step
    event, so 'strata replay' runs it again with no network. The digest is
    stored in the session, and with --scope global also as the tag's
    override. A global scope without a tag is refused before any model call.

    \b
    Example:
      strata digest optimize --model local
      strata digest optimize --scope global --tag team --focus "the CLI"
    """
    from strata.digest import Scope

    with open_repo() as repo:
        handle = target.digest(repo)
        if target.scope == "global":  # seed 003: fail first when the scope cannot be met
            from strata.digest.optimize import check_scope

            check_scope(Scope.GLOBAL, handle.overrides, target.tag)
        provider, secrets = open_model(repo, model)
        result = handle.optimize(
            provider,
            key=target.key,
            scope=Scope(target.scope),
            tag=target.tag,
            focus=focus,
            secrets=secrets,
        )
    if as_json:
        emit_json(result.to_json())
        return
    for warning in result.warnings:
        warn(warning)
    click.echo(result.digest.rstrip())
    click.echo(
        f"Digest {result.key} stored in session {result.session!r}"
        + (f" and override {result.tag!r}" if result.override_path else "")
        + f"; recorded as event {short(result.event_id)} ('strata replay' runs it again).",
        err=True,
    )


COMMANDS = [digest]
