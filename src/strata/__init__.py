"""Strata: a time machine and safety layer for an AI agent's workspace.

The public API is re-exported here and imported lazily, so that the CLI
starts fast::

    from strata import Repository

    repo = Repository.init("project")
    repo.snapshot("before the agent")
"""

from __future__ import annotations

from strata._version import __version__

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from strata.aio import AsyncRepository
    from strata.errors import (  # the RPI loop (ws-rpi)
        AgentLoopDetected,  # the step loop
        AmbiguousRef,
        ApprovalDenied,  # gateway
        BookmarkLocked,
        BranchInUse,
        CommandForbidden,  # gateway
        CommandNotExecutable,
        CommandNotFound,
        CorruptRepository,
        DiffError,
        DigestError,  # the workspace digest
        DiskFull,
        DocumentsNotInstalled,  # documents
        DocumentTooLarge,
        DraftChanged,
        DraftExists,
        DraftOpen,
        EntryInTheWay,
        ExportFailed,
        ExternalSymlink,
        ExtraNotInstalled,  # framework integrations
        FolderNotWritable,
        GatewayError,  # gateway
        GitBackendError,
        JournalError,
        KbDenseUnavailable,
        KbError,
        KbNotIndexed,
        ManifestUnavailable,  # the Workshop's file context (issue 13)
        MergeConflict,
        NameTaken,
        NestedRepository,
        NoDraft,
        NotARepository,
        NothingToPublish,
        NothingToRedo,
        NothingToUndo,
        ObjectMissing,
        PatchDoesNotApply,
        PathError,
        PathNotFound,
        PathOutsideWorkspace,
        PolicyInvalid,  # gateway
        PreflightFailed,
        ProposalRefused,
        ProtectedPath,
        ProviderAuthFailed,
        ProviderCancelled,
        ProviderError,
        ProviderNotConfigured,
        ProviderProtocolError,
        ProviderUnavailable,
        RefError,
        ReplayError,
        RepositoryError,
        RepositoryLocked,
        RunError,
        SandboxError,
        SandboxPolicyError,
        SandboxUnavailable,
        SnapshotPruned,
        StoreOfAnotherWorkspace,
        StrataError,
        SyncError,  # the Git sync (issue 29)
        SyncMismatch,
        TargetNotEmpty,
        ToolArgumentsInvalid,
        TraceCorrupt,
        TraceLocked,
        UndoError,
        UnknownRef,
        UnrecordedCall,
        UnsafeWorkspacePath,
        UnsupportedCapability,  # gateway
        UnsupportedFormat,
        UsageError,
        WatcherFailed,
        WatcherRunning,
        WorkshopBusy,  # issue 13
        WorkshopError,  # issue 13
        WorkshopLoopDetected,
        WorkshopPlanMissing,
        WorkshopStepLimit,
        WorkspaceBusy,
        WorkspaceChanged,
        WorkspaceError,
        WorkspaceRequired,  # gateway
    )
    from strata.ledger.events import Author, Event
    from strata.replay.preflight import PreflightResult
    from strata.repo import (
        DiffResult,
        FileDiff,
        Point,
        Repository,
        RewindResult,
        SnapshotResult,
        StatusResult,
    )
    from strata.runs.options import WorkspaceOptions
    from strata.runs.result import RunResult
    from strata.runs.watch import LiveCapture
    from strata.workbench.checkpoints import Checkpoint, Checkpoints
    from strata.workbench.draft import Draft, DraftRun
    from strata.workbench.publish import PublishResult, ReviewResult

