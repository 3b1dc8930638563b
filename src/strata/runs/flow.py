"""The flow of one instrumented run.

``before`` snapshot (HEAD's, when nothing changed) → execute → ``after``
snapshot (``after_failure`` when the target failed) → diff → a compact
summary in the run's ``run`` event → optional rollback. The repository's write
lock is held while recording, never while the target executes; a workspace
lease (:mod:`strata.core.lease`) is held from the ``before`` snapshot until the
run is recorded, so another process does not move the files meanwhile and a
killed run is found and recorded by the next command (:mod:`strata.runs.recovery`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core.lease import Lease
from strata.errors import (
    CommandNotExecutable,
    CommandNotFound,
    NotARepository,
    RunError,
    UsageError,
)
from strata.ledger.events import Author
from strata.runs.git import GitHead, check_rollback_git, index_path, read_head, rollback_git
from strata.runs.options import WorkspaceOptions
from strata.runs.process import ProcessOutcome, note_group, run_command
from strata.runs.record import (
    Taken,
    record_finish,
    rollback,
    run_group,
    take_snapshot,
    write_annotations,
)
from strata.runs.result import RunResult, WorkspaceResult

if TYPE_CHECKING:
    from strata.core import Core
    from strata.layout import Layout

Target = Sequence[str] | Callable[[], Any]


def choose_backend(repo: Core, strategy: str) -> str:
    """The backend a run of ``repo`` uses for ``strategy`` (``auto``, ``git`` or ``hash``)."""
    from strata.runs.git import GitWorkspace

    if strategy == "hash":
        return "hash"
    if strategy == "auto":
        return "git" if repo.layout.git_backed else "hash"
    if GitWorkspace.find(repo.root) is None:
        raise RunError(
            f"the git backend needs a git work tree whose top is the workspace {repo.root}",
            hint="use --strategy hash, or run 'git init' there",
        )
    return "git"


def layout_for_run(path: Path, *, strategy: str = "auto") -> Layout:
    """Where the repository a run in ``path`` records into lives.

    A Strata workspace's own repository; else, in a git work tree (strategy
    ``auto`` or ``git``), a repository kept inside ``.git`` (made on first
    use), so nothing appears in the work tree or in ``git status``.
    """
    from strata.layout import create_layout, find_layout

    try:
        return find_layout(path)
    except NotARepository:
        if strategy == "hash":
            raise
    top = _git_toplevel(path)
    if top is None:
        raise NotARepository(str(path.resolve())) from None
    if not (top / ".git").is_dir():
        raise RunError(
            f"{top} is a linked git worktree or submodule; the git backend needs its own "
            "repository there",
            hint="run 'strata init' in it to record runs with the hash backend",
        )
    layout, _ = create_layout(top, store=None, hidden=True)
    return layout


def _git_toplevel(path: Path) -> Path | None:
    import subprocess

    if shutil.which("git") is None:
        return None
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, check=False
    )
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.decode("utf-8", "surrogateescape").strip())


def check_command(argv: Sequence[str], cwd: Path) -> None:
    """Refuse a command that cannot start, before anything is recorded."""
    if not argv or not argv[0]:
        raise UsageError("name the command to run after '--'")
    name = argv[0]
    if "/" in name:
        path = cwd / name
        if not path.exists():
            raise CommandNotFound(name)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise CommandNotExecutable(name, "permission denied")
    elif shutil.which(name) is None:
        raise CommandNotFound(name)


@dataclass
class Begun:
    """A run whose ``before`` snapshot is recorded and whose lease is held: it may execute.

    :func:`begin_run` makes it, :func:`finish_run` records its end. Between the
    two the command executes, in this process or in another one the lease was
    handed to (:meth:`strata.core.lease.Lease.detach`).
    """

    run_id: str
    backend: str
    before: Taken
    what: list[str]
    cwd: Path
    label: str
    options: WorkspaceOptions
    author: Author
    head_before: GitHead | None
    lease: Lease
    saved_index: Path | None = None


def begin_run(
    repo: Core,
    target: Target,
    *,
    workspace: WorkspaceOptions | None = None,
    author: Author | None = None,
    label: str = "",
    cwd: Path | None = None,
    pid: int | None = None,
) -> Begun:
    """Check ``target``, record the ``before`` snapshot and take the run's lease.

    ``pid`` is the process that executes the command (kept in the lease;
    default: this one). The workspace options must be enabled.
    """
    opts = workspace or WorkspaceOptions()
    author = author or repo.author
    run_id = repo.ledger.new_id()
    cwd = (cwd or repo.root).resolve()
    if isinstance(target, str | bytes):
        raise UsageError("give the command as a list of arguments, e.g. ['make', 'test']")
    if not callable(target):
        target = [str(a) for a in target]
        check_command(target, cwd)
    if opts.path is not None and Path(opts.path).resolve() != repo.root.resolve():
        raise UsageError(
            f"the workspace path {opts.path} is not the repository's workspace {repo.root}"
        )
    assert opts.enabled, "a run without snapshots has nothing to begin"
    backend = choose_backend(repo, opts.strategy)
    what = _describe(target)
    head_before = read_head(repo.root)
    if opts.rollback_git:
        check_rollback_git(repo.root, head_before)
        opts = replace(opts, rollback_on_failure=True)
    saved_index: Path | None = None
    repo.extra_ignore = tuple(opts.ignore)
    try:
        with repo.writing(), repo.grouped(repo.group or run_group(run_id, what, author)):
            if opts.rollback_git:
                saved_index = _save_index(repo.root, run_id)
            before = take_snapshot(repo, backend, "before", run_id=run_id, author=author, what=what)
            write_annotations(repo, run_id, author, [before.annotation()])
        info = {
            "pid": pid if pid is not None else os.getpid(),
            "argv": what,
            "cwd": str(cwd),
            "label": label,
            "backend": backend,
            "before": before.to_json(),
            "options": opts.to_json(),
            "author": author.to_json(),
            "git_head_before": head_before.to_json() if head_before else None,
            # the group the run is a step of (a gateway exec's, a host run's...): should this
            # process die, the run is recorded in it (without one, the run's own group)
            **({"group": repo.group.to_json()} if repo.group is not None else {}),
        }
        lease = Lease.acquire(repo.layout.runs, run_id, info)
    except BaseException:
        if saved_index is not None:
            saved_index.unlink(missing_ok=True)
        raise
    finally:
        repo.extra_ignore = ()
    return Begun(
        run_id, backend, before, what, cwd, label, opts, author, head_before, lease, saved_index
    )


def finish_run(
    repo: Core,
    begun: Begun,
    outcome: ProcessOutcome,
    *,
    value: Any = None,
    error: BaseException | None = None,
    artifacts: tuple[str, ...] = (),
) -> RunResult:
    """Record how ``begun`` ended: the ``after`` snapshot, the diff, the ``run`` event.

    ``artifacts`` (the traces of the model calls it made) are linked from the ``run`` event.

    Then the rollback its options ask for, and the lease goes. When recording
    fails the lease is abandoned: the next command that writes records the
    run as interrupted.
    """
    opts, run_id, before = begun.options, begun.run_id, begun.before
    head_before = begun.head_before
    repo.extra_ignore = tuple(opts.ignore)
    try:
        try:
            failed = outcome.exit_code != 0 and not outcome.interrupted
            wants_rollback = (failed and opts.rollback_on_failure) or (
                outcome.interrupted and opts.rollback_on_interrupt
            )
            head_after = read_head(repo.root)
            heads = (
                head_before.to_json() if head_before else None,
                head_after.to_json() if head_after else None,
            )
            with repo.writing():
                # the rollback is an operation of its own, outside the run's group: 'strata
                # undo' right after it brings back what the failed command wrote
                with repo.grouped(repo.group or run_group(run_id, begun.what, begun.author)):
                    finish = record_finish(
                        repo,
                        run_id,
                        before,
                        backend=begun.backend,
                        author=begun.author,
                        what=begun.what,
                        cwd=str(begun.cwd),
                        label=begun.label,
                        outcome=outcome,
                        options=opts,
                        failed=outcome.exit_code != 0,
                        error=error,
                        will_roll_back=wants_rollback,
                        git_heads=heads,
                        artifacts=artifacts,
                    )
                safety = None
                kept: list[str] = []
                if wants_rollback and finish.changed:
                    safety, kept = rollback(
                        repo, run_id, before, finish.after, finish, begun.backend, begun.author
                    )
                git_rollback = None
                if wants_rollback and opts.rollback_git and head_before != head_after:
                    git_rollback = _rollback_git(
                        repo.root, run_id, head_before, head_after, begun.saved_index
                    )
        except BaseException:
            begun.lease.abandon()  # the next command that writes records the run as interrupted
            raise
        begun.lease.release()
    finally:
        repo.extra_ignore = ()
        if begun.saved_index is not None:
            begun.saved_index.unlink(missing_ok=True)
    ws = WorkspaceResult(
        begun.backend,
        before.ref,
        finish.after.ref,
        finish.summary,
        rolled_back=safety is not None,
        safety_ref=safety,
        rollback_skipped=kept,
    )
    return RunResult(
        run_id,
        outcome.exit_code,
        outcome.interrupted,
        outcome.duration_ms,
        run_event_id=finish.run_event_id,
        workspace=ws,
        value=value,
        error=error,
        signal=outcome.signal,
        git_head_before=heads[0],
        git_head_after=heads[1],
        git_rollback=git_rollback,
        warnings=list(finish.after.warnings),
    )


def execute_run(
    repo: Core,
    target: Target,
    *,
    workspace: WorkspaceOptions | None = None,
    author: Author | None = None,
    label: str = "",
    cwd: Path | None = None,
    around: Callable[[], AbstractContextManager[Any]] | None = None,
    artifacts: Callable[[], Sequence[str]] | None = None,
) -> RunResult:
    """Run ``target`` (an argv list or a callable) between two snapshots; see the module.

    ``cwd`` is where a command starts (default: the workspace root).
    ``around`` makes a context manager entered around the execution only
    (live capture hooks in here; so does the model proxy of ``--record-model``).
    ``artifacts``, called once the command ended, names stored objects the
    ``run`` event links (the traces of its model calls).
    """
    opts = workspace or WorkspaceOptions()
    if isinstance(target, str | bytes):
        raise UsageError("give the command as a list of arguments, e.g. ['make', 'test']")
    if not opts.enabled:
        run_id = repo.ledger.new_id()
        cwd = (cwd or repo.root).resolve()
        if not callable(target):
            target = [str(a) for a in target]
            check_command(target, cwd)
        if opts.path is not None and Path(opts.path).resolve() != repo.root.resolve():
            raise UsageError(
                f"the workspace path {opts.path} is not the repository's workspace {repo.root}"
            )
        outcome, value, error = _execute(target, cwd, around, None)
        return RunResult(
            run_id,
            outcome.exit_code,
            outcome.interrupted,
            outcome.duration_ms,
            value=value,
            error=error,
            signal=outcome.signal,
        )
    begun = begin_run(repo, target, workspace=opts, author=author, label=label, cwd=cwd)
    try:
        if not callable(target):
            target = begun.what
        repo.extra_ignore = tuple(begun.options.ignore)
        try:
            outcome, value, error = _execute(target, begun.cwd, around, begun.lease)
        finally:
            repo.extra_ignore = ()
    except BaseException:
        begun.lease.abandon()  # the next command that writes records the run as interrupted
        if begun.saved_index is not None:
            begun.saved_index.unlink(missing_ok=True)
        raise
    linked = tuple(artifacts()) if artifacts is not None else ()
    return finish_run(repo, begun, outcome, value=value, error=error, artifacts=linked)


def _rollback_git(
    root: Path,
    run_id: str,
    before: GitHead | None,
    after: GitHead | None,
    saved_index: Path | None,
) -> dict[str, Any]:
    """Move git's branch back (``rollback_git``); what happened, or ``{"error": why not}``."""
    try:
        if before is None or after is None:
            raise RunError("not moving git's branch back: the git work tree is gone")
        kept = rollback_git(root, run_id, before, after, saved_index)
    except RunError as exc:
        return {"error": exc.message}
    return {"branch": before.branch, "moved_to": before.commit, "kept_on": kept}


