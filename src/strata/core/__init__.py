"""The public core: the one unit of work, the workspace, refs, undo and check.

Feature packages (``runs/``, ``workbench/`` and those to come) build on these
names only; see ``docs/architecture.md``.
"""

from typing import TYPE_CHECKING, Any

from strata.core.core import (
    MANIFEST_FORMAT,
    SYSTEM,
    Core,
    monitor_in_process,
    open_core,
    watched_folders,
)
from strata.core.results import (
    DiffResult,
    FileDiff,
    Point,
    SnapshotResult,
    StatusResult,
)
from strata.core.transaction import Transaction
from strata.core.workspace import Scan, Workspace

if TYPE_CHECKING:
    from strata.core.results_ops import (
        BookmarkResult,
        CatResult,
        ConvertResult,
        ImportResult,
        InitResult,
        OperationRecord,
        RedoResult,
        RewindResult,
        UndoResult,
    )


#: the names :mod:`strata.core.results_ops` defines (see the module doc)
LATER = frozenset(
    {
        "BookmarkResult",
        "CatResult",
        "ConvertResult",
        "ImportResult",
        "InitResult",
        "OperationRecord",
        "RedoResult",
        "RewindResult",
        "UndoResult",
    }
)


def later(module: str, name: str) -> Any:
    """A module's ``__getattr__`` (PEP 562) for the names of :data:`LATER`: loads them."""
    if name in LATER:
        from strata.core import results_ops

        return getattr(results_ops, name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    """The results :mod:`strata.core.results_ops` defines, loaded on first use."""
    return later(__name__, name)


__all__ = [
    "MANIFEST_FORMAT",
    "SYSTEM",
    "BookmarkResult",
    "CatResult",
    "ConvertResult",
    "Core",
    "DiffResult",
    "FileDiff",
    "ImportResult",
    "InitResult",
    "OperationRecord",
    "Point",
    "RedoResult",
    "RewindResult",
    "Scan",
    "SnapshotResult",
    "StatusResult",
    "Transaction",
    "UndoResult",
    "Workspace",
    "monitor_in_process",
    "open_core",
    "watched_folders",
]
