"""``strata compare A B``: two attempts side by side, from their common ancestor.

For each side: the files it changed since the lowest common ancestor, their
semantic blocks, and the result events anchored on its line of events (from
the ancestor, excluded, to its tip); then the blocks both sides touched (where
a merge may conflict) and those only one did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.changes.blocks import FileSemantics, file_semantics
from strata.changes.merging import lowest_common_ancestor
from strata.changes.results import ResultRecord, list_results
from strata.errors import UsageError
from strata.sandbox.paths import display_path
from strata.store.tree import EMPTY_TREE

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.ledger.events import Event

__all__ = ["Comparison", "compare"]


@dataclass(frozen=True)
class Side:
    """One attempt: its tip, what it changed and what its results say."""

    ref: str
    event: Event
    files: list[FileSemantics]
    results: list[ResultRecord]

    def blocks(self) -> set[str]:
        """The ids of the blocks it changed."""
        return {b.id for f in self.files for b in f.result.semantic_blocks}

    def to_json(self) -> dict[str, Any]:
        """The side as ``--json`` prints it."""
        return {
            "ref": self.ref,
            "event_id": self.event.id,
            "files": [display_path(f.path) for f in self.files],
            "semantic": [f.to_json() for f in self.files],
            "results": [r.to_json() for r in self.results],
        }


@dataclass(frozen=True)
class Comparison:
    """Two sides and their common ancestor."""

    base: Event | None
    left: Side
    right: Side

    def to_json(self) -> dict[str, Any]:
        """What ``strata compare --json`` prints."""
        a, b = self.left.blocks(), self.right.blocks()
        return {
            "base": self.base.id if self.base else None,
            "left": self.left.to_json(),
            "right": self.right.to_json(),
            "both_changed": sorted(a & b),
            "only_left": sorted(a - b),
            "only_right": sorted(b - a),
        }


def _line(core: Core, tip: Event, base: Event | None) -> set[str]:
    """The ids of the state events from ``tip`` back to ``base`` (excluded), first parents."""
    found: set[str] = set()
    event: Event | None = tip
    while event is not None and (base is None or event.id != base.id):
        found.add(event.id)
        event = core.event(event.parent_event_id) if event.parent_event_id else None
    return found


def compare(core: Core, left: str, right: str, events: list[Event]) -> Comparison:
    """Compare the points ``left`` and ``right`` (``events``: the ledger, for results)."""
    a, b = core.resolve(left).event, core.resolve(right).event
    if a is None or b is None:
        raise UsageError("compare needs two recorded events: A and B")
    base = lowest_common_ancestor(core, a, b)
    base_tree = core.tree_of(base) if base else EMPTY_TREE
    results = list_results(events)
    sides = []
    for ref, tip in ((left, a), (right, b)):
        diff = core.diff_trees(base_tree, core.tree_of(tip), stats=False)
        line = _line(core, tip, base)
        mine = [r for r in results if r.event.anchor_event_id in line]
        sides.append(Side(ref, tip, file_semantics(core, diff), mine))
    return Comparison(base, sides[0], sides[1])
