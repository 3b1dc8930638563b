"""The studio's pages in a real browser (Debian's chromium through Playwright).

One browser for the module; each test serves its own workspace and saves a
screenshot under its temp folder.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.studio_support import ALICE, BOT, chromium, history, launch_args

from strata import Repository


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=launch_args())
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert not errors, errors  # no script error (a CSP refusal included) on any page


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    from strata.studio import running

    root = history(tmp_path / "ws")
    with running([root]) as studio:
        yield studio


def test_timeline_filter_play_head_and_live_events(page: Any, served: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(served.url)
    rows = page.locator(".ev")
    assert rows.count() == 3
    assert page.locator(".flag", has_text="v1").count() == 1  # the bookmark as a flag
    # the agent's changes only
    page.select_option("select[name=kind]", "agent")
    with page.expect_navigation():
        page.click("#apply")
    assert page.locator(".ev").count() == 1
    assert "fix the answer" in page.locator(".ev").inner_text()
    with page.expect_navigation():  # (the play head's handler is attached once the page loads)
        page.click("text=clear")
    # the play head to the first point: notes.md did not exist yet
    tree = page.locator("#tree")
    assert "notes.md" in tree.inner_text()
    page.locator("#playhead").fill("0")
    expect(tree).not_to_contain_text("notes.md")
    assert "app.py" in tree.inner_text()
    with page.expect_navigation():
        page.click("#tree a.file:has-text('app.py')")
    assert "return 41" in page.locator("table.code").inner_text()
    page.go_back()
    # a new event appears without a reload
    with Repository.open(served.workspaces[0].repo.root) as repo:
        (repo.root / "live.txt").write_text("new\n")
        repo.snapshot("recorded while the page is open", author=BOT)
    started = time.monotonic()
    expect(page.locator(".ev").first).to_contain_text("recorded while the page", timeout=5000)
    assert time.monotonic() - started < 3
    page.screenshot(path=str(tmp_path / "timeline.png"))


def test_points_picked_to_compare_stay_picked_when_a_new_event_arrives(
    page: Any, served: Any
) -> None:
    from playwright.sync_api import expect

    page.goto(served.url)
    # the live stream's first message (the ledger's newest record, an operation here) is
    # not news: the list is not loaded again for it
    page.wait_for_timeout(1500)
    assert page.locator("#rows").get_attribute("data-loaded-ms") is None
    boxes = page.locator("input[name=pick]")
    boxes.nth(0).check()
    boxes.nth(1).check()
    with Repository.open(served.workspaces[0].repo.root) as repo:
        (repo.root / "live.txt").write_text("new\n")
        repo.snapshot("recorded while two points are picked", author=BOT)
    expect(page.locator(".ev").first).to_contain_text("while two points are picked")
    # the list was loaded again: the same two points are still picked (now second and third)
    expect(page.locator("input[name=pick]:checked")).to_have_count(2)
    assert page.locator("input[name=pick]").nth(0).is_checked() is False
    with page.expect_navigation():
        page.click("#compare-btn")
    expect(page.locator("section.file")).to_have_count(2)


def test_rewind_and_undo_from_the_timeline(page: Any, served: Any, tmp_path: Path) -> None:
    root = served.workspaces[0].repo.root
    (root / "app.py").write_text("unrecorded edit\n")
    page.goto(served.url)
    oldest = page.locator(".ev").last
    with page.expect_navigation():
        oldest.locator("button", has_text="rewind").click()
    result = page.locator("#result").inner_text()
    assert "Auto-saved unrecorded work as" in result  # what was saved, shown first
    assert "Rewound to" in result
    assert (root / "app.py").read_text() == "def answer():\n    return 41\n"
    assert not (root / "notes.md").exists()
    with page.expect_navigation():
        page.click("#back")
    with page.expect_navigation():
        page.click("#undo")
    assert "Undid rewind" in page.locator("#result").inner_text()
    assert (root / "app.py").read_text() == "unrecorded edit\n"
    page.screenshot(path=str(tmp_path / "undo.png"))


def test_compare_two_points_side_by_side(page: Any, served: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(served.url)
    boxes = page.locator("input[name=pick]")
    boxes.nth(0).check()
    boxes.nth(2).check()
    with page.expect_navigation():
        page.click("#compare-btn")
    expect(page.locator("section.file")).to_have_count(3)
    page.click("#mode-split")  # (a link the page's script may also answer in place)
    sbs = page.locator("table.sbs").first
    expect(sbs).to_be_visible()
    assert "return 41" in sbs.locator("td.del").inner_text()
    assert "return 42" in sbs.locator("td.add").inner_text()
    # syntax highlighted: the keyword has Pygments' class
    assert sbs.locator("span.k", has_text="return").count() >= 1
    assert page.locator(".badge.kind-agent").count() >= 1  # who made the hunk
    images = page.locator(".images img")
    assert images.count() == 2
    for i in range(2):  # both versions load (served as images, not as files to save)
        expect(images.nth(i)).to_have_js_property("naturalWidth", 1)
    page.screenshot(path=str(tmp_path / "diff.png"), full_page=True)


def test_forks_and_merges_are_drawn_and_hunks_credited_line_by_line(
    page: Any, tmp_path: Path
) -> None:
    from strata.studio import running

    root = history(tmp_path / "ws")
    with Repository.open(root) as repo:
        repo.branch_create("attempt", "HEAD")
        repo.branch_switch("attempt")
        (root / "app.py").write_text("def answer():\n    return 42\n\n\ndef ask():\n    pass\n")
        repo.snapshot("the agent adds ask()", author=BOT)
        repo.branch_switch("main")
        (root / "notes.md").write_text("# Notes\n\nMerged soon.\n")
        repo.snapshot("alice writes notes", author=ALICE)
        merged = repo.merge("main", "attempt", message="take the agent's attempt")
        assert merged.event is not None
    with running([root]) as served:
        page.goto(served.url)
        merge_row = page.locator(f".ev[data-id='{merged.event.id}']")
        assert merge_row.locator("path.join[data-from='attempt']").count() == 1
        fork_row = page.locator(".ev", has_text="the agent adds ask()")
        assert fork_row.locator("line.fork[data-from='main']").count() == 1
        page.screenshot(path=str(tmp_path / "merge.png"), full_page=True)
        # the fork is drawn when its parent is not on the page (filtered out here)
        page.goto(served.url.split("?")[0] + "w/0/timeline?branch=attempt")
        assert page.locator(".ev", has_text="alice writes notes").count() == 0
        fork_row = page.locator(".ev", has_text="the agent adds ask()")
        assert fork_row.locator("line.fork[data-from='main']").count() == 1
        # the merge's diff: each hunk credited to the event that wrote its lines
        page.goto(served.url.split("?")[0] + f"w/0/diff?a=HEAD~3&b={merged.event.id}")
        app = page.locator("section.file", has_text="app.py")
        assert app.locator(".hunk .credit").first.inner_text().startswith("bot (agent)")
        notes = page.locator("section.file", has_text="notes.md")
        assert notes.locator(".hunk .credit").first.inner_text().startswith("alice")
        page.screenshot(path=str(tmp_path / "credits.png"), full_page=True)


def test_a_large_diff_pages(page: Any, served: Any, tmp_path: Path) -> None:
    root = served.workspaces[0].repo.root
    (root / "big.py").write_text("".join(f"value_{i} = {i}\n" for i in range(10_000)))
    with Repository.open(root) as repo:
        repo.snapshot("a big file")
    page.goto(served.url)
    with page.expect_navigation():
        page.locator(".ev").first.locator("a", has_text="diff").click()
    shown = page.locator("table.code tr").count()
    assert 1000 <= shown <= 2000
    with page.expect_navigation():
        page.click("#next-page")
    assert "value_1500 = 1500" in page.locator("table.code").first.inner_text()


def test_review_and_publish_a_draft(page: Any, served: Any, tmp_path: Path) -> None:
    root = served.workspaces[0].repo.root
    with Repository.open(root) as repo:
        draft = repo.draft()
        (draft.path / "app.py").write_text("def answer():\n    return 43\n")
        draft.record("the agent's better answer", author=BOT)
    page.goto(served.url)
    with page.expect_navigation():
        page.click("text=Draft")
    assert "the agent's better answer" in page.locator("ol.revs").inner_text()
    assert "app.py" in page.locator("ul.changed").inner_text()
    page.screenshot(path=str(tmp_path / "draft.png"))
    page.fill("input[name=message]", "ship it")
    with page.expect_navigation():
        page.click("#publish")
    assert "Published" in page.locator("#result").inner_text()
    assert (root / "app.py").read_text() == "def answer():\n    return 43\n"
    with page.expect_navigation():
        page.click("#back")
    assert "No Draft is open" in page.content()
    # the checkpoint the publish took puts the files back as they were before it
    with page.expect_navigation():
        page.locator("table.list button", has_text="restore").first.click()
    assert "Restored checkpoint" in page.locator("#result").inner_text()
    assert (root / "app.py").read_text() == "def answer():\n    return 42\n"


def test_answer_an_approval_that_a_headless_command_waits_for(
    page: Any, served: Any, tmp_path: Path
) -> None:
    import subprocess
    import sys

    root = served.workspaces[0].repo.root
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("object\n")
    with Repository.open(root) as repo:
        repo.snapshot("a build")
    waiting = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strata",
            "exec",
            "--ask-studio",
            "60",
            "--json",
            "--",
            "rm",
            "-rf",
            "build",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # no terminal to ask on
    )
    try:
        page.goto(served.url.replace("/?", "/w/0/approvals?"))
        card = page.locator(".approval")
        card.wait_for(timeout=15_000)  # the page refreshes itself
        assert "rm -rf build" in card.inner_text()
        assert "risk" in card.inner_text()
        page.screenshot(path=str(tmp_path / "approvals.png"))
        card.locator("button.approve").click()
        assert "Approved" in page.locator("#result").inner_text()
        out, err = waiting.communicate(timeout=30)
        assert b'"ran": true' in out.replace(b'"ran":true', b'"ran": true'), (out, err)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, err
    assert not (root / "build").exists()
    with Repository.open(root) as repo:
        decided = repo.history(action="approval_decided", limit=1)[0]
    assert decided.data["approved"] is True and decided.data["by"] == "studio"
    page.goto(served.url.replace("/?", "/w/0/timeline?action=approval&"))
    assert page.locator(".flag.pass", has_text="approved").count() == 1  # the overlay


SCRIPT = """\
- tool_calls: [{name: write_file, arguments: {path: app.py, content: "ANSWER = 1\\n"}}]
- text: Set the answer to one.
"""
# the model is opened again for each turn: the second turn reads this script
SCRIPT_2 = """\
- tool_calls: [{name: write_file, arguments: {path: app.py, content: "ANSWER = 2\\n"}}]
- text: Now it is two.
"""


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Any]:
    from strata.studio import running

    root = history(tmp_path / "shop")
    (tmp_path / "shop.yaml").write_text(SCRIPT)
    with open(root / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{tmp_path / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )
    with running([root]) as studio:
        yield studio


def test_workshop_send_and_rewind_to_a_message(page: Any, shop: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    served = shop
    root = served.workspaces[0].repo.root
    page.goto(served.url.replace("/?", "/w/0/workshop?"))
    page.fill("textarea[name=text]", "set the answer to one")
    page.click("#send")  # the turn runs on the server; the page streams it, then reloads
    expect(page.locator(".msg.assistant_message")).to_contain_text("Set the answer to one.")
    expect(page.locator("#send")).to_be_enabled()
    (root.parent / "shop.yaml").write_text(SCRIPT_2)
    page.fill("textarea[name=text]", "make it two")
    page.click("#send")
    expect(page.locator(".msg.assistant_message").last).to_contain_text("Now it is two.")
    expect(page.locator("#send")).to_be_enabled()
    with Repository.open(root) as repo:
        draft = repo.draft(create=False)
        assert (draft.path / "app.py").read_text() == "ANSWER = 2\n"
    # the files beside the conversation are the Draft's; one opens as it is there
    assert page.locator("#tree form").count() == 0  # no restore buttons here
    with page.expect_navigation():
        page.click("#tree a.file:has-text('app.py')")
    assert "ANSWER = 2" in page.locator("table.code").inner_text()
    page.go_back()
    # back to the first answer: the conversation and the Draft's files
    first_answer = page.locator(".msg.assistant_message").first
    first_answer.locator("button.rewind-to").click()
    assert "Now it is two." not in page.locator("#chat").inner_text()
    with Repository.open(root) as repo:
        assert (repo.draft(create=False).path / "app.py").read_text() == "ANSWER = 1\n"
    page.screenshot(path=str(tmp_path / "workshop.png"))
