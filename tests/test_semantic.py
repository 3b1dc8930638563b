"""Semantic diff handlers: the blocks a reader sees, and the fallbacks with their reasons."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import docx
import openpyxl
import pytest
from PIL import Image

from strata.semantic import registry
from strata.semantic.registry import analyze


def ids(result):
    return [(b.id, b.change) for b in result.semantic_blocks]


def test_python_definitions_added_removed_changed_moved_renamed():
    before = b"""import os
def greet(name):
    return "hi " + name
class A:
    def f(self): return 1
    def g(self): return 2
def old(x): return x * 2
def gone(): pass
"""
    after = b"""import os, sys
def greet(name):
    return "hello " + name
class A:
    def g(self): return 2
    def f(self): return 1
    def h(self): pass
def new(x): return x * 2
class B:
    def z(self): pass
"""
    result = analyze("src/app.py", before, after)
    assert result.diff_mode == "ast" and result.fallback_reason is None
    got = ids(result)
    assert ("src/app.py::greet", "changed") in got
    assert ("src/app.py::A.h", "added") in got
    assert ("src/app.py::B", "added") in got
    assert ("src/app.py::B.z", "added") not in got  # said by its class's addition
    assert ("src/app.py::gone", "removed") in got
    assert ("src/app.py::<module>", "changed") in got
    assert ("src/app.py::A", "changed") not in got  # only a member changed
    renamed = [b for b in result.semantic_blocks if b.change == "renamed"]
    assert [(b.id, b.old_id) for b in renamed] == [("src/app.py::new", "src/app.py::old")]
    assert {b.id for b in result.semantic_blocks if b.change == "moved"} <= {
        "src/app.py::A.f",
        "src/app.py::A.g",
    }
    assert "renamed" in result.summary


def test_python_method_moved_between_classes():
    before = b"class A:\n    x = 1\n    def run(self): return 1\nclass B:\n    y = 2\n"
    after = b"class A:\n    x = 1\nclass B:\n    y = 2\n    def run(self): return 1\n"
    result = analyze("m.py", before, after)
    assert [(b.id, b.change, b.old_id) for b in result.semantic_blocks] == [
        ("m.py::B.run", "moved", "m.py::A.run")
    ]


TRICKY = """\
import os

@decorated
# a comment between
def first(): return 1

if os.name == "nt":
    def second(): return 2
else:
    def second(): return 3

try:
    import fast
except ImportError:
    fast = None
finally:
    pass

class Box:
    def open(self): return 1
    @property
    def size(self): return 2
    @size.setter
    def size(self, v): pass
def first(): return 4
"""


SPANNING = '''TEMPLATE = """
def not_a_function():
    pass
