"""Placeholder: the Workshop session."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.core import Core, OperationRecord, Transaction


def recover_turns(core: Core) -> list[str]:
    """Nothing yet."""
    return []


def undo_workshop(tx: Transaction, op: OperationRecord) -> bool:
    """Nothing yet."""
    return False
