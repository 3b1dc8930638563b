"""The diff viewer's tables and documents, over HTTP against the real server."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strata import Repository
from strata.studio import running


def xlsx(rows: list[list[object]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def docx(paragraphs: list[str]) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "sales.xlsx").write_bytes(xlsx([["region", "units"], ["north", 10], ["south", 20]]))
    (root / "prices.csv").write_text("item,price\napple,1\npear,2\n")
    (root / "report.docx").write_bytes(docx(["Sales grew.", "North led."]))
    with Repository.create(root, snapshot=True)[0] as repo:
        (root / "sales.xlsx").write_bytes(
            xlsx([["region", "units"], ["north", 11], ["south", 20], ["east", 5]])
        )
        (root / "prices.csv").write_text("item,price\napple,1\npear,3\n")
        (root / "report.docx").write_bytes(docx(["Sales grew a lot.", "North led."]))
        repo.snapshot("new figures")
    with running([root]) as studio, httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as c:
        c.get(f"/?token={studio.token}")
        yield c


def test_tables_show_their_changed_cells(client: httpx.Client) -> None:
    page = client.get("/w/0/diff?a=HEAD~1&b=HEAD&path=sales.xlsx")
    assert page.status_code == 200
    assert '<td class="chg" title="was: 10">11</td>' in page.text
    assert '<td class="" >south</td>' in page.text  # unchanged cells are not marked
    assert "1 rows added" in page.text
    prices = client.get("/w/0/diff?a=HEAD~1&b=HEAD&path=prices.csv")
    assert '<td class="chg" title="was: 2">3</td>' in prices.text


def test_a_table_and_a_document_open_as_what_they_hold(client: httpx.Client) -> None:
    sheet = client.get("/w/0/file?at=HEAD&path=sales.xlsx")
    assert sheet.status_code == 200
    assert '<table class="grid">' in sheet.text and "<td>east</td>" in sheet.text
    document = client.get("/w/0/file?at=HEAD&path=report.docx")
    assert "the docx file&#39;s text" in document.text
    assert "Sales grew a lot." in re.sub(r"<[^>]+>", "", document.text)


def test_documents_show_as_text(client: httpx.Client) -> None:
    page = client.get("/w/0/diff?a=HEAD~1&b=HEAD&path=report.docx&mode=split")
    assert page.status_code == 200
    assert "the docx file&#39;s text" in page.text
    assert "Sales grew a lot." in page.text and "Sales grew." in page.text
    assert "binary:" not in page.text


def test_a_publish_conflict_shows_both_sides_hunk_by_hunk(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("A = 1\nB = 2\n")
    with Repository.create(root, snapshot=True)[0] as repo:
        draft = repo.draft()
        (draft.path / "app.py").write_text("A = 1\nB = 3\n")
        draft.record("the Draft's B")
    (root / "app.py").write_text("A = 1\nB = 4\n")  # Published changed the same line meanwhile
    with running([root]) as studio, httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as c:
        c.get(f"/?token={studio.token}")
        answer = c.post("/w/0/draft/publish", data={"csrf": studio.guard.csrf, "message": "x"})
    assert answer.status_code == 409
    assert "Conflicting files: app.py" in answer.text
    shown = re.sub(r"<[^>]+>", "", answer.text)  # the highlighted lines as text
    published, drafted = shown.split("The Draft\n")[-2:]
    assert "B = 4" in published and "B = 3" not in published
    assert "B = 3" in drafted and "B = 4" not in drafted
    assert (root / "app.py").read_text() == "A = 1\nB = 4\n"  # nothing was written


def test_each_hunk_is_credited_to_the_events_that_wrote_its_lines(tmp_path: Path) -> None:
    from strata import Author

    bot, alice, carol = Author("bot", "agent"), Author("alice", "human"), Author("carol", "human")
    root = tmp_path / "ws"
    root.mkdir()
    lines = [f"line {i}\n" for i in range(1, 41)]
    (root / "notes.txt").write_text("".join(lines))
    with Repository.create(root)[0] as repo:
        start = repo.snapshot("start", author=alice).event
        lines[1] = "line 2 by the bot\n"  # a hunk at the top: the bot's
        lines[30] = "line 31 by the bot\n"  # a hunk at the bottom, changed by carol after
        (root / "notes.txt").write_text("".join(lines))
        repo.snapshot("the bot's edit", author=bot)
        lines[31] = "line 32 by carol\n"
        del lines[35]  # carol removes line 36
        (root / "other.txt").write_text("x\n")
        (root / "notes.txt").write_text("".join(lines))
        repo.snapshot("carol's edit", author=carol)
        (root / "other.txt").write_text("y\n")
        end = repo.snapshot("another file, by alice", author=alice).event
    with running([root]) as studio, httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as c:
        c.get(f"/?token={studio.token}")
        page = c.get(f"/w/0/diff?a={start.id}&b={end.id}&path=notes.txt")
    assert page.status_code == 200
    hunks = page.text.split('<div class="hunk">')[1:]
    assert len(hunks) == 2

    def credited(hunk: str) -> list[str]:
        return re.findall(r'class="badge credit kind-\w+"[^>]*>([^(]+) \(', hunk)

    assert credited(hunks[0]) == ["bot"]  # not carol, the newest to touch the file
    assert credited(hunks[1]) == ["carol", "bot"]  # carol wrote 2 lines (one removed), bot 1
    by_line = dict(re.findall(r'data-by="(\w+)" title="(\w+) ', hunks[1]))
    assert sorted(by_line.values()) == ["bot", "carol"]
    assert "alice" not in page.text.split('<div class="hunk">', 1)[1]
