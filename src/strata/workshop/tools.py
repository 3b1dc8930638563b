"""The Workshop's tools: read, map and query a workspace's files; write only into the Draft.

:func:`workshop_tools` returns a :class:`ToolBox`: a
:class:`strata.agent.tools.ToolSet` (the one executor of every tool call)
composed of the groups of :data:`GROUPS` (``files``: the agent's
``write_file``/``edit_file`` with the Workshop's richer ``list_files`` and
``read_file``; ``maps``; ``tables``; ``styles``: ``docx_get_styles``,
``xlsx_get_styles``, ``pptx_get_styles``) and ``recall_tool_result``: it keeps
the full text of every result of the turn, so ``recall_tool_result`` can
page through a result that was cut. Use one ToolBox per turn (or per RPI
phase)::

    box = workshop_tools(phase="research")        # None: every tool
    request = Request(model=..., messages=..., tools=box.specs())
    result = box.run(draft.path, call.name, call.arguments)

The phases are seed 000's: ``research`` gets the read-only tools
(:data:`RESEARCH_TOOLS`), ``plan`` only ``read_file`` and
``recall_tool_result``, ``implement`` (or None) every tool.

Every schema is strict (:func:`strata.providers.profile.strict_schema`: all
properties required, optional ones nullable, no other property); the set
checks a call's arguments against it (a property left out counts as null) and
a call that does not fit is an error result naming the problem. Every path is
a workspace path checked at the edge (:func:`strata.agent.tools.tool_path`:
no absolute path, no ``..``, nothing in ``.strata``/``.git``) and every read
and write goes through :class:`~strata.store.fsops.WorkspaceWriter`, which
never follows a symlink: writes (``write_file``, ``edit_file``,
``table_export``) can land only in the folder the call runs on, the Draft's.
Binary documents (xlsx, docx, pptx, pdf) are never written as text.

A tool's failure is its result, marked as an error, for the model to read;
it never ends the step. Results longer than :data:`RESULT_LIMIT` are cut
with a marker naming the ``recall_tool_result`` call that reads on.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from strata.agent.tools import (
    RECALL,
    RESULT_LIMIT,
    Handler,
    Tool,
    ToolResult,
    ToolSet,
    edit_file,
    tool_path,
    write_bytes,
    write_file,
)
from strata.documents.readers import (
    docx_text,
    open_workbook,
    pdf_text,
    pptx_text,
    sheet_rows,
    sheet_size,
)
from strata.providers.base import ToolSpec
from strata.providers.profile import strict_schema
from strata.store.fsops import WorkspaceWriter
from strata.store.ignore import IgnoreRules
from strata.workshop.context import FileEntry, build_manifest
from strata.workshop.filemaps import (
    DOCUMENTS,
    OPAQUE_TYPES,
    decode,
    detect_encoding,
    file_map,
    sniff,
    type_of,
)
from strata.workshop.tables import (
    MAX_EXPORT_ROWS,
    TABLE,
    QueryRefused,
    TableError,
    check_query,
    open_table,
    quote_identifier,
    run_query,
)

__all__ = [
    "GROUPS",
    "PHASES",
    "PLAN_TOOLS",
    "RESEARCH_TOOLS",
    "RESULT_LIMIT",
    "SPECS",
    "ToolBox",
    "workshop_tools",
]

#: lines read_file returns when no end is given, and at most
READ_LINES = 200
MAX_READ_LINES = 1_000
LIST_LIMIT = 500
MAX_ROWS = 200

RESEARCH_TOOLS = (
    "list_files",
    "get_file_info",
    "get_file_map",
    "read_file",
    "table_describe",
    "table_stats",
    "table_read_rows",
    "table_query",
    "recall_tool_result",
    "xlsx_get_styles",
    "docx_get_styles",
    "pptx_get_styles",
)
PLAN_TOOLS = ("read_file", "recall_tool_result")
PHASES = ("research", "plan", "implement")

_PATH = {"type": "string", "description": "a file's path relative to the workspace root"}
_SHEET = {"type": "string", "description": "xlsx only: the sheet's name (default: the first)"}


def _schema(properties: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    return strict_schema({"type": "object", "properties": properties, "required": list(required)})


def _specs() -> dict[str, ToolSpec]:
    table = "The file (csv, tsv, or an xlsx sheet) is loaded as the table t."
    specs = [
        ToolSpec(
            "list_files",
            "List the workspace's files: path, type, size, readable or opaque.",
            _schema(
                {"prefix": {"type": "string", "description": "only paths under this folder"}},
                (),
            ),
        ),
        ToolSpec(
            "get_file_info",
            "A file's type, size, encoding, line count and whether its content is readable.",
            _schema({"path": _PATH}, ("path",)),
        ),
        ToolSpec(
            "get_file_map",
            "A file's structural map: CSV columns/types/rows, xlsx sheets, docx headings, "
            "pptx slides, pdf pages and outline, text line count and headings.",
            _schema({"path": _PATH}, ("path",)),
        ),
        ToolSpec(
            "read_file",
            "Read part of a file. Text, docx (as text), pptx (slides as text) and pdf "
            "(pages as text): start_line/end_line (1-based, inclusive; at most 1000 lines). "
            "pdf: pages like '2-4'. xlsx: sheet and a cell range like 'A1:D50'.",
            _schema(
                {
                    "path": _PATH,
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                    "sheet": _SHEET,
                    "range": {"type": "string", "description": "xlsx: a cell range, 'A1:D50'"},
                    "pages": {"type": "string", "description": "pdf: pages, '3' or '2-5'"},
                },
                ("path",),
            ),
        ),
        ToolSpec(
            "write_file",
            "Create or replace a text file with the given content (in the Draft).",
            _schema({"path": _PATH, "content": {"type": "string"}}, ("path", "content")),
        ),
        ToolSpec(
            "edit_file",
            "Replace the one exact occurrence of 'old' in a text file with 'new' (in the Draft).",
            _schema(
                {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
                ("path", "old", "new"),
            ),
        ),
        ToolSpec(
            "table_describe",
            f"A table's columns and types, row count and sniffed delimiter. {table}",
            _schema({"path": _PATH, "sheet": _SHEET}, ("path",)),
        ),
        ToolSpec(
            "table_stats",
            f"Per-column statistics: min, max, distinct, mean, quartiles, nulls. {table}",
            _schema(
                {
                    "path": _PATH,
                    "sheet": _SHEET,
                    "columns": {"type": "array", "items": {"type": "string"}},
                },
                ("path",),
            ),
        ),
        ToolSpec(
            "table_read_rows",
            f"Rows of a table as CSV: offset (0-based) and limit (at most 200). {table}",
            _schema(
                {
                    "path": _PATH,
                    "sheet": _SHEET,
                    "offset": {"type": "integer", "minimum": 0},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ROWS},
                    "columns": {"type": "array", "items": {"type": "string"}},
                },
                ("path",),
            ),
        ),
        ToolSpec(
            "table_query",
            f"Run one read-only SQL query (DuckDB; SELECT or WITH only) over the table t and "
            f"return at most 500 rows as CSV. {table} No other table, file or table function "
            f"can be read; queries stop after 5 s and 512 MB.",
            _schema({"path": _PATH, "sheet": _SHEET, "sql": {"type": "string"}}, ("path", "sql")),
        ),
        ToolSpec(
            "table_export",
            f"Write the result of one SELECT over the table t as a CSV file (in the Draft). "
            f"{table}",
            _schema(
                {
                    "path": _PATH,
                    "sheet": _SHEET,
                    "sql": {"type": "string"},
                    "output": {"type": "string", "description": "the CSV file to write"},
                },
                ("path", "sql", "output"),
            ),
        ),
        ToolSpec(
            "docx_get_styles",
            "A Word document's styles: theme fonts and colours, default font, page size and "
            "margins, the paragraph/character/table styles it uses (font, size, weight, base "
            "style) and the others it defines. Match them in what you write.",
            _schema({"path": _PATH}, ("path",)),
        ),
        ToolSpec(
            "xlsx_get_styles",
            "A workbook's styles: theme fonts and colours, named cell styles, and per sheet the "
            "distinct cell formats (font, fill, number format, alignment) with their cells.",
            _schema({"path": _PATH, "sheet": _SHEET}, ("path",)),
        ),
        ToolSpec(
            "pptx_get_styles",
            "A deck's styles: theme fonts and colours, slide size, each master's layouts, and "
            "per slide its layout and the fonts of its text.",
            _schema({"path": _PATH}, ("path",)),
        ),
    ]
    return {s.name: s for s in specs}


#: each tool's group: the Workshop's set is files + maps + tables (+ recall_tool_result)
GROUPS = {
    "list_files": "files",
    "get_file_info": "maps",
    "get_file_map": "maps",
    "read_file": "files",
    "write_file": "files",
    "edit_file": "files",
    "table_describe": "tables",
    "table_stats": "tables",
    "table_read_rows": "tables",
    "table_query": "tables",
    "table_export": "tables",
    "docx_get_styles": "styles",
    "xlsx_get_styles": "styles",
    "pptx_get_styles": "styles",
}
#: the style tools, one per Office format (gated by format: :func:`workshop_tools`)
STYLE_TOOLS = ("docx_get_styles", "xlsx_get_styles", "pptx_get_styles")
#: the tools that change files (a Draft is opened for their first call)
WRITERS = ("write_file", "edit_file", "table_export")
_OWN: dict[str, ToolSpec] = _specs()
SPECS: dict[str, ToolSpec] = {**_OWN, RECALL: ToolSet([], recall=True)[RECALL][0]}


class ToolBox(ToolSet):
    """A turn's tools (all, or one RPI phase's), keeping every result for recall_tool_result."""

    def __init__(
        self,
        *,
        phase: str | None = None,
        rules: IgnoreRules | None = None,
        styles: Iterable[str] | None = None,
    ) -> None:
        if phase is not None and phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; use one of {', '.join(PHASES)}")
        self.phase = phase
        self.rules = rules
        left_out = (
            set() if styles is None else set(STYLE_TOOLS) - {f"{k}_get_styles" for k in styles}
        )

        def listing(folder: Path, args: dict[str, Any]) -> ToolResult:
            return _list_files(folder, args, rules)

        handlers = {**_HANDLERS, "list_files": listing}
        super().__init__(
            (
                Tool(spec, handlers[name], GROUPS[name], writes=name in WRITERS)
                for name, spec in _OWN.items()
                if name not in left_out
            ),
            recall=True,
            only={"research": RESEARCH_TOOLS, "plan": PLAN_TOOLS}.get(phase or ""),
        )


def workshop_tools(
    *,
    phase: str | None = None,
    rules: IgnoreRules | None = None,
    styles: Iterable[str] | None = None,
) -> ToolBox:
    """A new :class:`ToolBox`: every tool, or the ``research``/``plan`` phase's subset.

    ``rules`` are the repository's ignore rules (for ``list_files``; default:
    Strata's defaults). ``styles`` gates the ``*_get_styles`` tools by
    format: only those of the formats given (``docx``, ``pptx``, ``xlsx``;
    the Workshop passes those of the turn's style skills, so a workspace
    without Office files spends no prompt on them); None keeps all three.
    """
    return ToolBox(phase=phase, rules=rules, styles=styles)


def _opt(args: dict[str, Any], key: str, default: Any) -> Any:
    value = args.get(key)
    return default if value is None else value


# -- reading --------------------------------------------------------------------------------


def _read(folder: Path, path: str) -> bytes:
    with WorkspaceWriter(folder) as reader:
        return reader.read_file(path)


def _list_files(folder: Path, args: dict[str, Any], rules: IgnoreRules | None) -> ToolResult:
    prefix = (args.get("prefix") or "").strip().strip("/")
    manifest = build_manifest(folder, rules=rules)
    files = [f for f in manifest.files if not prefix or f.path.startswith(prefix + "/")]
    if not files:
        return ToolResult(f"(no files under {prefix})" if prefix else "(no files)")
    rows = [f.row() for f in files[:LIST_LIMIT]]
    if len(files) > LIST_LIMIT:
        rows.append(f"[truncated: {len(files) - LIST_LIMIT} more files; list a folder with prefix]")
    return ToolResult(f"{len(files)} files\n" + "\n".join(rows))


def _entry(folder: Path, path: str, data: bytes) -> FileEntry:
    found = sniff(path, data[: 64 * 1024], len(data))
    return FileEntry(path, found.type, len(data), found.readable, found.encoding, found.reason)


def get_file_info(folder: Path, args: dict[str, Any]) -> ToolResult:
    """A file's type, size, encoding and readability."""
    path = tool_path(args)
    data = _read(folder, path)
    entry = _entry(folder, path, data)
    lines = [
        f"path: {path}",
        f"type: {entry.type}",
        f"size: {entry.size} bytes",
        f"content: {entry.availability}" + (f" ({entry.reason})" if entry.reason else ""),
    ]
    if entry.encoding:
        lines.append(f"encoding: {entry.encoding}")
        if entry.type not in DOCUMENTS:
            lines.append(f"lines: {len(decode(data, entry.encoding).splitlines())}")
    return ToolResult("\n".join(lines))


