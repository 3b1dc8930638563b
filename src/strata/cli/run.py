"""``strata run``: a command between two snapshots of the workspace.

The command's exit code is strata's; strata's own errors exit 125 (as
``env`` and ``timeout`` do), 127 when the command is not found and 126 when
it cannot be executed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import (
    State,
    author_options,
    command_output_to_stderr,
    debounce_option,
    emit_json,
    injected,
    json_option,
    make_author,
    report_error,
    warn,
)
from strata.cli.draft import SandboxChoice, sandbox_options
from strata.errors import RunError, StrataError, UsageError

if TYPE_CHECKING:
    from strata.repo import Repository
    from strata.runs.flow import Begun
    from strata.runs.options import WorkspaceOptions
    from strata.runs.result import RunResult

OWN_ERROR = 125


class _OwnUsageError(click.UsageError):
    exit_code = OWN_ERROR


class _RunCommand(click.Command):
    """Usage errors of ``strata run`` exit 125, so they never pass for the command's own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            _refuse_unknown_options(self, ctx, args)
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _OwnUsageError(exc.format_message(), ctx=ctx) from None


def _refuse_unknown_options(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    """An option before the command that ``strata run`` does not know is a usage error.

    Unknown options must pass through to the command (``strata run -- ls -l``),
    so click ignores them; but one before the command (``strata run --bogus --
    true``) is a typo, not a program to execute.
    """
    takes_value: dict[str, bool] = {}
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = not param.is_flag and not param.count
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--" or token == "-" or not token.startswith("-"):
            return
        name = token.split("=", 1)[0]
        if name not in takes_value:
            raise click.NoSuchOption(name, ctx=ctx)
        i += 2 if takes_value[name] and "=" not in token else 1


@click.command(
    "run",
    cls=_RunCommand,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "git", "hash"]),
    default="auto",
    help="Snapshot backend: Strata's store (hash), commits under refs/strata/ (git), "
    "or auto (hash in a Strata workspace, else git in a git work tree).",
)
@click.option(
    "--rollback-on-failure", is_flag=True, help="Put back what the command changed if it fails."
)
@click.option(
    "--rollback-git",
    is_flag=True,
    help="With --rollback-on-failure (implied): also move git's branch back to where HEAD "
    "was before the run, keeping the run's commits on the git branch failed/<run id>.",
)
@click.option(
    "--rollback-on-interrupt",
    is_flag=True,
    help="Also roll back when the run is interrupted (Ctrl-C, SIGTERM).",
)
@click.option("--capture-patch", is_flag=True, help="Keep the full patch in the run's summary.")
@click.option(
    "--max-patch-bytes",
    type=click.IntRange(min=0),
    default=1 << 20,
    show_default=True,
    help="Larger patches are dropped (the summary says patch_truncated).",
)
@click.option("--label", default="", help="A name for this run, kept in its event.")
@click.option(
    "--watch",
    is_flag=True,
    help="While the command runs, record a step each time the workspace settles (hash backend).",
)
@debounce_option("With --watch: how long the workspace must stay quiet before a step is recorded.")
@click.option(
    "--ignore",
    "ignore",
    multiple=True,
    metavar="GLOB",
    help="Leave paths matching GLOB (gitignore syntax) out of this run; repeatable.",
)
@click.option(
    "--draft",
    is_flag=True,
    help="Run in the Draft (started when none is open), isolated in a sandbox; "
    "Published is untouched until 'strata publish'.",
)
@click.option(
    "--keep-failed",
    is_flag=True,
    help="With --draft: keep what CMD wrote when it fails (by default a failed run's "
    "writes are recorded, then rolled back: 'strata undo' brings them back).",
)
@click.option(
    "--record-model",
    is_flag=True,
    help="Record the command's model calls: a proxy on 127.0.0.1 that ANTHROPIC_BASE_URL "
    "and OPENAI_BASE_URL point at forwards each to the URL they had (or the public API) "
    "and keeps it as a redacted trace of the run, so 'strata replay' can run it offline.",
)
@click.option(
    "--result",
    "result_name",
    metavar="NAME",
    help="Also record a result event NAME (passed when the command exits 0) anchored "
    "to the snapshot the command ran on; see 'strata results'.",
)
@click.option(
    "--junit",
    "junit_path",
    metavar="PATH",
    help="With --result: the JUnit XML report the command writes (found in pytest's "
    "--junitxml when not given); its totals become the result's metrics.",
)
@sandbox_options
@author_options
@json_option
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    strategy: str,
    rollback_on_failure: bool,
    rollback_git: bool,
    rollback_on_interrupt: bool,
    capture_patch: bool,
    max_patch_bytes: int,
    label: str,
    watch: bool,
    debounce_ms: int,
    ignore: tuple[str, ...],
    draft: bool,
    keep_failed: bool,
    record_model: bool,
    result_name: str | None,
    junit_path: str | None,
    box: SandboxChoice,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
    argv: tuple[str, ...],
) -> None:
    """Run CMD between two snapshots of the workspace: strata run -- CMD ARGS...

    The command keeps the terminal; Ctrl-C and SIGTERM reach it. Strata takes
    a 'before' snapshot, runs it, takes an 'after' snapshot (after_failure when
    it exits non-zero), records the diff and a 'run' event, and with
    --rollback-on-failure puts back what a failed command changed (the failed
    state is kept on the branch failed/<run id>; 'strata undo' reverses the
    rollback). With --watch, each time the workspace has been quiet for
    --debounce-ms while the command runs, a snapshot is recorded too
    (rationale 'live capture'), so a long session becomes a timeline of steps.
    Strata exits with the command's exit code; 125 for its own errors.

    With --draft the command runs in the Draft, in a sandbox with no network
    unless --net says otherwise (allow=HOST,... admits only those hosts);
    --agent claude|codex|aider gives it a throwaway copy of that agent's
    configuration, its API keys and its API hosts (docs/agents-in-a-draft.md).
    As with 'strata draft run', a failed command's writes in the Draft are
    recorded, then rolled back ('strata undo' brings them back);
    --keep-failed keeps them.

    With --record-model every model call the command makes through
    ANTHROPIC_BASE_URL or OPENAI_BASE_URL (Anthropic Messages, OpenAI
    Responses and Chat Completions, streamed or not) passes through a
    recording proxy and is linked from the run's event as a trace;
    'strata replay' then runs the command again offline (docs/replay.md).
    With --draft and the network denied, the proxy is the sandbox's only
    way out (through a socket bound into it); the revision links the traces.

    \b
    Example:
      strata run -- make test
      strata run --rollback-on-failure --json -- ./agent.sh "fix the bug"
      strata run --strategy git --ignore 'build/' -- claude
      strata run --watch -- claude      # a step each time the files settle
      strata run --draft --agent claude -- claude -p "fix the failing test"
      strata run --draft --net allow=api.openai.com,pypi.org --env OPENAI_API_KEY -- ./agent.sh
      strata run --record-model -- claude -p "fix the failing test"
      strata run --result tests -- pytest -q --junitxml=report.xml

    """
    from strata.runs.options import WorkspaceOptions

    try:
        if junit_path is not None and result_name is None:
            raise UsageError("--junit goes with --result NAME")
        if draft and result_name is not None:
            raise UsageError("--result records runs on Published; run it without --draft")
        if keep_failed and not draft:
            raise UsageError(
                "--keep-failed applies to runs in the Draft",
                hint="add --draft, or use --rollback-on-failure for a run on the real files",
            )
        if draft:
            _refuse_outside_draft(
                strategy != "auto",
                rollback_on_failure or rollback_git,
                rollback_on_interrupt,
                capture_patch,
                watch,
                bool(ignore),
            )
            from strata.cli.draft import run_in_draft

            code = run_in_draft(
                list(argv),
                box=box,
                as_json=as_json,
                author_name=author,
                author_kind=author_kind,
                message=label,
                record_model=record_model,
                keep_failed=keep_failed,
            )
            ctx.exit(code)
        if box != SandboxChoice():
            raise UsageError(
                "--sandbox, --net, --agent, --bind-ro and --env apply to runs in the Draft",
                hint="add --draft",
            )
        options = WorkspaceOptions(
            strategy=strategy,  # type: ignore[arg-type]
            capture_patch=capture_patch,
            max_patch_bytes=max_patch_bytes,
            rollback_on_failure=rollback_on_failure,
            rollback_on_interrupt=rollback_on_interrupt,
            rollback_git=rollback_git,
            ignore=ignore,
        )
        live = debounce_ms if watch else None
        with command_output_to_stderr(as_json):
            result = _run_published(
                list(argv),
                options,
                label,
                make_author(author, author_kind),
                live=live,
                record_model=record_model,
            )
    except StrataError as exc:
        state = ctx.find_object(State)
        if state is not None and state.debug:
            raise
        report_error(type(exc).__name__, exc.message, exc.hint, as_json=as_json)
        ctx.exit(exc.exit_code if isinstance(exc, RunError) else OWN_ERROR)
    if result_name is not None:
        from strata.cli.results import record_run_result

        try:
            record_run_result(result, result_name, list(argv), junit_path, as_json=as_json)
        except StrataError as exc:
            report_error(type(exc).__name__, exc.message, exc.hint, as_json=as_json)
            ctx.exit(OWN_ERROR)
    failed = result.exit_code != 0 and not result.interrupted
    wanted = (failed and (rollback_on_failure or rollback_git)) or (
        result.interrupted and rollback_on_interrupt
    )
    _report(result, as_json=as_json, rollback_wanted=wanted)
    ctx.exit(result.exit_code)


