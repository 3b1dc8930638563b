"""The public core: the one unit of work, the workspace, refs, undo and check.

Feature packages (``runs/``, ``workbench/`` and those to come) build on these
names only; see ``docs/architecture.md``.
"""

from strata.core.core import (
    MANIFEST_FORMAT,
    SYSTEM,
    Core,
    monitor_in_process,
    open_core,
    watched_folders,
)
from strata.core.results import (
    BookmarkResult,
    CatResult,
    ConvertResult,
    DiffResult,
    FileDiff,
    ImportResult,
    InitResult,
    OperationRecord,
    Point,
    RedoResult,
    RewindResult,
    SnapshotResult,
    StatusResult,
    UndoResult,
)
from strata.core.transaction import Transaction
from strata.core.workspace import Scan, Workspace

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
