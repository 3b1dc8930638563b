"""Office files in review: per-file summaries made when a Draft records, no model called."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from conftest import CliRunner, as_json, ok
from strata import Repository


def _docx(paragraphs: list[tuple[str, str]]) -> bytes:
    import docx

    document = docx.Document()
    for style, text in paragraphs:
        if style == "h1":
            document.add_heading(text, level=1)
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _xlsx(b2: int, *, extra_sheet: bool = False) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Sheet1"
    sheet.append(["name", "count"])
    sheet.append(["apples", b2])
    if extra_sheet:
        book.create_sheet("Notes").append(["hello"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _report(second: str) -> bytes:
    return _docx([("h1", "Intro"), ("p", "First words."), ("p", second), ("h1", "End")])


def _draft_editing_office_files(repo: Repository) -> str:
    (repo.root / "report.docx").write_bytes(_report("Second words."))
    (repo.root / "data.xlsx").write_bytes(_xlsx(3))
    repo.snapshot("base")
    draft = repo.draft()
    (draft.path / "report.docx").write_bytes(_report("Second words, edited."))
    (draft.path / "data.xlsx").write_bytes(_xlsx(4, extra_sheet=True))
    revision = draft.record("edit the office files")
    assert revision is not None
    return revision.id


def test_a_revision_stores_what_changed_inside_docx_and_xlsx(repo: Repository) -> None:
    revision = repo.event(_draft_editing_office_files(repo))
    stored = {s["path"]: s for s in revision.data["file_summaries"]}
    assert stored["data.xlsx"]["lines"] == ["Sheet1: B2 changed 3 -> 4", "sheet Notes added"]
    assert stored["report.docx"]["lines"] == ["heading 'Intro': paragraph 3 changed"]
    # the pair of blobs it describes, so review and diff find it again
    assert stored["report.docx"]["hash_before"] != stored["report.docx"]["hash_after"]
    # a revision changing no office file stores none
    draft = repo.draft()
    (draft.path / "notes.txt").write_text("plain\n")
    plain = draft.record("text only")
    assert plain is not None and "file_summaries" not in plain.data


def test_review_and_diff_show_the_summaries_without_a_provider(
    repo: Repository, run_cli: CliRunner, ws: Path
) -> None:
    revision = _draft_editing_office_files(repo)
    # the command line has no provider configured (a fresh HOME, no STRATA_ variables)
    out = ok(run_cli("review", cwd=ws))
    assert "Sheet1: B2 changed 3 -> 4" in out
    assert "heading 'Intro': paragraph 3 changed" in out
    review = as_json(run_cli("review", "--json", cwd=ws))
    assert review["file_summaries"]["data.xlsx"] == [
        "Sheet1: B2 changed 3 -> 4",
        "sheet Notes added",
    ]
    base = repo.draft().base.id
    stat = ok(run_cli("diff", base, revision, "--stat", cwd=ws))
    assert "Sheet1: B2 changed 3 -> 4" in stat
    diff = as_json(run_cli("diff", base, revision, "--json", cwd=ws))
    assert diff["file_summaries"]["report.docx"] == ["heading 'Intro': paragraph 3 changed"]


def test_review_shows_the_stored_lines_not_a_new_reading(repo: Repository) -> None:
    from strata.workbench.summaries import summaries_for

    revision = repo.event(_draft_editing_office_files(repo))
    draft = repo.draft()
    diff = repo.diff_trees(repo.tree_of(draft.base), repo.tree_of(revision))
    # what the revision stored is what is shown (here altered, to tell the two apart)
    entry = next(s for s in revision.data["file_summaries"] if s["path"] == "data.xlsx")
    altered = type(revision)(
        **{**revision.__dict__, "data": {"file_summaries": [{**entry, "lines": ["as stored"]}]}}
    )
    assert summaries_for(diff, [altered])["data.xlsx"] == ["as stored"]
    # a pair no revision stored is read now, by the same readers
    assert summaries_for(diff, [])["data.xlsx"] == [
        "Sheet1: B2 changed 3 -> 4",
        "sheet Notes added",
    ]


def test_a_damaged_document_says_so_and_records_anyway(repo: Repository) -> None:
    (repo.root / "report.docx").write_bytes(_report("Second words."))
    repo.snapshot("base")
    draft = repo.draft()
    (draft.path / "report.docx").write_bytes(b"PK\x03\x04 not really a zip\x00")
    revision = draft.record("broken")
    assert revision is not None
    (entry,) = revision.data["file_summaries"]
    assert entry["lines"][0].startswith("not summarised: ")


def _deck(titles: list[str]) -> bytes:
    import pptx

    deck = pptx.Presentation()
    for title in titles:
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = title
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _pdf(pages: int) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_slides_and_pages_are_summarised(repo: Repository) -> None:
    (repo.root / "deck.pptx").write_bytes(_deck(["Plan", "Risks"]))
    (repo.root / "paper.pdf").write_bytes(_pdf(1))
    repo.snapshot("base")
    draft = repo.draft()
    (draft.path / "deck.pptx").write_bytes(_deck(["Plan", "Costs", "Risks"]))
    (draft.path / "paper.pdf").write_bytes(_pdf(3))
    (draft.path / "new.docx").write_bytes(_report("x"))
    revision = draft.record("slides and pages")
    assert revision is not None
    stored = {s["path"]: s["lines"] for s in revision.data["file_summaries"]}
    assert stored["deck.pptx"] == ["slide 2 'Costs' added"]
    assert stored["paper.pdf"][0] == "1 -> 3 pages"
    assert stored["new.docx"] == ["added: 4 paragraph(s)", "heading 'Intro'", "heading 'End'"]


def test_the_studio_review_page_lists_the_summaries(tmp_path: Path) -> None:
    import httpx

    from strata.studio import running

    root = tmp_path / "ws"
    root.mkdir()
    (root / "data.xlsx").write_bytes(_xlsx(3))
    with Repository.create(root, snapshot=True)[0] as repo:
        draft = repo.draft()
        (draft.path / "data.xlsx").write_bytes(_xlsx(4))
        draft.record("B2")
    with running([root]) as studio, httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as c:
        c.get(f"/?token={studio.token}")
        page = c.get("/w/0/draft")
    assert page.status_code == 200
    assert "<li>Sheet1: B2 changed 3 -&gt; 4</li>" in page.text


def test_a_revision_spends_a_bounded_time_on_summaries(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strata.workbench import summaries

    monkeypatch.setattr(summaries, "BUDGET", -1.0)  # spent before the first file
    revision = repo.event(_draft_editing_office_files(repo))
    lines = [s["lines"] for s in revision.data["file_summaries"]]
    assert lines and all(x[0].startswith("not summarised: the revision's") for x in lines)
