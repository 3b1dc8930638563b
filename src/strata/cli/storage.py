"""Commands over the store's size: ``gc``, ``repack`` and ``du``."""

from __future__ import annotations

from typing import Any

import click

from strata.cli.common import emit_json, json_option, open_repo, short


def _size(n: int) -> str:
    """Bytes as a person reads them: ``812 B``, ``4.2 KiB``, ``1.3 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option(
    "--grace",
    "grace",
    type=click.IntRange(min=0),
    default=None,
    metavar="MINUTES",
    help="Spare unreachable objects written less than MINUTES ago "
    "(default: retention.prune_grace_minutes, 60).",
)
@json_option
def gc(dry_run: bool, grace: int | None, as_json: bool) -> None:
    """Remove stored objects that nothing kept can reach.

    Kept: every snapshot the retention policy of config.toml keeps
    ([retention]: everything for keep_all_days, then one per hour up to
    hourly_days, one per day up to daily_days), and always whatever HEAD,
    a branch, a bookmark, a checkpoint, the open Draft, a recent operation
    (undo/redo), a journal or a run in progress names. Events stay in the
    history; rewinding to one whose snapshot was removed says so. Also removes
    the kept Draft folder when no Draft is open and the git backend's refs of
    runs no longer kept.

    \b
    Example:
      strata gc --dry-run       # what would go, and how many bytes
      strata gc
    """
    with open_repo() as repo:
        result = repo.gc(dry_run=dry_run, grace_s=None if grace is None else grace * 60)
    if not dry_run:
        from strata import telemetry

        telemetry.note("gc_bytes_freed", result.bytes_freed)  # for 'strata metrics'
    if as_json:
        emit_json(result.to_json())
        return
    verb = "Would remove" if dry_run else "Removed"
    objects_bytes = max(result.bytes_freed - result.draft_folder_bytes, 0)
    click.echo(
        f"{verb} {_count(result.objects_removed, 'object')} ({_size(objects_bytes)}); "
        f"{result.kept_snapshots} snapshots kept, {len(result.pruned_snapshots)} thinned."
    )
    if result.spared_recent:
        click.echo(f"Spared {result.spared_recent} unreachable objects written recently.")
    if result.draft_folder_bytes:
        click.echo(f"{verb} the kept Draft folder ({_size(result.draft_folder_bytes)}).")
    if result.git_refs_removed:
        click.echo(f"{verb} {len(result.git_refs_removed)} git refs under refs/strata/.")
    if result.operation_id:
        click.echo(f"Recorded as operation {short(result.operation_id)}.")


@click.command("repack")
@json_option
def repack(as_json: bool) -> None:
    """Merge every pack and the loose objects into one pack.

    The new pack is written and made durable before the old ones are
    deleted, so a reader never misses an object and a crash loses nothing.

    \b
    Example:
      strata repack
    """
    with open_repo() as repo:
        result = repo.repack()
    if as_json:
        emit_json(result.to_json())
        return
    if result.pack is None and not result.packs_removed:
        click.echo("Nothing to repack.")
        return
    click.echo(
        f"Packed {result.objects} objects into one pack "
        f"({_count(result.packs_before, 'pack')} and "
        f"{_count(result.loose_packed, 'loose object')} before); "
        f"{_size(result.bytes_before)} -> {_size(result.bytes_after)} on disk."
    )
    if result.corrupt:
        click.echo(
            f"{len(result.corrupt)} corrupt objects were left in place: run 'strata check'",
            err=True,
        )


_KIND_NAMES = {
    "loose_objects": "loose objects",
    "packs": "packs",
    "pack_indexes": "pack indexes",
    "ledger": "ledger",
    "draft": "Draft folder",
    "stat_caches": "stat caches",
    "git_map": "git import map",
    "trash": "trash (replaced)",
    "other": "other",
}


@click.command("du")
@json_option
def du(as_json: bool) -> None:
    """Show the store's size on disk by kind, and what gc would free now.

    \b
    Example:
      strata du
      strata du --json | jq .gc_would_free
    """
    with open_repo() as repo:
        usage = repo.du()
    if as_json:
        emit_json(usage.to_json())
        return
    for kind, size in usage.kinds.items():
        click.echo(f"{_KIND_NAMES.get(kind, kind):<20} {_size(size):>12}")
    click.echo(f"{'total':<20} {_size(usage.total):>12}")
    parts = [f"{kind} {_size(size)} ({usage.counts[kind]})" for kind, size in usage.objects.items()]
    click.echo("objects: " + ", ".join(parts))
    for name, size in usage.outside.items():
        click.echo(f"outside the repository: {name} {_size(size)}")
    click.echo(f"gc would free {_size(usage.gc_would_free)} ({usage.gc_would_remove} objects).")
    click.echo(budget_line(usage.budget))


def budget_line(budget: dict[str, Any]) -> str:
    """The storage budget in one line, as ``du`` and ``status`` print it."""
    if not budget.get("max_size"):
        line = "Storage budget: none (set [retention] max_size in config.toml)"
    else:
        line = f"Storage budget: {_size(budget['used'])} of {_size(budget['max_size'])}"
    if budget.get("over"):
        line += " (over: what is kept (bookmarks, checkpoints, the last "
        line += f"{budget['keep_last']} states) needs more)"
    cut = budget.get("history_cut") or 0
    if cut:
        when = str(budget.get("last_cut") or "")[:19].replace("T", " ")
        line += (
            f"; it cut undo history: {_count(cut, 'state')} the retention tiers would keep "
            f"were pruned{f' (last {when} UTC)' if when else ''}"
        )
    return line


COMMANDS = [gc, repack, du]
