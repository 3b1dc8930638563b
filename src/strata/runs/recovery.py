"""Recording the runs whose strata was killed.

A run's lease (:mod:`strata.core.lease`) outlives a strata that was killed,
and nobody holds its lock. The next command that writes finds it (from
``Core.writing``, with the write lock held) and records the run as
interrupted: an ``after`` snapshot of what the workspace holds now, its diff
and a ``run`` event with ``recovered: true``, in the group the run was a step
of (the lease names it; else the run's own group, then closed with a ``group
close`` operation as :func:`strata.core.groups.recover_groups` closes the
others); then the lease file goes.

What the killed strata's command left running is ended first: the lease names
the command's process group (:func:`strata.runs.process.group_record`), which
gets SIGTERM, then SIGKILL, so no orphan goes on writing into the workspace
after its run is recorded (see docs/runs.md).
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core.lease import stale_leases
from strata.errors import StrataError
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author

if TYPE_CHECKING:
    from strata.core import Core


def recover_runs(repo: Core) -> list[str]:
    """Record every run whose lease nobody holds; return their run ids."""
    stale = stale_leases(repo.layout.runs)
    if not stale:
        return []  # (every writing command asks: what recording needs is loaded only now)
    from strata.core.groups import Group, close_group
    from strata.runs.process import end_group
    from strata.runs.record import run_group

    recovered: list[str] = []
    for info in stale:
        run_id = str(info.get("run_id", ""))
        path = Path(str(info["path"]))
        end_group(info.get("process_group"))
        if run_id and "before" in info and not _recorded(repo, run_id):
            options = info.get("options") or {}
            saved = repo.extra_ignore
            repo.extra_ignore = tuple(options.get("ignore") or ())
            try:
                author = Author.from_json(
                    info.get("author") or {"name": "strata", "kind": "system"}
                )
                what = [str(a) for a in info.get("argv") or []]
                outer = info.get("group")
                group = Group.from_json(outer) if isinstance(outer, dict) else None
                with repo.grouped(group or run_group(run_id, what, author)):
                    _record_interrupted(repo, run_id, info, author, what)
                if group is None:  # the run's own group ends here (another's, with its lease)
                    close_group(repo, run_group(run_id, what, author), error=None)
            except (StrataError, KeyError, TypeError, ValueError):
                continue  # left for 'strata check' to report; never blocks the command
            finally:
                repo.extra_ignore = saved
            recovered.append(run_id)
        with suppress(FileNotFoundError):
            path.unlink()
    return recovered


def _record_interrupted(
    repo: Core, run_id: str, info: dict[str, Any], author: Author, what: list[str]
) -> None:
    """Record how the run of a lease nobody holds ended: interrupted, the files as they are."""
    from strata.runs.options import WorkspaceOptions
    from strata.runs.record import Taken, record_finish

    options = info.get("options") or {}
    record_finish(
        repo,
        run_id,
        Taken.from_json(info["before"]),
        backend=str(info.get("backend", "hash")),
        author=author,
        what=what,
        cwd=str(info.get("cwd", repo.root)),
        label=str(info.get("label", "")),
        outcome=None,
        options=WorkspaceOptions(
            capture_patch=bool(options.get("capture_patch", False)),
            max_patch_bytes=int(options.get("max_patch_bytes", 1 << 20)),
        ),
        failed=False,
        recovered=True,
        git_heads=(_head_json(info.get("git_head_before")), _current_head(repo)),
    )


def _recorded(repo: Core, run_id: str) -> bool:
    found = repo.ledger.driver.find_events(
        EventFilter(operation_id=run_id, action_type="run"), limit=1
    )
    return bool(list(found))


def _head_json(raw: object) -> dict[str, Any] | None:
    """A git HEAD kept in a lease, as the run event keeps it."""
    from strata.runs.git import GitHead

    head = GitHead.from_json(raw) if isinstance(raw, dict) else None
    return head.to_json() if head else None


def _current_head(repo: Core) -> dict[str, Any] | None:
    from strata.runs.git import read_head

    head = read_head(repo.root)
    return head.to_json() if head else None
