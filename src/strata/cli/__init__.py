"""The ``strata`` command line.

One click group; one module per command family. This is the only place that
maps errors to output and exit codes: a :class:`~strata.errors.StrataError`
prints ``error: …`` (and ``hint: …``) and exits 1; a usage error exits 2; a
bug prints ``internal error`` and asks for ``--debug``.
"""

from __future__ import annotations

import os
import sys

import click

from strata._version import __version__
from strata.cli.common import State
from strata.errors import StrataError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="strata", message="%(prog)s %(version)s")
@click.option(
    "-C",
    "directory",
    type=click.Path(file_okay=False),
    help="Run as if strata was started in this folder.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx: click.Context, directory: str | None, debug: bool) -> None:
    """Strata: a time machine and safety layer for an agent's workspace.

    Every change to the workspace is recorded in an append-only ledger;
    any two points can be diffed, and any point rewound to without losing
    the work you had.

    \b
    Example:
      strata init && strata snapshot -m "before the agent"
      strata diff HEAD          # what changed since
      strata rewind HEAD        # put the files back (your edits are auto-saved)
    """
    if directory is not None:
        try:
            os.chdir(directory)
        except OSError as exc:
            raise click.UsageError(f"cannot change to {directory}: {exc.strerror}") from None
    ctx.obj = State(debug=debug)


def _register() -> None:
    from strata.cli import draft, inspect, ledger, record, refs, rewind, run, watch

    for module in (record, inspect, rewind, refs, ledger, run, watch, draft):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``strata`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("STRATA_DEBUG") == "1"
    try:
        code = cli.main(args, prog_name="strata", standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        if exc.ctx is not None:
            click.echo(f"hint: see '{exc.ctx.command_path} --help'", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except StrataError as exc:
        if debug:
            raise
        click.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
        sys.exit(1)
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(1)
    except Exception as exc:
        if debug:
            raise
        click.echo(
            f"error: internal error ({type(exc).__name__}: {exc}); "
            "run again with --debug for the traceback and please report it",
            err=True,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
