"""What a file is and how it is laid out: its type, whether it is readable, its structural map.

A file's type and readability are :mod:`strata.documents.kinds`' (re-exported
here).

A **structural map** (:func:`file_map`) describes a file's layout so a model
can ask for the part it needs instead of the whole file:

- ``csv``/``tsv``: DuckDB's reading of it (delimiter, header, columns and
  their types, row count, the first rows);
- ``xlsx``: openpyxl's (sheets, their dimensions, each sheet's header row);
- ``docx``: python-docx's (the headings outline, paragraph and table counts);
- ``pptx``: python-pptx's (each slide and its title);
- ``pdf``: pypdf's (page count, outline, the first page's text);
- text: line count, encoding, the headings of markdown and the top-level
  definitions of Python code.

A file that cannot be parsed (corrupt, encrypted, truncated) gets a map that
says so and why; making a map never raises for the file's content. Maps are
cached in memory by content hash (BLAKE3), so a warm call costs reading and
hashing the files, not parsing them; the heavy libraries are imported only
when a map of their type is made.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from strata.documents.kinds import (
    DOCUMENTS,
    OPAQUE_TYPES,
    SNIFF_BYTES,
    STRUCTURED,
    TABULAR,
    Sniffed,
    decode,
    detect_encoding,
    sniff,
    type_of,
)
from strata.documents.readers import (
    docx_paragraphs,
    open_docx,
    open_pdf,
    open_pptx,
    open_workbook,
    sheet_rows,
    sheet_size,
    slide_title,
)

__all__ = [
    "DOCUMENTS",
    "OPAQUE_TYPES",
    "SNIFF_BYTES",
    "STRUCTURED",
    "TABULAR",
    "FileMap",
    "Sniffed",
    "decode",
    "detect_encoding",
    "file_map",
    "sniff",
    "type_of",
]

#: files larger than this get no map (their type and size only)
MAP_MAX_BYTES = 64 * 1024 * 1024
#: how many lines a map lists of one kind (headings, slides, sheets...)
MAP_MAX_ITEMS = 500
#: maps kept in memory (keyed by content hash)
CACHE_ENTRIES = 20_000


# -- maps ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileMap:
    """The structural map of one file: lines that describe it, or why it could not be read.

    ``inline`` is the whole text of a small text file (None for anything else),
    which a prompt may include instead of the map.
    """

    type: str
    lines: tuple[str, ...]
    error: str | None = None
    inline: str | None = None

    @property
    def ok(self) -> bool:
        """True when the file could be read."""
        return self.error is None

    def render(self) -> str:
        """The map as text, one fact a line."""
        if self.error is not None:
            return f"content unavailable: {self.error}"
        return "\n".join(self.lines)


_cache: OrderedDict[tuple[str, str], FileMap] = OrderedDict()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every cached map (the next maps are made afresh)."""
    with _cache_lock:
        _cache.clear()


def content_digest(data: bytes) -> str:
    """The content hash maps are cached by."""
    return blake3.blake3(data).hexdigest()


def file_map(path: str, data: bytes, *, encoding: str | None = None) -> FileMap:
    """The structural map of the file ``path`` holding ``data`` (cached by content hash)."""
    kind = type_of(path)
    if kind in OPAQUE_TYPES:
        return FileMap(kind, (), error=f"{kind} file (opaque)")
    if len(data) > MAP_MAX_BYTES:
        return FileMap(kind, (f"size: {len(data)} bytes (too large to map)",))
    key = (kind, content_digest(data))
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    made = make_map(kind, data, encoding=encoding)
    with _cache_lock:
        _cache[key] = made
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return made


