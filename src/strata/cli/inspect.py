"""Commands that look: history, diff, status, show, export, cat and check."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import (
    LIMIT_MAX,
    complete_ref,
    emit_json,
    json_option,
    open_repo,
    rel_path,
    short,
    warn,
)
from strata.diff.display import printable, printable_patch
from strata.sandbox.paths import display_path

if TYPE_CHECKING:
    from strata.core.results import DiffResult
    from strata.ledger.events import Event
    from strata.repo import Repository

_LETTER = {
    "added": "A",
    "modified": "M",
    "deleted": "D",
    "renamed": "R",
    "type_changed": "T",
    "mode_changed": "M",
}


#: events that record how a change was recorded, not a change: 'history' lists them with --all
BOOKKEEPING = frozenset(
    {
        "workspace_snapshot_taken",
        "workspace_diff_computed",
        "tool_call_started",
        "terminal_step_started",
    }
)
#: how many events 'history' lists when its output is not a terminal and no --limit is given
HISTORY_DEFAULT = 1000


@click.command()
@click.option(
    "--file", "file_", metavar="PATH", help="Only events that changed PATH (a file or folder)."
)
@click.option("--author", help="Only events by this author name.")
@click.option(
    "--author-kind",
    type=click.Choice(["human", "agent", "llm", "system"]),
    help="Only events by this kind of author.",
)
@click.option("--branch", help="Only events recorded on this branch.")
@click.option("--operation", metavar="ID", help="Only events of this operation.")
@click.option(
    "--action",
    metavar="TYPE",
    help="Only events of this action type (snapshot, rewind…), or of a family: "
    "approval, tool_call, terminal_step, host, task.",
)
@click.option(
    "--group-by",
    type=click.Choice(["operation", "snapshot", "author"]),
    help="One line per operation, snapshot or author.",
)
@click.option(
    "--expand",
    is_flag=True,
    help="With --group-by: list each group's events too; also the events of rolled-up operations.",
)
@click.option(
    "--semantic-block",
    metavar="PATH::NAME",
    help="Only events that changed this function, class, key or heading "
    "(e.g. 'src/app.py::Greeter.greet', 'config.json::/services/web'), across renames.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help=f"Show at most N events (default: all on a terminal, through a pager; "
    f"the newest {HISTORY_DEFAULT} elsewhere, --json excepted).",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also list the bookkeeping events (a run's snapshots and diff, tool calls and "
    "terminal steps starting) that the listing leaves out; --json and --action list them.",
)
@click.option(
    "--graph",
    is_flag=True,
    help="Draw the branches and forks of the state events beside them (as git log --graph).",
)
@click.option("--no-pager", is_flag=True, help="Never page the listing on a terminal.")
@json_option
def history(
    file_: str | None,
    author: str | None,
    author_kind: str | None,
    branch: str | None,
    operation: str | None,
    action: str | None,
    group_by: str | None,
    expand: bool,
    semantic_block: str | None,
    limit: int | None,
    show_all: bool,
    graph: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """List recorded events, newest first.

    --graph draws the history graph of the state events (snapshots, runs'
    states, merges...) as git log --graph does: one column per line of
    descent, forks and merges joined; @ marks HEAD, branch tips and
    bookmarks are named.

    On a terminal the listing goes through a pager ($PAGER, else less) unless
    --no-pager; elsewhere it stops at the newest events, saying so, unless
    --limit is given.

    \b
    Example:
      strata history --file src/app.py --limit 5
      strata history --author-kind agent --group-by operation --expand
      strata history --semantic-block 'src/app.py::greet'
      strata history --all --no-pager
      strata history --graph --limit 30
    """
    if graph:
        _check_graph(file_, author, author_kind, operation, action, group_by, semantic_block)
        _check_graph_json(as_json)
    if semantic_block is not None:
        _block_history(semantic_block, branch, limit, as_json)
        return
    terminal = sys.stdout.isatty()
    stop = None
    if limit is None and not as_json and group_by is None and not terminal:
        stop = HISTORY_DEFAULT
    with open_repo() as repo:
        path = display_path(rel_path(repo, file_)) if file_ else None
        events = repo.history(
            path=path,
            author=author,
            limit=min(limit, LIMIT_MAX) if limit else (stop + 1 if stop else None),
            branch=branch,
            operation=operation,
            author_kind=author_kind,
            action=action,
        )
    if group_by is not None:
        titles: dict[str, str] = {}
        if group_by == "operation":  # an agent's prompt: its first line
            with open_repo() as repo:
                for op in repo.operations():
                    if op.group and "id" in op.group:
                        titles.setdefault(str(op.group["id"]), str(op.group.get("title") or ""))
        _print_groups(events, group_by, expand, as_json, titles)
        return
    if as_json:
        emit_json([e.to_json() for e in events])
        return
    cut = stop is not None and len(events) > stop
    events = events[:stop] if stop is not None else events
    if not (show_all or action or operation):
        events = [e for e in events if e.action_type not in BOOKKEEPING]
    if not events:
        filtered = path or author or author_kind or branch or operation or action
        click.echo("No matching events." if filtered else "No events recorded yet.")
        return
    from strata.changes.rollups import active_rollups

    rolled = active_rollups(events) if not expand else {}
    lines: list[str] = []
    if graph:
        with open_repo() as repo:
            lines = _graph_lines(events, repo.view())
    for e in events if not graph else ():
        if e.operation_id in rolled and e.action_type != "rollup":
            continue  # shown as its operation's rollup (--expand lists them)
        lines.append(_event_line(e))
        if e.action_type == "rollup" and e.data.get("rollup", {}).get("of_operation_id") in rolled:
            n = e.data["rollup"].get("event_count", 0)
            lines.append(f"    ({n} events rolled up; --expand lists them)")
    if terminal and limit is None and not no_pager:
        # as git does: less quits when the listing fits the screen and keeps the colours
        os.environ.setdefault("LESS", "FRX")
        click.echo_via_pager(line + "\n" for line in lines)
    else:
        for line in lines:
            click.echo(line)
    if cut:
        warn(f"the newest {stop} events are shown: --limit N shows more")


def _check_graph(*filters: str | None) -> None:
    if any(f is not None for f in filters):
        raise click.UsageError(
            "--graph draws whole lines of history: it takes --branch and --limit, not filters"
        )


def _check_graph_json(as_json: bool) -> None:
    if as_json:
        raise click.UsageError(
            "--graph draws for people; --json gives each event's parent_event_id instead"
        )


def _graph_lines(events: list[Event], view: Any) -> list[str]:
    """The state events of ``events`` with the drawing of their graph beside them."""
    from strata.cli.graph import draw

    states = [e for e in events if e.is_state]
    names: dict[str, list[str]] = {}
    for name, target in sorted(view.branches.items()):
        names.setdefault(str(target), []).append(name)
    for name, mark in sorted(view.bookmarks.items()):
        names.setdefault(str(mark.target), []).append(f"bookmark {name}")
    nodes = []
    for e in states:
        parents = [e.parent_event_id] if e.parent_event_id else []
        right = e.data.get("right") if e.action_type == "merge" else None
        nodes.append((str(e.id), [*parents, *([str(right)] if right else [])]))
    lines = []
    for prefix, index in draw(nodes, view.head_event):
        if index < 0:
            lines.append(prefix)
            continue
        e = states[index]
        refs = names.get(str(e.id))
        label = f" ({', '.join(printable(n) for n in refs)})" if refs else ""
        lines.append(f"{prefix} {_event_line(e)}{click.style(label, fg='green')}")
    return lines


def _block_history(block: str, branch: str | None, limit: int | None, as_json: bool) -> None:
    from strata.cli.semantic import block_line

    with open_repo() as repo:
        if "::" in block:
            path, name = block.split("::", 1)
            block = display_path(rel_path(repo, path)) + "::" + name
        hits = repo.block_history(
            block, branch=branch, limit=min(limit, LIMIT_MAX) if limit else None
        )
    if as_json:
        emit_json(
            [{**e.to_json(), "semantic_blocks": [b.to_json() for b in found]} for e, found in hits]
        )
        return
    if not hits:
        click.echo("No event changed that block.")
    for e, found in hits:
        _print_event(e)
        for b in found:
            click.echo(block_line(b.id, b.change, b.old_id, b.detail))


def _print_event(e: Event, indent: str = "") -> None:
    click.echo(_event_line(e, indent))


def _event_line(e: Event, indent: str = "") -> str:
    n = len(e.files)
    what = f"{n} file{'s' if n != 1 else ''}" if e.snapshot_ref else ""
    line = (
        f"{indent}{click.style(short(e.id), fg='yellow')} {e.ts[:19].replace('T', ' ')} "
        f"{e.action_type:<9} {printable(e.author.name)} ({e.author.kind})"
    )
    if e.snapshot_ref and e.branch != "main":
        line += f" [{printable(e.branch)}]"
    if what:
        line += f"  {what}"
    if e.rationale:
        line += f"  {printable(e.rationale)}"  # a message may hold anything: shown, never obeyed
    return line


def _group_key(event: Event, by: str) -> str:
    if by == "operation":
        return event.operation_id or event.id
    if by == "snapshot":
        return event.snapshot_ref or (event.anchor_event_id or event.id)
    return f"{event.author.name} ({event.author.kind})"


def _print_groups(
    events: list[Event], by: str, expand: bool, as_json: bool, titles: dict[str, str]
) -> None:
    groups: dict[str, list[Event]] = {}
    for e in events:
        groups.setdefault(_group_key(e, by), []).append(e)
    if as_json:
        emit_json(
            [
                {
                    "group_by": by,
                    "key": key,
                    "count": len(members),
                    "first_ts": members[-1].ts,
                    "last_ts": members[0].ts,
                    "changed_paths": sorted({f for m in members for f in m.files}),
                    "event_ids": [m.id for m in members],
                    **({"title": titles[key]} if key in titles else {}),
                    **({"events": [m.to_json() for m in members]} if expand else {}),
                }
                for key, members in groups.items()
            ]
        )
        return
    for key, members in groups.items():
        files = {f for m in members for f in m.files}
        actions = ", ".join(sorted({m.action_type for m in members}))
        label = printable(key) if by == "author" else short(key)
        count = f"{len(members)} event{'s' if len(members) != 1 else ''}"
        span = f"{members[-1].ts[:19].replace('T', ' ')} .. {members[0].ts[:19].replace('T', ' ')}"
        title = f"  {printable(titles[key])}" if key in titles else ""
        click.echo(
            f"{click.style(label, fg='cyan')}  {count}, "
            f"{len(files)} file{'s' if len(files) != 1 else ''}, {actions}  {span}{title}"
        )
        if expand:
            for e in members:
                _print_event(e, indent="    ")


@click.command()
@click.argument("a", shell_complete=complete_ref)
@click.argument("b", required=False, shell_complete=complete_ref)
@click.option(
    "--file", "files", multiple=True, metavar="PATH", help="Only these paths (repeatable)."
)
@click.option(
    "--stat", is_flag=True, help="Per-file insertions and deletions instead of the patch."
)
@click.option("--name-only", is_flag=True, help="Only the changed paths.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["unified", "ast", "schema", "binary", "auto"]),
    default="unified",
    show_default=True,
    help="unified: git's patch. auto: each file's semantic blocks (functions, JSON "
    "Pointers, headings, cells, image likeness) above its patch; ast, schema or binary: "
    "the blocks alone for files of that mode, the patch for the rest.",
)
@click.option("--side-by-side", is_flag=True, help="With --format: old and new in two columns.")
@json_option
def diff(
    a: str,
    b: str | None,
    files: tuple[str, ...],
    stat: bool,
    name_only: bool,
    fmt: str,
    side_by_side: bool,
    as_json: bool,
) -> None:
    """Show what changed from A to B (default B: the working tree).

    A and B are event ids, snapshot ids (or unique prefixes), run ids,
    branches, bookmarks, HEAD or HEAD~N. A run id alone shows what the run
    changed. The patch is in git's format: 'git apply' accepts it, binary
    files included.

    With --format other than unified, each file also goes through the
    semantic handler its name selects; --json then adds 'semantic': per file
    its diff_mode, semantic_blocks, summary and fallback_reason.

    \b
    Example:
      strata diff HEAD~1 HEAD --stat
      strata diff HEAD~1 HEAD > ../last.patch   # 'git apply ../last.patch' elsewhere
      strata diff HEAD~1 HEAD --format auto     # functions, keys, headings that changed
    """
    if side_by_side and fmt == "unified":
        fmt = "auto"
    with open_repo() as repo:
        paths = [rel_path(repo, f) for f in files] or None
        result = repo.diff(a, b, paths=paths)
        if fmt != "unified":
            from strata.changes.blocks import file_semantics
            from strata.cli.semantic import print_semantic

            semantic = file_semantics(repo, result)
            if as_json:
                emit_json({**result.to_json(), "semantic": [f.to_json() for f in semantic]})
            elif not (name_only or stat):
                print_semantic(result, semantic, fmt, side_by_side=side_by_side)
                return
        summaries = _office_summaries(repo, result, a, b)
        if as_json:
            if fmt == "unified":
                emit_json({**result.to_json(), "file_summaries": summaries})
            return
        # on a terminal, names and lines are shown, never obeyed (control characters
        # written out; a text file gone binary as text); to a file or pipe, exact bytes
        terminal = sys.stdout.isatty()
        if name_only:
            if terminal:
                for f in result.files:
                    click.echo(printable(f.path))
            else:  # a name that is not UTF-8 as its own bytes, for xargs and the like
                sys.stdout.flush()
                sys.stdout.buffer.write(
                    b"".join(os.fsencode(f.name or f.path) + b"\n" for f in result.files)
                )
                sys.stdout.buffer.flush()
        elif stat:
            _print_stat(result.files, summaries)
        else:
            if terminal:  # what changed inside office files, above their binary patch
                for path, lines in summaries.items():
                    click.echo(f"{printable(path)}:")
                    for line in lines:
                        click.echo(f"    {printable(line)}")
            sys.stdout.flush()
            for section in result.iter_patch(readable=terminal):
                sys.stdout.buffer.write(printable_patch(section) if terminal else section)
            sys.stdout.buffer.flush()


def _office_summaries(
    repo: Repository, result: DiffResult, a: str, b: str | None
) -> dict[str, list[str]]:
    """Office files' summary lines: those the Draft revisions at A or B stored, else made now."""
    from strata.workbench.summaries import summaries_between

    return summaries_between(repo.resolve, result, a, b)


