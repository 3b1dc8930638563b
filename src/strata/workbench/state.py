"""What the Draft's modules share: its record, its step lease, and the Draft as they see it.

:class:`DraftState` is the record ``draft.json`` of the open Draft, and
:func:`end_draft` removes it. :class:`OpenDraft` is the open Draft
(:class:`strata.workbench.draft.Draft`) as publish and time travel use it:
the Draft's methods call them, so they name it by what they use instead of
importing it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strata.atomic import fsync_dir
from strata.core.core import DRAFT_FILES
from strata.ids import EventId
from strata.ledger.events import Author, Event, format_ts

if TYPE_CHECKING:
    from strata.core import Core, Scan, Transaction, Workspace

STATE_FORMAT = 1
#: the ``kind`` of a lease held while a step changes the Draft's files
STEP_LEASE = "draft_step"


@dataclass(frozen=True)
class DraftState:
    """The record ``draft.json``: which Draft is open and where it started."""

    id: str
    branch: str
    base_event_id: EventId
    created_ms: int
    git: bool = False
    #: what opened the Draft: ``{"kind": "workshop", "conversation": …}``, ``{"kind":
    #: "run", "command": …}``, ``{"kind": "agent", "agent": …}``, ``{"kind": "hook",
    #: "agent": …}``, ``{"kind": "mcp"}``, ``{"kind": "cli"}``; None for a Draft
    #: recorded before sources were
    source: dict[str, Any] | None = None
    #: when the 24-hour reminder was last dismissed (it comes back a day later)
    #: (not part of which Draft this is: a dismissal does not end a Draft's step)
    reminder_dismissed_ms: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """As stored in ``draft.json``."""
        return {
            **({"source": self.source} if self.source is not None else {}),
            **(
                {"reminder_dismissed_ms": self.reminder_dismissed_ms}
                if self.reminder_dismissed_ms is not None
                else {}
            ),
            "format": STATE_FORMAT,
            "id": self.id,
            "branch": self.branch,
            "base_event_id": self.base_event_id,
            "created": format_ts(self.created_ms),
            "created_ms": self.created_ms,
            "files": DRAFT_FILES,
            "git": self.git,
        }

    @classmethod
    def load(cls, path: Path) -> DraftState | None:
        """The open Draft's record, or None when no Draft is open."""
        try:
            raw = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            from strata.errors import CorruptRepository

            raise CorruptRepository(f"the Draft record {path} is unreadable") from None
        from strata.errors import CorruptRepository, UnsupportedFormat

        if not isinstance(raw, dict):
            raise CorruptRepository(f"the Draft record {path} is not a JSON object")
        if raw.get("format") != STATE_FORMAT:
            raise UnsupportedFormat(str(path), raw.get("format"), STATE_FORMAT)
        fields = {"id": str, "branch": str, "base_event_id": str, "created_ms": int}
        wrong = [k for k, kind in fields.items() if type(raw.get(k)) is not kind]
        if wrong:
            raise CorruptRepository(
                f"the Draft record {path} lacks or mistypes {', '.join(wrong)}",
                hint=f"move it aside to end the Draft; its files stay in {path.parent}",
            )
        return cls(
            id=raw["id"],
            branch=raw["branch"],
            base_event_id=EventId(raw["base_event_id"]),
            created_ms=raw["created_ms"],
            git=bool(raw.get("git")),
            source=raw["source"] if isinstance(raw.get("source"), dict) else None,
            reminder_dismissed_ms=(
                raw["reminder_dismissed_ms"]
                if type(raw.get("reminder_dismissed_ms")) is int
                else None
            ),
        )

    def source_text(self) -> str:
        """The source as a person reads it (``Workshop (conv_…)``, ``draft run (make)``)."""
        source = self.source or {}
        kind = str(source.get("kind") or "")
        detail = {
            "workshop": "conversation",
            "run": "command",
            "agent": "agent",
            "hook": "agent",
        }.get(kind)
        label = {
            "workshop": "Workshop",
            "run": "draft run",
            "agent": "strata agent",
            "hook": "agent hook",
            "mcp": "MCP client",
            "cli": "draft start",
        }.get(kind, kind or "unknown source")
        value = source.get(detail) if detail else None
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        return f"{label} ({str(value)[:60]})" if value else label


class OpenDraft(Protocol):
    """The open Draft, as the functions its methods call use it."""

    core: Core
    state: DraftState

    @property
    def id(self) -> str:
        """The Draft's id."""

    @property
    def branch(self) -> str:
        """The Draft's branch."""

    @property
    def path(self) -> Path:
        """The folder holding the Draft's files."""

    @property
    def base(self) -> Event:
        """Published's event the Draft started from."""

    @property
    def workspace(self) -> Workspace:
        """The Draft's folder as a workspace."""

    def tip(self) -> Event:
        """The newest draft revision (the base until the first one)."""

    def revisions(self) -> list[Event]:
        """The Draft's revisions, newest first."""

    def record(
        self,
        message: str = "",
        *,
        author: Author | None = None,
        data: dict[str, Any] | None = None,
        always: bool = False,
        scanned: Scan | None = None,
        tx: Transaction | None = None,
        artifacts: tuple[str, ...] = (),
    ) -> Event | None:
        """Record the Draft's files as a draft revision."""


def end_draft(state_path: Path) -> None:
    """End the open Draft: its record goes (atomically); its folder is kept for the next one."""
    if state_path.exists():
        state_path.unlink()
        fsync_dir(state_path.parent)
