"""The Workshop's recoverer, light to import: every writing command calls it.

:func:`strata.workshop.session.recover_turns` (and the session module with
it) is loaded only when the repository holds the Workshop's folder, that is
once a Workshop has run here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.core import Core


def recover_turns(core: Core) -> list[str]:
    """Record every turn whose process was killed (see the session module's function)."""
    if not core.layout.workshop.is_dir():
        return []
    from strata.workshop.session import recover_turns as recover

    return recover(core)
