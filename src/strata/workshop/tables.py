"""The table tools' DuckDB: one file loaded as table ``t``, queried through guards.

A table is a CSV/TSV file (or one sheet of an xlsx workbook) that Strata
reads, through the workspace's no-symlink reader, and loads into a private
in-memory DuckDB as the table ``t``. Only then is the connection locked
down: ``enable_external_access = false`` (no file, no network, no
extension), ``lock_configuration = true`` (no ``SET`` can undo it), a
``memory_limit`` of 512 MB and no temporary directory to spill to. Nothing a
query says can reach a file: the table it sees is the file the tool call
names, loaded by Strata.

A model's query (:func:`check_query`) must be exactly one statement, of
DuckDB's SELECT type (parsed with ``duckdb.extract_statements``), starting
with ``SELECT`` or ``WITH`` (DuckDB's tokenizer: ``PRAGMA``, ``DESCRIBE``,
``SUMMARIZE``, ``FROM t`` and ``VALUES`` are SELECTs to DuckDB but refused),
whose syntax tree (``json_serialize_sql``) names no table function
(``read_csv``, ``glob``, ``range``...) and no table but ``t`` and its own
``WITH`` names. ``COPY``, ``ATTACH``, ``INSTALL``, ``LOAD``, ``PRAGMA``,
``SET``, ``CREATE``, ``INSERT``... are refused before anything runs. A query
is interrupted after 5 seconds (a timer calls ``interrupt`` on the
connection). Each refusal is a :class:`QueryRefused` with a message that
says what is allowed.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from strata.documents.readers import NoSheet, sheet_csv
from strata.errors import StrataError
from strata.workshop.filemaps import decode, spooled, type_of

if TYPE_CHECKING:
    import duckdb

TABLE = "t"
TIMEOUT_S = 5.0
MEMORY_LIMIT = "512MB"
#: rows a query result may hold before it is cut
MAX_RESULT_ROWS = 500
#: rows table_export may write
MAX_EXPORT_ROWS = 1_000_000
TABLE_TYPES = frozenset({"csv", "tsv", "xlsx"})
_FORBIDDEN_FUNCTIONS = frozenset({"getenv", "glob", "sniff_csv", "query", "query_table"})


class QueryRefused(ValueError):
    """A query the guards refuse; the message says why and what is allowed."""


class TableError(ValueError):
    """A file that cannot be loaded as a table."""


@contextlib.contextmanager
def open_table(
    path: str, data: bytes, *, encoding: str | None = None, sheet: str | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A locked-down connection whose table ``t`` holds the file ``path`` (``data``)."""
    import duckdb

    kind = type_of(path)
    if kind not in TABLE_TYPES:
        raise TableError(f"{path} is not a table (csv, tsv or xlsx); use read_file")
    if sheet is not None and kind != "xlsx":
        raise TableError(f"{path} has no sheets ('sheet' is for xlsx files)")
    con = duckdb.connect(
        ":memory:",
        config={
            "threads": 2,
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": "",
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        },
    )
    try:
        if kind == "xlsx":
            csv_data = sheet_as_csv(data, sheet)
            kind = "csv"
        else:
            csv_data = data
            if encoding not in (None, "utf-8", "ascii"):
                csv_data = decode(data, encoding).encode("utf-8")
        if not csv_data.strip():
            raise TableError(f"{path} is empty: it has no columns")
        options = ", delim='\t'" if kind == "tsv" else ""
        with spooled(csv_data, "." + kind) as name:
            try:
                con.execute(f"CREATE TABLE {TABLE} AS SELECT * FROM read_csv(?{options})", [name])
            except duckdb.Error as exc:
                raise TableError(f"{path} cannot be read as a table: {_first_line(exc)}") from None
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        yield con
    finally:
        con.close()