def get_file_map(folder: Path, args: dict[str, Any]) -> ToolResult:
    """A file's structural map."""
    path = tool_path(args)
    data = _read(folder, path)
    entry = _entry(folder, path, data)
    if not entry.readable:
        return ToolResult(f"{path}: content unavailable ({entry.reason})")
    made = file_map(path, data, encoding=entry.encoding)
    return ToolResult(f"{path} ({entry.type}, {entry.size} bytes)\n{made.render()}")


def read_file(folder: Path, args: dict[str, Any]) -> ToolResult:
    """Part of a file as text (see the tool's description for the selectors)."""
    path = tool_path(args)
    data = _read(folder, path)
    kind = type_of(path)
    if kind in OPAQUE_TYPES:
        return ToolResult(f"read_file: {path} is a {kind} file; its content is opaque", True)
    if kind == "xlsx":
        return _read_sheet(path, data, args)
    pages = args.get("pages")
    if pages is not None and kind != "pdf":
        raise ValueError("'pages' is for pdf files; use start_line/end_line")
    if args.get("sheet") is not None or args.get("range") is not None:
        raise ValueError("'sheet' and 'range' are for xlsx files")
    if kind == "docx":
        text, what = docx_text(data), "docx text"
    elif kind == "pptx":
        text, what = pptx_text(data), "pptx text"
    elif kind == "pdf":
        text, what = pdf_text(data, pages)
    else:
        if b"\0" in data[: 64 * 1024]:
            return ToolResult(f"read_file: {path} is binary; its content is opaque", True)
        encoding = detect_encoding(data)
        if encoding is None:
            return ToolResult(f"read_file: {path} is not text in any known encoding", True)
        text, what = decode(data, encoding), encoding
    return ToolResult(_line_window(path, text, what, args))


