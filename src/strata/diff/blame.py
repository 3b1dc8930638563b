"""Line attribution over a file's versions: which step last changed each line.

:func:`blame` takes a file's first version and the versions that followed,
each with a label (an event id), and answers, for the last version, the
label of the step that last wrote each line (``None``: the line was already
in the first version), and, for the first version, the label of the step
that removed each of its lines. Each step is diffed with libgit2's xdiff
(the diff ``strata diff`` prints) with no context, so a step costs the lines
it changed, not the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

__all__ = ["Blame", "blame", "carried"]

#: a step: its label and content, and optionally a label per line of the content
#: (``None`` in it: the step's own label), for a step that brings lines from elsewhere
Step = tuple[str, bytes] | tuple[str, bytes, Sequence[str | None]]


@dataclass(frozen=True)
class Blame:
    """Who wrote each line of the last version and who removed each line of the first.

    ``written[i]`` is the label of the step that last changed line ``i + 1``
    of the last version (``None``: unchanged since the first version);
    ``removed[i]`` is the label of the step that removed line ``i + 1`` of the
    first version (absent: the line is still there, or came back).
    """

    written: tuple[str | None, ...]
    removed: dict[int, str]


def _count(data: bytes) -> int:
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def carried(old: bytes, new: bytes, labels: Sequence[str | None]) -> list[str | None]:
    """For each line of ``new``: the label of the line of ``old`` it kept unchanged, else None.

    ``labels`` holds one label per line of ``old`` (a merge's right side as
    blamed on its own line: its lines keep their authors in the merge).
    """
    out: list[str | None] = []
    kept = 0
    for hunk in pygit2.Patch.create_from(old, new, context_lines=0).hunks:
        start = hunk.old_start - 1 if hunk.old_lines else hunk.old_start
        out.extend(labels[kept:start])
        out.extend(None for _ in range(hunk.new_lines))
        kept = start + hunk.old_lines
    out.extend(labels[kept:])
    return out


def blame(first: bytes, steps: Sequence[Step]) -> Blame:
    """Attribute the lines of the last of ``steps`` (or ``first``) to the steps that wrote them.

    ``steps`` are ``(label, content)`` oldest first, or ``(label, content,
    per_line)`` where ``per_line`` names who wrote each line of ``content``
    (a merge: the lines it took from its right side keep their authors); a
    step whose content is the previous one's changes nothing.
    """
    # each current line: ("", n) for line n of the first version, else (label, -1)
    origin: list[tuple[str, int]] = [("", n) for n in range(_count(first))]
    removed: dict[int, str] = {}
    previous = first
    for step in steps:
        label, content = step[0], step[1]
        per_line: Sequence[str | None] = step[2] if len(step) == 3 else ()
        if content == previous:
            continue
        patch = pygit2.Patch.create_from(previous, content, context_lines=0)
        out: list[tuple[str, int]] = []
        kept = 0  # lines of ``origin`` copied or dropped so far
        for hunk in patch.hunks:
            # old_start of a hunk that only adds is the line it follows
            start = hunk.old_start - 1 if hunk.old_lines else hunk.old_start
            out.extend(origin[kept:start])
            for gone in origin[start : start + hunk.old_lines]:
                if not gone[0]:
                    removed[gone[1]] = label
            kept = start + hunk.old_lines
            first_new = hunk.new_start - 1 if hunk.new_lines else hunk.new_start
            for j in range(first_new, first_new + hunk.new_lines):
                who = per_line[j] if j < len(per_line) else None
                out.append((who or label, -1))
        out.extend(origin[kept:])
        origin = out
        previous = content
    for who, n in origin:
        if not who:
            removed.pop(n, None)
    return Blame(tuple(who or None for who, _ in origin), removed)