def _print_stat(files: list, summaries: dict[str, list[str]]) -> None:  # type: ignore[type-arg]
    if not files:
        return
    width = max(len(_label(f)) for f in files)
    for f in files:
        if f.binary:
            detail = f"Bin {f.bytes_changed} bytes"
        else:
            detail = (
                f"{f.insertions + f.deletions} "
                + click.style("+" * min(f.insertions, 40), fg="green")
                + click.style("-" * min(f.deletions, 40), fg="red")
            )
        click.echo(f" {_label(f):<{width}} | {detail}")
        for line in summaries.get(f.path, ()):
            click.echo(f" {'':<{width}} |   {printable(line)}")
    ins = sum(f.insertions for f in files)
    dels = sum(f.deletions for f in files)
    n = len(files)
    click.echo(
        f" {n} file{'s' if n != 1 else ''} changed, "
        f"{ins} insertion{'s' if ins != 1 else ''}(+), {dels} deletion{'s' if dels != 1 else ''}(-)"
    )


def _label(f: object) -> str:
    old = getattr(f, "old_path", None)
    path = printable(str(getattr(f, "path", "")))
    return f"{printable(old)} => {path}" if old else path


@click.command()
@json_option
def status(as_json: bool) -> None:
    """Show how the working tree differs from HEAD (records nothing).

    Also the branch HEAD is on ('branch' in --json); after a rewind to a
    point that is not a branch tip, HEAD is detached and the branch the next
    snapshot starts is named ('next_branch'), and whether a watcher serves
    the workspace ('watcher'; when none can run, why).

    \b
    Example:
      strata status --json
    """
    from strata.cli.storage import budget_line
    from strata.cli.watcher import watcher_line, watcher_report

    with open_repo() as repo:
        result = repo.status()
        watcher = watcher_report(repo)
        budget = _budget(repo)
    if as_json:  # the warnings are in the JSON
        extra = {"budget": budget} if budget is not None else {}
        emit_json({**result.to_json(), "watcher": watcher, **extra})
        return
    for w in result.warnings:
        warn(w)
    if result.head is None:
        click.echo("Nothing recorded yet: run 'strata snapshot'.")
    else:
        click.echo(
            f"HEAD {short(result.head.id)} (snapshot {short(result.head.snapshot_ref)}) "
            f"{result.head.ts[:19].replace('T', ' ')}"
        )
    if result.branch is not None and result.next_branch == result.branch:
        click.echo(f"On branch {printable(result.branch)} (new: the next snapshot starts it)")
    elif result.branch is not None:
        click.echo(f"On branch {printable(result.branch)}")
    else:
        click.echo(
            f"HEAD detached (not a branch tip): the next snapshot will start branch "
            f"{result.next_branch}"
        )
    click.echo(watcher_line(watcher))
    if budget is not None and (budget["max_size"] or budget.get("history_cut")):
        click.echo(budget_line(budget))
    if result.clean:
        click.echo("Working tree matches HEAD.")
        return
    click.echo("Unrecorded changes:")
    for c in result.changes:
        label = f"{c.old_path} -> {c.path}" if c.old_path else c.path
        click.echo(f"  {_LETTER.get(c.status, '?')} {printable(label)}")