def _line_window(path: str, text: str, what: str, args: dict[str, Any]) -> str:
    lines = text.splitlines()
    total = len(lines)
    start = _opt(args, "start_line", 1)
    end = _opt(args, "end_line", start + READ_LINES - 1)
    if end < start:
        raise ValueError(f"end_line {end} is before start_line {start}")
    end = min(end, start + MAX_READ_LINES - 1, total)
    if total == 0:
        return f"{path}: empty ({what})"
    if start > total:
        raise ValueError(f"start_line {start} is past the end ({total} lines)")
    body = "\n".join(lines[start - 1 : end])
    header = f"{path} lines {start}-{end} of {total} ({what})"
    tail = ""
    if end < total:
        tail = f"\n[truncated: lines {end + 1}-{total} not shown; read_file start_line={end + 1}]"
    return f"{header}\n{body}{tail}"


def _read_sheet(path: str, data: bytes, args: dict[str, Any]) -> ToolResult:
    if args.get("pages") is not None:
        raise ValueError("'pages' is for pdf files; use sheet and range for xlsx")
    book = open_workbook(data)
    try:
        names = list(book.sheetnames)
        name = _opt(args, "sheet", names[0] if names else "")
        if name not in names:
            raise ValueError(f"no sheet {name!r}; the sheets are: {', '.join(names)}")
        sheet = book[name]
        cells = args.get("range")
        if cells is None:
            rows = sheet_rows(sheet, max_row=READ_LINES)
            cells = f"rows 1-{READ_LINES}"
        else:
            from openpyxl.utils.cell import range_boundaries

            try:
                min_col, min_row, max_col, max_row = range_boundaries(str(cells).upper())
            except ValueError:
                raise ValueError(f"'range' {cells!r} is not a cell range like 'A1:D50'") from None
            rows = sheet_rows(
                sheet,
                min_row=min_row,
                max_row=min(max_row or min_row + READ_LINES - 1, min_row + MAX_READ_LINES - 1),
                min_col=min_col,
                max_col=max_col,
            )
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])
        size = sheet_size(sheet)
        dims = f"{size[0]} rows x {size[1]} columns"
        return ToolResult(
            f"{path} sheet {name!r} {cells} (sheet is {dims}), as CSV\n" + out.getvalue()
        )
    finally:
        book.close()


