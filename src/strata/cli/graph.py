"""The history graph drawn in text, as ``git log --graph`` and ``jj log`` draw it.

Nodes are state events, newest first (every parent comes after its
children in that order, since the ledger appends a child after its parent).
Each column of the drawing waits for one event: the parent of the node drawn
above it. A node takes the column that waits for it (the leftmost, when
several do: a fork), the other columns waiting for it join it (``|/``), and
its column then waits for its first parent; a merge's second parent opens a
column to the right (``|\\``). ``@`` marks HEAD, ``*`` the other events.
"""

from __future__ import annotations

from collections.abc import Sequence


def _row(cols: Sequence[str | None], marks: dict[int, str] | None = None) -> str:
    """One row: ``|`` for every column waiting for an event, ``marks`` where given."""
    marks = marks or {}
    cells = [marks.get(k, "|" if c is not None else " ") for k, c in enumerate(cols)]
    return " ".join(cells).rstrip()


def _trim(cols: list[str | None]) -> None:
    while cols and cols[-1] is None:
        cols.pop()


def draw(nodes: Sequence[tuple[str, Sequence[str]]], head: str | None) -> list[tuple[str, int]]:
    """Rows of the drawing: ``(prefix, node index)``, or ``(lines, -1)`` for a row of lines."""
    cols: list[str | None] = []
    out: list[tuple[str, int]] = []
    for i, (eid, parents) in enumerate(nodes):
        waiting = [k for k, c in enumerate(cols) if c == eid]
        if waiting:
            col = waiting[0]
            for j in reversed(waiting[1:]):  # forks: the other children's lines join this one
                cells = [("|" if c is not None else " ") for c in cols[:j]]
                text = " ".join(cells)
                out.append((text[: 2 * j - 1] + "/", -1))
                cols[j] = None
            _trim(cols)
        elif None in cols:
            col = cols.index(None)
            cols[col] = eid
        else:
            col = len(cols)
            cols.append(eid)
        out.append((_row(cols, {col: "@" if eid == head else "*"}), i))
        cols[col] = parents[0] if parents else None
        for extra in parents[1:]:  # a merge: its other parent gets a column to the right
            if extra in cols:
                continue
            free = next((k for k in range(col + 1, len(cols)) if cols[k] is None), None)
            if free is None:
                cols.append(extra)
                free = len(cols) - 1
            else:
                cols[free] = extra
            cells = [("|" if c is not None else " ") for c in cols[: col + 1]]
            out.append((" ".join(cells) + "\\", -1))
        _trim(cols)
    return out
