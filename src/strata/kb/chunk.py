"""Cutting a document into passages: by heading, then by paragraph, with their line spans.

A heading starts a section; within a section, paragraphs (runs of non-blank
lines) are joined into one chunk until it would pass :data:`TARGET_CHARS`; a
paragraph longer than :data:`MAX_CHARS` is cut by lines. A chunk never
crosses a heading, so its heading path (``Install > Linux``) says where it
is. Line numbers are 1-based and inclusive: lines ``start_line..end_line``
of the document are the chunk's text exactly (blank lines between its
paragraphs included).
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.kb.extract import Document

#: a chunk grows by whole paragraphs up to about this many characters
TARGET_CHARS = 1200
#: a paragraph longer than this is cut by lines
MAX_CHARS = 2400
#: how long a heading path may be in a chunk's record
HEADING_CHARS = 200


@dataclass(frozen=True, slots=True)
class Chunk:
    """One passage of a document."""

    start_line: int
    end_line: int
    heading: str
    text: str
    page: int | None = None


def chunk(document: Document) -> list[Chunk]:
    """The chunks of ``document``, in order."""
    lines = document.lines
    out: list[Chunk] = []
    trail: list[tuple[int, str]] = []  # the heading path: (level, title)
    heading = ""
    # paragraphs as (first, last) 0-based line indexes; a heading is its own paragraph
    start: int | None = None  # the chunk being built: its first line...
    end = -1  # ...and its last
    size = 0
    para: int | None = None

    def flush() -> None:
        nonlocal start, size
        if start is not None:
            out.append(_make(document, start, end, heading))
        start, size = None, 0

    def add(first: int, last: int) -> None:
        nonlocal start, end, size
        length = sum(len(lines[i]) + 1 for i in range(first, last + 1))
        if length > MAX_CHARS:
            flush()
            _cut(document, first, last, heading, out)
            return
        if start is not None and size + length > TARGET_CHARS:
            flush()
        if start is None:
            start = first
        end, size = last, size + length

    for i, line in enumerate(lines):
        level = document.headings.get(i)
        if level is not None:
            if para is not None:
                add(para, i - 1)
                para = None
            flush()
            title = line.strip().lstrip("#").strip() or line.strip()
            while trail and trail[-1][0] >= level:
                trail.pop()
            trail.append((level, title))
            heading = " > ".join(t for _, t in trail)[:HEADING_CHARS]
            start, end, size = i, i, len(line) + 1
            continue
        if line.strip():
            if para is None:
                para = i
        elif para is not None:
            add(para, i - 1)
            para = None
    if para is not None:
        add(para, len(lines) - 1)
    flush()
    return out


def _make(document: Document, first: int, last: int, heading: str) -> Chunk:
    text = "\n".join(document.lines[first : last + 1])
    page = document.pages[first] if document.pages is not None else None
    return Chunk(first + 1, last + 1, heading, text, page)


def _cut(document: Document, first: int, last: int, heading: str, out: list[Chunk]) -> None:
    """Cut one long paragraph into chunks of whole lines (a very long line is kept whole)."""
    lines = document.lines
    begin, size = first, 0
    for i in range(first, last + 1):
        length = len(lines[i]) + 1
        if size and size + length > TARGET_CHARS:
            out.append(_make(document, begin, i - 1, heading))
            begin, size = i, 0
        size += length
    out.append(_make(document, begin, last, heading))