def sheet_as_csv(data: bytes, sheet: str | None) -> bytes:
    """One sheet of an xlsx workbook (the first when ``sheet`` is None) as CSV bytes."""
    try:
        return sheet_csv(data, sheet)[1]
    except (StrataError, NoSheet) as exc:
        if isinstance(exc, NoSheet):
            raise TableError(str(exc)) from None
        raise
    except Exception as exc:
        raise TableError(f"the workbook cannot be read: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- the guards -----------------------------------------------------------------------------


def check_query(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """``sql`` when the guards allow it (see the module's docstring), else :class:`QueryRefused`."""
    import duckdb

    if not sql.strip():
        raise QueryRefused("the query is empty; write one SELECT over the table t")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(f"the query does not parse: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise QueryRefused(
            f"the query has {len(statements)} statements; send exactly one SELECT statement"
        )
    statement = statements[0]
    first = _first_keyword(sql)
    if statement.type != duckdb.StatementType.SELECT:
        kind = (first or statement.type.name).upper()
        raise QueryRefused(
            f"{kind} statements are not allowed; send one SELECT (or WITH ... SELECT) "
            f"over the table {TABLE}"
        )
    if first not in ("select", "with"):
        raise QueryRefused(
            f"the query starts with {first.upper() or 'nothing'}; it must start with SELECT or "
            f"WITH (PRAGMA, DESCRIBE, SUMMARIZE, FROM-first and VALUES are not allowed)"
        )
    row = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True}
    if tree.get("error"):
        message = tree.get("error_message") or "not a plain SELECT"
        raise QueryRefused(f"the query is not a plain SELECT ({message})")
    ctes: set[str] = set()
    _collect_ctes(tree, ctes)
    _check_tree(tree, ctes | {TABLE})
    return sql


def _first_keyword(sql: str) -> str:
    import duckdb

    tokens = duckdb.tokenize(sql)
    for index, (start, kind) in enumerate(tokens):
        end = tokens[index + 1][0] if index + 1 < len(tokens) else len(sql)
        text = sql[start:end].strip()
        if kind == duckdb.token_type.comment:
            continue
        if kind == duckdb.token_type.operator and text.startswith("("):
            continue
        return text.split()[0].lower() if text else ""
    return ""


def _collect_ctes(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            for item in cte_map.get("map") or ():
                if isinstance(item, dict) and isinstance(item.get("key"), str):
                    out.add(item["key"].lower())
        for value in node.values():
            _collect_ctes(value, out)
    elif isinstance(node, list):
        for value in node:
            _collect_ctes(value, out)


def _check_tree(node: Any, tables: set[str]) -> None:
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = function.get("function_name", "?") if isinstance(function, dict) else "?"
            raise QueryRefused(
                f"table functions such as {name}() are not allowed; the query reads only "
                f"the table {TABLE} (the file named in the call)"
            )
        if kind == "BASE_TABLE":
            qualified = node.get("schema_name") or node.get("catalog_name")
            name = ".".join(
                str(part)
                for part in (
                    node.get("catalog_name"),
                    node.get("schema_name"),
                    node.get("table_name"),
                )
                if part
            )
            if qualified or name.lower() not in tables:
                raise QueryRefused(
                    f"the query may read only the table {TABLE} (the file named in the call), "
                    f"not {name!r}"
                )
        if node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name.startswith("read_") or name in _FORBIDDEN_FUNCTIONS:
                raise QueryRefused(f"the function {name}() is not allowed in a table query")
        for value in node.values():
            _check_tree(value, tables)
    elif isinstance(node, list):
        for value in node:
            _check_tree(value, tables)


# -- running --------------------------------------------------------------------------------


class QueryResult:
    """The columns and rows of a query, and whether rows were left out."""

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]], more: bool) -> None:
        self.columns = columns
        self.rows = rows
        self.more = more

    def as_csv(self) -> str:
        """The result as CSV text, a header row first."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows([["" if v is None else v for v in row] for row in self.rows])
        return out.getvalue()


def run_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    max_rows: int = MAX_RESULT_ROWS,
    timeout: float | None = None,
    params: Sequence[Any] = (),
) -> QueryResult:
    """Run ``sql`` (already checked, or Strata's own) with a timeout; at most ``max_rows`` rows.

    ``timeout`` defaults to :data:`TIMEOUT_S` (5 s).
    """
    import duckdb

    if timeout is None:
        timeout = TIMEOUT_S
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        cursor = con.execute(sql, list(params))
        columns = [d[0] for d in cursor.description or ()]
        rows = cursor.fetchmany(max_rows + 1)
    except duckdb.InterruptException:
        raise QueryRefused(
            f"the query ran longer than {timeout:g} s and was stopped; narrow it "
            "(filter, aggregate, LIMIT)"
        ) from None
    except duckdb.OutOfMemoryException:
        raise QueryRefused(
            f"the query needs more than {MEMORY_LIMIT} of memory; aggregate or LIMIT it"
        ) from None
    except duckdb.Error as exc:
        raise QueryRefused(f"the query failed: {_first_line(exc)}") from None
    finally:
        timer.cancel()
    return QueryResult(columns, rows[:max_rows], len(rows) > max_rows)


def quote_identifier(name: str) -> str:
    """``name`` as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'
