"""An ended Draft's folder is kept and brought to Published by the next ``draft start``.

The next Draft must hold exactly Published's files whatever the kept folder
held (published work, discarded work, ignored files, a private ``.git``,
temporary files, a crash half-way through its update), and bringing it there
writes only the paths that differ.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, Dir, File, Link, read_manifest, write_tree
from strata import Repository
from strata.errors import DraftOpen
from test_crash import Step, kill_at_step, record_steps, strata

Run = Callable[..., Any]

BASE = {
    ".gitignore": "build/\n*.o\n",
    "src/app.py": "line 1\nline 2\nline 3\n",
    "src/util.py": "def f():\n    return 1\n",
    "docs/readme.md": "# readme\n",
    "data.bin": b"\x00\x01\x02" * 100,
    "empty": Dir(),
    "run.sh": File("#!/bin/sh\necho hi\n", 0o755),
    "link": Link("src/app.py"),
    "swap": "a file that becomes a folder\n",
}


class PinnedFiles:
    """Open descriptors on a folder's files, to tell later whether each one is still there.

    An inode number alone cannot tell: once a file is deleted the filesystem
    may give its number to the next new file. While a descriptor is open the
    old file's inode stays allocated, so a file found at the same path with
    the same device and inode is the very same file, not a replacement.
    """

    def __init__(self, root: Path, pattern: str) -> None:
        self.fds: dict[str, int] = {}
        for path in sorted(root.rglob(pattern)):
            rel = path.relative_to(root)
            if ".strata" in rel.parts or path.is_symlink() or not path.is_file():
                continue
            self.fds[rel.as_posix()] = os.open(path, os.O_RDONLY)

    @property
    def files(self) -> list[str]:
        return list(self.fds)

    def kept(self, root: Path) -> list[str]:
        """The pinned paths whose file below ``root`` is the pinned file itself."""
        return [
            rel
            for rel, fd in self.fds.items()
            if (root / rel).is_file() and os.path.samestat(os.fstat(fd), (root / rel).lstat())
        ]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


@pytest.fixture
def pin_files() -> Iterator[Callable[[Path, str], PinnedFiles]]:
    """``pin_files(root, pattern)``: pin the matching files; all are closed after the test."""
    made: list[PinnedFiles] = []

    def pin(root: Path, pattern: str) -> PinnedFiles:
        made.append(PinnedFiles(root, pattern))
        return made[-1]

    yield pin
    for pinned in made:
        pinned.close()


def agent_work(draft: Path) -> None:
    """Edits of every kind, plus what a scan does not record (ignored and temporary files)."""
    (draft / "src" / "app.py").write_text("line 1\nline two\nline 3\n")
    (draft / "src" / "new.py").write_text("new\n")
    (draft / "docs" / "readme.md").unlink()
    (draft / "run.sh").chmod(0o644)
    (draft / "empty").chmod(0o700)
    (draft / "swap").unlink()
    (draft / "swap").mkdir()
    (draft / "swap" / "inside.txt").write_text("inside\n")
    (draft / "link").unlink()
    (draft / "link").symlink_to("src/util.py")
    (draft / "build" / "deep").mkdir(parents=True)
    (draft / "build" / "deep" / "out.bin").write_bytes(b"built")
    (draft / "src" / "app.o").write_bytes(b"object")
    (draft / "src" / ".strata-tmp-left").write_bytes(b"half written")


@pytest.fixture
def published(ws: Path, make_repo: Run) -> Repository:
    write_tree(ws, BASE)
    repo: Repository = make_repo(ws)
    repo.snapshot("base")
    return repo


def test_the_next_draft_after_a_publish_holds_exactly_published(
    published: Repository, manifest: Run
) -> None:
    draft = published.draft()
    agent_work(draft.path)
    published.root.joinpath("docs", "other.md").write_text("edited in Published meanwhile\n")
    draft.publish("ship")
    assert not published.layout.draft_state.exists()
    assert draft.path.is_dir()  # kept for the next Draft
    (published.root / "src" / "util.py").write_text("def f():\n    return 2\n")
    second = published.draft()
    assert second.id != draft.id
    assert manifest(second.path) == manifest(published.root)
    assert second.tip().id == second.base.id  # no revision: it starts equal to Published
    assert published.history(branch=second.branch, action="draft_revision") == []
    assert published.check() == []


def test_the_next_draft_start_is_one_operation_and_undo_names_it(published: Repository) -> None:
    draft = published.draft()
    (draft.path / "src" / "app.py").write_text("line 1\nline two\nline 3\n")
    draft.publish("ship")
    before = len(published.operations())
    second = published.draft()
    ops = published.operations()
    # the kept folder already holds Published: no empty revision of it is recorded
    assert len(ops) == before + 1
    assert ops[0].command == "draft start"
    assert ops[0].view_after.branches[second.branch] == second.base.id
    with pytest.raises(DraftOpen, match="draft start"):
        published.undo()
    assert published.check() == []


def test_the_next_draft_after_a_discard_holds_exactly_published(
    published: Repository, manifest: Run
) -> None:
    expected = manifest(published.root)
    draft = published.draft()
    agent_work(draft.path)
    discarded = manifest(draft.path)
    draft.discard()
    second = published.draft()
    assert manifest(second.path) == expected
    # the discarded work is still on its branch
    tip = published.history(branch=draft.branch, action="draft_revision")[-1]
    assert tip.snapshot_ref is not None
    restored = published.root.parent / "restored"
    published.export(tip.snapshot_ref, restored)
    assert manifest(restored) == {
        k: v
        for k, v in discarded.items()
        if not k.startswith("build") and k not in ("src/app.o", "src/.strata-tmp-left")
    }
    assert published.check() == []


def test_a_publish_and_the_next_start_write_only_the_changed_files(
    ws: Path, make_repo: Run, manifest: Run, pin_files: Run
) -> None:
    write_tree(ws, {f"d{i % 10}/f{i:03}.txt": f"file {i}\n" for i in range(400)})
    repo: Repository = make_repo(ws)
    repo.snapshot("base")
    draft = repo.draft()

    published_before, draft_before = pin_files(ws, "*.txt"), pin_files(draft.path, "*.txt")
    changed = ["d1/f001.txt", "d2/f012.txt", "d3/f123.txt"]
    for path in changed:
        (draft.path / path).write_text("changed by the agent\n")
    draft.publish("three files")
    second = repo.draft()
    assert manifest(second.path) == manifest(ws)
    untouched = [p for p in published_before.files if p not in changed]
    assert len(untouched) == 397
    assert set(untouched) <= set(published_before.kept(ws))
    assert set(untouched) <= set(draft_before.kept(second.path))
    # Published's three new files reach the next Draft without rewriting anything else
    second.discard()
    for path in changed:
        (ws / path).write_text("edited in Published\n")
    third = repo.draft()
    assert manifest(third.path) == manifest(ws)
    assert set(untouched) <= set(draft_before.kept(third.path))


def test_a_kept_folder_of_another_workspace_or_without_record_is_copied_afresh(
    published: Repository, manifest: Run, pin_files: Run
) -> None:
    draft = published.draft()
    agent_work(draft.path)
    draft.discard()
    kept = published.layout.draft / "kept.json"
    record = json.loads(kept.read_text())
    kept.write_text(json.dumps({**record, "workspace": "/elsewhere"}))
    old_files = pin_files(draft.path, "*")
    assert "src/util.py" in old_files.files
    second = published.draft()
    assert manifest(second.path) == manifest(published.root)
    assert old_files.kept(second.path) == []  # every file is a fresh copy
    old_files.close()
    second.discard()
    kept.unlink()  # as a start killed during its copy leaves it
    (second.path / "stray.txt").write_text("not Published's\n")
    third = published.draft()
    assert manifest(third.path) == manifest(published.root)


def test_a_kept_folder_with_a_special_file_is_copied_afresh(
    published: Repository, manifest: Run
) -> None:
    draft = published.draft()
    os.mkfifo(draft.path / "src" / "pipe")
    draft.discard()
    second = published.draft()
    assert manifest(second.path) == manifest(published.root)


def test_the_next_drafts_private_git_is_a_fresh_clone(
    ws: Path, git: Run, run_cli: CliRunner, manifest: Run
) -> None:
    (ws / "app.py").write_text("print(1)\n")
    git("init", "-q", "-b", "main", cwd=ws)
    git("add", "app.py", cwd=ws)
    git("commit", "-qm", "first", cwd=ws)
    head = git("rev-parse", "HEAD", cwd=ws).stdout
    for args in (["init"], ["draft", "start"]):
        code, _, err = run_cli(*args, cwd=ws)
        assert code == 0, err
    draft = ws / ".strata" / "draft" / "files"
    code, _, err = run_cli(
        "draft", "run", "--sandbox", "none", "--", "sh", "-c",
        "echo 'print(2)' > app.py && git add app.py && "
        "git -c user.name=agent -c user.email=a@example.com commit -qm agent",
        cwd=ws,
    )  # fmt: skip
    assert code == 0, err
    for args in (["discard"], ["draft", "start"]):
        code, _, err = run_cli(*args, cwd=ws)
        assert code == 0, err
    assert git("rev-parse", "HEAD", cwd=draft).stdout == head  # not the discarded commit
    assert git("log", "--format=%s", cwd=draft).stdout.decode().split() == ["first"]
    assert git("status", "--porcelain", cwd=draft).stdout == b""
    assert manifest(draft) == manifest(ws)


@pytest.mark.slow  # a crash loop: a draft start killed at each of its steps in turn
def test_a_start_after_a_publish_killed_at_any_step_leaves_a_whole_repository(
    tmp_path: Path,
) -> None:
    template = tmp_path / "template"
    write_tree(template, {f"d{i % 3}/f{i}.txt": f"file {i}\n" for i in range(30)})
    (template / ".gitignore").write_text("*.log\n")
    for args in (["init"], ["snapshot", "-m", "base"], ["draft", "start"]):
        result = strata(*args, cwd=template)
        assert result.returncode == 0, result.stderr
    (template / ".strata" / "draft" / "files" / "d1" / "f1.txt").write_text("agent\n")
    result = strata("publish", cwd=template)
    assert result.returncode == 0, result.stderr
    # what the agent left that is not recorded: a new Draft has none of it
    (template / ".strata" / "draft" / "files" / "d0" / "run.log").write_text("log\n")
    probe = copy_kept(template, tmp_path / "probe")
    steps = record_steps(["draft", "start"], probe)
    assert steps, "a draft start changes files"
    published = read_manifest(template)
    for n in range(1, len(steps) + 1):
        ws = copy_kept(template, tmp_path / f"ws{n}")
        kill_at_step(["draft", "start"], ws, n)
        check = strata("check", "--json", cwd=ws)
        assert json.loads(check.stdout)["ok"] is True, (n, steps[n - 1], check.stdout)
        if not (ws / ".strata" / "draft" / "draft.json").exists():
            result = strata("draft", "start", cwd=ws)
            assert result.returncode == 0, (n, result.stderr)
        assert read_manifest(ws / ".strata" / "draft" / "files") == published
        assert read_manifest(ws) == published
        review = strata("review", "--json", cwd=ws)
        assert json.loads(review.stdout)["files"] == [], n
        shutil.rmtree(ws)


# -- a start killed while it updates the kept folder ---------------------------------

FILES = 1500
ITERATIONS = 4


def copy_kept(template: Path, ws: Path) -> Path:
    """Copy ``template`` to ``ws``, its kept Draft folder recorded as ``ws``'s own.

    A kept folder recorded for another workspace is copied afresh, not
    updated: without this the copy would never exercise the update.
    """
    shutil.copytree(template, ws, symlinks=True)
    kept = ws / ".strata" / "draft" / "kept.json"
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "workspace": str(ws)}))
    return ws


@pytest.fixture(scope="module")
def kept_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Step]]:
    """Published, and a kept folder holding a discarded Draft that rewrote much of it."""
    base = tmp_path_factory.mktemp("kept-update")
    ws = base / "ws"
    write_tree(ws, {f"d{i % 30:02}/f{i:04}.txt": f"file {i}\n" * (1 + i % 5) for i in range(FILES)})
    for args in (["init"], ["snapshot", "-m", "base"], ["draft", "start"]):
        result = strata(*args, cwd=ws)
        assert result.returncode == 0, result.stderr
    draft = ws / ".strata" / "draft" / "files"
    for i in range(0, FILES, 2):
        path = draft / f"d{i % 30:02}/f{i:04}.txt"
        if i % 10 == 0:
            path.unlink()
        else:
            path.write_bytes(b"draft version\n" + path.read_bytes())
    for i in range(150):
        (draft / f"d{i % 30:02}/new{i:03}.bin").write_bytes(bytes([i]) * 200)
    result = strata("discard", cwd=ws)
    assert result.returncode == 0, result.stderr
    probe = copy_kept(ws, base / "probe")
    steps = record_steps(["draft", "start"], probe)
    assert not any(step.func == "rmdir" for step in steps), "the kept folder was not updated"
    assert read_manifest(draft) != read_manifest(ws)  # the template's kept folder is stale
    assert read_manifest(probe / ".strata" / "draft" / "files") == read_manifest(probe)
    return ws, steps


@pytest.mark.slow
@pytest.mark.parametrize("while_writing", [False, True], ids=["anywhere", "while-writing"])
def test_a_start_killed_while_updating_the_kept_folder_is_carried_on(
    kept_template: tuple[Path, list[Step]], tmp_path: Path, while_writing: bool
) -> None:
    template, steps = kept_template
    rng = random.Random(8 if while_writing else 7)
    # the first path the update writes (the discarded Draft had deleted it): d00/f0000.txt
    first = next(n for n, s in enumerate(steps, 1) if s.paths[-1:] == ("f0000.txt",))
    for n in range(ITERATIONS):
        ws = tmp_path / f"ws{n}"
        copy_kept(template, ws)
        published = read_manifest(ws)
        files = ws / ".strata" / "draft" / "files"
        assert not (files / "d00" / "f0000.txt").exists()
        if while_writing:  # in the first 30% of the update's writes
            stop_at = rng.randint(first + 1, first + int(0.3 * (len(steps) - first)))
        else:
            stop_at = rng.randint(1, len(steps))
        kill_at_step(["draft", "start"], ws, stop_at)
        status = strata("status", "--json", cwd=ws)
        assert status.returncode == 0, status.stderr
        check = strata("check", "--json", cwd=ws)
        assert json.loads(check.stdout)["ok"] is True, check.stdout
        if not (ws / ".strata" / "draft" / "draft.json").exists():
            result = strata("draft", "start", cwd=ws)
            assert result.returncode == 0, result.stderr
        assert read_manifest(files) == published
        assert read_manifest(ws) == published  # Published never touched
        review = strata("review", "--json", cwd=ws)
        assert json.loads(review.stdout)["files"] == []  # the Draft holds no stray change
        shutil.rmtree(ws)