_HOME = {
    "AsyncRepository": "strata.aio",
    "Author": "strata.ledger.events",
    "Checkpoint": "strata.workbench.checkpoints",
    "Checkpoints": "strata.workbench.checkpoints",
    "Draft": "strata.workbench.draft",
    "DraftRun": "strata.workbench.draft",
    "PreflightResult": "strata.replay.preflight",
    "PublishResult": "strata.workbench.publish",
    "ReviewResult": "strata.workbench.publish",
    "DiffResult": "strata.repo",
    "Event": "strata.ledger.events",
    "FileDiff": "strata.repo",
    "LiveCapture": "strata.runs.watch",
    "Point": "strata.repo",
    "Repository": "strata.repo",
    "RewindResult": "strata.repo",
    "RunResult": "strata.runs.result",
    "SnapshotResult": "strata.repo",
    "StatusResult": "strata.repo",
    "WorkspaceOptions": "strata.runs.options",
}
"""Where each public name lives; every other name of ``__all__`` is an error class
of :mod:`strata.errors`."""

__all__ = [
    "__version__",
    "AmbiguousRef",
    "AsyncRepository",
    "Author",
    "BookmarkLocked",
    "BranchInUse",
    "Checkpoint",
    "Checkpoints",
    "CommandNotExecutable",
    "CommandNotFound",
    "CorruptRepository",
    "DiffError",
    "DiffResult",
    "DiskFull",
    "Draft",
    "DraftChanged",
    "DraftExists",
    "DraftOpen",
    "DraftRun",
    "EntryInTheWay",
    "Event",
    "ExportFailed",
    "ExternalSymlink",
    "FileDiff",
    "FolderNotWritable",
    "GitBackendError",
    "JournalError",
    "LiveCapture",
    "MergeConflict",
    "NameTaken",
    "NestedRepository",
    "NoDraft",
    "NotARepository",
    "NothingToPublish",
    "NothingToRedo",
    "NothingToUndo",
    "ObjectMissing",
    "PatchDoesNotApply",
    "PathError",
    "PathNotFound",
    "PathOutsideWorkspace",
    "Point",
    "PreflightFailed",
    "PreflightResult",
    "ProposalRefused",
    "ProtectedPath",
    "ProviderAuthFailed",
    "ProviderCancelled",
    "ProviderError",
    "ProviderNotConfigured",
    "ProviderProtocolError",
    "ProviderUnavailable",
    "PublishResult",
    "RefError",
    "ReplayError",
    "Repository",
    "RepositoryError",
    "RepositoryLocked",
    "ReviewResult",
    "RewindResult",
    "RunError",
    "RunResult",
    "SandboxError",
    "SandboxPolicyError",
    "SandboxUnavailable",
    "SnapshotPruned",
    "SnapshotResult",
    "StatusResult",
    "StoreOfAnotherWorkspace",
    "StrataError",
    "TargetNotEmpty",
    "ToolArgumentsInvalid",
    "TraceCorrupt",
    "TraceLocked",
    "UndoError",
    "UnknownRef",
    "UnrecordedCall",
    "UnsafeWorkspacePath",
    "UnsupportedFormat",
    "UsageError",
    "WatcherFailed",
    "WatcherRunning",
    "WorkspaceBusy",
    "WorkspaceChanged",
    "WorkspaceError",
    "WorkspaceOptions",
    "DigestError",  # the workspace digest
    "SyncError",  # the Git sync (issue 29)
    "SyncMismatch",
    "ManifestUnavailable",  # the Workshop's file context (issue 13)
    "ApprovalDenied",  # gateway
    "CommandForbidden",  # gateway
    "GatewayError",  # gateway
    "PolicyInvalid",  # gateway
    "UnsupportedCapability",  # gateway
    "WorkspaceRequired",  # gateway
    # the knowledge base (strata kb)
    "KbDenseUnavailable",
    "KbError",
    "KbNotIndexed",
    "WorkshopBusy",  # issue 13
    "WorkshopError",  # issue 13
    # the Workshop's RPI loop (ws-rpi)
    "WorkshopLoopDetected",
    "AgentLoopDetected",  # the step loop
    "WorkshopPlanMissing",
    "WorkshopStepLimit",
    "ExtraNotInstalled",  # framework integrations (langgraph, openai_agents)
    "DocumentTooLarge",  # documents
    "DocumentsNotInstalled",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'strata' has no attribute {name!r}")
    home = _HOME.get(name, "strata.errors")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