def _report(result: RunResult, *, as_json: bool, rollback_wanted: bool) -> None:
    """What ``strata run`` prints once the run is recorded."""
    if as_json:
        emit_json(result.to_json())
    else:
        for w in result.warnings:
            warn(w)
    ws = result.workspace
    if ws is not None and ws.rolled_back:
        click.echo(
            f"strata: rolled back {ws.diff['files_changed']} changed path(s); "
            f"the failed state is kept at {ws.safety_ref}",
            err=True,
        )
        for path in ws.rollback_skipped:
            click.echo(
                f"strata: left {path} as it is: it could not be read, was over "
                "[snapshot] max_file_size, or changed meanwhile, so rolling it back could "
                "lose work (snapshot it once it can be recorded, then rewind it)",
                err=True,
            )
    elif ws is not None and not as_json:
        n = ws.diff["files_changed"]
        click.echo(
            f"strata: recorded run {result.run_id}: "
            f"{n} file{'s' if n != 1 else ''} changed, "
            f"+{ws.diff['insertions']} -{ws.diff['deletions']}"
            + (f" ('strata diff {result.run_id[:12]}' shows it)" if n else ""),
            err=True,
        )
    _report_git(result, rollback_wanted)


def _report_git(result: RunResult, rollback_wanted: bool) -> None:
    """Say what a rollback did (or did not do) about the commits the command made."""
    if result.git_rollback is not None:
        if "error" in result.git_rollback:
            click.echo(f"error: {result.git_rollback['error']}", err=True)
        else:
            moved = result.git_rollback
            click.echo(
                f"strata: moved git branch {moved['branch']} back to "
                f"{str(moved['moved_to'])[:12]}; the run's commits are kept on the git branch "
                f"{moved['kept_on']}",
                err=True,
            )
        return
    if not (rollback_wanted and result.new_git_commits):
        return
    before, after = result.git_head_before or {}, result.git_head_after or {}
    where = f"on branch {after['branch']}" if after.get("branch") else "at a detached HEAD"
    click.echo(
        f"strata: git HEAD moved during the run ({str(before.get('commit'))[:12]} -> "
        f"{str(after.get('commit'))[:12]}): the files were rolled back but the commits remain "
        f"{where}; run with --rollback-git to move the branch back too",
        err=True,
    )


