"""Operation groups: one user action (an agent's prompt) whose steps are operations of their own.

A group is not a record of its own: each operation that is a step of it
carries it (``group`` in the operation record, see ``docs/format.md``), and
its events take the group's id as their ``operation_id``. Kept apart from
:mod:`strata.core.core` so that a snapshot, which never makes one, does not pay
for the dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.ledger.events import Author


@dataclass(frozen=True)
class Group:
    """One user action whose steps are operations of their own: an agent's prompt.

    Each of its operations carries it (``group`` in the operation record) and its
    events take its id as their ``operation_id``; ``strata undo`` reverses the
    whole group, ``strata op log`` shows it as one line. ``data`` holds what
    links it to the agent's conversation (``session_id``, ``transcript_path``).
    """

    id: str
    kind: str
    title: str
    author: Author
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The group as its operations record it."""
        return {
            **self.data,
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "author": self.author.to_json(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Group:
        """The inverse of :meth:`to_json`."""
        data = {k: v for k, v in raw.items() if k not in ("id", "kind", "title", "author")}
        return cls(
            str(raw["id"]),
            str(raw["kind"]),
            str(raw["title"]),
            Author.from_json(raw["author"]),
            data,
        )
