"""strata.documents: the DOCX, PDF, XLSX and PPTX readers and writers, bounded.

Each bound is shown on a generated file that broke it: a sheet whose file
records 16,384 columns (a sheet formatted to column XFD), a Word document
of 50,000 short runs, and one whose XML unpacks to more than is read. A
command that needs a document library without the ``documents`` extra says
which extra to install and exits 2.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import docx
import openpyxl
import pytest

from conftest import as_json, assert_user_error, ok
from strata.documents.readers import (
    MAX_UNPACKED,
    docx_paragraphs,
    docx_text,
    open_docx,
    sheet_csv,
)
from strata.documents.writers import docx_add, docx_read, xlsx_cells, xlsx_set
from strata.errors import DocumentTooLarge


def _rezip(data: bytes, part: str, change: callable) -> bytes:  # type: ignore[valid-type]
    """``data`` (a zip) with ``part`` replaced by ``change(part's bytes)``."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for item in src.infolist():
            body = src.read(item.filename)
            z.writestr(item, change(body) if item.filename == part else body)
    return out.getvalue()


def _workbook(rows: int) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["id", "name", "price"])
    for n in range(rows):
        sheet.append([n, f"item {n}", n * 1.5])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def _to_xfd(data: bytes) -> bytes:
    """The workbook with its sheet's recorded size set to column XFD (16,384 columns)."""

    def widen(xml: bytes) -> bytes:
        return re.sub(rb'<dimension ref="[^"]*"/>', b'<dimension ref="A1:XFD2001"/>', xml)

    return _rezip(data, "xl/worksheets/sheet1.xml", widen)


def test_a_sheet_recorded_to_column_xfd_is_read_to_its_last_value() -> None:
    clean = _workbook(2000)
    wide = _to_xfd(clean)
    assert b"XFD2001" in zipfile.ZipFile(io.BytesIO(wide)).read("xl/worksheets/sheet1.xml")
    name, table = sheet_csv(wide, None)
    # every row as long as its values: 3 columns, not 16,384 (32 MB of commas before)
    assert (name, table) == sheet_csv(clean, None)
    lines = table.decode().splitlines()
    assert (
        len(lines) == 2001 and lines[0] == "id,name,price" and lines[-1] == "1999,item 1999,2998.5"
    )


def test_the_workshop_maps_and_reads_such_a_sheet_by_its_values(tmp_path: Path) -> None:
    from strata.workshop.filemaps import file_map
    from strata.workshop.tables import sheet_as_csv
    from strata.workshop.tools import read_file

    wide = _to_xfd(_workbook(200))
    assert "sheet 'Sheet': 201 rows x 3 columns" in file_map("a.xlsx", wide).render()
    assert sheet_as_csv(wide, None).count(b"\n") == 201
    (tmp_path / "a.xlsx").write_bytes(wide)
    shown = read_file(tmp_path, {"path": "a.xlsx"}).text
    assert "(sheet is 201 rows x 3 columns)" in shown
    assert "\n0,item 0,0\n" in shown and ",,," not in shown


def _docx(build: callable) -> bytes:  # type: ignore[valid-type]
    document = docx.Document()
    build(document)
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def test_paragraphs_are_read_as_python_docx_reads_them() -> None:
    def build(document: docx.document.Document) -> None:
        document.add_heading("Report", level=0)
        document.add_heading("Costs", level=2)
        p = document.add_paragraph("before\ttab ")
        p.add_run("bold").bold = True
        p.add_run().add_break()
        p.add_run("after the break")
        document.add_paragraph("")
        document.add_paragraph("quote", style="Quote")

    data = _docx(build)
    document = docx.Document(io.BytesIO(data))
    expected = [p.text for p in document.paragraphs]
    assert [text for _, text in docx_paragraphs(open_docx(data))] == expected
    assert [level for level, _ in docx_paragraphs(open_docx(data))] == [1, 2, None, None, None]
    assert docx_text(data).splitlines()[:2] == ["# Report", "## Costs"]


def test_a_document_of_fifty_thousand_runs_reads_whole() -> None:
    run = b'<w:r><w:t xml:space="preserve">a </w:t></w:r>'
    many = b"<w:p>" + run * 50 + b"</w:p>"
    data = _rezip(
        _docx(lambda d: d.add_paragraph("end")),
        "word/document.xml",
        lambda xml: xml.replace(b"<w:body>", b"<w:body>" + many * 1000),
    )
    assert len(data) < 64 * 1024  # a small file: 19 s to read before, each paragraph's style
    paragraphs = docx_paragraphs(open_docx(data))  # looked up among every style
    assert len(paragraphs) == 1001 and paragraphs[0] == (None, "a " * 50)


def _bomb() -> bytes:
    """A small docx whose XML unpacks past what is read (one paragraph, repeated)."""
    filler = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>" * (MAX_UNPACKED // 30)
    return _rezip(
        _docx(lambda d: d.add_paragraph("end")),
        "word/document.xml",
        lambda xml: xml.replace(b"<w:body>", b"<w:body>" + filler),
    )


def test_a_document_that_unpacks_past_the_bound_is_refused_unparsed() -> None:
    data = _bomb()
    assert len(data) < 256 * 1024
    with pytest.raises(
        DocumentTooLarge, match=r"XML unpacks to 1\d MiB, past the 16 MiB that is read of one"
    ):
        docx_text(data)


def test_the_knowledge_base_skips_it_and_says_why(run_cli, ws: Path) -> None:
    (ws / "notes.md").write_text("# Notes\n\nthe kettle is blue\n")
    (ws / "big.docx").write_bytes(_bomb())
    ok(run_cli("init", cwd=ws))
    report = as_json(run_cli("kb", "index", "--json", cwd=ws))
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    assert list(skipped) == ["big.docx"] and "past the 16 MiB" in skipped["big.docx"]
    assert "notes.md" in ok(run_cli("kb", "search", "kettle", cwd=ws))


def test_writers_write_what_readers_read(tmp_path: Path) -> None:
    report = tmp_path / "out" / "report.docx"
    docx_add(report, ["one"])
    docx_add(report, ["two", "three"])
    assert docx_read(report) == ["one", "two", "three"]
    book = tmp_path / "book.xlsx"
    xlsx_set(book, {"A1": 3, "B2": "=A1*2"}, "Costs")
    xlsx_set(book, {"A2": "x"}, "Costs")
    assert xlsx_cells(book, "Costs", None) == ("Costs", {"A1": 3, "A2": "x", "B2": "=A1*2"})
    with pytest.raises(ValueError, match="has no sheet 'Nope'"):
        xlsx_cells(book, "Nope", None)


def test_a_command_without_the_documents_extra_names_it(run_cli, ws: Path, tmp_path: Path) -> None:
    # python-docx, as a missing package looks to an import
    missing = tmp_path / "without"
    missing.mkdir()
    (missing / "docx.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'docx'\", name='docx')\n"
    )
    (ws / "a.docx").write_bytes(_docx(lambda d: d.add_paragraph("hello")))
    ok(run_cli("init", cwd=ws))
    result = run_cli("kb", "index", cwd=ws, env={"PYTHONPATH": str(missing)})
    message = assert_user_error(result, code=2, says="the 'documents' extra")
    assert "pip install 'strata-workspace[documents]'" in message
