"""The Draft's recoverer, light to import: every writing command calls it.

:func:`strata.workbench.timetravel.recover_draft_steps` (and the time-travel
module with it) is loaded only when a killed Draft step left its lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.core.lease import stale_leases

if TYPE_CHECKING:
    from strata.core import Core

#: the ``kind`` of a lease held while a step changes the Draft's files
STEP_LEASE = "draft_step"


def recover_draft_steps(core: Core) -> list[str]:
    """Put the Draft back for every step whose process was killed (see timetravel's)."""
    if not any(info.get("kind") == STEP_LEASE for info in stale_leases(core.layout.runs)):
        return []
    from strata.workbench.timetravel import recover_draft_steps as recover

    return recover(core)
