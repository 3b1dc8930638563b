"""What a run returns: :class:`RunResult` and its :class:`WorkspaceResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.schemas import fields_json


@dataclass
class WorkspaceResult:
    """The workspace side of a finished run."""

    backend: str
    """``hash`` or ``git``."""
    before_snapshot: str
    """The ``before`` snapshot: a Strata snapshot id, or ``git:<commit>``."""
    after_snapshot: str
    """The ``after`` (or ``after_failure``) snapshot, in the same form."""
    diff: dict[str, Any]
    """The compact summary: counts, changed paths, the patch when captured."""
    rolled_back: bool = False
    safety_ref: str | None = None
    """Where the failed state is kept after a rollback (a branch, and a git ref)."""
    rollback_skipped: list[str] = field(default_factory=list)
    """Paths the rollback left as they are on disk: they could not be read (so not
    recorded), or they changed after the rollback's scan."""

    def to_json(self) -> dict[str, Any]:
        """The workspace result as JSON."""
        return fields_json(self)


@dataclass
class RunResult:
    """One finished run: how the target ended and what it did to the workspace.

    A callable's return value is :attr:`value`; the exception it raised is kept
    in :attr:`error`, and :meth:`raise_error` raises it again.
    """

    run_id: str
    exit_code: int
    interrupted: bool
    duration_ms: int
    run_event_id: str | None = None
    workspace: WorkspaceResult | None = None
    value: Any = None
    error: BaseException | None = None
    signal: int | None = None
    warnings: list[str] = field(default_factory=list)
    git_head_before: dict[str, Any] | None = None
    """Git's HEAD before the run: ``{"commit", "branch"}`` (None outside a git work tree)."""
    git_head_after: dict[str, Any] | None = None
    """Git's HEAD after the run, in the same form."""
    git_rollback: dict[str, Any] | None = None
    """With ``rollback_git`` when HEAD moved: ``{"branch", "moved_to", "kept_on"}`` once the
    branch moved back, or ``{"error"}`` saying why it did not (HEAD changed branch)."""

    @property
    def new_git_commits(self) -> bool:
        """True when git's HEAD moved during the run (the command made or checked out commits)."""
        before, after = self.git_head_before, self.git_head_after
        return before is not None and after is not None and before != after

    @property
    def ok(self) -> bool:
        """True when the target exited 0 (or returned) and was not interrupted."""
        return self.exit_code == 0 and not self.interrupted

    def raise_error(self) -> None:
        """Raise the callable's exception again, if it raised one."""
        if self.error is not None:
            raise self.error

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata run --json`` prints."""
        ws = self.workspace
        return {
            "run_id": self.run_id,
            "run_event_id": self.run_event_id,
            "backend": ws.backend if ws else None,
            "before_snapshot": ws.before_snapshot if ws else None,
            "after_snapshot": ws.after_snapshot if ws else None,
            "exit_code": self.exit_code,
            "interrupted": self.interrupted,
            "duration_ms": self.duration_ms,
            "diff": ws.diff if ws else None,
            "rolled_back": ws.rolled_back if ws else False,
            "safety_ref": ws.safety_ref if ws else None,
            "git_head_before": self.git_head_before,
            "git_head_after": self.git_head_after,
            "git_rollback": self.git_rollback,
            "rollback_skipped": ws.rollback_skipped if ws else [],
            "warnings": self.warnings,
        }