def _budget(repo: Any) -> dict[str, Any] | None:
    """The storage budget for ``status``; None when ``[retention]`` is wrong (gc says why)."""
    from strata.errors import RepositoryError

    try:
        return dict(repo.budget().to_json())
    except RepositoryError:
        return None


@click.command()
@click.argument("spec", metavar="REF:PATH")
def show(spec: str) -> None:
    """Print a file as it was at REF (a folder prints its listing).

    \b
    Example:
      strata show HEAD~2:src/app.py
    """
    if ":" not in spec:
        raise click.UsageError("give REF:PATH, for example HEAD:README.md")
    scheme = "git:" if spec.startswith("git:") else ""  # git:<commit>:<path>
    ref, _, path = spec[len(scheme) :].partition(":")
    ref = scheme + ref
    with open_repo() as repo:
        data = repo.show(ref, _stored_path(repo, path))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _stored_path(repo: object, path: str) -> str:
    from strata.sandbox.paths import check_relative

    path = path.strip("/")
    return check_relative(path) if path else ""


@click.command()
@click.argument("ref", shell_complete=complete_ref)
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads that write files (default: one, plus one per further CPU for large files).",
)
@json_option
def export(ref: str, directory: str, threads: int | None, as_json: bool) -> None:
    """Write the files of REF into DIRECTORY (new or empty).

    \b
    Example:
      strata export HEAD~3 /tmp/before-agent
    """
    with open_repo() as repo:
        count = repo.export(ref, directory, threads=threads)
    if as_json:
        emit_json({"ref": ref, "directory": directory, "files_written": count})
    else:
        click.echo(
            f"Exported {count} file{'s' if count != 1 else ''} of {printable(ref)} "
            f"into {printable(str(directory))}"
        )


