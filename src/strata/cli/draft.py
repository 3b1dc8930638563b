"""The Draft's commands: ``draft start|status|run``, ``review``, ``publish``, ``discard``.

Also ``checkpoint list|create|restore``.

:func:`run_in_draft` is shared with ``strata run --draft``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import (
    author_options,
    command_output_to_stderr,
    emit_json,
    emit_list,
    json_option,
    make_author,
    open_repo,
    rel_path,
    short,
    warn,
)
from strata.cli.preflight import echo_preflight, sandbox_option, timeout_option
from strata.diff.display import printable, printable_patch
from strata.errors import UsageError

if TYPE_CHECKING:
    from strata.repo import Repository
    from strata.sandbox.net import NetPolicy

_LETTER = {"added": "A", "modified": "M", "deleted": "D", "renamed": "R", "type_changed": "T"}


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


# -- strata draft ------------------------------------------------------------------


@click.group()
def draft() -> None:
    """Work in the Draft: an isolated copy of the workspace where agent edits land.

    Published (your real files) does not change until you publish.

    \b
    Example:
      strata draft start
      strata draft run -- my-agent "fix the tests"
      strata review && strata publish
    """


@draft.command("start")
@author_options
@json_option
def draft_start(author: str | None, author_kind: str | None, as_json: bool) -> None:
    """Create the Draft from Published's files (one Draft at a time).

    Files are cloned copy-on-write where the file system can (reflinks),
    else copied; ignored folders (.venv, node_modules) are not copied. The
    Draft gets its own branch draft/ID; HEAD stays where it is. In a git work
    tree the Draft gets a private .git clone, never published.

    \b
    Example:
      strata draft start --json
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        from strata.workbench.draft import start_draft

        d = start_draft(repo, author=who, source={"kind": "cli", "author": who.name})
        info = d.status(now_ms=repo.now_ms())
    if as_json:
        emit_json(info)
        return
    click.echo(
        f"Started Draft {d.id} on branch {printable(d.branch)} from {short(info['base_event_id'])}"
    )
    click.echo(f"Its files: {printable(str(d.path))}")


@draft.command("status")
@json_option
def draft_status(as_json: bool) -> None:
    """Show the open Draft, its age and its newest revision.

    \b
    Example:
      strata draft status --json
    """
    with open_repo() as repo:
        from strata.workbench.draft import open_draft

        d = open_draft(repo)
        info: dict[str, Any] = d.status(now_ms=repo.now_ms()) if d else {"open": False}
    if as_json:
        emit_json(info)
        return
    if not info["open"]:
        click.echo("No Draft is open ('strata draft start' makes one).")
        return
    click.echo(
        f"Draft {info['id']} (branch {info['branch']}), opened {info['created_ts'][:19]} "
        f"({_age(info['age_ms'] // 1000)} ago), {info['revisions']} revision(s), "
        f"tip {short(info['tip_event_id'])}"
    )
    click.echo(f"Its files: {printable(str(info['path']))}")


@draft.command("dismiss")
@json_option
def draft_dismiss(as_json: bool) -> None:
    """Dismiss the reminder of a Draft open longer than a day, for another day.

    The reminder ('You have an open Draft from ...', in 'strata status',
    'strata ask' and 'strata chat') offers Review ('strata review'), Discard
    ('strata discard') and Dismiss (this). The dismissal is recorded in the
    Draft's record; a day later the reminder comes back.

    \b
    Example:
      strata draft dismiss
      strata draft dismiss --json
    """
    with open_repo() as repo:
        from strata.ledger.events import format_ts
        from strata.workbench.draft import DAY_MS, dismiss_reminder

        now = repo.now_ms()
        state = dismiss_reminder(repo, now_ms=now)
    info = {
        "id": state.id,
        "dismissed_ts": format_ts(now),
        "next_reminder_ts": format_ts(max(now, state.created_ms) + DAY_MS),
    }
    if as_json:
        emit_json(info)
        return
    click.echo(
        f"Dismissed the reminder of Draft {state.id} until {info['next_reminder_ts'][:16]} UTC."
    )


@dataclass(frozen=True)
class SandboxChoice:
    """How a command run in the Draft is isolated: the options of :func:`sandbox_options`."""

    sandbox: str = "bwrap"
    net: str | None = None
    agents: tuple[str, ...] = ()
    bind_ro: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()


