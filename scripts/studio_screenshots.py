"""Take the screenshots of docs/studio.md from a small workspace (needs chromium)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.studio_support import BOT, history

from strata import Repository
from strata.gateway import ApprovalQueue, ApprovalRequest
from strata.studio import running

SCRIPT = """\
- tool_calls: [{name: write_file, arguments: {path: app.py, content: "ANSWER = 42\\n"}}]
- text: I set the answer to 42 in app.py; it is in the Draft for you to review.
"""

OUT = Path(__file__).resolve().parents[1] / "docs" / "images"


def main() -> None:
    """Build the workspace, serve it, save the screenshots."""
    tmp = Path(tempfile.mkdtemp(prefix="studio-shots-"))
    root = history(tmp / "demo")
    with Repository.open(root) as repo:
        repo.rewind("HEAD~1")
        (root / "app.py").write_text("def answer():\n    return 40 + 2\n")
        repo.snapshot("try another answer on a branch", author=BOT)
        repo.branch_switch("main")
        merged = repo.merge(
            "main",
            "main-2",
            message="keep the branch's answer",
            resolutions={"app.py": {"choices": ["theirs"], "rationale": "the branch's is clearer"}},
        )
        assert merged.event is not None, merged.plan.conflicts
        draft = repo.draft()
        (draft.path / "app.py").write_text('def answer():\n    """The answer."""\n    return 43\n')
        (draft.path / "README.md").write_text("# Demo\n\nThe answer, documented.\n")
        draft.record("document the answer", author=BOT)
    shots = root.parent / "chat"
    history(shots)
    (root.parent / "shop.yaml").write_text(SCRIPT)
    with open(shots / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{root.parent / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )
    ApprovalQueue.of(root / ".strata").submit(
        ApprovalRequest(
            "rm -rf build",
            "high",
            "'rm -rf' deletes files recursively",
            str(root),
            state={"head_event_id": "zxnpwvsgsrab", "changed": 1, "changes": ["modified app.py"]},
        )
    )
    flags = ["--no-sandbox"] if os.geteuid() == 0 else []
    with running([root, shots]) as studio, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=flags)
        page = browser.new_page(viewport={"width": 1360, "height": 640})
        page.goto(studio.url)  # the token becomes a cookie; with two workspaces, their list
        base = f"http://127.0.0.1:{studio.port}/w/0"
        page.goto(base + "/timeline")
        page.screenshot(path=str(OUT / "studio-timeline.png"))
        page.goto(base + "/diff?a=HEAD~2&b=HEAD&mode=split")
        page.screenshot(path=str(OUT / "studio-diff.png"))
        page.goto(base + "/draft")
        page.screenshot(path=str(OUT / "studio-draft.png"))
        page.goto(base + "/approvals")
        page.screenshot(path=str(OUT / "studio-approvals.png"))
        page.goto(f"http://127.0.0.1:{studio.port}/w/1/workshop")
        page.fill("textarea[name=text]", "What should the answer be? Fix it.")
        page.click("#send")  # the answer streams in, then the page shows the conversation
        expect(page.locator(".msg.assistant_message")).to_contain_text("I set the answer")
        expect(page.locator("#send")).to_be_enabled()
        page.screenshot(path=str(OUT / "studio-workshop.png"))
        browser.close()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