# -- tables ---------------------------------------------------------------------------------


def _table_source(folder: Path, args: dict[str, Any]) -> tuple[str, bytes, str | None]:
    path = tool_path(args)
    data = _read(folder, path)
    encoding = None
    if type_of(path) != "xlsx":
        encoding = detect_encoding(data[: 64 * 1024], complete=len(data) <= 64 * 1024)
    return path, data, encoding


def _columns(con: Any, wanted: list[str] | None) -> list[str]:
    names = [row[0] for row in con.execute(f"DESCRIBE {TABLE}").fetchall()]
    if wanted is None:
        return names
    missing = [c for c in wanted if c not in names]
    if missing:
        raise ValueError(f"no column {missing[0]!r}; the columns are: {', '.join(names)}")
    return wanted


def table_describe(folder: Path, args: dict[str, Any]) -> ToolResult:
    """Columns, types and row count of a table."""
    path, data, encoding = _table_source(folder, args)
    try:
        with open_table(path, data, encoding=encoding, sheet=args.get("sheet")) as con:
            columns = con.execute(f"DESCRIBE {TABLE}").fetchall()
            count = con.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    except TableError as exc:
        raise ValueError(str(exc)) from None
    lines = [f"{path}: table {TABLE}, {count[0] if count else 0} rows, {len(columns)} columns"]
    lines.extend(f"  {c[0]}: {c[1]}" for c in columns)
    if type_of(path) != "xlsx":
        lines.append("(delimiter and header are sniffed: check them before a write or export)")
    return ToolResult("\n".join(lines))


