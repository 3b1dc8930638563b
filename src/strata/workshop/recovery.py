"""The Workshop's finisher, light to import: every writing command's recovery names it.

The core finishes and closes a group whose process died
(:func:`strata.core.groups.recover_groups`); for a Workshop lease (kind
:data:`TURN_LEASE`) it calls :func:`finish_turn`, which loads the session
module only then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from strata.layout import WORKSHOP_LEASE as TURN_LEASE

if TYPE_CHECKING:
    from strata.core import Core

__all__ = ["TURN_LEASE", "finish_turn"]


def finish_turn(core: Core, info: Mapping[str, Any]) -> None:
    """Record what a killed Workshop action left unrecorded (in its group, if it has one)."""
    from strata.workshop.session import finish_turn as finish

    finish(core, info)
