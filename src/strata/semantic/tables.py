"""Tables and documents: csv and xlsx by sheet, row and cell; docx by paragraph.

Rows are aligned with :class:`difflib.SequenceMatcher` (an inserted row is
one ``added`` row, not every row below it changed); rows replaced one for one
are compared cell by cell, each cell named as a spreadsheet does
(``Sheet1!B3``; a csv file's only sheet is unnamed: ``B3``). A docx file is
read with python-docx: its paragraphs, each under its heading path, aligned
the same way.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Sequence

from strata.semantic.base import Block, HandlerFailed, HandlerResult, decode_text, summarise

__all__ = ["DocxHandler", "TableHandler", "cell_name"]

#: past this many blocks a file's list ends with one saying how many more
MAX_BLOCKS = 1000

Row = tuple[str, ...]


def cell_name(row: int, col: int) -> str:
    """``A1``-style name of a zero-based ``(row, col)``."""
    letters = ""
    col += 1
    while col:
        col, rem = divmod(col - 1, 26)
        letters = chr(65 + rem) + letters
    return f"{letters}{row + 1}"


def _short(value: str) -> str:
    """A cell's value as a change's detail shows it (empty cells as '')."""
    value = " ".join(value.split())
    return (value if len(value) <= 30 else value[:29] + "…") if value else "''"


def _rows_diff(path: str, sheet: str, old: Sequence[Row], new: Sequence[Row]) -> list[Block]:
    prefix = f"{path}::{sheet}!" if sheet else f"{path}::"
    blocks: list[Block] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        paired = min(a1 - a0, b1 - b0) if op == "replace" else 0
        if paired:
            for i in range(paired):
                ra, rb = old[a0 + i], new[b0 + i]
                for c in range(max(len(ra), len(rb))):
                    va = ra[c] if c < len(ra) else ""
                    vb = rb[c] if c < len(rb) else ""
                    if va != vb:
                        name = prefix + cell_name(b0 + i, c)
                        detail = f"{_short(va)} -> {_short(vb)}"
                        blocks.append(Block("cell", name, "changed", detail=detail))
            a0, b0 = a0 + paired, b0 + paired
        blocks.extend(Block("row", f"{prefix}{i + 1}:{i + 1}", "removed") for i in range(a0, a1))
        blocks.extend(Block("row", f"{prefix}{i + 1}:{i + 1}", "added") for i in range(b0, b1))
    return blocks


def _cap(blocks: list[Block], path: str) -> tuple[Block, ...]:
    if len(blocks) <= MAX_BLOCKS:
        return tuple(blocks)
    more = len(blocks) - MAX_BLOCKS
    return (*blocks[:MAX_BLOCKS], Block("cell", f"{path}::…", "changed", detail=f"{more:,} more"))


def _csv_rows(data: bytes | None, what: str, delimiter: str) -> list[Row]:
    text = decode_text(data, what)
    try:
        return [tuple(r) for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)]
    except csv.Error as exc:
        raise HandlerFailed(f"{what} is not valid CSV ({exc})") from None


def _xlsx_sheets(data: bytes | None, what: str) -> dict[str, list[Row]]:
    if data is None:
        return {}
    try:
        import openpyxl

        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # zipfile, XML and openpyxl errors alike
        raise HandlerFailed(f"{what} is not a readable xlsx workbook ({exc})") from None
    try:
        return {
            ws.title: [
                tuple("" if v is None else str(v) for v in row)
                for row in ws.iter_rows(values_only=True)
            ]
            for ws in book.worksheets
        }
    finally:
        book.close()


class TableHandler:
    """The ``schema`` handler for csv, tsv and xlsx files."""

    name = "tables"

    def handles(self, path: str) -> bool:
        """``.csv``, ``.tsv`` and ``.xlsx`` files."""
        return path.lower().endswith((".csv", ".tsv", ".xlsx"))

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Sheets, rows and cells added, removed or changed."""
        blocks: list[Block] = []
        if path.lower().endswith(".xlsx"):
            old = _xlsx_sheets(before, "the old side")
            new = _xlsx_sheets(after, "the new side")
            for name in list(old) + [n for n in new if n not in old]:
                if name not in new:
                    blocks.append(Block("sheet", f"{path}::{name}", "removed"))
                elif name not in old:
                    blocks.append(Block("sheet", f"{path}::{name}", "added"))
                else:
                    blocks.extend(_rows_diff(path, name, old[name], new[name]))
        else:
            delimiter = "\t" if path.lower().endswith(".tsv") else ","
            blocks = _rows_diff(
                path,
                "",
                _csv_rows(before, "the old side", delimiter),
                _csv_rows(after, "the new side", delimiter),
            )
        result = _cap(blocks, path)
        return HandlerResult("schema", result, summarise(result, "change"), handler=self.name)


def _paragraphs(data: bytes | None, what: str) -> list[tuple[str, str]]:
    """``(heading path, text)`` of each paragraph of a docx file."""
    if data is None:
        return []
    try:
        import docx

        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # zipfile, XML and python-docx errors alike
        raise HandlerFailed(f"{what} is not a readable docx document ({exc})") from None
    out: list[tuple[str, str]] = []
    trail: list[tuple[int, str]] = []
    # style names by id, read once: python-docx's Paragraph.style searches the styles
    # part for every paragraph, which costs more than the rest of the diff together
    from docx.enum.style import WD_STYLE_TYPE

    names = {s.style_id: s.name or "" for s in document.styles}
    fallback = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    plain = fallback.name or "" if fallback is not None else ""
    for para in document.element.body.p_lst:  # the body's w:p elements, as .paragraphs
        style_id = para.style  # the paragraph's w:pStyle, None for the default style
        style = names.get(style_id, plain) if style_id is not None else plain
        text = para.text
        if style.startswith("Heading") and style[7:].strip().isdigit():
            level = int(style[7:].strip())
            while trail and trail[-1][0] >= level:
                trail.pop()
            trail.append((level, text.strip()))
        elif style == "Title":
            trail = [(0, text.strip())]
        out.append((" > ".join(t for _, t in trail) or "(top)", text))
    return out


class DocxHandler:
    """The ``ast`` handler for docx documents: paragraphs under their headings."""

    name = "docx"

    def handles(self, path: str) -> bool:
        """``.docx`` files."""
        return path.lower().endswith(".docx")

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Paragraphs added, removed or changed, named by heading path and number."""
        old = _paragraphs(before, "the old side")
        new = _paragraphs(after, "the new side")
        blocks: list[Block] = []
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
        for op, a0, a1, b0, b1 in matcher.get_opcodes():
            if op == "equal":
                continue
            if op == "replace" and a1 - a0 == b1 - b0:
                blocks.extend(
                    Block("paragraph", f"{path}::{new[b0 + i][0]} ¶{b0 + i + 1}", "changed")
                    for i in range(a1 - a0)
                )
                continue
            blocks.extend(
                Block("paragraph", f"{path}::{old[i][0]} ¶{i + 1}", "removed")
                for i in range(a0, a1)
            )
            blocks.extend(
                Block("paragraph", f"{path}::{new[i][0]} ¶{i + 1}", "added") for i in range(b0, b1)
            )
        result = _cap(blocks, path)
        return HandlerResult("ast", result, summarise(result, "paragraph"), handler=self.name)