def _refuse_outside_draft(*given: bool) -> None:
    """Options of runs on Published make no sense with ``--draft``."""
    if any(given):
        raise UsageError(
            "--strategy, --rollback-on-failure, --rollback-on-interrupt, --capture-patch, "
            "--watch and --ignore apply to runs on the real files, not to --draft",
            hint="a Draft is never published without 'strata review' and 'strata publish'; "
            "'strata discard' drops it",
        )


def _run_published(
    argv: list[str],
    options: WorkspaceOptions,
    label: str,
    author: Any,
    *,
    live: int | None,
    record_model: bool = False,
) -> RunResult:
    """Run ``argv`` on the workspace's real files (``live``: the live capture's debounce).

    With ``record_model`` a recording model proxy runs while the command does and
    the run's event links the traces of its calls.
    """
    from strata.cli.common import Progress
    from strata.repo import Repository

    repo = Repository.open_for_run(
        Path.cwd(), strategy=options.strategy, author=author, progress=Progress(), **injected()
    )
    with repo:
        from strata.cli import common
        from strata.cli.watcher import autostart

        if common.AUTOSTART:  # as every command that opens the repository
            autostart(repo)
        if live is not None and options.enabled:
            from strata.runs.flow import choose_backend

            if choose_backend(repo, options.strategy) != "hash":
                raise UsageError(
                    "--watch records steps in Strata's own store: it needs the hash backend",
                    hint="run 'strata init' here and use --strategy hash (or auto)",
                )
        if record_model and not options.enabled:
            raise UsageError("--record-model needs the run's snapshots to link its traces to")
        proxies: list[Any] = []
        return repo.execute_run(
            argv,
            workspace=options,
            author=author,
            label=label,
            cwd=Path.cwd(),
            around=lambda: _around_execution(
                repo, options, author, label, live, proxies if record_model else None
            ),
            artifacts=lambda: [i for p in proxies for i in p.trace_ids],
        )


@contextmanager
def _around_execution(
    repo: Repository,
    options: WorkspaceOptions,
    author: Any,
    label: str,
    live: int | None,
    proxies: list[Any] | None = None,
) -> Iterator[None]:
    """Entered while the command executes: ``--watch``'s live capture, ``--record-model``'s proxy.

    The proxy is started here and added to ``proxies``; the command inherits
    the base-URL variables pointing at it.
    """
    with ExitStack() as stack:
        if proxies is not None:
            proxies.append(stack.enter_context(_model_proxy(repo)))
        if live is not None and options.enabled:
            from strata.runs.watch import RATIONALE, LiveCapture

            message = f"{RATIONALE}: {label}" if label else RATIONALE
            stack.enter_context(LiveCapture(repo, debounce_ms=live, author=author, message=message))
        yield


