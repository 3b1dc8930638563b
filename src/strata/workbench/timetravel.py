"""The Draft's time travel: rewind an open Draft to one of its own revisions.

A rewind never erases: the Draft's files are brought to the chosen
revision's tree (writing only the paths that differ) and the result is
recorded as a new draft revision whose ``data.rewind`` names where it went
(``to``) and where it came from (``from``). The operation (``draft
rewind``) keeps the trees before and after in its details, so ``strata
undo`` puts the files back (:func:`strata.workbench.recovery.undo_draft_rewind`).

Every change of the Draft's files made for a step (an agent step, a rewind)
runs inside :meth:`~strata.workbench.draft.Draft.step`: a lease
(``RUNS/<id>.lease``, ``kind: draft_step``) is held while the files change,
an exception puts the files back as the Draft's last revision has them
(:meth:`~strata.workbench.draft.Draft.put_back`), and a lease whose process
was killed is found on the next write by
:func:`strata.workbench.recovery.recover_draft_steps`, which puts the files
back the same way. So a failed or killed step leaves the
Draft as it was before it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.core.lease import Lease, active_leases
from strata.errors import AmbiguousRef, NoDraft, StrataError, UnknownRef, WorkshopBusy
from strata.ids import ObjectId
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author, Event, EventType
from strata.workbench.state import STEP_LEASE, DraftState, OpenDraft

if TYPE_CHECKING:
    from strata.core import Core, Transaction

#: the operation a Draft rewind records
REWIND_COMMAND = "draft rewind"


@dataclass(frozen=True)
class DraftRewindResult:
    """What :meth:`Draft.rewind <strata.workbench.draft.Draft.rewind>` did."""

    draft_id: str
    target_event_id: str
    from_event_id: str
    revision_event_id: str
    operation_id: str
    paths: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata draft rewind --json`` prints."""
        return {
            "draft_id": self.draft_id,
            "target_event_id": self.target_event_id,
            "from_event_id": self.from_event_id,
            "revision_event_id": self.revision_event_id,
            "operation_id": self.operation_id,
            "files_changed": len(self.paths),
            "paths": list(self.paths),
        }


def revisions(draft: OpenDraft) -> list[Event]:
    """The Draft's revisions, newest first (its base, Published's event, not included)."""
    core = draft.core
    records = core.ledger.driver.find_events(
        EventFilter(branch=draft.branch, action_type=EventType.DRAFT_REVISION), limit=None
    )
    return [Event.from_json(r.body, seq=r.seq) for r in records]


def resolve_revision(draft: OpenDraft, rev: str) -> Event:
    """The revision ``rev`` names: a draft_revision event id (or unique prefix), or ``base``."""
    wanted = rev.strip()
    if wanted in ("base", draft.state.base_event_id):
        return draft.base
    hint = f"see 'strata history --branch {draft.branch}' for the Draft's revisions, or use 'base'"
    if len(wanted) < 4:
        raise UnknownRef(rev, hint=hint)
    found = [e for e in revisions(draft) if e.id.startswith(wanted)]
    if draft.state.base_event_id.startswith(wanted):
        found.append(draft.base)
    if not found:
        raise UnknownRef(rev, hint=hint)
    if len(found) > 1:
        raise AmbiguousRef(rev, [e.id for e in found])
    return found[0]


def put_back(draft: OpenDraft, tree: ObjectId | None = None) -> list[str]:
    """Bring the Draft's files to ``tree`` (default: its last revision's), writing what differs.

    Returns the paths written. Nothing is recorded: this is how a failed
    step leaves the Draft as it was before it.
    """
    core = draft.core
    target = tree if tree is not None else core.tree_of(draft.tip())
    workspace = draft.workspace
    actions = workspace.plan(workspace.scan(), target)
    workspace.apply(actions)
    return sorted({a.path for a in actions})


def busy_steps(core: Core) -> list[dict[str, Any]]:
    """The leases of steps in progress in the Draft (a Workshop turn, a rewind)."""
    return [h for h in active_leases(core.layout.runs) if h.get("kind") == STEP_LEASE]


@contextmanager
def step(draft: OpenDraft, what: str, **info: Any) -> Iterator[Lease]:
    """Hold a step lease while the Draft's files change; put them back if the block fails.

    ``what`` names the step (shown to a second process that finds it busy);
    ``info`` is kept in the lease. On an exception (a failed model call, a
    Ctrl-C between two tool calls) the files go back to the Draft's last
    revision, so the step leaves nothing behind; a killed process leaves its
    lease, and :func:`strata.workbench.recovery.recover_draft_steps` does the
    same on the next write.
    """
    core = draft.core
    held = busy_steps(core)
    if held:
        raise WorkshopBusy(what, [str(h.get("what") or h.get("run_id")) for h in held])
    lease_id = f"step_{core.new_event_id().removeprefix('evt_')}"
    body = {"kind": STEP_LEASE, "what": what, "draft": draft.id, "pid": os.getpid(), **info}
    lease = Lease.acquire(core.layout.runs, lease_id, body)
    try:
        yield lease
    except BaseException:
        try:
            if _still_open(draft):
                put_back(draft)
        finally:
            lease.release()
        raise
    lease.release()


def _still_open(draft: OpenDraft) -> bool:
    try:
        return DraftState.load(draft.core.layout.draft_state) == draft.state
    except StrataError:  # an unreadable record: nothing to put back
        return False


def rewind(draft: OpenDraft, rev: str, *, author: Author | None = None) -> DraftRewindResult:
    """Bring the open Draft back to its revision ``rev``, recorded as a new revision.

    Unrecorded edits in the Draft are recorded first (nothing is lost). One
    operation, ``draft rewind``, which ``strata undo`` reverses.
    """
    core = draft.core
    with core.writing():
        if not _still_open(draft):
            raise NoDraft()
        target = resolve_revision(draft, rev)
        with step(draft, "rewind the Draft"):
            draft.record("before rewind", author=author)
            with core.transaction(REWIND_COMMAND, author, draft=draft.id) as tx:
                event, paths = rewind_in(tx, draft, target, author=author)
    return DraftRewindResult(
        draft.id, target.id, str(event.data["rewind"]["from"]), event.id, tx.id, tuple(paths)
    )


def rewind_in(
    tx: Transaction,
    draft: OpenDraft,
    target: Event,
    *,
    author: Author | None = None,
    message: str = "",
    data: dict[str, Any] | None = None,
) -> tuple[Event, list[str]]:
    """Within ``tx``: bring the Draft's files to ``target``'s tree and record it as a revision.

    The operation's details get ``draft_id``, ``draft_tree_before`` and
    ``draft_tree_after`` (what :func:`strata.workbench.recovery.undo_draft_rewind` reads). Call it
    inside :func:`step`, so a failure puts the files back.
    """
    core = draft.core
    tip = draft.tip()
    before = core.tree_of(tip)
    after = core.tree_of(target)
    paths = put_back(draft, after)
    event = draft.record(
        message or f"rewind the Draft to {target.id}",
        author=author,
        data={"rewind": {"to": target.id, "from": tip.id}, **(data or {})},
        always=True,
        tx=tx,
    )
    assert event is not None
    tx.details.update(draft_id=draft.id, draft_tree_before=before, draft_tree_after=after)
    return event, paths