def table_stats(folder: Path, args: dict[str, Any]) -> ToolResult:
    """Per-column statistics (DuckDB's SUMMARIZE)."""
    path, data, encoding = _table_source(folder, args)
    try:
        with open_table(path, data, encoding=encoding, sheet=args.get("sheet")) as con:
            columns = _columns(con, args.get("columns"))
            select = ", ".join(quote_identifier(c) for c in columns)
            result = run_query(con, f"SUMMARIZE SELECT {select} FROM {TABLE}", max_rows=1000)
    except TableError as exc:
        raise ValueError(str(exc)) from None
    return ToolResult(f"{path}: statistics per column\n" + result.as_csv())


def table_read_rows(folder: Path, args: dict[str, Any]) -> ToolResult:
    """Rows ``offset``.. of a table as CSV."""
    path, data, encoding = _table_source(folder, args)
    offset = _opt(args, "offset", 0)
    limit = _opt(args, "limit", 50)
    try:
        with open_table(path, data, encoding=encoding, sheet=args.get("sheet")) as con:
            columns = _columns(con, args.get("columns"))
            select = ", ".join(quote_identifier(c) for c in columns)
            count = con.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
            result = run_query(
                con,
                f"SELECT {select} FROM {TABLE} LIMIT ? OFFSET ?",
                params=(limit, offset),
                max_rows=limit,
            )
    except TableError as exc:
        raise ValueError(str(exc)) from None
    total = int(count[0]) if count else 0
    shown = len(result.rows)
    header = (
        f"{path}: rows {offset + 1}-{offset + shown} of {total}"
        if shown
        else (f"{path}: no rows at offset {offset} (the table has {total})")
    )
    return ToolResult(header + "\n" + result.as_csv())