@click.command()
@click.argument("object_id", metavar="ID")
@json_option
def cat(object_id: str, as_json: bool) -> None:
    """Pretty-print a stored object: a tree, a snapshot manifest or a blob.

    ID is an object id or a unique prefix (or a ref: its snapshot is shown).

    \b
    Example:
      strata cat HEAD           # the manifest of HEAD's snapshot
      strata cat 3fa9c1         # a tree or blob by id prefix
    """
    with open_repo() as repo:
        kind, value = repo.cat(object_id)
    if kind == "tree":
        if as_json:
            emit_json(
                {
                    "kind": "tree",
                    "entries": [
                        {
                            "name": e.name,
                            "kind": e.kind,
                            "mode": f"{e.mode:o}",
                            "size": e.size,
                            "id": e.oid,
                        }
                        for e in value
                    ],
                }
            )
        else:
            for e in value:
                click.echo(f"{e.kind:<7} {e.mode:o} {e.size:>10} {e.oid} {printable(e.name)}")
    elif kind == "snapshot":
        emit_json({"kind": "snapshot", **value} if as_json else value)
    elif as_json:
        emit_json({"kind": "blob", "size": len(value)})
    else:
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()


@click.command()
@json_option
def check(as_json: bool) -> None:
    """Verify every object's hash and every reference.

    Exits 1 and lists each problem when anything is wrong.

    \b
    Example:
      strata check
    """
    with open_repo() as repo:
        problems = repo.check()
        events = sum(1 for _ in repo.ledger.driver.scan(kind="event"))
    if as_json:
        emit_json({"ok": not problems, "problems": problems, "events": events})
    elif problems:
        for p in problems:
            click.echo(f"problem: {printable(str(p))}", err=True)
    else:
        click.echo(f"ok: {events} events, every object and reference verified")
    if problems:
        if not as_json:
            click.echo(
                f"error: {len(problems)} problem{'s' if len(problems) != 1 else ''} found", err=True
            )
        sys.exit(1)


COMMANDS = [history, diff, status, show, export, cat, check]
