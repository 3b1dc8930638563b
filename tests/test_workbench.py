"""The Draft, review, publish, discard and checkpoints, through the Python API and the CLI.

Runs here use ``--sandbox none`` (no isolation); the sandboxed runs are in
``test_draft_sandbox.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import NOW_MS, CliRunner, Dir, File, Link
from strata import Repository
from strata.errors import (
    DraftChanged,
    DraftExists,
    DraftOpen,
    ExternalSymlink,
    MergeConflict,
    NoDraft,
    NothingToPublish,
)

Run = Callable[..., Any]

BASE = {
    "src/app.py": "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n",
    "src/util.py": "def f():\n    return 1\n",
    "docs/readme.md": "# readme\n",
    "data.bin": b"\x00\x01\x02" * 100,
    "empty": Dir(),
    "run.sh": File("#!/bin/sh\necho hi\n", 0o755),
    "link": Link("src/app.py"),
}


def sh(draft_path: Path, script: str) -> None:
    subprocess.run(["sh", "-c", script], cwd=draft_path, check=True)


def agent_edit(draft_path: Path) -> None:
    """What an agent does: edit, add, delete, chmod, write binary."""
    sh(
        draft_path,
        "sed -i 's/line 2/line two/' src/app.py; echo new > src/new.py; rm docs/readme.md;"
        "chmod +x src/util.py; printf '\\000\\377' >> data.bin",
    )


@pytest.fixture
def published(ws: Path, make_tree: Callable[..., Path], make_repo: Run) -> Repository:
    make_tree(ws, BASE)
    repo: Repository = make_repo(ws)
    repo.snapshot("base")
    return repo


def test_draft_start_copies_published_on_its_own_branch(
    published: Repository, manifest: Run
) -> None:
    head = published.head()
    draft = published.draft()
    assert manifest(draft.path) == manifest(published.root)
    assert draft.branch == f"draft/{draft.id}"
    assert published.view().branches[draft.branch] == draft.base.id
    assert published.head() == head  # Published's head does not move
    assert published.view().head_branch == "main"  # nor does Published leave its branch
    assert published.layout.draft_state.exists()
    # the open Draft is returned again; a second explicit start is refused
    assert published.draft().id == draft.id
    from strata.workbench.draft import start_draft

    with pytest.raises(DraftExists):
        start_draft(published)


def test_review_lists_exactly_the_drafts_changes(published: Repository) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    result = draft.review()
    files = {f["path"]: f for f in result.to_json()["files"]}
    assert set(files) == {"src/app.py", "src/new.py", "docs/readme.md", "src/util.py", "data.bin"}
    assert files["src/app.py"]["status"] == "modified"
    assert (files["src/app.py"]["insertions"], files["src/app.py"]["deletions"]) == (1, 1)
    assert files["src/new.py"]["status"] == "added"
    assert files["docs/readme.md"]["status"] == "deleted"
    assert files["src/util.py"]["mode_after"] == "755"
    assert files["data.bin"]["binary"] is True
    assert files["data.bin"]["bytes_changed"] == 2
    assert files["data.bin"]["hash_before"] != files["data.bin"]["hash_after"]
    # the same list 'strata diff --json' prints between the base and the reviewed snapshot
    same = published.diff(result.base_event.id, result.draft_event.id).to_json()["files"]
    assert result.to_json()["files"] == same
    assert result.draft_snapshot_id == draft.tip().snapshot_ref
    assert published.status().clean  # Published untouched


def test_publish_is_byte_identical_and_checkpoint_restore_brings_old_back(
    published: Repository, manifest: Run
) -> None:
    before = manifest(published.root)
    draft = published.draft()
    agent_edit(draft.path)
    reviewed = draft.review()
    expected = manifest(draft.path)
    result = draft.publish("ship", expect=reviewed.draft_snapshot_id)
    assert manifest(published.root) == expected
    assert result.files_changed == 5
    assert result.event.action_type == "publish"
    assert result.event.data["checkpoint_id"] == result.checkpoint.id
    assert not published.layout.draft_state.exists()  # the folder is kept for the next Draft
    with pytest.raises(NoDraft):
        published.draft(create=False)
    assert published.check() == []

    published.checkpoints.restore(result.checkpoint.id)
    assert manifest(published.root) == before
    kinds = [c.kind for c in published.checkpoints.list()]
    assert kinds == ["pre_restore", "publish"]
    published.undo()  # the restore itself can be undone
    assert manifest(published.root) == expected


def test_undo_reverses_a_publish(published: Repository, manifest: Run) -> None:
    before = manifest(published.root)
    draft = published.draft()
    agent_edit(draft.path)
    draft.publish()
    result = published.undo()
    assert result.command == "publish"
    assert manifest(published.root) == before


def test_conflicting_publish_writes_nothing_and_names_the_files(
    published: Repository, manifest: Run
) -> None:
    draft = published.draft()
    sh(draft.path, "sed -i 's/line 3/draft 3/' src/app.py; echo draft > docs/readme.md")
    app = published.root / "src/app.py"
    app.write_text(app.read_text().replace("line 3", "published 3"))
    (published.root / "docs/readme.md").unlink()
    (published.root / "other.txt").write_text("unrelated\n")
    before = manifest(published.root)
    with pytest.raises(MergeConflict) as caught:
        draft.publish()
    assert caught.value.paths == ["docs/readme.md", "src/app.py"]
    assert "src/app.py" in str(caught.value)
    assert manifest(published.root) == before
    assert published.layout.draft_state.exists()  # the Draft is still there to fix
    assert [e.action_type for e in published.history(action="publish")] == []


def test_publish_merges_concurrent_edits_of_other_files_and_other_lines(
    published: Repository,
) -> None:
    draft = published.draft()
    sh(draft.path, "sed -i 's/line 2/draft 2/' src/app.py; echo draft > src/draft.txt")
    root = published.root
    app = root / "src/app.py"
    app.write_text(app.read_text().replace("line 5", "published 5"))
    (root / "src/util.py").write_text("def f():\n    return 2\n")
    result = draft.publish()
    text = app.read_text()
    assert "draft 2" in text and "published 5" in text
    assert (root / "src/util.py").read_text().endswith("return 2\n")
    assert (root / "src/draft.txt").read_text() == "draft\n"
    assert result.merged_paths == ["src/app.py"]
    merges = published.history(action="merge")
    assert len(merges) == 1
    data = merges[0].data
    assert data["policy"] == "merge3"
    assert data["base"] == draft.base.id
    assert data["right"] == result.event.data["draft_event_id"]
    assert published.ledger.is_ancestor(data["left"], result.event.id)
    assert published.status().clean
    assert published.check() == []


def test_discard_keeps_the_work_on_its_branch(
    published: Repository, manifest: Run, tmp_path: Path
) -> None:
    before = manifest(published.root)
    draft = published.draft()
    agent_edit(draft.path)
    work = manifest(draft.path)
    event = draft.discard()
    assert manifest(published.root) == before
    assert not published.layout.draft_state.exists()
    assert event.action_type == "discard"
    # recovery: the discarded work is the tip of the Draft's branch
    published.export(draft.branch, tmp_path / "recovered")
    assert manifest(tmp_path / "recovered") == work
    # and a new Draft can start
    assert published.draft().id != draft.id


def test_a_draft_starts_in_a_folder_with_nothing_recorded(
    ws: Path, make_repo: Run, manifest: Run
) -> None:
    repo: Repository = make_repo(ws)
    assert repo.head() is None
    draft = repo.draft()
    (draft.path / "new.txt").write_text("made by the agent\n")
    draft.publish()
    assert (ws / "new.txt").read_text() == "made by the agent\n"


def test_publishing_an_empty_draft_records_no_publish(published: Repository) -> None:
    before = [e.id for e in published.history()]
    draft = published.draft()
    with pytest.raises(NothingToPublish, match="nothing to publish"):
        draft.publish()
    assert [e.id for e in published.history()] == before  # no publish, no checkpoint
    assert published.layout.draft_state.exists()  # the Draft stays for 'strata discard'
    (draft.path / "late.txt").write_text("now there is something\n")
    assert draft.publish().event.action_type == "publish"


def test_a_rewind_never_lands_on_an_ended_drafts_branch(published: Repository) -> None:
    base = published.head()
    empty = published.draft()  # its branch's tip stays the base: nothing was recorded in it
    empty.discard()
    draft = published.draft()
    agent_edit(draft.path)
    draft.publish()
    published.rewind(base.id)
    assert published.view().head_branch == "main"
    (published.root / "after.txt").write_text("after the rewind\n")
    event = published.snapshot("after").event
    assert event is not None and event.branch == "main-2"
    assert published.view().branches[empty.branch] == base.id  # the ended Draft's branch stays


def test_draft_guards_refuse_to_move_published(published: Repository) -> None:
    (published.root / "x.txt").write_text("x\n")
    published.snapshot("second")
    published.branch_create("other", "HEAD~1")
    published.checkpoints.create("known good")
    cp = published.checkpoints.list()[0]
    published.draft()
    for action in (
        lambda: published.rewind("HEAD~1"),
        lambda: published.restore("HEAD~1", ["x.txt"]),
        lambda: published.branch_switch("other"),
        lambda: published.checkpoints.restore(cp.id),
    ):
        with pytest.raises(DraftOpen, match="publish or discard the Draft first"):
            action()
    published.draft().discard()
    published.rewind("HEAD~1")  # a rewind: undoing it would move Published
    published.draft()
    with pytest.raises(DraftOpen, match="publish or discard the Draft first"):
        published.undo()
    # snapshot still records Published
    (published.root / "y.txt").write_text("y\n")
    assert published.snapshot("still recorded").event is not None


def test_external_symlinks_are_refused_unless_allowed(published: Repository) -> None:
    draft = published.draft()
    os.symlink("../../outside", draft.path / "src/escape")
    os.symlink("/etc/passwd", draft.path / "abs")
    os.symlink("app.py", draft.path / "src/inside")
    with pytest.raises(ExternalSymlink) as caught:
        draft.publish()
    assert caught.value.paths == ["abs", "src/escape"]
    assert not (published.root / "src/inside").is_symlink()
    draft.publish(allow_external_symlinks=True)
    assert os.readlink(published.root / "abs") == "/etc/passwd"


def test_expect_refuses_a_changed_draft(published: Repository) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    reviewed = draft.review()
    (draft.path / "late.txt").write_text("changed after the review\n")
    with pytest.raises(DraftChanged):
        draft.publish(expect=reviewed.draft_snapshot_id)
    assert not (published.root / "late.txt").exists()
    assert not (published.root / "src/new.py").exists()


# -- the command line ---------------------------------------------------------------


def cli_ok(run_cli: CliRunner, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    code, out, err = run_cli(*args, cwd=cwd, env=env)
    assert code == 0, err
    return str(out)


def test_cli_draft_run_none_records_revisions(
    ws: Path, make_tree: Callable[..., Path], run_cli: CliRunner, manifest: Run
) -> None:
    make_tree(ws, BASE)
    cli_ok(run_cli, "init", cwd=ws)
    cli_ok(run_cli, "snapshot", "-m", "base", cwd=ws)
    before = manifest(ws)
    code, out, err = run_cli(
        "draft", "run", "--sandbox", "none", "--", "sh", "-c",
        'echo one > one.txt; echo "ceiling=$GIT_CEILING_DIRECTORIES"', cwd=ws,
    )  # fmt: skip
    assert code == 0, err
    assert "no isolation" in err
    assert "ceiling=" in out and out.strip() != "ceiling="
    code, out, err = run_cli(
        "draft", "run", "--sandbox", "none", "--json", "--", "sh", "-c", "echo two > two.txt",
        cwd=ws,
    )  # fmt: skip
    assert code == 0, err
    second = json.loads(out)
    assert second["isolated"] is False and second["revision_event_id"]
    code, _, _ = run_cli("draft", "run", "--sandbox", "none", "--", "sh", "-c", "exit 3", cwd=ws)
    assert code == 3  # the command's exit code
    status = json.loads(cli_ok(run_cli, "draft", "status", "--json", cwd=ws))
    assert status["revisions"] == 3  # one per run, even one that changed nothing
    history = json.loads(cli_ok(run_cli, "history", "--json", "--branch", status["branch"], cwd=ws))
    revisions = [e for e in history if e["action_type"] == "draft_revision"]
    assert revisions[0]["data"]["exit_code"] == 3
    assert "echo two > two.txt" in revisions[1]["rationale"]
    assert revisions[1]["data"]["command"] == ["sh", "-c", "echo two > two.txt"]
    assert manifest(ws) == before  # Published untouched
    review = json.loads(cli_ok(run_cli, "review", "--json", cwd=ws))
    assert sorted(f["path"] for f in review["files"]) == ["one.txt", "two.txt"]
    code, _, err = run_cli("draft", "start", cwd=ws)
    assert code == 1 and "already open" in err
    code, _, err = run_cli("rewind", "HEAD", cwd=ws)
    assert code == 1 and "publish or discard the Draft first" in err
    assert "Traceback" not in err
    code, _, err = run_cli("publish", "--expect", "00000000", cwd=ws)
    assert code == 1 and "changed since the review" in err
    published = json.loads(
        cli_ok(run_cli, "publish", "--json", "--expect", review["draft_snapshot_id"], cwd=ws)
    )
    assert set(published) >= {"event_id", "checkpoint_id", "files_changed"}
    assert published["files_changed"] == 2
    assert (ws / "two.txt").read_text() == "two\n"
    checkpoints = json.loads(cli_ok(run_cli, "checkpoint", "list", "--json", cwd=ws))
    assert [(c["id"], c["kind"]) for c in checkpoints] == [(published["checkpoint_id"], "publish")]
    assert set(checkpoints[0]) >= {"id", "ts", "kind", "message"}
    cli_ok(run_cli, "checkpoint", "restore", published["checkpoint_id"], cwd=ws)
    assert manifest(ws) == before


def test_cli_status_reminds_of_an_old_draft(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.txt").write_text("a\n")
    cli_ok(run_cli, "init", cwd=ws)
    cli_ok(run_cli, "draft", "start", cwd=ws)
    soon = json.loads(cli_ok(run_cli, "status", "--json", cwd=ws))
    assert not any("open Draft" in w for w in soon["warnings"])
    later = {"STRATA_NOW": str(NOW_MS + 25 * 3600 * 1000)}
    status = json.loads(cli_ok(run_cli, "status", "--json", cwd=ws, env=later))
    assert (
        "You have an open Draft from 2023-11-14 22:13 UTC. Review and publish or discard?"
        in (status["warnings"])
    )
    code, _, err = run_cli("status", cwd=ws, env=later)
    assert code == 0 and "You have an open Draft from" in err
    cli_ok(run_cli, "discard", cwd=ws)
    code, _, err = run_cli("discard", cwd=ws)
    assert code == 1 and "no Draft is open" in err


def test_cli_sandbox_unavailable_is_a_clear_error(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.txt").write_text("a\n")
    cli_ok(run_cli, "init", cwd=ws)

    def strata_where_namespaces_are_forbidden(*args: str) -> subprocess.CompletedProcess[str]:
        # a machine whose kernel refuses new user namespaces: strata runs inside a
        # bubblewrap that forbids them, so its own bubblewrap cannot make a sandbox
        outer = ["bwrap", "--unshare-user", "--disable-userns", "--dev-bind", "/", "/", "--"]
        return subprocess.run(
            [*outer, sys.executable, "-m", "strata", *args],
            cwd=ws,
            env=run_cli.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = strata_where_namespaces_are_forbidden("draft", "run", "--", "true")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: cannot run in a sandbox: bubblewrap cannot create")
    assert "--sandbox none" in done.stderr and "Traceback" not in done.stderr
    assert not (ws / ".strata" / "draft" / "draft.json").exists()  # no Draft made for nothing
    done = strata_where_namespaces_are_forbidden("run", "--draft", "--", "true")
    assert done.returncode == 125, done.stderr  # strata's own error, not the command's
    done = strata_where_namespaces_are_forbidden(
        "run", "--draft", "--sandbox", "none", "--", "sh", "-c", "echo b > b.txt"
    )
    assert done.returncode == 0, done.stderr
    assert "no isolation" in done.stderr
    assert not (ws / "b.txt").exists()
    assert (ws / ".strata" / "draft" / "files" / "b.txt").read_text() == "b\n"


# -- git work trees ---------------------------------------------------------------------


def test_a_git_work_trees_draft_has_a_private_git_never_published(
    ws: Path, git: Run, run_cli: CliRunner, manifest: Run
) -> None:
    (ws / "app.py").write_text("print(1)\n")
    git("init", "-q", "-b", "main", cwd=ws)
    git("add", "app.py", cwd=ws)
    git("commit", "-qm", "first", cwd=ws)
    published_head = git("rev-parse", "HEAD", cwd=ws).stdout
    git_state = manifest(ws / ".git", skip=())
    cli_ok(run_cli, "init", cwd=ws)
    status = json.loads(cli_ok(run_cli, "draft", "start", "--json", cwd=ws))
    assert status["git"] is True
    draft = Path(status["path"])
    assert git("rev-parse", "--show-toplevel", cwd=draft).stdout.decode().strip() == str(draft)
    assert git("status", "--porcelain", cwd=draft).stdout == b""
    # an agent commits in the Draft, as it would anywhere
    code, _, err = run_cli(
        "draft", "run", "--sandbox", "none", "--", "sh", "-c",
        "echo 'print(2)' > app.py && git add app.py && "
        "git -c user.name=agent -c user.email=a@example.com commit -qm agent",
        cwd=ws,
    )  # fmt: skip
    assert code == 0, err
    assert git("log", "--format=%s", cwd=draft).stdout.decode().split() == ["agent", "first"]
    cli_ok(run_cli, "publish", cwd=ws)
    assert (ws / "app.py").read_text() == "print(2)\n"
    assert git("rev-parse", "HEAD", cwd=ws).stdout == published_head
    assert manifest(ws / ".git", skip=()) == git_state  # Published's .git untouched
    assert git("status", "--porcelain", cwd=ws).stdout.decode().split() == ["M", "app.py"]


def test_publish_and_discard_wait_for_an_agent_still_running_in_the_draft(
    ws: Path, run_cli: CliRunner, manifest: Run
) -> None:
    (ws / "a.txt").write_text("a\n")
    cli_ok(run_cli, "init", cwd=ws)
    cli_ok(run_cli, "snapshot", cwd=ws)
    before = manifest(ws)
    gate = ws.parent / "gate"
    agent = subprocess.Popen(
        [sys.executable, "-m", "strata", "draft", "run", "--sandbox", "none", "--", "sh", "-c",
         f"echo early > early.txt; while [ ! -e {gate} ]; do sleep 0.05; done; "
         "echo late > late.txt"],
        cwd=ws, env=run_cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        draft_files = ws / ".strata" / "draft" / "files"
        for _ in range(600):
            if (draft_files / "early.txt").exists():
                break
            time.sleep(0.05)
        assert (draft_files / "early.txt").exists()
        for command in ("publish", "discard"):
            code, _, err = run_cli(command, cwd=ws)
            assert code == 1, err
            assert err.startswith(f"error: refusing to {command}: a run is in progress")
            assert f"then {command} again" in err
        assert manifest(ws) == before  # nothing was published under the agent
    finally:
        gate.write_text("go")
        _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    cli_ok(run_cli, "publish", cwd=ws)
    assert (ws / "early.txt").read_text() == "early\n"
    assert (ws / "late.txt").read_text() == "late\n"  # the agent's last write was published too