@contextmanager
def _model_proxy(repo: Repository) -> Iterator[Any]:
    """A recording model proxy for this run; the base-URL variables point at it meanwhile."""
    import os

    from strata.integrations.model_proxy import recording
    from strata.redaction import known_secrets

    with recording(
        repo.objects.put, os.environ, root=repo.root, secrets=known_secrets(os.environ, repo.root)
    ) as proxy:
        saved = {k: os.environ.get(k) for k in proxy.environment()}
        os.environ.update(proxy.environment())
        try:
            yield proxy
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    for failure in proxy.failures:  # the calls went through; their traces could not be kept
        warn(f"a model call's trace could not be stored: {failure}")


class NotPlain(Exception):
    """A ``strata run`` that is not the plain form: the caller runs the whole command line."""


#: the options of the plain form, ``strata run [--label L] [--author A] [--author-kind K] CMD``
PLAIN_OPTIONS = ("label", "author", "author_kind", "argv")


def begin_for_asker(argv: list[str], *, pid: int) -> tuple[Repository, Begun, int] | int:
    """Begin ``strata ARGV`` (a plain run) whose command process ``pid`` executes.

    Run by the watcher in the asker's folder and environment (see
    :mod:`strata.runs.thin`). Returns the open repository, the run and its
    lease's descriptor; or the exit code after printing the error that ends
    the run before its command starts, as ``strata run`` prints it.
    :class:`NotPlain` (nothing done) when the arguments are not the plain form.
    """
    from click.core import ParameterSource

    from strata.cli.common import Progress
    from strata.repo import Repository
    from strata.runs.thin import begin_elsewhere

    if argv[:1] != ["run"]:
        raise NotPlain
    try:
        ctx = run.make_context("run", list(argv[1:]))
        params = ctx.params
        for name in params:
            if name not in PLAIN_OPTIONS and ctx.get_parameter_source(name) not in (
                ParameterSource.DEFAULT,
                None,
            ):
                raise NotPlain
        author = make_author(params["author"], params["author_kind"])
    except (click.ClickException, click.exceptions.Exit) as exc:
        raise NotPlain from exc
    try:
        repo = Repository.open_for_run(Path.cwd(), author=author, progress=Progress(), **injected())
        try:
            begun, fd = begin_elsewhere(
                repo,
                [str(a) for a in params["argv"]],
                author=author,
                label=str(params["label"]),
                cwd=Path.cwd(),
                pid=pid,
            )
        except BaseException:
            repo.close()
            raise
    except StrataError as exc:
        report_error(type(exc).__name__, exc.message, exc.hint, as_json=False)
        return exc.exit_code if isinstance(exc, RunError) else OWN_ERROR
    return repo, begun, fd


def end_for_asker(repo: Repository, begun: Begun, fd: int, report: dict[str, Any]) -> int:
    """End a run :func:`begin_for_asker` began; print what ``strata run`` prints; its exit code.

    ``fd`` is the run's lease, handed back (now owned here); ``report`` is how
    the command ended (:func:`strata.runs.thin.end_elsewhere`). The repository is closed.
    """
    from strata.runs.thin import end_elsewhere

    try:
        with repo:
            result = end_elsewhere(repo, begun, fd, report)
    except StrataError as exc:
        report_error(type(exc).__name__, exc.message, exc.hint, as_json=False)
        return exc.exit_code if isinstance(exc, RunError) else OWN_ERROR
    _report(result, as_json=False, rollback_wanted=False)
    return result.exit_code


def finish_here(fd: int, report: dict[str, Any]) -> int:
    """End a run begun by a watcher that went away, holding its lease ``fd``; the exit code."""
    from strata.repo import Repository
    from strata.runs.thin import finish_from_lease

    try:
        with Repository.open_for_run(Path.cwd(), **injected()) as repo:
            result = finish_from_lease(repo, fd, report)
    except StrataError as exc:
        report_error(type(exc).__name__, exc.message, exc.hint, as_json=False)
        return exc.exit_code if isinstance(exc, RunError) else OWN_ERROR
    except (KeyError, TypeError, ValueError) as exc:  # a lease this Strata cannot read
        report_error("RunError", f"cannot record the run: {exc}", None, as_json=False)
        return OWN_ERROR
    if result is None:  # recorded meanwhile
        outcome = report.get("outcome") or {}
        code = outcome.get("exit_code")
        return code if isinstance(code, int) else OWN_ERROR
    _report(result, as_json=False, rollback_wanted=False)
    return result.exit_code


COMMANDS = [run]
