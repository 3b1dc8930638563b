"""What the core calls for the Draft: light to import, since every writing command does.

:func:`recover_draft_steps` (a recoverer) loads the Draft and its time travel
only when a killed step left its lease; :func:`undo_draft_rewind` (an undo
handler) when an undo meets a Draft rewind.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from strata.core.lease import stale_leases
from strata.errors import NoDraft
from strata.ids import ObjectId
from strata.workbench.state import STEP_LEASE

if TYPE_CHECKING:
    from strata.core import Core, OperationRecord, Transaction


def recover_draft_steps(core: Core) -> list[str]:
    """Put the Draft back for every step whose process was killed; return their lease ids.

    Runs under the write lock (a recoverer of :class:`~strata.core.Core`).
    """
    stale = [i for i in stale_leases(core.layout.runs) if i.get("kind") == STEP_LEASE]
    if not stale:
        return []
    from strata.workbench.draft import open_draft  # (only for a killed step)
    from strata.workbench.timetravel import put_back

    done: list[str] = []
    for info in stale:
        draft = open_draft(core)
        if draft is not None and draft.id == info.get("draft"):
            put_back(draft)
        Path(str(info["path"])).unlink(missing_ok=True)
        done.append(str(info.get("run_id")))
    return done


def undo_draft_rewind(tx: Transaction, op: OperationRecord) -> bool:
    """``strata undo`` of a ``draft rewind``: the files back as they were, as a new revision.

    False when ``op`` is not a Draft rewind (the caller undoes it otherwise).
    """
    from strata.workbench.timetravel import REWIND_COMMAND, put_back, step

    if op.command != REWIND_COMMAND:
        return False
    from strata.workbench.draft import open_draft

    core = tx.core
    draft = open_draft(core)
    if draft is None or draft.id != op.details.get("draft_id"):
        raise NoDraft()
    tree = ObjectId(str(op.details["draft_tree_before"]))
    with step(draft, "undo a Draft rewind"):
        put_back(draft, tree)
        draft.record(
            f"undo draft rewind {op.id}",
            data={"undo_of": op.id},
            always=True,
            tx=tx,
        )
    tx.details.update(
        undid=op.id,
        draft_id=draft.id,
        redo_refused="a Draft rewind is not redone; rewind the Draft again instead",
    )
    return True
