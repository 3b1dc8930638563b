"""``strata results``: the result events that test and eval runs recorded."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import emit_list, emit_one, json_option, open_repo, short
from strata.diff.display import printable

if TYPE_CHECKING:
    from strata.changes.results import ResultRecord
    from strata.runs.result import RunResult


def _junit_from_argv(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith("--junitxml=") or arg.startswith("--junit-xml="):
            return arg.split("=", 1)[1]
        if arg in ("--junitxml", "--junit-xml") and i + 1 < len(argv):
            return argv[i + 1]
    return None


def record_run_result(
    run: RunResult, name: str, argv: list[str], junit_path: str | None, *, as_json: bool
) -> ResultRecord:
    """Record ``strata run --result NAME``'s result event after the run."""
    from strata.errors import UsageError

    path = junit_path or _junit_from_argv(argv)
    junit = None
    if path is not None:
        report = Path(path)
        if report.is_file():
            junit = report.read_bytes()
        elif junit_path is not None:
            raise UsageError(f"--junit {path}: the command wrote no such file")
    anchor = run.workspace.before_snapshot if run.workspace is not None else "HEAD"
    with open_repo() as repo:
        record = repo.record_result(
            name,
            exit_code=run.exit_code,
            duration_ms=run.duration_ms,
            anchor=anchor,
            command=argv,
            run_id=run.run_id,
            junit=junit,
        )
    if not as_json:
        click.echo(f"strata: {_line(record)}", err=True)
    return record


def _line(r: ResultRecord) -> str:
    m: dict[str, Any] = r.to_json()["metrics"]
    counts = (
        f" ({m['tests']} tests, {m['failures']} failures, {m['errors']} errors, "
        f"{m['skipped']} skipped)"
        if m
        else ""
    )
    verdict = click.style("passed", fg="green") if r.passed else click.style("failed", fg="red")
    took = r.event.data.get("duration_ms") or 0
    return (
        f"result {short(r.event.id)} {printable(r.name)}: {verdict}{counts} in {took / 1000:.1f} s"
        f" on {short(r.event.anchor_event_id or '')}"
    )


@click.group()
def results() -> None:
    """Result events: test and eval runs, judged, anchored to their snapshots.

    \b
    Example:
      strata run --result tests -- pytest -q --junitxml=report.xml
      strata results list --between HEAD~5..HEAD
    """


@results.command("list")
@click.option("--between", metavar="A..B", help="Only results anchored from A to B.")
@click.option("--name", help="Only results of this name.")
@json_option
def list_(between: str | None, name: str | None, as_json: bool) -> None:
    """List result events, newest first.

    \b
    Example:
      strata results list
      strata results list --between main~3..main --name tests --json
    """
    with open_repo() as repo:
        found = repo.results(between=between, name=name)
    emit_list(found, as_json=as_json, empty="No results recorded.", line=_line)


@results.command()
@click.argument("result_id")
@json_option
def show(result_id: str, as_json: bool) -> None:
    """Show one result event: its verdict, metrics, command and anchor.

    \b
    Example:
      strata results show 3f9k
    """
    with open_repo() as repo:
        record = repo.result(result_id)
    data = record.to_json()

    def text() -> str:
        lines = [_line(record), f"  command: {printable(' '.join(data['command']))}"]
        lines += [f"  {key}: {value}" for key, value in sorted(data["metrics"].items())]
        return "\n".join(lines + ([f"  run: {data['run_id']}"] if data["run_id"] else []))

    emit_one(data, as_json=as_json, text=text)


COMMANDS = [results]