def sandbox_options(func: Any) -> Any:
    """The options of a run in the Draft, shared with ``strata run --draft``.

    The command receives them as one :class:`SandboxChoice`, its argument ``box``.
    """

    @functools.wraps(func)
    def command(
        *args: Any,
        sandbox: str,
        net: str | None,
        agents: tuple[str, ...],
        bind_ro: tuple[str, ...],
        env_names: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        box = SandboxChoice(sandbox, net, agents, bind_ro, env_names)
        return func(*args, box=box, **kwargs)

    for option in reversed(
        [
            click.option(
                "--sandbox",
                type=click.Choice(["bwrap", "none"]),
                default="bwrap",
                show_default=True,
                help="Isolate the command with bubblewrap, or not at all ('none').",
            ),
            click.option(
                "--net",
                metavar="deny|allow|allow=HOST,...",
                default=None,
                help="Network inside the sandbox: none (deny, the default), the host's whole "
                "network (allow), or only the listed hosts (allow=api.openai.com,pypi.org:443) "
                "through a proxy Strata runs; a host without :PORT admits 443 and 80.",
            ),
            click.option(
                "--agent",
                "agents",
                multiple=True,
                type=click.Choice(["claude", "codex", "aider"]),
                help="Set up the sandbox for this agent: a throwaway copy of its configuration "
                "(~/.claude and ~/.claude.json, ~/.codex, ~/.aider*), its API key variables, and "
                "its API hosts on the network allow-list (repeatable).",
            ),
            click.option(
                "--bind-ro",
                "bind_ro",
                multiple=True,
                type=click.Path(exists=True),
                help="Expose this host path read-only in the sandbox (repeatable).",
            ),
            click.option(
                "--env",
                "env_names",
                multiple=True,
                metavar="NAME",
                help="Pass this environment variable into the sandbox (repeatable).",
            ),
        ]
    ):
        command = option(command)
    return command


def run_in_draft(
    argv: Sequence[str],
    *,
    box: SandboxChoice,
    as_json: bool = False,
    author_name: str | None = None,
    author_kind: str | None = None,
    message: str = "",
    record_model: bool = False,
    keep_failed: bool = False,
) -> int:
    """Run ``argv`` in the Draft (starting one when none is open); return its exit code.

    The shared body of ``strata draft run`` and ``strata run --draft``: ``box``
    holds the options of :func:`sandbox_options` (``net``: ``deny``, ``allow`` or
    ``allow=HOSTS``; None is ``deny``, or the ``agents``' hosts).
    The command starts in the Draft's folder matching the current folder;
    every run records a draft revision. Prints a report (``as_json``: the
    :class:`~strata.workbench.draft.DraftRun` JSON on stdout, else a few lines
    on stderr, saying "no isolation" for ``--sandbox none``). ``record_model``
    records the command's model calls through a proxy (with ``--net deny`` the
    sandbox's only way out), linked from the revision. Unless ``keep_failed``,
    a failed command's writes are rolled back after its revision is recorded.
    """
    from strata.sandbox.net import NetPolicy

    who = make_author(author_name, author_kind)
    sandbox = box.sandbox
    policy = NetPolicy.parse(box.net) if box.net is not None else NetPolicy("deny")
    if sandbox == "none" and (policy.mode == "list" or box.agents):
        raise UsageError(
            "--net allow=HOSTS and --agent need the sandbox: without it nothing holds the "
            "command to the allow-list or keeps the agent's configuration a copy",
            hint="drop --sandbox none",
        )
    with open_repo(who) as repo:
        from strata.workbench.draft import check_sandbox, open_draft, start_draft

        if sandbox != "none":
            check_sandbox()  # before a Draft is made for nothing
        d = open_draft(repo)
        started = d is None
        if d is None:
            d = start_draft(repo, author=who, source={"kind": "run", "command": list(argv)})
        cwd = rel_path(repo, ".")
        if started and not as_json:
            click.echo(f"strata: started Draft {d.id}", err=True)
        if sandbox == "none":  # said even with --json (on stderr): it matters
            click.echo(
                f"strata: running in the Draft {d.path} with no isolation (--sandbox none)",
                err=True,
            )
            _warn_editable(repo.root)
        with command_output_to_stderr(as_json):
            result = d.run(
                argv,
                environ=dict(os.environ),
                sandbox=sandbox,
                net=policy,
                bind_ro=[Path(p) for p in box.bind_ro],
                env_names=box.env_names,
                cwd=cwd,
                author=who,
                message=message,
                agents=box.agents,
                on_net_refused=_tell_refused(policy),
                model_calls=(lambda: _model_proxy(repo)) if record_model else None,
                keep_failed=keep_failed,
            )
    if as_json:
        emit_json({"draft_id": d.id, "started": started, **result.to_json()})
    else:
        rev = result.revision
        if rev is None:
            click.echo("strata: the Draft did not change", err=True)
        else:
            n = rev.data.get("files_changed", 0)
            click.echo(
                f"strata: recorded draft revision {short(rev.id)} "
                f"({n} file{'s' if n != 1 else ''} changed); 'strata review' shows the Draft",
                err=True,
            )
        if result.rolled_back_to is not None:
            k = len(result.rolled_back_paths)
            click.echo(
                f"strata: the command failed (exit {result.outcome.exit_code}): its writes "
                f"({k} file{'s' if k != 1 else ''}) were rolled back; 'strata undo' brings "
                "them back, --keep-failed keeps them next time",
                err=True,
            )
    return result.outcome.exit_code


@contextmanager
def _model_proxy(repo: Repository) -> Iterator[Any]:
    """A recording model proxy for one command in the Draft, on a socket of its own too."""
    import shutil
    import tempfile

    from strata.integrations.model_proxy import recording
    from strata.redaction import known_secrets

    folder = Path(tempfile.mkdtemp(prefix="strata-model-proxy-"))
    try:
        with recording(
            repo.objects.put,
            os.environ,
            root=repo.root,
            secrets=known_secrets(os.environ, repo.root),
            socket_folder=folder,
        ) as proxy:
            yield proxy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _tell_refused(policy: NetPolicy) -> Callable[[str], None]:
    """What the proxy calls when it refuses a host: one line on stderr, at once."""
    listed = [str(entry) for entry in policy.hosts]

    def tell(host: str) -> None:
        bare, _, port = host.rpartition(":")
        name = bare if port in ("443", "80") else host
        click.echo(
            f"strata: refused a connection to {host}: it is not on the network allow-list; "
            f"to allow it, run again with --net allow={','.join([*listed, name])}",
            err=True,
        )

    return tell


def _warn_editable(published: Path) -> None:
    """Warn when this Python imports the project from Published, not from the Draft."""
    import shutil

    from strata.sandbox.editable import editable_installs_in

    prefixes = [Path(sys.prefix)]
    if os.environ.get("VIRTUAL_ENV"):
        prefixes.append(Path(os.environ["VIRTUAL_ENV"]))
    for program in ("python3", "python"):  # what the command would run
        found_at = shutil.which(program)
        if found_at:
            prefixes.append(Path(found_at).parent.parent)
    found = editable_installs_in(published, prefixes=dict.fromkeys(prefixes))
    if found:
        names = ", ".join(sorted({name for name, _ in found}))
        click.echo(
            f"strata: warning: {names} is installed editable from {found[0][1]} (Published): "
            "Python commands here import Published's code, not the Draft's; "
            "run in the sandbox (drop --sandbox none) to use the Draft's",
            err=True,
        )


@draft.command("run", context_settings={"ignore_unknown_options": True})
@sandbox_options
@author_options
@click.option("-m", "--message", default="", help="Why (the draft revision's message).")
@click.option(
    "--keep-failed",
    is_flag=True,
    help="Keep what COMMAND wrote when it fails (by default a failed run's writes are "
    "recorded, then rolled back: 'strata undo' brings them back).",
)
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def draft_run(
    box: SandboxChoice,
    author: str | None,
    author_kind: str | None,
    message: str,
    keep_failed: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND in the Draft (made first when none is open) and record a draft revision.

    When COMMAND fails (a non-zero exit or a signal) its writes are rolled
    back: its revision is recorded, then the Draft goes back to the revision
    before it ('strata undo' brings the writes back); --keep-failed keeps them.

    By default COMMAND runs in a bubblewrap sandbox: the Draft at the
    workspace's own path, system folders read-only, private /tmp, /run and
    $HOME, a cleared environment, no network and no host sockets. With
    '--sandbox none' it runs in the Draft folder with no isolation. Exits
    with COMMAND's exit code.

    \b
    Example:
      strata draft run --env OPENAI_API_KEY --net allow=api.openai.com -- my-agent "fix it"
      strata draft run --agent codex -- codex exec "fix the tests"
      strata draft run --sandbox none -- make test
    """
    code = run_in_draft(
        command,
        box=box,
        as_json=as_json,
        author_name=author,
        author_kind=author_kind,
        message=message,
        keep_failed=keep_failed,
    )
    sys.stdout.flush()
    raise SystemExit(code)


# -- review, publish, discard ------------------------------------------------------


@draft.command("rewind")
@click.argument("rev", metavar="REV")
@author_options
@json_option
def draft_rewind(rev: str, author: str | None, author_kind: str | None, as_json: bool) -> None:
    """Bring the Draft back to one of its own revisions (REV: an event id, a prefix, or 'base').

    The Draft's files become what they were at REV, recorded as a new
    revision (nothing is erased: unrecorded edits are recorded first).
    'strata undo' puts the files back. 'strata history --branch draft/ID'
    lists the Draft's revisions.

    \b
    Example:
      strata draft rewind 3f2a91c0
      strata draft rewind base --json
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        from strata.workbench.draft import current_draft

        result = current_draft(repo).rewind(rev, author=who)
    if as_json:
        emit_json(result.to_json())
        return
    click.echo(
        f"Rewound Draft {result.draft_id} to {short(result.target_event_id)}: "
        f"{len(result.paths)} file(s) changed, revision {short(result.revision_event_id)} "
        "('strata undo' puts them back)"
    )


@click.command()
@json_option
def review(as_json: bool) -> None:
    """Record the Draft and show its changes against the point it started from.

    Per file: A/M/D with insertions and deletions (binary files: bytes
    changed and hashes; docx, xlsx, pptx and pdf files: the sheets and
    cells, headings and paragraphs, slides or pages that changed, read
    when the Draft recorded them, no model called), then the unified diff. Publish exactly what you
    reviewed with 'strata publish --expect SNAPSHOT_ID'.

    \b
    Example:
      strata review
      strata publish --expect "$(strata review --json | jq -r .draft_snapshot_id)"
    """
    with open_repo() as repo:
        from strata.workbench.draft import current_draft

        result = current_draft(repo).review()
        if as_json:
            emit_json(result.to_json())
            return
        for w in result.warnings:
            warn(w)
        click.echo(
            f"Draft snapshot {result.draft_snapshot_id} "
            f"(from {short(result.base_event.id)}): {result.diff.files_changed} file(s) changed"
        )
        for f in result.diff.files:
            if f.binary:
                detail = (
                    f"binary, {f.bytes_changed} bytes changed, "
                    f"{short(f.hash_before)} -> {short(f.hash_after)}"
                )
            else:
                detail = f"+{f.insertions} -{f.deletions}"
            click.echo(f"  {_LETTER.get(f.status, '?')} {printable(f.path)}  {detail}")
            for line in result.summaries.get(f.path, ()):
                click.echo(f"      {printable(line)}")
        for path in result.ignored_paths:
            click.echo(f"  I {printable(path)}  now ignored in the Draft (kept, not deleted)")
        # a reader's patch: control characters written out, a text file gone binary as text
        first = True
        for section in result.diff.iter_patch(readable=True):
            if not section:
                continue
            if first:
                click.echo("")
                sys.stdout.flush()
                first = False
            sys.stdout.buffer.write(printable_patch(section))
        sys.stdout.buffer.flush()


@click.command()
@click.option("-m", "--message", default="", help="Why (the publish event's message).")
@click.option(
    "--expect",
    metavar="SNAPSHOT_ID",
    help="Refuse unless the Draft is still this snapshot (from 'strata review').",
)
@click.option(
    "--allow-external-symlinks",
    is_flag=True,
    help="Publish symlinks whose target leaves the workspace.",
)
@click.option(
    "--preflight",
    "preflight_check",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[CMD]",
    help="First rebuild what would be published in a scratch folder, hash-verify it and run "
    "the shell command CMD there (sandboxed, no network); publish only if all pass. "
    'Without CMD (or with ""): rebuild and verify only.',
)
@timeout_option
@sandbox_option
@author_options
@json_option
def publish(
    message: str,
    expect: str | None,
    allow_external_symlinks: bool,
    preflight_check: str | None,
    timeout_s: float | None,
    sandbox: str | None,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
) -> None:
    """Apply the Draft to Published, atomically, and end the Draft.

    Published is auto-saved and checkpointed first ('strata undo' or
    'strata checkpoint restore' bring it back). If Published changed since
    the Draft started, changes to different files combine and same-file
    edits merge line by line; real conflicts refuse the publish, naming the
    files, with nothing written.

    With --preflight, 'strata preflight' runs first (--timeout and --sandbox
    are its check's): when it fails nothing is published, its event and
    report stay; when it passes, the publish event carries its result, and
    the publish is refused if the files changed meanwhile.

    \b
    Example:
      strata publish -m "agent: fix the parser" --expect 3f2a9c1b
      strata publish --preflight "pytest -q"
    """
    if preflight_check is None and (timeout_s is not None or sandbox is not None):
        raise click.UsageError("--timeout and --sandbox apply to --preflight's check")
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        from strata.workbench.draft import current_draft

        draft = current_draft(repo)
        stamp = verified = None
        if preflight_check is not None:
            from strata.errors import PreflightFailed

            checked = repo.preflight(
                check=preflight_check or None,
                timeout_s=timeout_s,
                sandbox=sandbox or "bwrap",
                environ=dict(os.environ),
                author=who,
            )
            if not as_json:
                echo_preflight(checked, err=True)
            if not checked.ok:
                raise PreflightFailed(
                    f"{checked.failure()}; nothing was published",
                    report=checked.report_artifact,
                )
            stamp, verified = checked.stamp, checked.expected_tree
        result = draft.publish(
            message,
            expect=expect,
            allow_external_symlinks=allow_external_symlinks,
            author=who,
            preflight=stamp,
            verified_tree=verified,
        )
    if as_json:
        emit_json(result.to_json())
        return
    n = result.files_changed
    click.echo(
        f"Published {short(result.event.id)}: {n} file{'s' if n != 1 else ''} changed "
        f"(checkpoint {short(result.checkpoint.id)}; 'strata undo' reverses it)"
    )
    for p in result.merged_paths:
        click.echo(f"  merged {printable(p)} with changes made to Published meanwhile")
    for p in result.skipped_paths:
        click.echo(f"warning: left {printable(p)} untouched: it changed while publishing", err=True)


@click.command()
@author_options
@json_option
def discard(author: str | None, author_kind: str | None, as_json: bool) -> None:
    """Record the Draft, then end it without touching Published.

    Nothing is lost: the Draft's revisions stay on its branch draft/ID
    ('strata export draft/ID DIR' or 'strata branch switch' bring them back).

    \b
    Example:
      strata discard
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        from strata.workbench.draft import current_draft

        d = current_draft(repo)
        event = d.discard(author=who)
    info = {
        "event_id": event.id,
        "draft_id": d.id,
        "branch": d.branch,
        "draft_event_id": event.anchor_event_id,
    }
    if as_json:
        emit_json(info)
        return
    click.echo(
        f"Discarded Draft {d.id}; its work stays on branch {d.branch} "
        f"(at {short(event.anchor_event_id)})"
    )


# -- strata checkpoint ----------------------------------------------------------------


@click.group()
def checkpoint() -> None:
    """List, create and restore checkpoints: protected snapshots of Published.

    A checkpoint is taken before every publish, on demand, and before every
    checkpoint restore.

    \b
    Example:
      strata checkpoint create -m "before the big refactor"
      strata checkpoint list
    """


@checkpoint.command("list")
@json_option
def checkpoint_list(as_json: bool) -> None:
    """List checkpoints, newest first.

    \b
    Example:
      strata checkpoint list --json
    """
    with open_repo() as repo:
        found = repo.checkpoints.list()
    emit_list(
        found,
        as_json=as_json,
        empty="No checkpoints yet.",
        line=lambda c: (
            f"{short(c.id)}  {c.ts[:19].replace('T', ' ')}  {c.kind:<11}  {printable(c.message)}"
        ),
    )


@checkpoint.command("create")
@click.option("-m", "--message", default="", help="What the checkpoint is for.")
@author_options
@json_option
def checkpoint_create(
    message: str, author: str | None, author_kind: str | None, as_json: bool
) -> None:
    """Record Published and protect it as a checkpoint.

    \b
    Example:
      strata checkpoint create -m "known good"
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        c = repo.checkpoints.create(message, author=who)
    if as_json:
        emit_json(c.to_json())
        return
    click.echo(f"Checkpoint {short(c.id)} of {short(c.event_id)}")


@checkpoint.command("restore")
@click.argument("checkpoint_id", metavar="ID")
@author_options
@json_option
def checkpoint_restore(
    checkpoint_id: str, author: str | None, author_kind: str | None, as_json: bool
) -> None:
    """Put Published back as checkpoint ID holds it.

    A pre_restore checkpoint is taken first, so the restore can be undone;
    refused while a Draft is open.

    \b
    Example:
      strata checkpoint restore gtyrjgpy
    """
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        result = repo.checkpoints.restore(checkpoint_id, author=who)
    if as_json:
        emit_json(result.to_json())
        return
    n = len(result.restored_paths)
    click.echo(
        f"Restored checkpoint {short(checkpoint_id)}: {n} path{'s' if n != 1 else ''} "
        "written or removed ('strata undo' reverses it)"
    )


COMMANDS = [draft, review, publish, discard, checkpoint]
