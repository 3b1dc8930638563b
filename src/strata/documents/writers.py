"""The writers of DOCX and XLSX documents (what the gateway's ``docx`` and ``excel`` do).

Each writes one file in place through its library (the ``documents`` extra,
see :func:`strata.documents.readers.library`); recording the change is the
caller's (a gateway capability runs them as a recorded run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from strata.documents.readers import check_unpacked, docx_paragraphs, library, open_docx

#: what a cell may be given: a string, a number, a truth value, or None to clear it
CellValue = str | int | float | bool | None


def docx_add(path: Path, paragraphs: Sequence[str]) -> None:
    """Add ``paragraphs`` to the Word document at ``path``, made when it does not exist."""
    docx = library("docx")
    if path.is_file():
        document = open_docx(path.read_bytes())
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    document.save(str(path))


def docx_read(path: Path) -> list[str]:
    """The text of each paragraph of the Word document at ``path``."""
    return [text for _, text in docx_paragraphs(open_docx(path.read_bytes()))]


def xlsx_set(path: Path, cells: Mapping[str, CellValue], sheet: str | None) -> None:
    """Set ``cells`` (``{"A1": 3}``) of ``sheet`` (the active one when None) at ``path``.

    The workbook is made when it does not exist, and the sheet when it has none of that name.
    """
    openpyxl = library("xlsx")
    if path.is_file():
        check_unpacked("xlsx", path.read_bytes())
        book = openpyxl.load_workbook(str(path))
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        book = openpyxl.Workbook()
        if sheet is not None:
            book.active.title = sheet
    if sheet is not None and sheet not in book.sheetnames:
        book.create_sheet(sheet)
    ws = book[sheet] if sheet is not None else book.active
    for name, value in cells.items():
        ws[name] = value
    book.save(str(path))


def xlsx_cells(
    path: Path, sheet: str | None, wanted: Sequence[str] | None
) -> tuple[str, dict[str, Any]]:
    """(the sheet's title, its cells as written, formulas included) of the workbook at ``path``.

    ``wanted`` names the cells (``["A1", "B2"]``); None: every cell that holds
    something. ValueError when the workbook has no sheet ``sheet``.
    """
    data = path.read_bytes()
    check_unpacked("xlsx", data)
    book = library("xlsx").load_workbook(str(path), data_only=False)
    try:
        if sheet is not None and sheet not in book.sheetnames:
            raise ValueError(f"has no sheet {sheet!r} (it has {', '.join(book.sheetnames)})")
        ws = book[sheet] if sheet is not None else book.active
        if wanted is None:
            found = {
                c.coordinate: c.value for row in ws.iter_rows() for c in row if c.value is not None
            }
        else:
            found = {c: ws[c].value for c in wanted}
        return ws.title, found
    finally:
        book.close()