def _save_index(root: Path, run_id: str) -> Path | None:
    """Copy the user's git index aside (``--rollback-git`` puts it back); None without one."""
    index = index_path(root)
    if index is None or not index.exists():
        return None
    saved = index.with_name(f"strata-index-{run_id}")
    shutil.copy2(index, saved)
    return saved


def _describe(target: Target) -> list[str]:
    if callable(target):
        name = getattr(target, "__qualname__", None) or type(target).__name__
        module = getattr(target, "__module__", None)
        return [f"{module}.{name}" if module else str(name)]
    return list(target)


def _execute(
    target: Target,
    cwd: Path,
    around: Callable[[], AbstractContextManager[Any]] | None,
    lease: Lease | None,
) -> tuple[ProcessOutcome, Any, BaseException | None]:
    """Run ``target``; a command runs in a process group of its own, which ``lease`` records.

    Should this process be killed, the lease is left unheld and names the
    group: the next command that writes ends it and records the run as
    interrupted (:mod:`strata.runs.recovery`).
    """
    import time

    def started(pid: int) -> None:
        if lease is not None:
            note_group(lease.fileno(), pid)

    with around() if around is not None else nullcontext():
        if not callable(target):
            try:
                return (
                    run_command(target, cwd=cwd, own_group=True, on_start=started),
                    None,
                    None,
                )
            except FileNotFoundError:
                raise CommandNotFound(target[0]) from None
            except PermissionError as exc:
                raise CommandNotExecutable(target[0], exc.strerror or "permission denied") from None
        start = time.monotonic()
        value: Any = None
        error: BaseException | None = None
        interrupted = False
        try:
            value = target()
        except KeyboardInterrupt as exc:
            error, interrupted = exc, True
        except Exception as exc:
            error = exc
        ms = int((time.monotonic() - start) * 1000)
        code = 130 if interrupted else (1 if error is not None else 0)
        return ProcessOutcome(code, None, interrupted, None, ms), value, error
