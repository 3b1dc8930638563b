"""The readers of DOCX, PDF and PPTX documents: their text, as a model or an index reads it.

The heavy libraries (python-docx, pypdf, python-pptx) are imported only when
a document of their kind is read.
"""

from __future__ import annotations

import io
from typing import Any


def heading_level(style: str) -> int | None:
    """The outline level of a Word paragraph style (``Title`` 1, ``Heading 2`` 2), or None."""
    if style == "Title":
        return 1
    if style.startswith("Heading"):
        rest = style.removeprefix("Heading").strip()
        return int(rest) if rest.isdigit() else 1
    return None


def slide_title(slide: Any) -> str:
    """A slide's title, or its first line of text, or ''."""
    title = slide.shapes.title
    if title is not None and title.has_text_frame and title.text_frame.text.strip():
        return str(title.text_frame.text.strip())
    for shape in slide.shapes:
        if shape.has_text_frame and shape.text_frame.text.strip():
            return str(shape.text_frame.text.strip().splitlines()[0])
    return ""


def docx_text(data: bytes) -> str:
    """A Word document's text: headings as ``#`` lines, then each table's rows."""
    import docx

    document = docx.Document(io.BytesIO(data))
    lines: list[str] = []
    for paragraph in document.paragraphs:
        style = paragraph.style.name if paragraph.style is not None else ""
        level = heading_level(style or "")
        text = paragraph.text
        lines.append(("#" * level + " " + text) if level and text.strip() else text)
    for number, table in enumerate(document.tables, 1):
        lines.append(f"[table {number}]")
        for row in table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    return "\n".join(lines)


def pptx_text(data: bytes) -> str:
    """A deck's text: a ``## Slide N: title`` line, then the slide's other text."""
    import pptx

    deck = pptx.Presentation(io.BytesIO(data))
    lines: list[str] = []
    for number, slide in enumerate(deck.slides, 1):
        lines.append(f"## Slide {number}: {slide_title(slide) or '(untitled)'}")
        for shape in slide.shapes:
            if shape.has_text_frame and shape is not slide.shapes.title:
                lines.extend(line for line in shape.text_frame.text.splitlines() if line.strip())
    return "\n".join(lines)


def pdf_text(data: bytes, pages: str | None) -> tuple[str, str]:
    """The text of a PDF's ``pages`` (``"3"``, ``"2-5"``; default the first five), and what it is.

    ValueError for an encrypted PDF or pages it does not have.
    """
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        raise ValueError("the pdf is encrypted; its text cannot be read")
    total = len(reader.pages)
    first, last = 1, min(total, 5)
    if pages is not None:
        text = str(pages).strip()
        low, _, high = text.partition("-")
        try:
            first = int(low)
            last = int(high) if high else first
        except ValueError:
            raise ValueError(f"'pages' {pages!r} is not a page or range like '2-5'") from None
        if not 1 <= first <= last:
            raise ValueError(f"'pages' {pages!r} is not a valid range")
        if first > total:
            raise ValueError(f"the pdf has {total} pages")
        last = min(last, total)
    out: list[str] = []
    for number in range(first, last + 1):
        out.append(f"--- page {number} ---")
        out.append(reader.pages[number - 1].extract_text() or "(no text on this page)")
    return "\n".join(out), f"pdf pages {first}-{last} of {total}"
