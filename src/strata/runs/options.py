"""How a run instruments its workspace: :class:`WorkspaceOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from strata.errors import UsageError

Strategy = Literal["auto", "git", "hash"]
STRATEGIES: tuple[str, ...] = ("auto", "git", "hash")
DEFAULT_MAX_PATCH_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class WorkspaceOptions:
    """The workspace side of a run: which snapshots it takes and what it keeps.

    ``enabled`` off runs the target with no snapshot at all. ``path`` names the
    workspace (default: the repository's). ``strategy`` picks the backend:
    ``hash`` (Strata's own store), ``git`` (commits under ``refs/strata/``)
    or ``auto`` (``hash`` in a Strata workspace, ``git`` in a git work tree).
    ``capture_patch`` keeps the full patch in the run's summary when it fits
    ``max_patch_bytes``. ``rollback_on_failure`` puts back what a failed run
    changed; ``rollback_on_interrupt`` does so for an interrupted one too.
    ``rollback_git`` (implies ``rollback_on_failure``) also moves git's branch
    back to where HEAD was before the run and puts the user's git index back,
    keeping the run's commits on the git branch ``failed/<run id>``.
    ``ignore`` adds gitignore-style patterns to the repository's ignore rules
    for this run's snapshots: an ignored path is never recorded, deleted or
    overwritten by the run's rollback.
    """

    enabled: bool = True
    path: Path | str | None = None
    strategy: Strategy = "auto"
    capture_patch: bool = False
    max_patch_bytes: int = DEFAULT_MAX_PATCH_BYTES
    rollback_on_failure: bool = False
    rollback_on_interrupt: bool = False
    rollback_git: bool = False
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise UsageError(
                f"unknown strategy {self.strategy!r}; use one of {', '.join(STRATEGIES)}"
            )
        if self.max_patch_bytes < 0:
            raise UsageError("max_patch_bytes must be 0 or more")
        if isinstance(self.ignore, str):
            raise UsageError("ignore is a sequence of patterns, not one string")
        for pattern in self.ignore:
            if not pattern.strip() or "\n" in pattern:
                raise UsageError(f"invalid ignore pattern {pattern!r}")

    def to_json(self) -> dict[str, Any]:
        """The options as JSON (kept in the run's lease and event)."""
        return {
            "strategy": self.strategy,
            "capture_patch": self.capture_patch,
            "max_patch_bytes": self.max_patch_bytes,
            "rollback_on_failure": self.rollback_on_failure,
            "rollback_on_interrupt": self.rollback_on_interrupt,
            "rollback_git": self.rollback_git,
            "ignore": list(self.ignore),
        }
