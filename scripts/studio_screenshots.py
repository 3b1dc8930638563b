"""Take the screenshots of docs/studio.md from a small workspace (needs chromium)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.studio_support import BOT, history

from strata import Repository
from strata.studio import running

OUT = Path(__file__).resolve().parents[1] / "docs" / "images"


def main() -> None:
    """Build the workspace, serve it, save the three screenshots."""
    tmp = Path(tempfile.mkdtemp(prefix="studio-shots-"))
    root = history(tmp / "demo")
    with Repository.open(root) as repo:
        repo.rewind("HEAD~1")
        (root / "app.py").write_text("def answer():\n    return 40 + 2\n")
        repo.snapshot("try another answer on a branch", author=BOT)
        repo.branch_switch("main")
        draft = repo.draft()
        (draft.path / "app.py").write_text('def answer():\n    """The answer."""\n    return 43\n')
        (draft.path / "README.md").write_text("# Demo\n\nThe answer, documented.\n")
        draft.record("document the answer", author=BOT)
    flags = ["--no-sandbox"] if os.geteuid() == 0 else []
    with running([root]) as studio, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=flags)
        page = browser.new_page(viewport={"width": 1360, "height": 640})
        page.goto(studio.url)
        page.screenshot(path=str(OUT / "studio-timeline.png"))
        base = f"http://127.0.0.1:{studio.port}/w/0"
        page.goto(base + "/diff?a=HEAD~2&b=HEAD&mode=split")
        page.screenshot(path=str(OUT / "studio-diff.png"))
        page.goto(base + "/draft")
        page.screenshot(path=str(OUT / "studio-draft.png"))
        browser.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
