"""The Workshop's tools: strict schemas, selectors, Draft-only writes, the DuckDB guards."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from strata import Repository
from strata.providers.profile import strict_schema
from strata.workshop import tables
from strata.workshop.context import build_prompt
from strata.workshop.tables import QueryRefused, check_query, open_table, run_query
from strata.workshop.tools import (
    PLAN_TOOLS,
    RESEARCH_TOOLS,
    RESULT_LIMIT,
    SPECS,
    ToolBox,
    workshop_tools,
)
from workshop_fixtures import write_all


@pytest.fixture
def draft(tmp_path: Path) -> Path:
    root = tmp_path / "draft"
    root.mkdir()
    write_all(root)
    return root


def call(box: ToolBox, folder: Path, name: str, **arguments: Any) -> str:
    result = box.run(folder, name, arguments)
    assert not result.is_error, result.text
    return result.text


def fails(box: ToolBox, folder: Path, name: str, **arguments: Any) -> str:
    result = box.run(folder, name, arguments)
    assert result.is_error, result.text
    return result.text


# -- the tool set ------------------------------------------------------------------------------


def test_every_schema_is_strict() -> None:
    for spec in SPECS.values():
        params = spec.parameters
        assert strict_schema(params) == params, spec.name
        assert params["additionalProperties"] is False
        assert params["required"] == list(params["properties"])
        jsonschema.Draft202012Validator.check_schema(params)


def test_phases_get_the_seeds_subsets() -> None:
    everything = workshop_tools()
    assert list(everything) == list(SPECS)
    assert [s.name for s in everything.specs()] == list(SPECS)
    research = workshop_tools(phase="research")
    assert set(research) == set(RESEARCH_TOOLS)
    assert not {"write_file", "edit_file", "table_export"} & set(research)
    assert list(workshop_tools(phase="plan")) == list(PLAN_TOOLS)
    with pytest.raises(ValueError, match="unknown phase"):
        workshop_tools(phase="deploy")


def test_a_phase_cannot_call_a_tool_it_was_not_given(draft: Path) -> None:
    plan = workshop_tools(phase="plan")
    text = fails(plan, draft, "write_file", path="x.txt", content="no")
    assert "unknown or unavailable tool 'write_file'" in text
    assert not (draft / "x.txt").exists()


def test_the_mapping_has_the_agent_tools_shape(draft: Path) -> None:
    box = workshop_tools()
    spec, handler = box["read_file"]
    assert spec.name == "read_file"
    assert "Project" in handler(draft, {"path": "README.md"}).text
    assert box.results  # the handler is bound to the box: its result is kept


def test_arguments_must_fit_the_schema(draft: Path) -> None:
    box = workshop_tools()
    assert "'bogus' was unexpected" in fails(box, draft, "read_file", path="README.md", bogus=1)
    assert "invalid start_line" in fails(box, draft, "read_file", path="README.md", start_line=0)
    assert "is not of type 'string'" in fails(box, draft, "get_file_map", path=3)
    # properties left out count as null
    assert "lines 1-" in call(box, draft, "read_file", path="README.md")


# -- reading -----------------------------------------------------------------------------------


def test_list_files_and_file_info(draft: Path) -> None:
    box = workshop_tools()
    text = call(box, draft, "list_files")
    assert "- data/sales.csv (csv, " in text and "- logo.png (image, 264 bytes, opaque" in text
    sales = next(line for line in text.splitlines() if "data/sales.csv" in line)
    assert call(box, draft, "list_files", prefix="data") == "1 files\n" + sales
    info = call(box, draft, "get_file_info", path="src/app.py")
    assert "type: python" in info and "encoding: utf-8" in info and "lines: 9" in info


def test_read_file_line_selectors(draft: Path) -> None:
    (draft / "long.txt").write_text("".join(f"row {i}\n" for i in range(1, 501)))
    box = workshop_tools()
    text = call(box, draft, "read_file", path="long.txt")
    assert text.startswith("long.txt lines 1-200 of 500 (utf-8)\nrow 1\n")
    assert text.endswith("[truncated: lines 201-500 not shown; read_file start_line=201]")
    text = call(box, draft, "read_file", path="long.txt", start_line=499, end_line=900)
    assert text == "long.txt lines 499-500 of 500 (utf-8)\nrow 499\nrow 500"
    assert "past the end" in fails(box, draft, "read_file", path="long.txt", start_line=501)


def test_read_file_of_an_xlsx_sheet_and_range(draft: Path) -> None:
    box = workshop_tools()
    text = call(box, draft, "read_file", path="book.xlsx", sheet="Sales", range="A1:B3")
    assert text.splitlines()[1:] == ["Region,Units", "north,10", "south,20"]
    text = call(box, draft, "read_file", path="book.xlsx", sheet="Notes")
    assert "source,survey 2026" in text
    assert "the sheets are: Sales, Notes" in fails(
        box, draft, "read_file", path="book.xlsx", sheet="Nope"
    )


def test_read_file_of_documents_as_text(draft: Path) -> None:
    box = workshop_tools()
    docx = call(box, draft, "read_file", path="report.docx")
    assert "# Quarterly Report\nSales grew in every region this quarter.\n## Method" in docx
    assert "[table 1]\nRegion | Units" in docx
    pptx = call(box, draft, "read_file", path="deck.pptx")
    assert "## Slide 2: Budget 2026" in pptx
    pdf = call(box, draft, "read_file", path="invoice.pdf", pages="2")
    assert "--- page 2 ---\nTerms and conditions" in pdf and "Invoice" not in pdf
    assert "opaque" in fails(box, draft, "read_file", path="logo.png")


@pytest.mark.parametrize("name", ["bad.xlsx", "bad.pdf"])
def test_a_corrupt_file_is_an_error_result_not_a_crash(draft: Path, name: str) -> None:
    (draft / name).write_bytes(b"PK\x03\x04 broken" if name.endswith("xlsx") else b"%PDF-1 x")
    box = workshop_tools()
    assert "content unavailable: could not be read as" in call(
        box, draft, "get_file_map", path=name
    )
    fails(box, draft, "read_file", path=name)


def test_a_long_result_is_cut_and_recalled(draft: Path) -> None:
    (draft / "wide.txt").write_text("".join(f"{i:05d} " + "w" * 200 + "\n" for i in range(150)))
    box = workshop_tools()
    call(box, draft, "list_files")
    text = call(box, draft, "read_file", path="wide.txt")
    assert len(text) < RESULT_LIMIT + 200
    assert f"recall_tool_result index=2 offset={RESULT_LIMIT} reads on]" in text
    rest = call(box, draft, "recall_tool_result", index=2, offset=RESULT_LIMIT)
    assert "00149 " in rest and "00149 " not in text
    assert "no result 9" in fails(box, draft, "recall_tool_result", index=9)


# -- writing: the Draft only -------------------------------------------------------------------


def test_write_and_edit_land_in_the_folder(draft: Path) -> None:
    box = workshop_tools()
    call(box, draft, "write_file", path="notes/todo.md", content="- one\n- two\n")
    assert (draft / "notes/todo.md").read_text() == "- one\n- two\n"
    call(box, draft, "edit_file", path="notes/todo.md", old="- two", new="- 2")
    assert (draft / "notes/todo.md").read_text() == "- one\n- 2\n"
    assert "was not found" in fails(box, draft, "edit_file", path="notes/todo.md", old="x", new="")
    (draft / "twice.txt").write_text("a a")
    assert "found 2 times" in fails(box, draft, "edit_file", path="twice.txt", old="a", new="b")


def test_binary_documents_are_never_written_as_text(draft: Path) -> None:
    box = workshop_tools()
    before = (draft / "book.xlsx").read_bytes()
    assert "cannot be written as text" in fails(
        box, draft, "write_file", path="book.xlsx", content="x"
    )
    assert (draft / "book.xlsx").read_bytes() == before


@pytest.mark.parametrize(
    "path", ["../outside.txt", "/tmp/outside.txt", "a/../../outside.txt", ".strata/x", ".git/x"]
)
def test_a_path_escaping_the_workspace_is_refused(draft: Path, path: str) -> None:
    box = workshop_tools()
    fails(box, draft, "write_file", path=path, content="escaped")
    fails(box, draft, "read_file", path=path)
    fails(box, draft, "table_export", path="data/sales.csv", sql="select * from t", output=path)
    assert not (draft.parent / "outside.txt").exists()
    assert not (draft / ".strata").exists() and not (draft / ".git").exists()


def test_a_symlink_cannot_carry_a_write_or_read_outside(draft: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET")
    os.symlink(outside, draft / "escape")
    os.symlink(outside / "secret.txt", draft / "secret.txt")
    box = workshop_tools()
    assert "symlink" in fails(box, draft, "write_file", path="escape/new.txt", content="x")
    assert not (outside / "new.txt").exists()
    assert "TOP-SECRET" not in fails(box, draft, "read_file", path="escape/secret.txt")
    fails(box, draft, "read_file", path="secret.txt")
    fails(box, draft, "edit_file", path="secret.txt", old="TOP", new="changed")
    assert (outside / "secret.txt").read_text() == "TOP-SECRET"


# -- tables ------------------------------------------------------------------------------------


def test_table_describe_stats_and_rows(draft: Path) -> None:
    box = workshop_tools()
    text = call(box, draft, "table_describe", path="data/sales.csv")
    assert "table t, 5 rows, 3 columns" in text and "units: BIGINT" in text
    text = call(box, draft, "table_stats", path="data/sales.csv", columns=["units"])
    stats = list(csv.DictReader(io.StringIO(text.split("\n", 1)[1])))
    assert stats[0]["column_name"] == "units" and stats[0]["min"] == "1" and stats[0]["max"] == "5"
    rows = call(box, draft, "table_read_rows", path="data/sales.csv", offset=3, limit=2)
    assert rows.splitlines() == [
        "data/sales.csv: rows 4-5 of 5",
        "region,units,price",
        "west,4,10.0",
        "north,5,12.5",
    ]
    assert "no column 'nope'" in fails(
        box, draft, "table_read_rows", path="data/sales.csv", columns=["nope"]
    )
    assert "is not a table" in fails(box, draft, "table_describe", path="README.md")


def test_table_query_and_export_on_an_xlsx_sheet(draft: Path) -> None:
    box = workshop_tools()
    sql = 'select "Region", "Units" * 2 as doubled from t order by doubled desc'
    text = call(box, draft, "table_query", path="book.xlsx", sheet="Sales", sql=sql)
    assert text.splitlines() == ["3 rows", "Region,doubled", "east,60", "south,40", "north,20"]
    out = call(
        box, draft, "table_export", path="book.xlsx", sheet="Sales", sql=sql, output="out/d.csv"
    )
    assert out == "wrote 3 rows (41 bytes) to out/d.csv"
    assert (draft / "out/d.csv").read_text() == "Region,doubled\neast,60\nsouth,40\nnorth,20\n"


def test_a_big_query_result_is_cut_with_a_marker(draft: Path) -> None:
    (draft / "big.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(1200)))
    box = workshop_tools()
    text = call(box, draft, "table_query", path="big.csv", sql="select n from t")
    assert text.startswith("500 rows\n[truncated: the result has more than 500 rows; count first")


FORBIDDEN = {
    "two statements": ("select * from t; select * from t", "2 statements"),
    "copy": ("copy t to '/tmp/wsctx-stolen.csv'", "COPY statements are not allowed"),
    "attach": ("attach '/tmp/wsctx-other.db'", "ATTACH statements are not allowed"),
    "install": ("install httpfs", "INSTALL statements are not allowed"),
    "load": ("load httpfs", "LOAD statements are not allowed"),
    "pragma": ("pragma database_list", "starts with PRAGMA"),
    "set": ("set memory_limit = '8GB'", "SET statements are not allowed"),
    "insert": ("insert into t values ('x', 1, 1.0)", "INSERT statements are not allowed"),
    "create": ("create table u as select * from t", "CREATE statements are not allowed"),
    "drop": ("drop table t", "DROP statements are not allowed"),
    "read_csv": ("select * from read_csv('/etc/passwd')", "read_csv() are not allowed"),
    "read_text": ("select * from read_text('/etc/hostname')", "read_text() are not allowed"),
    "file literal": ("select * from '/etc/passwd'", "not '/etc/passwd'"),
    "file in a subquery": (
        "select * from t where region in (select * from 'x.csv')",
        "not 'x.csv'",
    ),
    "glob": ("select * from glob('/etc/*')", "glob() are not allowed"),
    "other table": ("select * from duckdb_settings()", "duckdb_settings() are not allowed"),
    "qualified table": ("select * from system.main.t", "not 'system.main.t'"),
    "describe": ("describe t", "starts with DESCRIBE"),
    "summarize": ("summarize t", "starts with SUMMARIZE"),
    "from first": ("from t", "starts with FROM"),
    "getenv": ("select getenv('HOME')", "getenv() is not allowed"),
    "parse error": ("select from where", "does not parse"),
}


@pytest.mark.parametrize("form", list(FORBIDDEN))
def test_table_query_refuses(draft: Path, form: str) -> None:
    sql, message = FORBIDDEN[form]
    box = workshop_tools()
    text = fails(box, draft, "table_query", path="data/sales.csv", sql=sql)
    assert message in text
    assert not Path("/tmp/wsctx-stolen.csv").exists()
    assert not Path("/tmp/wsctx-other.db").exists()


def test_select_and_with_are_allowed(draft: Path) -> None:
    box = workshop_tools()
    sql = "with s as (select region, units from t) (select count(*) as n from s)"
    assert call(box, draft, "table_query", path="data/sales.csv", sql=sql) == "1 rows\nn\n5\n"
    sql = "/* count */ select count(*) as n from t"
    assert call(box, draft, "table_query", path="data/sales.csv", sql=sql) == "1 rows\nn\n5\n"


def test_the_connection_itself_cannot_reach_files_or_be_reconfigured() -> None:
    # below the guards: even a query that got past them could read no file
    with open_table("x.csv", b"a\n1\n") as con:
        with pytest.raises(QueryRefused, match="Permission Error"):
            run_query(con, "select * from read_csv('/etc/passwd')")
        with pytest.raises(QueryRefused, match="configuration has been locked"):
            run_query(con, "set enable_external_access = true")
        settings = run_query(
            con,
            "select current_setting('memory_limit'), current_setting('enable_external_access')",
        )
        assert settings.rows[0][1] is False
        assert settings.rows[0][0].startswith("488")  # 512 MB, as DuckDB prints it (MiB)


def test_a_query_is_stopped_by_its_timeout(draft: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert tables.TIMEOUT_S == 5.0
    monkeypatch.setattr(tables, "TIMEOUT_S", 0.3)
    (draft / "n.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(3000)))
    box = workshop_tools()
    started = time.monotonic()
    sql = "select sum(a.n * b.n + c.n) from t a, t b, t c"
    text = fails(box, draft, "table_query", path="n.csv", sql=sql)
    assert "ran longer than 0.3 s and was stopped" in text
    assert time.monotonic() - started < 3


def test_a_query_is_stopped_by_the_memory_limit() -> None:
    data = ("s\n" + "".join("y" * 100 + f"{i}\n" for i in range(3000))).encode()
    with open_table("x.csv", data) as con:
        sql = check_query(con, "select list(a.s || b.s) from t a, t b")
        with pytest.raises(QueryRefused, match="needs more than 512MB of memory"):
            run_query(con, sql)


# -- on a real repository ----------------------------------------------------------------------


def test_a_turn_reads_published_and_writes_only_the_draft(repo: Repository, ws: Path) -> None:
    write_all(ws)
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "dep.js").write_text("x")
    repo.snapshot("base")
    prompt = build_prompt(ws, [], user_text="Total units per region", rules=repo.rules())
    assert "- data/sales.csv (csv, " in prompt.system
    assert "node_modules" not in prompt.system and ".strata" not in prompt.system
    draft = repo.draft()
    box = workshop_tools()
    sql = "select region, sum(units) as units from t group by region order by region"
    call(box, draft.path, "table_export", path="data/sales.csv", sql=sql, output="totals.csv")
    call(box, draft.path, "edit_file", path="README.md", old="Intro.", new="Totals added.")
    assert (draft.path / "totals.csv").read_text().startswith("region,units\neast,3\n")
    assert not (ws / "totals.csv").exists()
    assert "Intro." in (ws / "README.md").read_text()
    review = draft.review()
    assert sorted(f.path for f in review.diff.files) == ["README.md", "totals.csv"]


def test_importing_the_workshop_loads_no_heavy_library() -> None:
    code = (
        "import sys, strata.workshop.tools, strata.workshop.context; "
        "heavy = {'duckdb', 'openpyxl', 'docx', 'pptx', 'pypdf', 'charset_normalizer'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