def table_query(folder: Path, args: dict[str, Any]) -> ToolResult:
    """The result of one checked SELECT over the table."""
    path, data, encoding = _table_source(folder, args)
    try:
        with open_table(path, data, encoding=encoding, sheet=args.get("sheet")) as con:
            sql = check_query(con, str(args["sql"]))
            result = run_query(con, sql)
    except (TableError, QueryRefused) as exc:
        return ToolResult(f"table_query: {exc}", True)
    more = ""
    if result.more:
        more = (
            f"[truncated: the result has more than {len(result.rows)} rows; count first, "
            "then fetch windows with LIMIT/OFFSET]\n"
        )
    return ToolResult(f"{len(result.rows)} rows\n{more}" + result.as_csv())


def table_export(folder: Path, args: dict[str, Any]) -> ToolResult:
    """Write a checked SELECT's result as CSV into the folder (the Draft)."""
    path, data, encoding = _table_source(folder, args)
    output = tool_path(args, "output")
    if type_of(output) not in ("csv", "tsv", "text"):
        raise ValueError(f"'output' {output} must be a .csv file")
    try:
        with open_table(path, data, encoding=encoding, sheet=args.get("sheet")) as con:
            sql = check_query(con, str(args["sql"]))
            result = run_query(con, sql, max_rows=MAX_EXPORT_ROWS)
    except (TableError, QueryRefused) as exc:
        return ToolResult(f"table_export: {exc}", True)
    if result.more:
        return ToolResult(
            f"table_export: the result has more than {MAX_EXPORT_ROWS} rows; narrow it", True
        )
    content = result.as_csv().encode()
    write_bytes(folder, output, content)
    return ToolResult(f"wrote {len(result.rows)} rows ({len(content)} bytes) to {output}")


def _styles_of(kind: str, folder: Path, args: dict[str, Any]) -> ToolResult:
    """The styles of the ``kind`` document at ``args["path"]`` (an error result for others)."""
    from strata.documents import styles

    path = tool_path(args)
    found = type_of(path)
    if found != kind:
        hint = f"; use {found}_get_styles" if found in ("docx", "xlsx", "pptx") else ""
        return ToolResult(f"{kind}_get_styles: {path} is a {found} file, not {kind}{hint}", True)
    data = _read(folder, path)
    if kind == "docx":
        text = styles.docx_styles(data)
    elif kind == "xlsx":
        text = styles.xlsx_styles(data, args.get("sheet"))
    else:
        text = styles.pptx_styles(data)
    return ToolResult(f"{path}: {text}")


def docx_get_styles(folder: Path, args: dict[str, Any]) -> ToolResult:
    """A Word document's styles (:func:`strata.documents.styles.docx_styles`)."""
    return _styles_of("docx", folder, args)


def xlsx_get_styles(folder: Path, args: dict[str, Any]) -> ToolResult:
    """A workbook's styles (:func:`strata.documents.styles.xlsx_styles`)."""
    return _styles_of("xlsx", folder, args)


def pptx_get_styles(folder: Path, args: dict[str, Any]) -> ToolResult:
    """A deck's styles (:func:`strata.documents.styles.pptx_styles`)."""
    return _styles_of("pptx", folder, args)


_HANDLERS: dict[str, Handler] = {
    "get_file_info": get_file_info,
    "get_file_map": get_file_map,
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "table_describe": table_describe,
    "table_stats": table_stats,
    "table_read_rows": table_read_rows,
    "table_query": table_query,
    "table_export": table_export,
    "docx_get_styles": docx_get_styles,
    "xlsx_get_styles": xlsx_get_styles,
    "pptx_get_styles": pptx_get_styles,
}
