"""A run whose command another process executes: the watcher records it, the caller runs it.

``strata run -- CMD`` costs two scans and the import of all of Strata; a
workspace's watcher has both at hand. So for the plain form the command
line (``strata._resident``, standard library only) asks the watcher to
*begin* the run (:func:`begin_elsewhere`: the ``before`` snapshot and the
lease, exactly as :func:`strata.runs.flow.begin_run` takes them), executes
the command itself as its own child (its terminal, stdin, signals), then
asks the watcher to *end* it (:func:`end_elsewhere`: the ``after`` snapshot
and the closing events, as :func:`strata.runs.flow.finish_run` records them).

The lease is what ties the three together. The watcher creates and locks it
at the beginning and hands its file descriptor to the caller (``SCM_RIGHTS``)
without keeping a copy, so from then on the caller holds the lock exactly
as a ``strata run`` process holds its own: if the caller is killed, the
lock goes with it and the next command that writes records the run as
interrupted (:mod:`strata.runs.recovery`). The caller hands the descriptor
back with the end, so the watcher holds the lock while it records, even if
the caller dies meanwhile. A caller whose watcher went away finishes the run
itself from the lease (:func:`finish_from_lease`).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core.lease import Lease
from strata.errors import CommandNotExecutable, CommandNotFound, RunError
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author
from strata.runs.flow import Begun, begin_run, finish_run
from strata.runs.git import GitHead
from strata.runs.options import WorkspaceOptions
from strata.runs.process import ProcessOutcome
from strata.runs.record import Taken

if TYPE_CHECKING:
    from strata.core import Core
    from strata.runs.result import RunResult

#: what the command's environment gains in a run (the full path adds nothing either)
RUN_ENV: dict[str, str] = {}


def begin_elsewhere(
    repo: Core, argv: list[str], *, author: Author, label: str, cwd: Path, pid: int
) -> tuple[Begun, int]:
    """Begin a plain run of ``argv`` that process ``pid`` executes; the lease's descriptor.

    The run is :class:`Begun` as by ``strata run`` itself (same checks, same
    events); the returned descriptor holds the lease's lock and belongs to
    the caller, who hands it on and closes it: this process keeps no copy.
    """
    begun = begin_run(
        repo, argv, workspace=WorkspaceOptions(), author=author, label=label, cwd=cwd, pid=pid
    )
    return begun, begun.lease.detach()


def outcome_from_json(raw: dict[str, Any]) -> ProcessOutcome:
    """How the command ended, as the executing process reported it.

    ``{"exit_code", "signal", "interrupted", "received", "duration_ms"}``;
    :class:`ValueError` when malformed.
    """

    def number(name: str, *, optional: bool = False) -> int | None:
        value = raw.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"bad outcome: {name}")
        return value

    interrupted = raw.get("interrupted")
    if not isinstance(interrupted, bool):
        raise ValueError("bad outcome: interrupted")
    code, duration = number("exit_code"), number("duration_ms")
    assert code is not None and duration is not None
    return ProcessOutcome(
        code,
        number("signal", optional=True),
        interrupted,
        number("received", optional=True),
        max(duration, 0),
    )


def start_error(command: str, raw: object) -> RunError | None:
    """The error of a command that could not start (``{"not_found": ...}`` reported), or None."""
    if not isinstance(raw, dict):
        return None
    if raw.get("kind") == "not_found":
        return CommandNotFound(command)
    return CommandNotExecutable(command, str(raw.get("reason") or "permission denied"))


def end_elsewhere(repo: Core, begun: Begun, fd: int, report: dict[str, Any]) -> RunResult:
    """Record the end of ``begun``, whose lease's descriptor came back as ``fd`` (now ours).

    ``report`` is what the executing process sent: ``{"outcome": {...}}``, or
    ``{"start_error": {...}}`` when the command could not start (the run is
    then left to be recorded as interrupted, as ``strata run`` leaves it, and
    the error is raised). :class:`RunError` when ``fd`` is not the run's lease.
    """
    lease = Lease(begun.lease.path, begun.lease.info, fd)
    try:
        mine, theirs = os.fstat(fd), os.stat(begun.lease.path)
    except OSError:
        lease.abandon()
        raise RunError(f"the lease of run {begun.run_id} is gone") from None
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
        lease.abandon()
        raise RunError(f"what came with the end of run {begun.run_id} is not its lease")
    begun = replace(begun, lease=lease)
    failure = start_error(begun.what[0], report.get("start_error"))
    if failure is not None:
        lease.abandon()  # the next command that writes records the run as interrupted
        raise failure
    try:
        outcome = outcome_from_json(report.get("outcome") or {})
    except ValueError:
        lease.abandon()
        raise
    return finish_run(repo, begun, outcome)


def finish_from_lease(repo: Core, fd: int, report: dict[str, Any]) -> RunResult | None:
    """Finish a run begun elsewhere whose watcher is gone, holding its lease ``fd`` (now ours).

    None when the run was recorded meanwhile (its watcher recorded it, then
    went away before it could say so); the lease goes either way.
    """
    info = json.loads(os.pread(fd, 1 << 20, 0) or b"{}")
    path = repo.layout.runs / f"{info['run_id']}.lease"
    with repo.writing():  # the watcher may be recording it still
        found = repo.ledger.driver.find_events(
            EventFilter(operation_id=str(info["run_id"]), action_type="run"), limit=1
        )
        if list(found):
            Lease(path, info, fd).release()
            return None
        options = info.get("options") or {}
        head = info.get("git_head_before")
        begun = Begun(
            str(info["run_id"]),
            str(info["backend"]),
            Taken.from_json(info["before"]),
            [str(a) for a in info["argv"]],
            Path(str(info["cwd"])),
            str(info.get("label", "")),
            WorkspaceOptions(
                strategy=options.get("strategy", "auto"),
                capture_patch=bool(options.get("capture_patch", False)),
                max_patch_bytes=int(options.get("max_patch_bytes", 1 << 20)),
                ignore=tuple(options.get("ignore") or ()),
            ),
            Author.from_json(info["author"]),
            GitHead.from_json(head) if isinstance(head, dict) else None,
            Lease(path, info, None),
        )
        return end_elsewhere(repo, begun, fd, report)
