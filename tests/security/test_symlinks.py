"""A Draft's symlink that leads outside the workspace never reaches Published unasked.

The check resolves each target through the tree's own symlinks, as the kernel
does: ``y -> a/b/x/..`` reads as ``a/b`` but, with ``a/b/x -> ../..``, lands
above the workspace. Publishing refuses such a symlink unless
``--allow-external-symlinks``; rewinding Published to a Draft revision that
holds one refuses too (that would be publishing it by another door).
Each case first asks the real kernel where the link goes, in the Draft, so
the test cannot pass on a link that stays inside.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CliRunner, assert_user_error, ok

# name -> (symlinks to make in the Draft: path -> target, the path that leaves)
CHAINS: dict[str, tuple[dict[str, str], str]] = {
    "parent of a link to the root": ({"a/b/x": "../..", "y": "a/b/x/.."}, "y"),
    "deep dot-dots": ({"a/b/c/x": "../../../../.."}, "a/b/c/x"),
    "through a link, then up": ({"sub/up": "..", "z": "sub/up/../outside"}, "z"),
    "a link to a link-folder": ({"a/b/x": "../..", "d": "a/b/x", "e": "d/../secret"}, "e"),
    "a chain of three": ({"p/q": "..", "r/s": "../p/q", "t": "r/s/.."}, "t"),
}


def _make(draft: Path, links: dict[str, str]) -> None:
    for path, target in links.items():
        (draft / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, draft / path)


def _outside(root: Path, link: Path) -> bool:
    real = os.path.realpath(link)
    return os.path.commonpath([real, os.path.realpath(root)]) != os.path.realpath(root)


@pytest.fixture
def draft_of(run_cli: CliRunner, ws: Path) -> Callable[[], Path]:
    def start() -> Path:
        ok(run_cli("init", "--no-snapshot", cwd=ws))
        (ws / "a.txt").write_text("one\n")
        ok(run_cli("snapshot", "-m", "base", cwd=ws))
        ok(run_cli("draft", "start", cwd=ws))
        return ws / ".strata" / "draft" / "files"

    return start


@pytest.mark.parametrize("case", sorted(CHAINS))
def test_publish_refuses_a_symlink_that_leaves_through_the_trees_own_symlinks(
    case: str, run_cli: CliRunner, ws: Path, draft_of: Callable[[], Path]
) -> None:
    links, leaving = CHAINS[case]
    draft = draft_of()
    _make(draft, links)
    assert _outside(draft, draft / leaving)  # the kernel agrees: it leads outside
    assert_user_error(run_cli("publish", cwd=ws), says=leaving)
    assert not os.path.lexists(ws / leaving)
    assert (ws / "a.txt").read_text() == "one\n"
    # the user may still choose to publish it
    ok(run_cli("publish", "--allow-external-symlinks", cwd=ws))
    assert os.readlink(ws / leaving) == links[leaving]


def test_publish_accepts_links_that_stay_inside_and_loops(
    run_cli: CliRunner, ws: Path, draft_of: Callable[[], Path]
) -> None:
    draft = draft_of()
    inside = {
        "a/b/x": "../..",  # the root itself
        "a/c": "b/x/a.txt",
        "l1": "l2",
        "l2": "l1",  # a loop reaches nothing
        "self": "self/../self",
        "deep/up": "../a/b/x/a",
    }
    _make(draft, inside)
    for path in ("a/b/x", "a/c", "deep/up"):
        assert not _outside(draft, draft / path)
    ok(run_cli("publish", cwd=ws))
    assert os.readlink(ws / "a" / "c") == "b/x/a.txt"
    assert (ws / "a" / "c").read_text() == "one\n"


def test_an_external_symlink_published_already_has_does_not_block_publish(
    run_cli: CliRunner, ws: Path, draft_of: Callable[[], Path]
) -> None:
    ok(run_cli("init", cwd=ws))
    os.symlink("/usr/share", ws / "share")  # the user's own
    (ws / "a.txt").write_text("one\n")
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    (ws / ".strata" / "draft" / "files" / "a.txt").write_text("two\n")
    ok(run_cli("publish", cwd=ws))
    assert (ws / "a.txt").read_text() == "two\n"
    assert os.readlink(ws / "share") == "/usr/share"


@pytest.mark.parametrize("case", ["parent of a link to the root", "a link to a link-folder"])
def test_rewind_to_a_draft_revision_refuses_a_symlink_that_leaves(
    case: str, run_cli: CliRunner, ws: Path, draft_of: Callable[[], Path]
) -> None:
    links, leaving = CHAINS[case]
    draft = draft_of()
    _make(draft, links)
    revision = json.loads(ok(run_cli("review", "--json", cwd=ws)))["draft_event_id"]
    ok(run_cli("discard", cwd=ws))  # its revisions stay in history, on the Draft's branch
    assert_user_error(run_cli("rewind", revision, cwd=ws), says=leaving)
    assert not os.path.lexists(ws / leaving)
    assert (ws / "a.txt").read_text() == "one\n"
    assert_user_error(run_cli("restore", revision, leaving, cwd=ws), says=leaving)
    assert not os.path.lexists(ws / leaving)
    # the other paths of that revision can still be restored one by one
    ok(run_cli("restore", revision, "a.txt", cwd=ws))


def test_rewind_to_a_draft_revision_whose_links_stay_inside_works(
    run_cli: CliRunner, ws: Path, draft_of: Callable[[], Path]
) -> None:
    draft = draft_of()
    _make(draft, {"a/b/x": "../..", "a/c": "b/x/a.txt"})
    (draft / "a.txt").write_text("two\n")
    revision = json.loads(ok(run_cli("review", "--json", cwd=ws)))["draft_event_id"]
    ok(run_cli("discard", cwd=ws))
    ok(run_cli("rewind", revision, cwd=ws))
    assert (ws / "a" / "c").read_text() == "two\n"


def test_rewind_to_published_history_keeps_the_users_own_external_symlinks(
    run_cli: CliRunner, ws: Path
) -> None:
    ok(run_cli("init", cwd=ws))
    os.symlink("/usr/share", ws / "share")
    (ws / "sub").mkdir()
    os.symlink("..", ws / "sub" / "up")
    os.symlink("sub/up/..", ws / "parent")
    first = json.loads(ok(run_cli("snapshot", "--json", cwd=ws)))["event_id"]
    for name in ("share", "parent"):
        os.unlink(ws / name)
    ok(run_cli("snapshot", cwd=ws))
    ok(run_cli("rewind", first, cwd=ws))
    assert os.readlink(ws / "share") == "/usr/share"
    assert os.readlink(ws / "parent") == "sub/up/.."
