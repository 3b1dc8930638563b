"""``strata merge``: a three-way merge of two points, with a conflict review in the terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from strata.cli.common import complete_ref, emit_json, json_option, open_repo, short
from strata.diff.display import printable
from strata.errors import UsageError


def _state_file(repo: Any) -> Path:
    return Path(repo.layout.repo) / "merge" / "review.json"


def _save(path: Path, state: dict[str, Any]) -> None:
    from strata.atomic import atomic_write

    path.parent.mkdir(exist_ok=True)
    atomic_write(path, json.dumps(state, indent=2, sort_keys=True).encode())


def _show_hunk(n: int, total: int, hunk: Any) -> None:
    click.echo(click.style(f"  hunk {n}/{total}", bold=True))
    click.echo(click.style("  <<<<<<< ours", fg="yellow"))
    for line in hunk.ours:
        click.echo("  " + printable(line.rstrip("\n")))
    click.echo(click.style("  ======= base", dim=True))
    for line in hunk.base:
        click.echo(click.style("  " + printable(line.rstrip("\n")), dim=True))
    click.echo(click.style("  ======= theirs", fg="cyan"))
    for line in hunk.theirs:
        click.echo("  " + printable(line.rstrip("\n")))
    click.echo(click.style("  >>>>>>>", fg="cyan"))


def _ask(prompt: str, options: tuple[str, ...]) -> str:
    letters = {o[0]: o for o in options}
    while True:
        answer = click.prompt(prompt, prompt_suffix=" ", default="", show_default=False).strip()
        if answer in options:
            return answer
        if answer[:1] in letters and len(answer) == 1:
            return letters[answer]
        click.echo(f"  answer {' | '.join(options)}")


def _review(result: Any, state: dict[str, Any], state_path: Path) -> None:
    """Ask for each conflicted file's choices and rationale; saved after every answer."""
    plan = result.plan
    resolutions: dict[str, Any] = state.setdefault("resolutions", {})
    pending: dict[str, Any] = state.setdefault("pending", {})
    for path in plan.conflicted_paths:
        if path in resolutions:
            continue
        kinds = ", ".join(
            sorted({f"{c.kind} {c.where}".strip() for c in plan.conflicts if c.path == path})
        )
        click.echo(click.style(f"{printable(path)}: {kinds}", bold=True))
        hunks = plan.hunks(path)
        choices: list[Any] = list(pending.get(path, []))
        if hunks is None:
            if not choices:
                choices = [_ask("  keep [o]urs or [t]heirs?", ("ours", "theirs"))]
        else:
            for i, hunk in enumerate(hunks):
                if i < len(choices):
                    continue
                _show_hunk(i + 1, len(hunks), hunk)
                answer = _ask(
                    "  [o]urs | [t]heirs | [b]oth | [e]dit?", ("ours", "theirs", "both", "edit")
                )
                if answer == "edit":
                    text = click.edit("".join(hunk.ours) + "".join(hunk.theirs), require_save=False)
                    choices.append({"edit": text or ""})
                else:
                    choices.append(answer)
                pending[path] = choices
                _save(state_path, state)
        pending[path] = choices
        _save(state_path, state)
        rationale = ""
        while not rationale:
            rationale = click.prompt(
                "  why (one line)", prompt_suffix=": ", default="", show_default=False
            ).strip()
        resolutions[path] = {"choices": choices, "rationale": rationale}
        pending.pop(path, None)
        _save(state_path, state)


