"""Commands over the ledger itself: ``ledger head``, ``ledger verify``, ``ledger index rebuild``."""

from __future__ import annotations

import sys

import click

from strata.cli.common import emit_json, json_option, open_repo
from strata.diff.display import printable


@click.group()
def ledger() -> None:
    """Inspect and maintain the ledger (the append-only, hash-chained record).

    \b
    Example:
      strata ledger head        # write this down: it proves later that nothing was rewritten
      strata ledger verify
    """


@ledger.command("head")
@json_option
def ledger_head(as_json: bool) -> None:
    """Print the hash of the newest record: it summarises the whole history.

    On a shared ledger (PostgreSQL), each branch is chained on its own: the
    head of every branch follows, one a line.

    \b
    Example:
      strata ledger head > ~/strata-head.txt
    """
    with open_repo() as repo:
        head = repo.ledger.chain_head()
        last = repo.ledger.driver.last()
        heads = repo.ledger.chain_heads() if repo.ledger.shared else {}
    if as_json:
        emit_json(
            {
                "head": head,
                "records": last.seq if last else 0,
                **({"heads": heads} if heads else {}),
            }
        )
    else:
        click.echo(head or "(empty ledger)")
        for lane, lane_head in sorted(heads.items()):
            click.echo(f"{lane_head}  {f'branch {lane}' if lane else '(before the branches)'}")


@ledger.command("verify")
@json_option
def ledger_verify(as_json: bool) -> None:
    """Check the hash chain and the index; exit 1 naming the first bad record.

    \b
    Example:
      strata ledger verify
    """
    with open_repo() as repo:
        broken = repo.ledger.verify()
        problems = ([broken] if broken else []) + repo.ledger.driver.verify_index()
        records = repo.ledger.driver.count()
    if as_json:
        emit_json({"ok": not problems, "problems": problems, "records": records})
    elif not problems:
        click.echo(f"ok: {records} records, chain and index verified")
    for p in problems if not as_json else []:
        click.echo(f"problem: {printable(str(p))}", err=True)
    if problems:
        sys.exit(1)


@ledger.group("index")
def ledger_index() -> None:
    """Maintain the ledger's index.

    \b
    Example:
      strata ledger index rebuild
    """


@ledger_index.command("rebuild")
@json_option
def ledger_index_rebuild(as_json: bool) -> None:
    """Rebuild the event index from the records (the records are the truth).

    \b
    Example:
      strata ledger index rebuild
    """
    with open_repo() as repo, repo.writing():
        repo.ledger.driver.rebuild_index()
        problems = repo.ledger.driver.verify_index()
    if as_json:
        emit_json({"ok": not problems, "problems": problems})
    else:
        click.echo("Index rebuilt." if not problems else "\n".join(problems))
    if problems:
        sys.exit(1)


@ledger.command("convert")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="sqlite|jsonl|postgresql://...",
    help="The driver to move to (a PostgreSQL URL names an empty database).",
)
@json_option
def ledger_convert(to: str, as_json: bool) -> None:
    """Move the ledger to another driver: same records, same ids, same chain head.

    The old store is kept beside the new one until the next conversion (a
    PostgreSQL ledger converted away stays in its database).

    \b
    Example:
      strata ledger convert --to jsonl
      strata ledger convert --to postgresql://team@db.example/strata
      strata ledger convert --to sqlite
    """
    with open_repo() as repo:
        result = repo.convert_ledger(to)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(
            f"Converted {result.records} records to {to}; chain head {result.head} "
            f"(old store kept at {result.backup})"
        )


COMMANDS = [ledger]