def make_map(kind: str, data: bytes, *, encoding: str | None = None) -> FileMap:
    """The map of ``data`` read as ``kind`` (uncached); a parse failure is the map's error."""
    maker = _MAKERS.get(kind, _text_map)
    try:
        return maker(kind, data, encoding)
    except Exception as exc:  # a corrupt file of any type: the map says so, never a crash
        return FileMap(kind, (), error=f"could not be read as {kind}: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return f"{name}: {text[:200]}" if text else name


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = str(value).replace("\n", " ").replace("\r", " ")
    return text if len(text) <= 40 else text[:37] + "..."


# -- tabular text: DuckDB --------------------------------------------------------------


@contextlib.contextmanager
def spooled(data: bytes, suffix: str) -> Iterator[str]:
    """``data`` in a private temporary file (for readers that want a path), removed after."""
    fd, name = tempfile.mkstemp(prefix="strata-workshop-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _csv_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    import duckdb

    if not data.strip():
        return FileMap(kind, ("empty file (no rows, no columns)",))
    if encoding not in (None, "utf-8", "ascii"):
        data = decode(data, encoding).encode("utf-8")
    with spooled(data, "." + kind) as name:
        con = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB"})
        try:
            options = ", delim='\t'" if kind == "tsv" else ""
            sniffed = con.execute(f"SELECT * FROM sniff_csv(?{options})", [name]).fetchone()
            con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv(?{options})", [name])
            columns = con.execute("DESCRIBE t").fetchall()
            count_row = con.execute("SELECT count(*) FROM t").fetchone()
            sample = con.execute("SELECT * FROM t LIMIT 3").fetchall()
        finally:
            con.close()
    rows = int(count_row[0]) if count_row else 0
    lines = [f"rows: {rows}", f"columns: {len(columns)}"]
    if sniffed is not None:
        delimiter = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}.get(
            str(sniffed[0]), repr(sniffed[0])
        )
        lines.append(
            f"delimiter: {delimiter} (sniffed); header row: {'yes' if sniffed[6] else 'no'}"
        )
    for column in columns[:MAP_MAX_ITEMS]:
        lines.append(f"  {column[0]}: {column[1]}")
    if len(columns) > MAP_MAX_ITEMS:
        lines.append(f"  [truncated: {len(columns) - MAP_MAX_ITEMS} more columns]")
    if sample:
        lines.append("first rows:")
        lines.extend("  " + " | ".join(_cell(v) for v in row[:20]) for row in sample)
    return FileMap(kind, tuple(lines))


# -- xlsx: openpyxl ---------------------------------------------------------------------


def _xlsx_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    book = open_workbook(data)
    try:
        names = list(book.sheetnames)
        lines = [f"sheets: {len(names)}"]
        for name in names[:MAP_MAX_ITEMS]:
            sheet = book[name]
            header = [_cell(v) for v in next(sheet_rows(sheet, max_row=1), [])[:30]]
            rows, cols = sheet_size(sheet)
            dims = f"{rows} rows x {cols} columns"
            lines.append(f"sheet {name!r}: {dims}")
            if header and any(header):
                lines.append("  header: " + " | ".join(header))
        if len(names) > MAP_MAX_ITEMS:
            lines.append(f"[truncated: {len(names) - MAP_MAX_ITEMS} more sheets]")
    finally:
        book.close()
    return FileMap(kind, tuple(lines))


# -- docx: python-docx ------------------------------------------------------------------


def _docx_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    document = open_docx(data)
    paragraphs = docx_paragraphs(document)
    outline: list[str] = []
    for level, text in paragraphs:
        if level is not None and text.strip():
            outline.append("  " * max(level - 1, 0) + "- " + _cell(text.strip()))
    words = sum(len(text.split()) for _, text in paragraphs)
    lines = [
        f"paragraphs: {len(paragraphs)}",
        f"tables: {len(document.tables)}",
        f"words: {words}",
        f"headings: {len(outline)}",
    ]
    if outline:
        lines.append("outline:")
        lines.extend(outline[:MAP_MAX_ITEMS])
        if len(outline) > MAP_MAX_ITEMS:
            lines.append(f"[truncated: {len(outline) - MAP_MAX_ITEMS} more headings]")
    return FileMap(kind, tuple(lines))


# -- pptx: python-pptx ------------------------------------------------------------------


def _pptx_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    slides = list(open_pptx(data).slides)
    lines = [f"slides: {len(slides)}"]
    for number, slide in enumerate(slides[:MAP_MAX_ITEMS], 1):
        lines.append(f"  {number}. {_cell(slide_title(slide)) or '(untitled)'}")
    if len(slides) > MAP_MAX_ITEMS:
        lines.append(f"  [truncated: {len(slides) - MAP_MAX_ITEMS} more slides]")
    return FileMap(kind, tuple(lines))


# -- pdf: pypdf -----------------------------------------------------------------------------


def _pdf_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    reader = open_pdf(data)
    if reader.is_encrypted:
        return FileMap(kind, (), error="encrypted pdf (no text can be extracted)")
    pages = len(reader.pages)
    lines = [f"pages: {pages}"]
    outline: list[str] = []

    def walk(items: Any, depth: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
                continue
            with contextlib.suppress(Exception):
                number = reader.get_destination_page_number(item)
                where = f" (page {number + 1})" if number is not None else ""
                outline.append(f"{'  ' * depth}- {_cell(item.title)}{where}")

    with contextlib.suppress(Exception):
        walk(reader.outline, 1)
    if outline:
        lines.append("outline:")
        lines.extend(outline[:MAP_MAX_ITEMS])
    if pages:
        text = " ".join(reader.pages[0].extract_text().split())
        if text:
            lines.append("first page text: " + (text if len(text) <= 300 else text[:300] + "..."))
        else:
            lines.append("first page text: (none: scanned or image-only)")
    return FileMap(kind, tuple(lines))


# -- text ----------------------------------------------------------------------------------

#: a text file at most this large (and this many lines) is inlined whole
INLINE_MAX_CHARS = 8_000
INLINE_MAX_LINES = 200
_DEF_PREFIXES = {
    "python": ("def ", "class ", "async def "),
    "javascript": ("function ", "export ", "class "),
    "typescript": ("function ", "export ", "class ", "interface "),
    "go": ("func ", "type "),
    "rust": ("fn ", "pub fn ", "struct ", "pub struct ", "enum ", "impl "),
}


def _text_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    if b"\0" in data[:SNIFF_BYTES]:
        return FileMap(kind, (), error="binary content")
    encoding = encoding or detect_encoding(data)
    if encoding is None:
        return FileMap(kind, (), error="undecodable text (no encoding fits)")
    text = decode(data, encoding)
    lines_of = text.splitlines()
    lines = [f"lines: {len(lines_of)}", f"encoding: {encoding}"]
    found: list[str] = []
    if kind == "markdown":
        fenced = False
        for line in lines_of:
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                level = len(line) - len(line.lstrip("#"))
                if level <= 6 and line[level : level + 1] == " ":
                    found.append("  " * (level - 1) + "- " + line[level:].strip())
        label = "headings"
    else:
        prefixes = _DEF_PREFIXES.get(kind, ())
        for number, line in enumerate(lines_of, 1):
            if prefixes and line.startswith(prefixes):
                found.append(f"  {number}: {line.rstrip()[:100]}")
        label = "top-level definitions"
    if found:
        lines.append(f"{label}:")
        lines.extend(found[:MAP_MAX_ITEMS])
        if len(found) > MAP_MAX_ITEMS:
            lines.append(f"  [truncated: {len(found) - MAP_MAX_ITEMS} more]")
    small = len(text) <= INLINE_MAX_CHARS and len(lines_of) <= INLINE_MAX_LINES
    return FileMap(kind, tuple(lines), inline=text if small else None)


def _tabular_map(kind: str, data: bytes, encoding: str | None) -> FileMap:
    made = _csv_map(kind, data, encoding)
    if len(data) <= INLINE_MAX_CHARS and encoding is not None:
        text = decode(data, encoding)
        if len(text.splitlines()) <= INLINE_MAX_LINES:
            return FileMap(kind, made.lines, inline=text)
    return made


_MAKERS = {
    "csv": _tabular_map,
    "tsv": _tabular_map,
    "xlsx": _xlsx_map,
    "docx": _docx_map,
    "pptx": _pptx_map,
    "pdf": _pdf_map,
}


def read_regular(root: Path, path: str) -> bytes:
    """The bytes of the regular file ``path`` below ``root``, never following a symlink.

    Raises FileNotFoundError, or :class:`~strata.errors.UnsafeWorkspacePath`
    for a symlink on the way (see :class:`~strata.store.fsops.WorkspaceWriter`).
    """
    from strata.store.fsops import WorkspaceWriter

    with WorkspaceWriter(root) as reader:
        return reader.read_file(path)
