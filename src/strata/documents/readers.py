"""The readers of DOCX, PDF, XLSX and PPTX documents, bounded in time and memory.

The libraries (python-docx, pypdf, openpyxl, python-pptx: the ``documents``
extra) are imported only when a document of their kind is opened, through
:func:`library`, which raises :class:`~strata.errors.DocumentsNotInstalled`
(naming the extra) when one is missing.

What bounds a read:

- an Office document (a zip of XML parts) is refused before it is parsed when
  its XML unpacks to more than :data:`MAX_UNPACKED` bytes (pictures and other
  media are not parsed, and not counted)
  (:class:`~strata.errors.DocumentTooLarge`): the libraries hold the XML in
  memory, and a few kilobytes of zip can hold a hundred megabytes of it;
- a Word document's paragraphs are read from its XML in one pass
  (:func:`docx_paragraphs`): python-docx looks a paragraph's style up among
  all the styles, for every paragraph, which made a 45 KB document of 50,000
  short runs take 19 s;
- a sheet is read to its last cell that holds a value (:func:`sheet_rows`),
  never to the size its file records: a sheet formatted to column XFD
  records 16,384 columns, and every row was padded to them.
"""

from __future__ import annotations

import csv
import importlib
import io
import zipfile
from collections.abc import Iterator
from typing import Any

from strata.errors import DocumentsNotInstalled, DocumentTooLarge

#: what the XML parts of one DOCX, XLSX or PPTX may unpack to, in all (python-docx parses
#: 12 MiB of it in about 4 s, and holds it in memory)
MAX_UNPACKED = 16 << 20
#: the library that reads each kind of document, and its package (the ``documents`` extra)
_LIBRARIES = {
    "docx": ("docx", "python-docx"),
    "xlsx": ("openpyxl", "openpyxl"),
    "pptx": ("pptx", "python-pptx"),
    "pdf": ("pypdf", "pypdf"),
}
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


class NoSheet(ValueError):
    """A workbook has no sheet of the name asked for (the message lists those it has)."""


def library(kind: str) -> Any:
    """The library that reads ``kind`` documents (``docx``, ``xlsx``, ``pptx``, ``pdf``).

    :class:`~strata.errors.DocumentsNotInstalled` when the ``documents`` extra is not installed.
    """
    module, package = _LIBRARIES[kind]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DocumentsNotInstalled(kind, package) from None


def check_unpacked(kind: str, data: bytes, limit: int = MAX_UNPACKED) -> None:
    """Refuse an Office document whose XML parts unpack past ``limit`` (before it is parsed).

    A file that is not a zip passes: its library says what is wrong with it.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(
                info.file_size
                for info in archive.infolist()
                if info.filename.endswith((".xml", ".rels", ".vml"))
            )
    except (zipfile.BadZipFile, ValueError):
        return
    if unpacked > limit:
        raise DocumentTooLarge(kind, unpacked, limit)


def open_docx(data: bytes) -> Any:
    """A python-docx ``Document`` of ``data`` (checked by :func:`check_unpacked`)."""
    check_unpacked("docx", data)
    return library("docx").Document(io.BytesIO(data))


def open_pptx(data: bytes) -> Any:
    """A python-pptx ``Presentation`` of ``data`` (checked by :func:`check_unpacked`)."""
    check_unpacked("pptx", data)
    return library("pptx").Presentation(io.BytesIO(data))


def open_workbook(data: bytes) -> Any:
    """An openpyxl workbook of ``data``, read-only, values not formulas (close it)."""
    check_unpacked("xlsx", data)
    return library("xlsx").load_workbook(io.BytesIO(data), read_only=True, data_only=True)


def open_pdf(data: bytes) -> Any:
    """A pypdf ``PdfReader`` of ``data`` (lenient: a damaged file reads as far as it can)."""
    return library("pdf").PdfReader(io.BytesIO(data), strict=False)


def docx_paragraphs(document: Any) -> list[tuple[int | None, str]]:
    """The body's paragraphs as (heading level or None, text), read from the XML in one pass."""
    names = {style.style_id: style.name for style in document.styles}
    out: list[tuple[int | None, str]] = []
    for p in document.element.body.iterchildren(f"{_W}p"):
        style = p.find(f"{_W}pPr/{_W}pStyle")
        name = names.get(style.get(f"{_W}val")) if style is not None else None
        parts: list[str] = []
        for node in p.iter(f"{_W}t", f"{_W}tab", f"{_W}br", f"{_W}cr"):
            if node.tag == f"{_W}t":
                parts.append(node.text or "")
            else:
                parts.append("\t" if node.tag == f"{_W}tab" else "\n")
        out.append((heading_level(name or ""), "".join(parts)))
    return out


def sheet_rows(
    sheet: Any,
    *,
    min_row: int = 1,
    max_row: int | None = None,
    min_col: int = 1,
    max_col: int | None = None,
) -> Iterator[list[Any]]:
    """A read-only sheet's rows of values, each cut after its last value.

    The size the file records is not trusted (see the module doc): rows are
    as long as their cells; a caller that wants a rectangle pads them.
    """
    if max_col is None:
        sheet.reset_dimensions()  # (rows stop at their own last cell)
    for row in sheet.iter_rows(
        min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col, values_only=True
    ):
        values = list(row)
        while values and values[-1] is None:
            values.pop()
        yield values


def sheet_size(sheet: Any) -> tuple[int, int]:
    """(rows, columns) a read-only sheet holds values in, read to its last value."""
    rows = cols = 0
    for number, values in enumerate(sheet_rows(sheet), 1):
        if values:
            rows, cols = number, max(cols, len(values))
    return rows, cols


def sheet_csv(data: bytes, sheet: str | None) -> tuple[str, bytes]:
    """One sheet of a workbook (the first when ``sheet`` is None) as (its name, CSV bytes).

    :class:`NoSheet` when the workbook has no such sheet. Rows are padded to the
    widest row's last value.
    """
    book = open_workbook(data)
    try:
        names = list(book.sheetnames)
        name = sheet if sheet is not None else (names[0] if names else None)
        if name is None or name not in names:
            raise NoSheet(f"no sheet {sheet!r}; the sheets are: {', '.join(names)}")
        rows = list(sheet_rows(book[name]))
    finally:
        book.close()
    width = max((len(r) for r in rows), default=0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if v is None else v for v in row] + [""] * (width - len(row)))
    return name, out.getvalue().encode()


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
    document = open_docx(data)
    lines: list[str] = []
    for level, text in docx_paragraphs(document):
        lines.append(("#" * level + " " + text) if level and text.strip() else text)
    for number, table in enumerate(document.tables, 1):
        lines.append(f"[table {number}]")
        for row in table.rows:
            lines.append(" | ".join(cell.text.strip() for cell in row.cells))
    return "\n".join(lines)


def pptx_text(data: bytes) -> str:
    """A deck's text: a ``## Slide N: title`` line, then the slide's other text."""
    deck = open_pptx(data)
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
    reader = open_pdf(data)
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
