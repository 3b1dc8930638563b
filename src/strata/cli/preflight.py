"""``strata preflight``: rebuild a proposal in a scratch folder, verify it, check it.

:func:`echo_preflight` is shared with ``strata publish --preflight``.
"""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING

import click

from strata.cli.common import author_options, emit_json, json_option, make_author, open_repo
from strata.diff.display import printable, printable_lines

if TYPE_CHECKING:
    from strata.replay.preflight import PreflightResult

#: the lines of a failed check's output the terminal shows (the report keeps more)
TAIL_LINES = 20
#: the lines of a divergence's diff the terminal shows
DIFF_LINES = 40


def timeout_option(func: click.decorators.FC) -> click.decorators.FC:
    """The check's ``--timeout`` (shared with ``publish --preflight``)."""
    return click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Stop the check after this long and count it failed (default 600).",
    )(func)


def sandbox_option(func: click.decorators.FC) -> click.decorators.FC:
    """The check's ``--sandbox`` (shared with ``publish --preflight``)."""
    return click.option(
        "--sandbox",
        type=click.Choice(["bwrap", "none"]),
        default=None,
        help="Run the check in the bubblewrap sandbox with no network (default), "
        "or directly in the scratch folder ('none': no isolation).",
    )(func)


def echo_preflight(result: PreflightResult, *, err: bool = False) -> None:
    """Print what a preflight found: ok or FAILED, the divergence or the check's tail."""

    def say(line: str = "") -> None:
        click.echo(line, err=err)

    report = result.report
    details = report["proposal"]
    if report["kind"] == "draft":
        what = f"Draft {details['draft_id']}"
    else:
        what = f"patch {details['name'] or details['patch_artifact'][:12]}"
    n = len(details["paths"])
    onto = f"{what} ({n} path{'s' if n != 1 else ''}) onto {report['base']['event_id'][:12]}"
    if result.ok:
        say(f"preflight ok: {printable(onto)}: rebuilt and hash-verified")
    else:
        say(f"preflight FAILED: {printable(result.failure())}")
        say(f"  proposal: {printable(onto)}")
    divergence = result.divergence
    if divergence is not None and divergence.get("diff"):
        lines = str(divergence["diff"]).rstrip("\n").split("\n")
        for line in lines[:DIFF_LINES]:
            say(f"    {printable(line)}")
        if len(lines) > DIFF_LINES or divergence.get("diff_truncated"):
            say("    … (the report has more)")
    check = result.check
    if check is not None:
        shown = _command(check["command"])
        where = "no isolation" if check["sandbox"] == "none" else "sandboxed, no network"
        if not check["ran"]:
            say(f"  check {shown}: not run (the files diverged)")
        elif check["timed_out"]:
            say(f"  check {shown} ({where}): timed out after {check['timeout_s']:g} s")
        else:
            seconds = check["duration_ms"] / 1000
            say(f"  check {shown} ({where}): exit {check['exit_code']} in {seconds:.1f} s")
        if check["ran"] and not result.ok and check["output_tail"]:
            lines = str(check["output_tail"]).rstrip("\n").split("\n")
            cut = check["truncated"] or len(lines) > TAIL_LINES
            say("  the end of its output:" if cut else "  its output:")
            for line in lines[-TAIL_LINES:]:
                say(f"    | {printable(line)}")
    for warning in report.get("warnings", []):
        say(f"  warning: {printable_lines(warning)}")
    say(f"  report: {result.report_artifact} ('strata cat {result.report_artifact[:12]}')")


def _command(argv: list[str]) -> str:
    if len(argv) == 3 and argv[0] == "/bin/sh" and argv[1] == "-c":
        return repr(printable(argv[2]))
    return repr(printable(" ".join(argv)))


@click.command()
@click.option(
    "--patch",
    "patch_file",
    type=click.File("rb"),
    default=None,
    metavar="FILE",
    help="Check this patch (a unified diff; '-' reads stdin) applied onto HEAD's files "
    "instead of the Draft.",
)
@click.option(
    "--check",
    "check",
    default=None,
    metavar="CMD",
    help="Run this shell command in the rebuilt files; the preflight fails unless it exits 0.",
)
@timeout_option
@sandbox_option
@author_options
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="CMD")
def preflight(
    patch_file: IO[bytes] | None,
    check: str | None,
    timeout_s: float | None,
    sandbox: str | None,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Rebuild a proposal in a scratch folder, hash-verify it and run a check there.

    The proposal is the open Draft (what 'strata publish' would write:
    the Draft merged onto Published), or with --patch a unified diff applied
    onto HEAD's files. Published is rebuilt from the store in a scratch
    folder outside the workspace, verified against its recorded tree, the
    proposal applied and verified against the tree it should make; any
    difference is a divergence, shown with the first differing path. Then
    the check (--check CMD, or an argv after '--') runs there in the
    bubblewrap sandbox with no network. The folder is removed afterwards;
    a 'preflight' event records the outcome and links the report ('strata
    cat ID' shows it). Exits 1 when the preflight fails.

    \b
    Example:
      strata preflight --check "pytest -q"
      strata preflight --patch fix.patch -- make test
      # an agent's patch from stdin
      strata preflight --patch - --check "pytest -q" < agent.diff
    """
    if check is not None and command:
        raise click.UsageError("give the check either with --check or after '--', not both")
    who = make_author(author, author_kind)
    patch: bytes | None = None
    name = ""
    if patch_file is not None:
        patch = patch_file.read()
        name = "stdin" if patch_file is sys.stdin.buffer else os.path.basename(patch_file.name)
    with open_repo(who) as repo:
        result = repo.preflight(
            patch=patch,
            patch_name=name,
            check=list(command) if command else check,
            timeout_s=timeout_s,
            sandbox=sandbox or "bwrap",
            environ=dict(os.environ),
            author=who,
        )
    if as_json:
        emit_json(result.to_json())
    else:
        echo_preflight(result)
    if not result.ok:
        sys.stdout.flush()
        raise SystemExit(1)


COMMANDS = [preflight]
