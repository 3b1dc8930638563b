"""What every command shares: opening the repository, ``--json``, author options, output.

This shell is the only layer that reads the environment. ``STRATA_AUTHOR``
and ``STRATA_AUTHOR_KIND`` set the default author; ``STRATA_NOW`` (milliseconds
since the epoch) freezes the clock and ``STRATA_SEED`` seeds event ids, so
output is byte-stable in tests. ``NO_COLOR`` (set, not empty) turns colour off even
on a terminal. ``STRATA_NO_RESIDENT=1`` keeps a command from being handed
to the workspace's watcher (``strata._resident``); ``STRATA_NO_DAEMON=1`` keeps
commands from starting one (:func:`open_repo`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from strata.diff.display import printable_lines
from strata.schemas import versioned

if TYPE_CHECKING:
    import click

    from strata.core import InitResult
    from strata.ledger.events import Author
    from strata.repo import Repository

F = TypeVar("F", bound=Callable[..., Any])

AUTHOR_KINDS = ("human", "agent", "llm", "system")


@dataclass
class State:
    """Per-invocation settings shared by commands (the root context's ``obj``)."""

    debug: bool = False
    json: bool = False
    """``--json`` was given: an error is then printed as JSON too."""
    observer: Any = None
    """The command's :class:`strata.cli.observe.Observer`, when it is measured or traced."""


def remember_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """``--json`` given here or before the command (``strata --json status``): remember it."""
    state = ctx.find_object(State)
    if value and state is not None:
        state.json = True
    return value or (state is not None and state.json)


#: the largest ``--limit`` passed on (SQLite's integers are 64-bit): a larger one means "all"
LIMIT_MAX = 2**62


def json_option(func: F) -> F:
    """The shared ``--json`` flag."""
    import click  # (not at import: a plain snapshot runs without the parser)

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=remember_json,
        help="Print machine-readable JSON (errors too, on stderr).",
    )(func)


def force_option(func: F) -> F:
    """The shared ``--force`` flag of commands that move files while a run may hold the lease."""
    import click

    return click.option(
        "--force",
        is_flag=True,
        help="Move the files even while a 'strata run' is in progress here.",
    )(func)


def author_options(func: F) -> F:
    """The shared ``--author`` / ``--author-kind`` options."""
    import click

    func = click.option(
        "--author-kind",
        type=click.Choice(AUTHOR_KINDS),
        default=None,
        help="What made the change (default $STRATA_AUTHOR_KIND or human).",
    )(func)
    return click.option(
        "--author", default=None, help="Who made the change (default $STRATA_AUTHOR or your login)."
    )(func)


def make_author(name: str | None, kind: str | None) -> Author:
    """The author from options, then the environment, then git's ``user.name``, then the login."""
    from strata.ledger.events import Author

    name = name or os.environ.get("STRATA_AUTHOR") or os.environ.get("USER") or _who_else()
    kind = kind or os.environ.get("STRATA_AUTHOR_KIND") or "human"
    if kind not in AUTHOR_KINDS:
        import click

        raise click.UsageError(f"STRATA_AUTHOR_KIND must be one of {', '.join(AUTHOR_KINDS)}")
    return Author(name, kind)  # type: ignore[arg-type]


