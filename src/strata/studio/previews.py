"""Files shown as what they hold: images, tables (csv, tsv, xlsx), documents (docx, pdf)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from strata.kb.extract import extract

#: the images the studio shows (by name); anything else is never served raw
IMAGES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
#: the suffixes of the tables shown as a grid
TABLES = ("csv", "tsv", "xlsx")


def image_type(path: str) -> str | None:
    """The media type of an image the studio shows, by the path's suffix (None: not one)."""
    dot = path.rfind(".")
    return IMAGES.get(path[dot:].lower()) if dot >= 0 else None


def suffix_of(path: str) -> str:
    """The path's suffix, lower case, without the dot ("" for none)."""
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


#: rows and columns of a table (csv, tsv, xlsx) shown with its changed cells marked
TABLE_ROWS = 1000
TABLE_COLUMNS = 50
#: documents shown as their text (docx paragraphs, pdf pages' lines)
DOCUMENTS = ("docx", "pdf")


@dataclass
class Cell:
    """One cell of a changed table: its value now, and before when it changed."""

    value: str
    before: str | None = None
    changed: bool = False


@dataclass
class Table:
    """A table's rows after the change, each cell marked when it changed."""

    rows: list[list[Cell]]
    added_rows: int
    removed_rows: int
    truncated: bool


def document_text(kind: str, data: bytes) -> bytes:
    """A docx's paragraphs or a pdf's lines as text (:class:`Unreadable` when it cannot)."""
    if not data:
        return b""
    return "\n".join(extract(kind, data).lines).encode() + b"\n"


def rows(suffix: str, data: bytes) -> list[list[str]]:
    """A table's rows (xlsx: its first sheet); ValueError or csv.Error when unreadable."""
    if not data:
        return []
    if suffix == "xlsx":
        from strata.workshop.tables import TableError, sheet_as_csv

        try:
            data = sheet_as_csv(data, None)
        except TableError as exc:
            raise ValueError(str(exc)) from None
    text = data.decode("utf-8", "replace")
    return list(csv.reader(io.StringIO(text), delimiter="\t" if suffix == "tsv" else ","))


def table_diff(old: list[list[str]], new: list[list[str]]) -> Table:
    """``new``'s rows with each cell that differs from ``old`` at the same place marked."""
    rows = []
    for r, row in enumerate(new[:TABLE_ROWS]):
        was = old[r] if r < len(old) else None
        cells = []
        for c, value in enumerate(row[:TABLE_COLUMNS]):
            prior = was[c] if was is not None and c < len(was) else None
            cells.append(Cell(value, prior, was is not None and prior != value))
        rows.append(cells)
    return Table(
        rows,
        added_rows=max(0, len(new) - len(old)),
        removed_rows=max(0, len(old) - len(new)),
        truncated=len(new) > TABLE_ROWS,
    )
