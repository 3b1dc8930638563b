"""The studio's safety rules, against the real server over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.studio_support import HOSTILE, history

from strata import Repository
from strata.studio import Studio, running


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    root = history(tmp_path_factory.mktemp("studio") / "ws")
    with running([root]) as studio:
        yield studio


@pytest.fixture
def client(served: Studio) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}") as c:
        answer = c.get(f"/?token={served.token}")
        assert answer.status_code == 303  # the token becomes a cookie
        yield c


def test_a_request_without_the_token_or_with_a_wrong_one_is_refused(served: Studio) -> None:
    base = f"http://127.0.0.1:{served.port}"
    bare = httpx.get(base + "/w/0/timeline")
    assert bare.status_code == 401
    assert "needs the studio&#39;s token" in bare.text
    assert "app.py" not in bare.text
    wrong = httpx.get(base + "/w/0/timeline?token=guess")
    assert wrong.status_code == 401
    forged = httpx.get(base + "/w/0/timeline", cookies={f"strata_studio_{served.port}": "x"})
    assert forged.status_code == 401


def test_the_token_becomes_a_cookie_and_leaves_the_url(served: Studio) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}") as c:
        first = c.get(f"/w/0/timeline?token={served.token}&kind=agent")
        assert first.status_code == 303
        assert first.headers["location"] == "/w/0/timeline?kind=agent"
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        page = c.get("/w/0/timeline?kind=agent")
        assert page.status_code == 200
        assert "fix the answer" in page.text and "add notes" not in page.text


def test_a_foreign_origin_or_host_is_refused(client: httpx.Client, served: Studio) -> None:
    other = client.get("/w/0/timeline", headers={"Origin": "http://evil.example"})
    assert other.status_code == 403
    rebound = client.get("/w/0/timeline", headers={"Host": f"evil.example:{served.port}"})
    assert rebound.status_code == 400
    assert "answers only at 127.0.0.1" in rebound.text
    mine = client.get("/w/0/timeline", headers={"Origin": f"http://127.0.0.1:{served.port}"})
    assert mine.status_code == 200


def test_a_post_without_the_csrf_token_changes_nothing(
    client: httpx.Client, served: Studio
) -> None:
    repo = served.workspaces[0].repo
    head = repo.view().head_event
    answer = client.post("/w/0/act/undo", data={"csrf": "stale"})
    assert answer.status_code == 403
    assert repo.view().head_event == head
    assert client.get("/w/0/act/undo").status_code == 405  # never by GET


@pytest.mark.parametrize(
    "path", ["../../etc/passwd", "/etc/passwd", "a/%00b", "app.py/../../x", "."]
)
def test_a_path_never_leaves_the_store(client: httpx.Client, path: str) -> None:
    for page in ("file", "raw"):
        answer = client.get(f"/w/0/{page}?at=HEAD&path={path}")
        assert answer.status_code == 400, (page, path, answer.text)
        assert "root:" not in answer.text
        assert answer.text.count("error:") == 1
        assert "Traceback" not in answer.text
    folder = client.get(f"/w/0/tree?at=HEAD&dir={path}")
    assert folder.status_code in (400, 404)


def test_a_symlink_shows_its_target_never_what_it_points_at(
    client: httpx.Client, served: Studio
) -> None:
    root = served.workspaces[0].repo.root
    (root / "passwd").symlink_to("/etc/passwd")
    with Repository.open(root) as repo:
        repo.snapshot("a link")
    page = client.get("/w/0/file?at=HEAD&path=passwd")
    assert page.status_code == 200
    assert "/etc/passwd" in page.text and "root:x:" not in page.text
    assert client.get("/w/0/raw?at=HEAD&path=passwd").status_code == 415


def test_an_html_file_name_and_content_show_as_text(client: httpx.Client) -> None:
    tree = client.get("/w/0/tree?at=HEAD")
    assert "<img src=x" not in tree.text
    assert "&lt;img src=x onerror=alert(1)&gt;.txt" in tree.text
    shown = client.get("/w/0/file", params={"at": "HEAD", "path": HOSTILE})
    assert shown.status_code == 200
    assert "<script>alert" not in shown.text
    assert "\x1b" not in shown.text and "\\x1b[31m" in shown.text
    policy = shown.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert shown.headers["x-content-type-options"] == "nosniff"


def test_bad_input_gets_one_line_and_its_status(client: httpx.Client) -> None:
    cases = {
        "/w/0/diff?a=nope&b=HEAD": 404,
        "/w/0/diff?a=HEAD": 400,
        "/w/0/timeline?kind=robot": 400,
        "/w/0/timeline?before=x": 400,
        "/w/7/timeline": 404,
        "/w/-1/timeline": 404,
        "/w/-1/events": 404,
        "/w/0/object/zz": 404,
        "/nowhere": 404,
    }
    for url, status in cases.items():
        answer = client.get(url)
        assert answer.status_code == status, (url, answer.text)
        assert answer.text.count('class="message"') == 1
        assert "Traceback" not in answer.text


def test_an_approval_is_answered_once_and_only_when_it_waits(
    client: httpx.Client, served: Studio
) -> None:
    from strata.gateway import ApprovalQueue, ApprovalRequest

    queue = ApprovalQueue.of(served.workspaces[0].repo.layout.repo)
    request_id = queue.submit(ApprovalRequest("rm -rf build", "high", "'rm -rf'", "/w"))
    page = client.get("/w/0/approvals")
    assert "rm -rf build" in page.text
    csrf = served.guard.csrf
    answer = {"csrf": csrf, "id": request_id, "answer": "deny", "reason": "not now"}
    assert client.post("/w/0/approvals/answer", data=answer).status_code == 200
    decision = queue.wait(request_id, 1)
    assert decision is not None and not decision.approved and decision.reason == "not now"
    again = client.post("/w/0/approvals/answer", data={**answer, "answer": "approve"})
    assert again.status_code == 400 and "already answered" in again.text
    unknown = client.post("/w/0/approvals/answer", data={**answer, "id": "../../x"})
    assert unknown.status_code == 400
    assert queue.wait(request_id, 0).approved is False  # the first answer stands
