"""What a run writes: its snapshots, its annotation events, its summary, its rollback.

Every function here runs with the repository's write lock held.

Events of one run share the run id as ``operation_id``:

- state events (``snapshot``, data ``run_id`` and ``label``) for ``before``
  (none when HEAD already holds the files) and ``after`` / ``after_failure``;
- ``workspace_snapshot_taken`` {label, backend, ref}, anchored to each;
- ``workspace_diff_computed`` {files_changed, insertions, deletions, has_patch}
  and ``run`` {argv, exit_code, duration_ms, cwd, interrupted, summary,
  git_head_before, git_head_after (git's HEAD commit and branch, null outside git)},
  anchored to the ``after`` state event, in one operation;
- after a rollback, a ``rollback`` event written by the restore.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.core import Point
from strata.core.restore import changed_paths, restore_into
from strata.ids import EventId, ObjectId, SnapshotId
from strata.ledger.events import Author, EventType
from strata.ledger.ledger import moved
from strata.runs.options import WorkspaceOptions
from strata.runs.process import ProcessOutcome

if TYPE_CHECKING:
    from strata.core import Core, DiffResult
    from strata.core.groups import Group


@dataclass(frozen=True)
class Taken:
    """One snapshot a run took: its state event, snapshot, tree and backend ref."""

    label: str
    backend: str
    event_id: EventId
    snapshot_id: SnapshotId
    tree: ObjectId
    ref: str
    """A Strata snapshot id, or ``git:<commit>``."""
    warnings: tuple[str, ...] = ()
    """What the scan could not record (not kept in the lease)."""
    unreadable: tuple[str, ...] = ()
    """The paths the scan could not read (they hold what was last recorded)."""

    def annotation(self) -> tuple[str, EventId, dict[str, Any], str]:
        """The ``workspace_snapshot_taken`` event of this snapshot."""
        data = {"label": self.label, "backend": self.backend, "ref": self.ref}
        return "workspace_snapshot_taken", self.event_id, data, f"{self.label} snapshot"

    def to_json(self) -> dict[str, Any]:
        """As kept in the run's lease."""
        return {
            "label": self.label,
            "backend": self.backend,
            "event_id": self.event_id,
            "snapshot_id": self.snapshot_id,
            "tree": self.tree,
            "ref": self.ref,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Taken:
        """Parse :meth:`to_json`."""
        return cls(
            str(raw["label"]),
            str(raw["backend"]),
            EventId(raw["event_id"]),
            SnapshotId(raw["snapshot_id"]),
            ObjectId(raw["tree"]),
            str(raw["ref"]),
        )


def run_group(run_id: str, what: list[str], author: Author) -> Group:
    """The operation group of run ``run_id``: its snapshots, its ``run`` and any rollback.

    Its id is the run's, so the run's events keep the run id as their
    ``operation_id``; ``strata op log`` shows it as one line and ``strata undo``
    reverses it whole through the run's undo (``undo: "handler"``). A run made
    inside another group (a gateway ``exec``, a host run, an agent's prompt)
    is a step of that one instead.
    """
    from strata.core.groups import Group

    title = "run: " + shlex.join(what)
    return Group(run_id, "run", title[:200], author, {"undo": "handler"})


def take_snapshot(
    core: Core, backend: str, label: str, *, run_id: str, author: Author, what: list[str]
) -> Taken:
    """Snapshot the workspace with ``backend``; record a state event unless HEAD holds it."""
    message = f"run {label}: {shlex.join(what)}"[:200]
    if label == "before" and author.kind != "human":
        # what the before snapshot records was made before the agent's run, by the person
        from strata.core.core import OUTSIDE_AGENT

        message = f"{OUTSIDE_AGENT}, {message}"[:200]
        author = core.person
    warnings: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    data = {"run_id": run_id, "label": label}
    with core.transaction(EventType.SNAPSHOT, author) as tx:
        if backend == "git":
            from strata.runs.git import GitWorkspace, import_commit

            git = GitWorkspace.find(core.root)
            if git is None:
                from strata.errors import RunError

                raise RunError(f"{core.root} is no longer the top of a git work tree")
            sha = git.snapshot(message, ignore=core.extra_ignore)
            git.set_ref(f"runs/{run_id}/{label}", sha)
            tree = import_commit(core.objects, core.layout.repo / "gitmap.db", git.git_dir, sha)
            result = tx.record(
                tree,
                message,
                author=author,
                data=data,
                operation_id=run_id,
                manifest={"git_commit": sha},
            )
            ref = f"git:{sha}"
        else:
            result, scan = tx.snapshot(message, author=author, data=data, operation_id=run_id)
            tree = scan.tree
            ref = ""
            warnings, unreadable = tuple(scan.warnings), tuple(scan.errors)
        event = result.event or tx.head()
    assert event is not None and event.snapshot_ref is not None
    if backend == "git" and result.event is None:
        tree = core.tree_of(event)
    return Taken(
        label,
        backend,
        event.id,
        event.snapshot_ref,
        tree,
        ref or event.snapshot_ref,
        warnings,
        unreadable,
    )


def write_annotations(
    core: Core,
    run_id: str,
    author: Author,
    events: list[tuple[str, EventId, dict[str, Any], str]],
    *,
    files: list[str] | None = None,
    artifacts: tuple[str, ...] = (),
) -> list[EventId]:
    """Append annotation events ``(action type, anchor, data, rationale)`` as one operation.

    ``artifacts`` (stored objects: the traces of the model calls the run made) are
    linked from the ``run`` event.
    """
    ids: list[EventId] = []
    with core.transaction(events[-1][0], author, run_id=run_id) as tx:
        for action_type, anchor, data, rationale in events:
            event = tx.annotate(
                action_type,
                anchor=anchor,
                data=data,
                rationale=rationale,
                files=files if action_type == EventType.RUN and files else (),
                operation_id=run_id,
                artifacts=artifacts if action_type == EventType.RUN else (),
            )
            ids.append(event.id)
    return ids


@dataclass
class Finish:
    """What :func:`record_finish` recorded."""

    after: Taken
    diff: DiffResult
    summary: dict[str, Any]
    run_event_id: EventId
    changed: list[str] = field(default_factory=list)


def summarize(
    diff: DiffResult, *, backend: str, before: Taken, after: Taken, options: WorkspaceOptions
) -> dict[str, Any]:
    """The compact summary kept in the run event (the patch only when asked and small enough)."""
    summary: dict[str, Any] = {
        "backend": backend,
        "before_snapshot": before.ref,
        "after_snapshot": after.ref,
        "files_changed": diff.files_changed,
        "insertions": diff.insertions,
        "deletions": diff.deletions,
        "changed_paths": [f.path for f in diff.files],
        "has_patch": False,
    }
    if options.capture_patch and diff.changes:
        patch = diff.patch()
        if len(patch) <= options.max_patch_bytes:
            summary["patch"] = patch.decode("utf-8", "replace")
            summary["has_patch"] = True
        else:
            summary["patch_truncated"] = True
            summary["patch_bytes"] = len(patch)
    return summary


def record_finish(
    core: Core,
    run_id: str,
    before: Taken,
    *,
    backend: str,
    author: Author,
    what: list[str],
    cwd: str,
    label: str,
    outcome: ProcessOutcome | None,
    options: WorkspaceOptions,
    failed: bool,
    error: BaseException | None = None,
    will_roll_back: bool = False,
    recovered: bool = False,
    git_heads: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
    artifacts: tuple[str, ...] = (),
) -> Finish:
    """Take the ``after`` snapshot and write the diff and ``run`` events (one operation).

    ``artifacts`` are the traces of the model calls the run made (``--record-model``).
    """
    label_after = "after_failure" if failed else "after"
    after = take_snapshot(core, backend, label_after, run_id=run_id, author=author, what=what)
    diff = core.diff_trees(before.tree, after.tree)
    summary = summarize(diff, backend=backend, before=before, after=after, options=options)
    interrupted = recovered or (outcome is not None and outcome.interrupted)
    run_data: dict[str, Any] = {
        "run_id": run_id,
        "argv": what,
        "cwd": cwd,
        "label": label,
        "exit_code": outcome.exit_code if outcome else None,
        "signal": outcome.signal if outcome else None,
        "duration_ms": outcome.duration_ms if outcome else None,
        "interrupted": interrupted,
        "rollback": will_roll_back and bool(diff.changes),
        "options": options.to_json(),
        "workspace": summary,
        "git_head_before": git_heads[0],
        "git_head_after": git_heads[1],
    }
    if error is not None:
        run_data["error"] = f"{type(error).__name__}: {error}"[:2000]
    if recovered:
        run_data["recovered"] = True
    if artifacts:
        run_data["model_calls"] = len(artifacts)
    diff_data = {
        "files_changed": summary["files_changed"],
        "insertions": summary["insertions"],
        "deletions": summary["deletions"],
        "has_patch": summary["has_patch"],
    }
    title = label or shlex.join(what)  # as the user would type it again
    ids = write_annotations(
        core,
        run_id,
        author,
        [
            after.annotation(),
            ("workspace_diff_computed", after.event_id, diff_data, "run diff"),
            ("run", after.event_id, run_data, f"run: {title}"[:200]),
        ],
        files=summary["changed_paths"],
        artifacts=artifacts,
    )
    changed = changed_paths(core, before.tree, after.tree)
    return Finish(after, diff, summary, ids[-1], changed)


def rollback(
    core: Core,
    run_id: str,
    before: Taken,
    after: Taken,
    finish: Finish,
    backend: str,
    author: Author,
) -> tuple[str, list[str]]:
    """Keep the failed state, then put back exactly the paths the run changed.

    The failed state stays on the branch ``failed/<run id>`` (and, with the
    git backend, at ``refs/strata/safety/<run id>``); HEAD's branch moves back
    to the ``before`` event. One operation, so ``strata undo`` reverses it.

    A path the scans could not read (see :attr:`strata.store.scan.ScanResult.errors`)
    is neither deleted nor overwritten: it may hold work no snapshot has, so
    it stays as it is on disk and is returned among the paths left alone.
    Returns the name of the kept state and the paths left alone.
    """
    safety = f"failed/{run_id}"
    if backend == "git":
        from strata.runs.git import GitWorkspace

        git = GitWorkspace.find(core.root)
        assert git is not None
        safety = git.set_ref(f"safety/{run_id}", after.ref.removeprefix("git:"))
    with core.transaction("rollback", author) as tx:
        view = tx.view
        branches = {**view.branches, f"failed/{run_id}": after.event_id}
        if view.branches.get(view.head_branch) == after.event_id:
            branches[view.head_branch] = before.event_id
        result = restore_into(
            tx,
            Point(before.tree, before.snapshot_id, core.event(before.event_id), "before"),
            f"the state before run {run_id}",
            paths=finish.changed,
            event_type=EventType.ROLLBACK,
            after_view=moved(view, head_event=before.event_id, branches=branches),
            details={"run_id": run_id, "safety": safety},
        )
    # what the after snapshot could not read holds what was last recorded, not what is on disk
    return safety, sorted({*result.skipped_paths, *after.unreadable})