def _who_else() -> str:
    """The person running this when ``$USER`` is unset: git's ``user.name``, else the login."""
    import subprocess

    try:
        found = subprocess.run(
            ["git", "config", "--get", "user.name"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if found:
        return found
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name or "unknown"
    except KeyError:
        return "unknown"


def injected() -> dict[str, Any]:
    """The clock and random source ``STRATA_NOW`` and ``STRATA_SEED`` ask for (tests)."""
    import random

    kwargs: dict[str, Any] = {}
    now = os.environ.get("STRATA_NOW")
    if now:
        try:
            start = int(now)
        except ValueError:
            import click

            raise click.UsageError("STRATA_NOW must be milliseconds since the epoch") from None
        ticks = iter(range(start, start + 10**9))
        kwargs["clock"] = lambda: next(ticks)
    seed = os.environ.get("STRATA_SEED")
    if seed:
        kwargs["rng"] = random.Random(seed)
    # whose workspace it is, whoever runs this command (an agent's hook, an agent's run)
    kwargs["person"] = make_author(None, "human")
    from strata.redaction import secret_values

    kwargs["secrets"] = secret_values(os.environ)  # never written into the ledger
    return kwargs


class Progress:
    """A one-line progress report on a terminal's stderr, shown once work passes a second."""

    def __init__(self) -> None:
        import time

        self._clock = time.monotonic
        self._start = self._clock()
        self._tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        """Report ``done`` of ``total`` files read."""
        if not self._tty or self._clock() - self._start < 1.0:
            return
        sys.stderr.write(f"\rreading files: {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


#: False in a watcher: the commands it runs for the command line start no other
AUTOSTART = True


def open_repo(author: Author | None = None, *, start_watcher: bool = True) -> Repository:
    """The repository of the workspace containing the current folder.

    With ``start_watcher``, the workspace's watcher is started in the
    background when none runs (``strata.cli.watcher.autostart``; the command
    does not wait for it).
    """
    from strata.repo import Repository

    repo = Repository.open(
        Path.cwd(),
        author=author or make_author(None, None),
        progress=Progress(),
        **injected(),
    )
    _warn_unknown_tables(repo)
    from strata.redaction import known_secrets

    # the values of the workspace's .env and key files an agent may have read, too
    repo.ledger.secrets = known_secrets(os.environ, repo.root)
    if start_watcher and AUTOSTART:
        from strata.cli.watcher import autostart  # (light: the watcher's module is not loaded)

        autostart(repo)
    return repo


#: the config files this command has warned about (a command may open its repository twice)
_WARNED: set[Path] = set()


def new_command() -> None:
    """Forget what the previous command warned about (a watcher runs many in one process)."""
    _WARNED.clear()


def _warn_unknown_tables(repo: Repository) -> None:
    """Warn, once, about tables of config.toml Strata does not read (a typo drops settings).

    A warning and not a refusal: recording must go on whatever the file holds
    (and an older Strata must keep recording in a repository a newer one
    configured); the command that reads a table refuses a near miss of it.
    """
    from strata.layout import unknown_tables_warning

    problem = unknown_tables_warning(repo.config.raw)
    if problem is not None and repo.layout.config not in _WARNED:
        _WARNED.add(repo.layout.config)
        warn(f"{repo.layout.config}: {problem}")


def init_repo(
    path: str,
    store: str | None,
    ledger: str = "sqlite",
    *,
    snapshot: bool = False,
    objects: str | None = None,
) -> tuple[Repository, InitResult]:
    """Create or reopen a repository; what init did (``snapshot``: record the folder as it is)."""
    from strata.repo import Repository

    return Repository.create(
        Path(path),
        store=Path(store) if store else None,
        ledger=ledger,
        snapshot=snapshot,
        objects=Path(objects) if objects else None,
        author=make_author(None, None),
        progress=Progress(),
        **injected(),
    )


def rel_path(repo: Repository, arg: str) -> str:
    """A path typed by the user, relative to the current folder, as a workspace path."""
    from strata.sandbox.paths import workspace_relative

    return workspace_relative(arg, cwd=Path.cwd(), root=repo.root)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout; an object carries ``"schema": 1``."""
    sys.stdout.write(json.dumps(versioned(value), indent=2, ensure_ascii=False) + "\n")


def emit_list(
    items: Sequence[Any], *, as_json: bool, empty: str, line: Callable[[Any], str]
) -> None:
    """A list command's answer: each item's ``to_json()``, or a ``line`` each (``empty``: none)."""
    import click

    if as_json:
        emit_json([item.to_json() for item in items])
        return
    if not items:
        click.echo(empty)
    for item in items:
        click.echo(line(item))


def emit_one(data: Any, *, as_json: bool, text: Callable[[], str]) -> None:
    """A command's answer of one thing: ``data`` as JSON, or the lines ``text()`` makes."""
    import click

    if as_json:
        emit_json(data)
    else:
        click.echo(text())


def emit_json_line(value: dict[str, Any]) -> None:
    """Print one object as a line of JSON (a stream of them: ``watch --json``)."""
    sys.stdout.write(json.dumps(versioned(value), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def report_error(
    error_type: str,
    message: str,
    hint: str | None,
    *,
    as_json: bool,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Print an error on stderr: ``error:``/``hint:`` lines, or with ``as_json`` one JSON line.

    The JSON is ``{"schema": 1, "error": {"type": ..., "message": ..., "hint": ... or null}}``;
    ``type`` is the error's class name (see :mod:`strata.errors`); ``extra`` adds
    keys to ``error`` (``alternatives``: the models a failed provider may be switched to).
    """
    import click

    if as_json:
        body = {"type": error_type, "message": message, "hint": hint, **(extra or {})}
        sys.stderr.write(json.dumps(versioned({"error": body}), ensure_ascii=False) + "\n")
        sys.stderr.flush()
        return
    click.echo(f"error: {printable_lines(message)}", err=True)
    if hint:
        click.echo(f"hint: {printable_lines(hint)}", err=True)


def warn(message: str) -> None:
    """A warning on stderr."""
    import click

    click.echo(click.style("warning: ", fg="yellow") + printable_lines(message), err=True)


def short(text: str | None, width: int = 12) -> str:
    """The shown prefix of an id."""
    return (text or "-")[:width]


@contextmanager
def command_output_to_stderr(active: bool) -> Iterator[None]:
    """With ``--json``, the command's standard output goes to stderr: stdout is the JSON's.

    The command inherits file descriptor 1, so it is pointed at stderr while
    the command runs and put back before the JSON is printed.
    """
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def debounce_option(help_text: str) -> Callable[[F], F]:
    """The shared ``--debounce-ms`` of the commands that record a step when the files settle."""
    import click

    return click.option(
        "--debounce-ms",
        type=click.IntRange(min=0),
        default=1000,
        show_default=True,
        help=help_text,
    )


def local_port_option(func: F) -> F:
    """The shared ``--port`` of the commands that serve on 127.0.0.1."""
    import click

    return click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        help="The port on 127.0.0.1 (0: any free one).",
    )(func)


def wait_for_interrupt() -> None:
    """Block until Ctrl-C or SIGTERM (a server's foreground loop); the handlers are put back."""
    import signal
    import threading
    from types import FrameType

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def model_option(help_text: str | None = None) -> Callable[[F], F]:
    """The shared ``--model PROVIDER[:MODEL]`` option of the commands that call a model."""
    import click

    text = help_text or (
        "The provider (and model) to use; default $STRATA_MODEL or [model] default "
        "of config.toml ('strata models' lists them)."
    )
    return click.option("--model", "model", default=None, metavar="PROVIDER[:MODEL]", help=text)


def open_model(repo: Any, model: str | None) -> tuple[Any, tuple[str, ...]]:
    """The provider ``model`` names (or the default), and the secrets its traces must not keep.

    Retries are announced on stderr (``strata: …``), so a user never waits in
    silence; the secrets are the environment's ``*_API_KEY`` and ``*_TOKEN`` values.
    """
    import click

    from strata.providers.config import open_provider
    from strata.providers.transport import Retry

    provider = open_provider(
        model,
        config=repo.config.raw,
        environ=os.environ,
        root=repo.root,
        retry=Retry(notify=lambda line: click.echo(f"strata: {line}", err=True)),
    )
    return provider, environment_secrets()


def environment_secrets() -> tuple[str, ...]:
    """The environment's ``*_API_KEY`` and ``*_TOKEN`` values (redacted from traces)."""
    return tuple(v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and v)


#: the tool gateway's policy profiles (strata.gateway.policy.PROFILES, not imported at start-up)
PROFILE_NAMES = ("read-only", "workspace-write", "full")


def profile_option(help_text: str) -> Callable[[F], F]:
    """The shared ``--profile`` option of the commands that run commands through the gateway."""
    import click

    return click.option("--profile", type=click.Choice(PROFILE_NAMES), default=None, help=help_text)


def command_timeout_option(help_text: str) -> Callable[[F], F]:
    """The shared ``--timeout`` of the commands that run commands through the gateway (120 s)."""
    import click

    return click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=120.0,
        show_default=True,
        help=help_text,
    )


# -- shell completion (click's shell_complete; see docs/completion.md) ----------------

#: how many of the newest state events a completion offers
COMPLETE_EVENTS = 20


def _completion_refs(kinds: tuple[str, ...]) -> list[tuple[str, str]]:
    """(value, help) of the refs of the current folder's repository; [] outside one or on error.

    Read only, as a reader: no watcher is started, nothing is recorded.
    """
    from strata.errors import StrataError
    from strata.repo import Repository

    found: list[tuple[str, str]] = []
    try:
        with Repository.open(Path.cwd()) as repo:
            view = repo.view()
            if "event" in kinds:
                found += [("HEAD", "the current state"), ("HEAD~1", "the state before it")]
            if "branch" in kinds:
                found += [(name, "branch") for name in sorted(view.branches)]
            if "bookmark" in kinds:
                found += [(name, "bookmark") for name in sorted(view.bookmarks)]
            if "event" in kinds:
                states = [e for e in repo.history(limit=COMPLETE_EVENTS * 4) if e.is_state]
                for e in states[:COMPLETE_EVENTS]:
                    what = f"{e.action_type} {e.ts[:16].replace('T', ' ')}"
                    if e.rationale:
                        what += f" {e.rationale.splitlines()[0][:40]}"
                    found.append((short(e.id), what))
    except (StrataError, OSError, ValueError):
        return []
    return found


def _completer(*kinds: str) -> Callable[[click.Context, click.Parameter, str], list[Any]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [
            CompletionItem(value, help=help_text)
            for value, help_text in _completion_refs(kinds)
            if value.startswith(incomplete)
        ]

    return complete


#: completes a ref: HEAD, branches, bookmarks and the newest state events' ids
complete_ref = _completer("event", "branch", "bookmark")
#: completes a branch name
complete_branch = _completer("branch")
#: completes a bookmark name
complete_bookmark = _completer("bookmark")
