"""The audit bundle: ``strata bundle export|verify|replay``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from strata.cli.common import emit_json, json_option, open_repo, short
from strata.diff.display import printable

#: ``--identity FILE`` (repeatable): the keys that open an encrypted bundle
identity_option = click.option(
    "--identity",
    "identities",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A key file that opens an encrypted bundle (age or SSH; repeatable).",
)


@click.group()
def bundle() -> None:
    """One self-verifying file with a stretch of history, for an audit.

    The bundle holds the ledger's hash chain, the chain head, every snapshot
    manifest, tree and file of the range, the patches, the (redacted) traces
    and a replay script. 'verify' and 'replay' need no repository.

    \b
    Example:
      strata bundle export ../audit.tar.zst
      strata bundle verify ../audit.tar.zst     # on any machine
    """


@bundle.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("span", required=False)
@click.option(
    "--recipient",
    "recipients",
    multiple=True,
    help="Encrypt for this age (age1…) or SSH public key (repeatable; the bundle-age extra).",
)
@json_option
def bundle_export(file: Path, span: str | None, recipients: tuple[str, ...], as_json: bool) -> None:
    """Write the history (or the range A..B) to FILE (tar + zstd).

    \b
    Example:
      strata bundle export ../audit.tar.zst
      strata bundle export ../last-run.tar.zst HEAD~2..HEAD
      strata bundle export ../for-audit.age --recipient "$(age-keygen -y auditor.key)"
    """
    from strata.sync.bundle import export_bundle

    with open_repo() as repo:
        result = export_bundle(repo, file, span, recipients=recipients)
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"Wrote {printable(str(file))}: {result['events']} event(s), "
            f"{result['snapshots']} snapshot(s), chain head {short(result['head'])}"
        )


@bundle.command("verify")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@identity_option
@json_option
def bundle_verify(file: Path, identities: tuple[Path, ...], as_json: bool) -> None:
    """Check a bundle's hash chain, head, objects and snapshots; exit 1 on the first problem.

    \b
    Example:
      strata bundle verify audit.tar.zst
    """
    from strata.sync.bundle import verify_bundle

    report = verify_bundle(file, identities)
    if as_json:
        emit_json(report.to_json())
    elif not report.problems:
        click.echo(
            f"ok: {report.records} records chained to head {short(report.head)}, "
            f"{report.snapshots} snapshot(s) and {report.objects} object(s) verified"
        )
    for problem in report.problems if not as_json else []:
        click.echo(f"problem: {printable(problem)}", err=True)
    if report.problems:
        sys.exit(1)


@bundle.command("replay")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.option("--event", "event", help="The state event to rebuild (default: the last).")
@identity_option
@json_option
def bundle_replay(
    file: Path, dest: Path, event: str | None, identities: tuple[Path, ...], as_json: bool
) -> None:
    """Verify a bundle, then rebuild a recorded state's files in DEST, offline.

    \b
    Example:
      strata bundle replay audit.tar.zst ./as-recorded
    """
    from strata.sync.bundle import replay_bundle

    result = replay_bundle(file, dest, event, identities)
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"Rebuilt {result['files']} file(s) of event {short(result['event_id'])} "
            f"in {printable(str(dest))}"
        )


COMMANDS = [bundle]