"""
TOTAL = (1 +
2)
'''


@pytest.mark.parametrize(
    "source",
    [TRICKY, TRICKY.replace("return 3", "return 30"), SPANNING + TRICKY, TRICKY + SPANNING],
)
def test_python_module_cut_in_chunks_reads_as_parsed_whole(source: str):
    from strata.semantic import python

    whole = python._parse(source)
    assert not isinstance(whole, str)
    chunked = python._by_chunks(source)
    # lines at column 0 inside a string or brackets: a chunk fails, the module is parsed whole
    assert (chunked is None) == (SPANNING in source)
    found = python.definitions(source, "the new side")
    assert [(d.qualname, d.kind, d.parent, d.index, d.text) for d in found[0].values()] == [
        (d.qualname, d.kind, d.parent, d.index, d.text) for d in whole[0].values()
    ]
    assert found[1] == whole[1]
    names = list(found[0])
    assert "not_a_function" not in names
    assert names.count("first") == 1 and "first#2" in names and "Box.size#2" in names
    changed = analyze("t.py", TRICKY.encode(), TRICKY.replace("return 2", "return 20", 1).encode())
    assert [b.id for b in changed.semantic_blocks] == ["t.py::<module>"]
    edited = analyze("t.py", TRICKY.encode(), TRICKY.replace("return 4", "return 40").encode())
    assert [(b.id, b.change) for b in edited.semantic_blocks] == [("t.py::first#2", "changed")]


def test_reformatting_python_changes_no_definition():
    result = analyze("m.py", b"def f(a,b):\n  return a+b\n", b"def f(a, b):\n    return a + b\n")
    assert result.diff_mode == "ast" and result.semantic_blocks == ()


@pytest.mark.parametrize(
    ("path", "before", "after", "reason"),
    [
        ("m.py", b"def f(:\n", b"x = 1\n", "not valid Python (line 1"),
        ("c.json", b'{"a": 1', b'{"a": 2}', "not valid JSON"),
        ("c.yaml", b"a: [1\n", b"a: 2\n", "not valid YAML"),
        ("c.toml", b"a = \n", b"a = 2\n", "not valid TOML"),
        ("m.py", b"x = 1\n", b"\xff\xfe x", "not UTF-8"),
    ],
)
def test_malformed_input_falls_back_to_line_ranges_with_the_reason(path, before, after, reason):
    result = analyze(path, before, after)
    assert result.diff_mode == "unified"
    assert result.fallback_reason is not None and reason in result.fallback_reason
    assert result.semantic_blocks and all(b.kind == "lines" for b in result.semantic_blocks)


def test_json_by_pointer():
    before = b'{"services": {"web": {"ports": [80, 443]}, "db": 1}, "x": {"a/b": 1}}'
    after = b'{"services": {"web": {"ports": [8080, 443, 9]}}, "x": {"a/b": 2}, "n": {"k": 1}}'
    result = analyze("compose.json", before, after)
    assert result.diff_mode == "schema"
    assert sorted(ids(result)) == sorted(
        [
            ("compose.json::/services/web/ports/0", "changed"),
            ("compose.json::/services/web/ports/2", "added"),
            ("compose.json::/services/db", "removed"),
            ("compose.json::/x/a~1b", "changed"),
            ("compose.json::/n", "added"),
        ]
    )


def test_yaml_comment_only_change_changes_no_value():
    result = analyze("c.yml", b"a: 1\nb: [1, 2]\n", b"# tuned\na: 1\nb: [1, 2]  # same\n")
    assert result.diff_mode == "schema" and result.semantic_blocks == ()
    assert "comments" in result.summary


def test_toml_by_pointer():
    result = analyze("pyproject.toml", b"[tool.x]\na = 1\n", b"[tool.x]\na = 2\nb = 3\n")
    assert ids(result) == [
        ("pyproject.toml::/tool/x/b", "added"),
        ("pyproject.toml::/tool/x/a", "changed"),
    ] or sorted(ids(result)) == sorted(
        [("pyproject.toml::/tool/x/a", "changed"), ("pyproject.toml::/tool/x/b", "added")]
    )


def test_markdown_by_heading_path():
    before = b"# T\n\n## Install\n### Linux\napt\n```\n# not a heading\n```\n## Old\nsame\n"
    after = (
        b"# T\n\n## Install\n### Linux\napt-get\n```\n# not a heading\n```\n"
        b"## New\nsame\n## Use\nx\n"
    )
    result = analyze("README.md", before, after)
    assert ids(result) == [
        ("README.md::# T > ## Install > ### Linux", "changed"),
        ("README.md::# T > ## New", "renamed"),
        ("README.md::# T > ## Use", "added"),
    ]


def test_csv_by_cell_and_row():
    result = analyze("d.csv", b"a,b\n1,2\n3,4\n", b"a,b\n1,5\n0,0\n3,4\n")
    assert ids(result) == [("d.csv::B2", "changed"), ("d.csv::3:3", "added")]


def _xlsx(rows, extra_sheet=False):
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Prices"
    for row in rows:
        sheet.append(row)
    if extra_sheet:
        book.create_sheet("Notes")
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_xlsx_by_sheet_and_cell():
    result = analyze(
        "p.xlsx",
        _xlsx([["item", "price"], ["tea", 3]]),
        _xlsx([["item", "price"], ["tea", 4]], True),
    )
    assert ids(result) == [("p.xlsx::Prices!B2", "changed"), ("p.xlsx::Notes", "added")]


def _docx(paragraphs):
    document = docx.Document()
    for style, text in paragraphs:
        document.add_paragraph(text, style=style)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_by_heading_and_paragraph():
    before = _docx(
        [("Heading 1", "Intro"), (None, "Hello."), ("Heading 1", "Usage"), (None, "Run it.")]
    )
    after = _docx(
        [("Heading 1", "Intro"), (None, "Hello."), ("Heading 1", "Usage"), (None, "Run it twice.")]
    )
    result = analyze("guide.docx", before, after)
    assert ids(result) == [("guide.docx::Usage ¶4", "changed")]


def _png(colour, size=(40, 30)):
    image = Image.new("RGB", size, colour)
    for x in range(10):
        image.putpixel((x, x), (0, 0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_image_impact_line():
    result = analyze("docs/diagram.png", _png((255, 0, 0)), _png((250, 0, 0), (40, 31)))
    assert result.diff_mode == "binary"
    (impact,) = result.artifact_impacts
    assert impact["kind"] == "image"
    assert impact["dimensions_before"] == [40, 30] and impact["dimensions_after"] == [40, 31]
    assert impact["bytes_changed"] > 0 and impact["hash_before"] != impact["hash_after"]
    assert impact["summary"].startswith("replaced docs/diagram.png; ")
    assert "% alike" in impact["summary"] and "40x30 → 40x31" in impact["summary"]


def test_binary_bytes_changed():
    a = b"\0" + bytes(range(256)) * 100
    b = a[:1000] + b"XYZ" + a[1003:]
    result = analyze("blob.bin", a, b)
    assert result.diff_mode == "binary"
    assert result.artifact_impacts[0]["bytes_changed"] == 3
    assert "3 bytes changed" in result.summary


@pytest.mark.parametrize(
    ("path", "before", "after", "want"),
    [
        (
            "web/app.ts",
            b"class Server { listen() { return 1 } }\nfunction g() {}\n",
            b"class Server { listen() { return 2 } close() {} }\nexport const k = () => 1;\n",
            [
                ("web/app.ts::Server.listen", "changed"),
                ("web/app.ts::Server.close", "added"),
                ("web/app.ts::k", "added"),
                ("web/app.ts::g", "removed"),
            ],
        ),
        (
            "main.go",
            b"package m\nfunc (s *Store) Get() int { return 1 }\ntype T struct{}\n",
            b"package m\nfunc (s *Store) Get() int { return 2 }\n",
            [("main.go::Store.Get", "changed"), ("main.go::T", "removed")],
        ),
        (
            "src/lib.rs",
            b"struct A;\nimpl A { fn f(&self) {} }\nfn old() -> u8 { 1 }\n",
            b"struct A;\nimpl A { fn f(&self) { 1; } fn g() {} }\nfn new() -> u8 { 1 }\n",
            [
                ("src/lib.rs::A.f", "changed"),
                ("src/lib.rs::A.g", "added"),
                ("src/lib.rs::new", "renamed"),
            ],
        ),
    ],
)
def test_tree_sitter_languages(path, before, after, want):
    result = analyze(path, before, after)
    assert result.diff_mode == "ast", result.fallback_reason
    assert ids(result) == want


def test_tree_sitter_syntax_error_falls_back():
    result = analyze("a.js", b"function f() {}\n", b"function f( {\n")
    assert result.diff_mode == "unified" and "syntax errors" in (result.fallback_reason or "")


def test_unknown_text_gives_line_ranges():
    result = analyze("notes.txt", b"a\nb\nc\n", b"a\nB\nc\nd\n")
    assert result.fallback_reason is None and result.diff_mode == "unified"
    assert ids(result) == [("notes.txt::L2", "changed"), ("notes.txt::L4", "added")]


def test_big_files_fall_back_within_the_time_out():
    lines = b"x = 1\n" * 100_000
    started = time.monotonic()
    result = analyze("big.py", lines, lines + b"y = 2\n", timeout=2.0)
    assert "100,000 lines" in (result.fallback_reason or "")
    huge = b'{"a": "' + b"x" * (50 * 1024 * 1024) + b'"}'
    result = analyze("big.json", huge, huge[:-3] + b'y"}', timeout=2.0)
    assert "bytes, past the structured handler's limit" in (result.fallback_reason or "")
    assert time.monotonic() - started < 2.0


class _Slow:
    name = "slow"

    def handles(self, path):
        return path.endswith(".slow")

    def diff(self, path, before, after, unified_patch):
        time.sleep(1.0)
        raise AssertionError("never waited for")


def test_a_handler_past_its_time_out_falls_back():
    started = time.monotonic()
    result = analyze("a.slow", b"a\n", b"b\n", timeout=0.1, chain=[_Slow()])
    assert time.monotonic() - started < 0.5
    assert result.fallback_reason == "the slow handler took over 0.1 s"
    assert ids(result) == [("a.slow::L1", "changed")]


def test_entry_point_handler_is_used_first(tmp_path: Path, monkeypatch):
    (tmp_path / "plug_sem.py").write_text(
        "from strata.semantic.base import Block, HandlerResult\n"
        "class Handler:\n"
        "    name = 'plug'\n"
        "    def handles(self, path): return path.endswith('.py')\n"
        "    def diff(self, path, before, after, patch):\n"
        "        block = Block('thing', path + '::x', 'changed')\n"
        "        return HandlerResult('ast', (block,), 'plugged', handler='plug')\n"
    )
    info = tmp_path / "plug_sem-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-sem\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[strata.diff_handlers]\nplug = plug_sem:Handler\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._plugins.cache_clear()
    try:
        result = analyze("a.py", b"x = 1\n", b"x = 2\n")
        assert result.handler == "plug" and ids(result) == [("a.py::x", "changed")]
    finally:
        sys.modules.pop("plug_sem", None)
        monkeypatch.undo()
        registry._plugins.cache_clear()
    assert analyze("a.py", b"x = 1\n", b"x = 2\n").handler == "python"


def test_handlers_are_deterministic():
    before = b"def a(): pass\ndef b(): pass\n"
    after = b"def b(): pass\ndef c(): pass\n"
    first = analyze("m.py", before, after).to_json()
    assert all(analyze("m.py", before, after).to_json() == first for _ in range(5))