@click.command()
@click.argument("a", required=False, shell_complete=complete_ref)
@click.argument("b", required=False, shell_complete=complete_ref)
@click.option(
    "--policy",
    type=click.Choice(["text", "semantic"]),
    default=None,
    help="text (default): merge3 by lines. semantic: where lines conflict, JSON, YAML and TOML "
    "merge by key and Python by top-level definition.",
)
@click.option(
    "--no-ff",
    is_flag=True,
    help="Record a merge event even when A's branch could fast-forward to B.",
)
@click.option("--resume", is_flag=True, help="Continue the interrupted review of the last merge.")
@click.option("-m", "--message", default="", help="The merge event's rationale.")
@click.option(
    "--review/--no-review",
    default=None,
    help="Review conflicts hunk by hunk (default: when the terminal is interactive).",
)
@json_option
def merge(
    a: str | None,
    b: str | None,
    policy: str | None,
    no_ff: bool,
    resume: bool,
    message: str,
    review: bool | None,
    as_json: bool,
) -> None:
    """Merge B into A three-way, at their lowest common ancestor.

    The result lands on A's branch (A: a branch, HEAD, or any point; a point
    that is no branch's tip starts a new branch). When that branch is HEAD's,
    unrecorded work is auto-saved first and the files move to the result;
    another branch just moves, the files stay. When A is an ancestor of B,
    A's branch fast-forwards to B and nothing is recorded, unless --no-ff
    asks for a merge event.

    A path changed on one side takes that side; both sides changing one file
    merge its lines (merge3), or with --policy semantic its keys (JSON, YAML, TOML)
    and top-level definitions (Python). What cannot be merged is a conflict:
    binary content and modes are never merged silently. On a terminal each
    conflict is reviewed hunk by hunk (ours | theirs | both | edit in $EDITOR)
    with a one-line rationale per file, kept as the merge's merge_resolution
    artifact; an interrupted review continues with --resume. Without a
    review (--json, --no-review) the conflicts are listed, nothing is
    recorded, and the exit code is 1. A merge is one 'strata undo' away.

    \b
    Example:
      strata merge main attempt-b --policy semantic -m "combine both attempts"
      strata merge main attempt-b --json     # the conflicts, for a tool
      strata merge attempt-a attempt-b       # on attempt-a's branch; files stay
      strata merge main attempt-b --no-ff    # a merge event even if main is behind
      strata merge --resume
    """
    interactive = review if review is not None else (sys.stdin.isatty() and not as_json)
    with open_repo() as repo:
        state_path = _state_file(repo)
        state: dict[str, Any]
        if resume:
            if not state_path.exists():
                raise UsageError("no merge review to resume", hint="start one: strata merge A B")
            state = json.loads(state_path.read_text("utf-8"))
            if policy is not None and policy != state["policy"]:
                raise UsageError("--resume continues with the policy the merge started with")
        else:
            if a is None or b is None:
                raise click.UsageError("give A and B (or --resume)")
            state = {
                "left": a,
                "right": b,
                "policy": policy or "text",
                "no_ff": no_ff,
                "resolutions": {},
                "pending": {},
            }
        left, right, pol = state["left"], state["right"], state["policy"]
        while True:
            result = repo.merge(
                left,
                right,
                policy=pol,
                message=message,
                resolutions=state.get("resolutions") or {},
                no_ff=bool(state.get("no_ff")),
            )
            if result.event is not None or not interactive:
                break
            try:
                _review(result, state, state_path)
            except (click.Abort, EOFError):
                _save(state_path, state)
                click.echo("\nreview interrupted: 'strata merge --resume' continues it", err=True)
                sys.exit(1)
        if result.event is not None:
            state_path.unlink(missing_ok=True)
        else:
            _save(state_path, state)
    if as_json:
        emit_json(result.to_json())
    elif result.fast_forward:
        click.echo(
            f"Fast-forwarded {printable(result.branch)} to {printable(right)} "
            f"({short(result.event.id) if result.event else ''})"
        )
    elif result.event is not None:
        n = len(result.merged_paths)
        click.echo(
            f"Merged {printable(right)} into {printable(left)} on {printable(result.branch)}: "
            f"event {short(result.event.id)}, {n} file{'s' if n != 1 else ''} changed"
        )
    else:
        click.echo(f"{len(result.plan.conflicts)} conflict(s); nothing recorded:")
        for c in result.plan.conflicts:
            where = f" {printable(c.where)}" if c.where else ""
            click.echo(f"  {c.kind:<10} {printable(c.path)}{where}  {printable(c.detail)}")
        click.echo("review them on a terminal, or 'strata merge --resume --review'")
    if result.event is None:
        sys.exit(1)


@click.command()
@click.argument("a", shell_complete=complete_ref)
@click.argument("b", shell_complete=complete_ref)
@json_option
def compare(a: str, b: str, as_json: bool) -> None:
    """Compare two attempts from their common ancestor: files, semantic blocks, results.

    Each side lists the files it changed since the lowest common ancestor of
    A and B, their semantic blocks, and the result events recorded on its line
    ('strata run --result'); then the blocks both changed, where a merge may
    conflict.

    \b
    Example:
      strata compare attempt-a attempt-b
      strata compare main attempt-b --json
    """
    with open_repo() as repo:
        found = repo.compare(a, b)
    data = found.to_json()
    if as_json:
        emit_json(data)
        return
    click.echo(f"base {short(data['base'] or '') or '(none)'}")
    for key in ("left", "right"):
        side = data[key]
        click.echo(click.style(f"{printable(side['ref'])} ({short(side['event_id'])})", bold=True))
        for f in side["semantic"]:
            click.echo(f"  {printable(f['path'])}  [{f['diff_mode']}] {printable(f['summary'])}")
        for r in side["results"]:
            verdict = "passed" if r["passed"] else "failed"
            click.echo(f"  result {printable(r['name'])}: {verdict} {r['metrics'] or ''}")
        if not side["semantic"] and not side["results"]:
            click.echo("  (no change)")
    if data["both_changed"]:
        click.echo("changed on both sides:")
        for block in data["both_changed"]:
            click.echo(f"  {printable(block)}")


COMMANDS = [merge, compare]
