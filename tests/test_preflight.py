"""Preflight: a proposal rebuilt in a scratch folder, hash-verified and checked before it lands.

The proposals are a real Draft (what ``strata publish`` would write) and real
patches (applied by git); checks run for real, in the bubblewrap sandbox
(``sandbox`` marker) or with ``--sandbox none``; a damaged object is a real
file of the store overwritten; "no network" is a real TCP server on
127.0.0.1 that a sandboxed check fails to reach.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import CliRunner, Dir, File, Person, assert_user_error, wait_until
from strata import Repository
from strata.errors import MergeConflict, NoDraft, PatchDoesNotApply, PreflightFailed, UsageError
from strata.replay.preflight import OUTPUT_TAIL_BYTES, apply_patch
from strata.sandbox.bwrap import sandbox_problem
from strata.store.objects import compress
from strata.store.tree import lookup

Run = Callable[..., Any]

BASE = {
    "src/app.py": "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n",
    "src/util.py": "def f():\n    return 1\n",
    "docs/readme.md": "# readme\n",
    "keep.txt": "kept as it is\n",
    "locked": Dir(0o555),
    "locked/inside.txt": "in a read-only folder\n",
    "run.sh": File("#!/bin/sh\necho hi\n", 0o755),
    "private.txt": File("mine\n", 0o600),
}

#: a patch as 'git diff' writes it: an edit, a new executable, a deletion, a rename
GOOD_PATCH = b"""\
diff --git a/src/app.py b/src/app.py
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 line 1
-line 2
+line two
 line 3
diff --git a/tools/new.sh b/tools/new.sh
new file mode 100755
--- /dev/null
+++ b/tools/new.sh
@@ -0,0 +1,2 @@
+#!/bin/sh
+echo new
diff --git a/docs/readme.md b/docs/readme.md
deleted file mode 100644
--- a/docs/readme.md
+++ /dev/null
@@ -1 +0,0 @@
-# readme
diff --git a/src/util.py b/src/helpers.py
similarity index 100%
rename from src/util.py
rename to src/helpers.py
diff --git a/private.txt b/private.txt
--- a/private.txt
+++ b/private.txt
@@ -1 +1,2 @@
 mine
+and more
"""

#: a hunk whose context is not in the file
BAD_PATCH = GOOD_PATCH.replace(b"-line 2\n", b"-line zwei\n")

SCHEMA = json.loads(
    resources.files("strata.schemas").joinpath("cli", "preflight.schema.json").read_text()
)


def needs_bwrap() -> None:
    problem = sandbox_problem()
    if problem is not None:
        if os.environ.get("CI") or "not installed" in problem:
            pytest.fail(f"the sandbox tests need bubblewrap: {problem}")
        pytest.skip(problem)


@pytest.fixture
def published(ws: Path, make_tree: Callable[..., Path], make_repo: Run) -> Repository:
    make_tree(ws, BASE)
    repo: Repository = make_repo(ws)
    repo.snapshot("base")
    return repo


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


def agent_edit(draft: Path) -> None:
    (draft / "src" / "app.py").write_text("line 1\nline two\nline 3\nline 4\nline 5\nline 6\n")
    (draft / "src" / "new.py").write_text("print('new')\n")
    (draft / "docs" / "readme.md").unlink()


def preflights(repo: Repository) -> list[Any]:
    return repo.history(action="preflight")


def report_of(repo: Repository, oid: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(repo.objects.get(oid))  # type: ignore[arg-type]
    return report


# -- the Draft --------------------------------------------------------------------------


def test_a_drafts_edits_pass_and_the_publish_carries_the_preflight(
    published: Repository, scratch: Path, manifest: Run
) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    result = published.preflight(
        check=["sh", "-c", "grep -q 'line two' src/app.py && test -f src/new.py"],
        sandbox="none",
        scratch=scratch,
    )
    assert result.ok, result.report
    report = result.report
    assert report["kind"] == "draft" and report["divergence"] is None
    assert report["rebuilt_tree"] == report["base"]["tree"]
    assert report["observed_tree"] == report["expected_tree"]
    assert sorted(report["proposal"]["paths"]) == ["docs/readme.md", "src/app.py", "src/new.py"]
    assert report["check"]["exit_code"] == 0 and report["check"]["ran"]
    # the event: anchored at the Draft's revision, linking the stored report
    event = result.event
    assert event.action_type == "preflight"
    assert event.anchor_event_id == draft.tip().id == report["proposal"]["draft_event_id"]
    assert event.preflight == {"ok": True, "report_artifact": result.report_artifact}
    assert result.report_artifact in event.artifacts
    assert report_of(published, result.report_artifact) == report
    assert list(scratch.iterdir()) == []  # the scratch folder is gone

    expected = manifest(draft.path)
    done = draft.publish("ship", preflight=result.stamp, verified_tree=result.expected_tree)
    assert manifest(published.root) == expected
    assert done.event.preflight == result.stamp
    assert result.report_artifact in done.event.artifacts
    assert done.to_json()["preflight"] == result.stamp
    assert published.check() == []


def test_the_preflight_verifies_the_merge_publish_makes(
    published: Repository, scratch: Path
) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    # Published moves meanwhile: another file, and another line of the same file
    (published.root / "keep.txt").write_text("changed in Published\n")
    app = published.root / "src" / "app.py"
    app.write_text(app.read_text().replace("line 6", "line six"))
    result = published.preflight(
        check=["sh", "-c", "grep -q 'line two' src/app.py && grep -q 'line six' src/app.py"],
        sandbox="none",
        scratch=scratch,
    )
    assert result.ok, result.report
    assert result.report["proposal"]["merged_paths"] == ["src/app.py"]
    # the auto-save made Published's edit the base the Draft is merged onto
    assert result.report["base"]["event_id"] == published.head().id  # type: ignore[union-attr]
    done = draft.publish(preflight=result.stamp, verified_tree=result.expected_tree)
    assert done.merged_paths == ["src/app.py"]
    assert published.tree_of(done.event) == result.expected_tree
    assert (published.root / "keep.txt").read_text() == "changed in Published\n"


def test_a_conflicting_draft_is_an_error_and_records_nothing(
    published: Repository, scratch: Path
) -> None:
    draft = published.draft()
    (draft.path / "keep.txt").write_text("the Draft's\n")
    (published.root / "keep.txt").write_text("Published's\n")
    before = len(published.ledger.operations())
    with pytest.raises(MergeConflict):
        published.preflight(scratch=scratch)
    assert len(published.ledger.operations()) == before
    assert list(scratch.iterdir()) == []


def test_a_publish_refuses_files_changed_since_the_preflight(
    published: Repository, scratch: Path, manifest: Run
) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    result = published.preflight(scratch=scratch)
    assert result.ok
    (published.root / "keep.txt").write_text("edited after the preflight\n")
    before = manifest(published.root)
    with pytest.raises(PreflightFailed, match="changed while the preflight ran"):
        draft.publish(preflight=result.stamp, verified_tree=result.expected_tree)
    assert manifest(published.root) == before
    assert published.draft(create=False).id == draft.id  # still open


def test_a_failing_check_refuses_the_publish(ws: Path, run_cli: CliRunner, manifest: Run) -> None:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    (ws / ".strata" / "draft" / "files" / "a.txt").write_text("the Draft's a\n")
    before = manifest(ws)
    result = run_cli(
        "publish", "--preflight", "echo checking; echo broken >&2; false", "--sandbox", "none",
        cwd=ws,
    )  # fmt: skip
    code, out, err = result
    assert code == 1 and out == ""
    lines = err.splitlines()
    error = [line for line in lines if line.startswith("error: ")]
    assert (
        error == [error[0]]
        and "preflight failed: the check 'echo checking; echo broken >&2; false' exited 1"
        in error[0]
    )
    assert "nothing was published" in error[0]
    assert "    | broken" in lines  # the failing check's output, shown
    assert lines[-1].startswith("hint: read the report with 'strata cat ")
    report_id = lines[-1].split("strata cat ")[1].rstrip("'")
    assert manifest(ws) == before  # Published unchanged
    status = json.loads(run_cli("draft", "status", "--json", cwd=ws)[1])
    assert status["open"] is True
    history = json.loads(run_cli("history", "--json", cwd=ws)[1])
    assert [e["action_type"] for e in history[:2]] == ["preflight", "draft_revision"]
    assert history[0]["preflight"] == {"ok": False, "report_artifact": report_id}
    assert not any(e["action_type"] == "publish" for e in history)
    code, out, _ = run_cli("cat", report_id, cwd=ws)
    report = json.loads(out)
    assert report["ok"] is False and report["check"]["exit_code"] == 1
    assert report["check"]["output_tail"] == "checking\nbroken\n"
    assert report["check"]["truncated"] is False
    # once it passes, the same publish goes ahead and its event carries the result
    out = json.loads(
        run_cli(
            "publish", "--preflight", "grep -q Draft a.txt", "--sandbox", "none", "--json",
            cwd=ws,
        )[1]
    )  # fmt: skip
    assert out["preflight"]["ok"] is True
    assert (ws / "a.txt").read_text() == "the Draft's a\n"
    history = json.loads(run_cli("history", "--limit", "1", "--json", cwd=ws)[1])
    assert history[0]["action_type"] == "publish"
    assert history[0]["preflight"] == out["preflight"]
    assert run_cli("check", cwd=ws)[0] == 0


def test_publish_preflight_with_no_command_rebuilds_and_verifies_only(
    ws: Path, run_cli: CliRunner
) -> None:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    (ws / ".strata" / "draft" / "files" / "b.txt").write_text("b\n")
    code, out, err = run_cli("publish", "--preflight", "-m", "ship", cwd=ws)
    assert code == 0, err
    assert "preflight ok: Draft" in err and "check" not in err
    assert out.startswith("Published ")
    history = json.loads(run_cli("history", "--limit", "2", "--json", cwd=ws)[1])
    assert [e["action_type"] for e in history] == ["publish", "checkpoint"]
    assert history[0]["rationale"] == "ship" and history[0]["preflight"]["ok"] is True


# -- patches -------------------------------------------------------------------------------


def test_a_patch_that_applies(published: Repository, scratch: Path, manifest: Run) -> None:
    before = manifest(published.root)
    head = published.head()
    assert head is not None
    result = published.preflight(
        patch=GOOD_PATCH,
        patch_name="fix.patch",
        check=["sh", "-c", "./tools/new.sh && cat private.txt && ls -l private.txt"],
        sandbox="none",
        scratch=scratch,
    )
    assert result.ok, result.report
    report = result.report
    assert report["kind"] == "patch" and report["base"]["event_id"] == head.id
    assert result.event.anchor_event_id == head.id
    assert sorted(report["proposal"]["paths"]) == [
        "docs/readme.md",
        "private.txt",
        "src/app.py",
        "src/helpers.py",
        "src/util.py",
        "tools/new.sh",
    ]
    assert report["check"]["output_tail"].startswith("new\nmine\nand more\n-rw-------")
    # the patch is stored and linked too; the files are untouched
    patch_id = report["proposal"]["patch_artifact"]
    assert published.objects.get(patch_id) == GOOD_PATCH
    assert set(result.event.artifacts) == {result.report_artifact, patch_id}
    assert manifest(published.root) == before
    assert list(scratch.iterdir()) == []
    # the expected tree: what the patch makes of HEAD's files, modes included
    tree = result.expected_tree
    store = published.objects
    app = lookup(store, tree, "src/app.py")
    assert app is not None and store.get(app.oid).startswith(b"line 1\nline two\n")
    new = lookup(store, tree, "tools/new.sh")
    assert new is not None and new.mode == 0o755
    private = lookup(store, tree, "private.txt")
    assert private is not None and private.mode == 0o600  # kept: the patch changes content only
    assert lookup(store, tree, "src/util.py") is None
    assert lookup(store, tree, "src/helpers.py") is not None
    assert lookup(store, tree, "docs") is None  # emptied by the patch: gone, as git leaves it
    assert lookup(store, tree, "locked/inside.txt") is not None


def test_a_patch_that_does_not_apply_is_a_clear_error(published: Repository, scratch: Path) -> None:
    before = len(published.ledger.operations())
    with pytest.raises(PatchDoesNotApply) as caught:
        published.preflight(patch=BAD_PATCH, scratch=scratch)
    assert caught.value.path == "src/app.py"
    assert "src/app.py: patch does not apply" in caught.value.message
    assert "\n" not in caught.value.message
    assert len(published.ledger.operations()) == before  # nothing recorded
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        (
            b"diff --git a/keep.txt b/keep.txt\nnew file mode 100644\n--- /dev/null\n"
            b"+++ b/keep.txt\n@@ -0,0 +1 @@\n+again\n",
            "keep.txt: already exists in HEAD's files",
        ),
        (
            b"--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-a\n+b\n",
            "missing.txt: does not exist in HEAD's files",
        ),
        (
            b"diff --git a/keep.txt/x b/keep.txt/x\nnew file mode 100644\n--- /dev/null\n"
            b"+++ b/keep.txt/x\n@@ -0,0 +1 @@\n+x\n",
            "keep.txt is a file, not a folder",
        ),
        (
            b"diff --git a/.strata/config.toml b/.strata/config.toml\nnew file mode 100644\n"
            b"--- /dev/null\n+++ b/.strata/config.toml\n@@ -0,0 +1 @@\n+x\n",
            "inside .strata or .git",
        ),
        (b"just some words\n", "no patch found"),
    ],
    ids=["exists", "missing", "file-in-the-way", "strata-folder", "not-a-patch"],
)
def test_patches_git_refuses(published: Repository, patch: bytes, says: str) -> None:
    with pytest.raises(PatchDoesNotApply, match=says):
        apply_patch(published.objects, published.head_tree(), patch)


def test_a_plain_unified_diff_applies(published: Repository) -> None:
    patch = (
        b"--- src/util.py.orig\n+++ src/util.py\n@@ -1,2 +1,2 @@\n"
        b" def f():\n-    return 1\n+    return 2\n"
    )
    tree, paths = apply_patch(published.objects, published.head_tree(), patch)
    assert paths == ["src/util.py"]
    entry = lookup(published.objects, tree, "src/util.py")
    assert entry is not None
    assert published.objects.get(entry.oid) == b"def f():\n    return 2\n"


def test_a_patch_adding_an_ignored_file_passes_with_a_warning(
    published: Repository, scratch: Path
) -> None:
    (published.root / ".gitignore").write_text("*.log\n")
    patch = (
        b"diff --git a/debug.log b/debug.log\nnew file mode 100644\n"
        b"--- /dev/null\n+++ b/debug.log\n@@ -0,0 +1 @@\n+hi\n"
    )
    result = published.preflight(patch=patch, scratch=scratch)
    assert result.ok
    assert result.report["warnings"] == [
        "debug.log: an ignore rule hides it, so Strata does not record it"
    ]
    assert result.report["observed_tree"] != result.report["expected_tree"]


# -- divergence ----------------------------------------------------------------------------


def _damage(repo: Repository, path: str) -> str:
    """Overwrite the stored object of ``path`` (at HEAD) with other, well-formed content."""
    entry = lookup(repo.objects, repo.head_tree(), path)
    assert entry is not None
    loose = repo.objects.loose_path(entry.oid)  # type: ignore[attr-defined]
    os.chmod(loose, 0o644)
    loose.write_bytes(compress(b"not what was recorded\n"))
    return str(entry.oid)


def test_a_damaged_object_in_the_base_is_a_divergence_naming_its_path(
    published: Repository, scratch: Path, manifest: Run
) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    oid = _damage(published, "keep.txt")
    before = manifest(published.root)
    result = published.preflight(check=["true"], sandbox="none", scratch=scratch)
    assert not result.ok
    divergence = result.divergence
    assert divergence is not None
    assert divergence["stage"] == "base" and divergence["path"] == "keep.txt"
    assert oid in divergence["reason"] and "corrupt" in divergence["reason"]
    assert result.check is not None and result.check["ran"] is False  # the check did not run
    assert result.failure().startswith("the rebuilt base diverges at keep.txt: object ")
    assert result.event.preflight == {"ok": False, "report_artifact": result.report_artifact}
    assert report_of(published, result.report_artifact)["divergence"] == divergence
    assert list(scratch.iterdir()) == []
    assert manifest(published.root) == before


def test_a_damaged_object_of_the_proposal_is_a_divergence(
    published: Repository, scratch: Path
) -> None:
    draft = published.draft()
    agent_edit(draft.path)
    draft.record("the agent's edit")
    entry = lookup(published.objects, published.tree_of(draft.tip()), "src/new.py")
    assert entry is not None
    loose = published.objects.loose_path(entry.oid)  # type: ignore[attr-defined]
    os.chmod(loose, 0o644)
    loose.write_bytes(compress(b"tampered\n"))
    result = published.preflight(scratch=scratch)
    assert not result.ok
    assert result.divergence is not None
    assert result.divergence["stage"] == "proposal"
    assert result.divergence["path"] == "src/new.py"


def test_a_draft_that_hides_a_tracked_file_passes_with_a_warning(
    published: Repository, scratch: Path, manifest: Run
) -> None:
    """Its new rule hides keep.txt: publish keeps the file (see keep_ignored), which a scan
    of the result does not record: a warning, not a divergence."""
    draft = published.draft()
    (draft.path / ".gitignore").write_text("keep.txt\n")
    result = published.preflight(scratch=scratch)
    assert result.ok, result.report
    assert result.report["warnings"] == [
        "keep.txt: an ignore rule hides it, so Strata does not record it"
    ]
    done = draft.publish(preflight=result.stamp, verified_tree=result.expected_tree)
    assert done.event.preflight == result.stamp
    assert (published.root / "keep.txt").read_text() == "kept as it is\n"


def test_a_recorded_file_this_user_cannot_read_is_a_divergence_with_its_diff(
    person: Person, home_of: Path, cli_as: CliRunner, run_cli: CliRunner
) -> None:
    """Root records a file nobody else may read; whoever runs the preflight must be able to
    read back what it rebuilt: root can, an unprivileged user cannot (a divergence)."""
    ws = home_of / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "secret.txt").write_text("the secret\n")
    (ws / "secret.txt").chmod(0o000)
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("snapshot", cwd=ws)[0] == 0  # as root: recorded with its content
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(home_of)], check=True)
    patch = home_of / "p.diff"
    patch.write_bytes(b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n")
    code, out, err = cli_as("preflight", "--patch", str(patch), "--json", cwd=ws)
    report = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    if person.is_root:
        assert code == 0 and report["ok"] is True, err
        return
    assert code == 1 and report["ok"] is False, err
    divergence = report["divergence"]
    assert divergence["stage"] == "base" and divergence["path"] == "secret.txt"
    assert divergence["reason"].startswith("missing from the rebuilt files (the scan: ")
    assert "-the secret" in divergence["diff"] and divergence["paths"] == ["secret.txt"]
    code, out, _ = cli_as("preflight", "--patch", str(patch), cwd=ws)
    assert code == 1
    assert out.startswith("preflight FAILED: the rebuilt base diverges at secret.txt: missing")
    assert "    -the secret" in out.splitlines()


# -- the check -----------------------------------------------------------------------------


def test_a_check_that_times_out_fails_and_leaves_nothing(
    published: Repository, scratch: Path
) -> None:
    published.draft()
    started = time.monotonic()
    result = published.preflight(
        check="echo started; sleep 30", sandbox="none", timeout_s=0.5, scratch=scratch
    )
    assert time.monotonic() - started < 10
    assert not result.ok
    check = result.check
    assert check is not None
    assert check["timed_out"] is True and check["exit_code"] is None
    assert check["output_tail"] == "started\n"
    assert result.failure() == "the check 'echo started; sleep 30' timed out after 0.5 s"
    assert list(scratch.iterdir()) == []


def test_the_output_tail_is_clipped(published: Repository, scratch: Path) -> None:
    published.draft()
    script = "import sys\nfor i in range(20000): print(f'line {i}')\nsys.exit(2)"
    result = published.preflight(
        check=[sys.executable, "-c", script], sandbox="none", scratch=scratch
    )
    check = result.check
    assert check is not None and check["exit_code"] == 2 and check["truncated"] is True
    tail = check["output_tail"]
    assert len(tail.encode()) <= OUTPUT_TAIL_BYTES
    assert tail.endswith("line 19998\nline 19999\n")


def test_a_check_that_locks_its_folders_still_leaves_no_scratch_folder(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    """As root and as an unprivileged user: a read-only folder in the tree, and a check that
    makes folders unreadable, unwritable and unlistable; the scratch folder still goes. A
    Draft that writes into the read-only folder cannot be published by the unprivileged
    user: its preflight says so."""
    ws = home_of / "ws"
    scratch = home_of / "scratch"
    for folder in (ws, scratch):
        folder.mkdir()
    (ws / "a.txt").write_text("a\n")
    (ws / "ro").mkdir()
    (ws / "ro" / "f.txt").write_text("f\n")
    (ws / "ro").chmod(0o555)
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(home_of)], check=True)
    env = {"TMPDIR": str(scratch)}
    assert cli_as("init", cwd=ws, env=env)[0] == 0
    assert cli_as("draft", "start", cwd=ws, env=env)[0] == 0
    draft = ws / ".strata" / "draft" / "files"
    (draft / "b.txt").write_text("b\n")
    os.chown(draft / "b.txt", person.uid, person.gid)
    script = "mkdir -p deep/er && touch deep/er/x && chmod -R a-w . && chmod 000 deep/er; ls ro"
    code, out, _ = cli_as(
        "preflight", "--sandbox", "none", "--check", script, "--json", cwd=ws, env=env
    )
    report = json.loads(out)
    assert code == 0, report
    assert report["ok"] is True and report["check"]["output_tail"] == "f.txt\n"
    assert list(scratch.iterdir()) == []

    (draft / "ro").chmod(0o755)
    (draft / "ro" / "g.txt").write_text("g\n")
    (draft / "ro").chmod(0o555)
    os.chown(draft / "ro" / "g.txt", person.uid, person.gid)
    code, out, _ = cli_as("preflight", "--sandbox", "none", "--json", cwd=ws, env=env)
    report = json.loads(out)
    assert list(scratch.iterdir()) == []
    if person.is_root:
        assert code == 0 and report["ok"] is True, report
        return
    assert code == 1 and report["ok"] is False
    assert report["divergence"]["path"] == "ro/g.txt"
    assert report["divergence"]["reason"] == (
        "cannot be written: this user may not write into the folder ro"
    )


def test_ctrl_c_stops_the_check_and_removes_the_scratch_folder(
    ws: Path, run_cli: CliRunner, scratch: Path
) -> None:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    marker = ws.parent / "check-pid"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "strata", "preflight", "--sandbox", "none",
            "--check", f"echo $$ > {marker}; exec sleep 60",
        ],
        cwd=ws,
        env=run_cli.env({"TMPDIR": str(scratch)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: marker.exists() and marker.read_text().strip())
        # the check's own process (the shell exec'd sleep): its descriptor becomes readable
        # when it exits, whoever reaps it, and it names that process even if its pid is reused
        sleeper = os.pidfd_open(int(marker.read_text()))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    try:
        # strata killed and reaped it before it exited itself: it is gone now, not later
        ended, _, _ = select.select([sleeper], [], [], 0)
    finally:
        os.close(sleeper)
    assert proc.returncode == 130, err
    assert err.strip() == "error: interrupted"
    assert list(scratch.iterdir()) == []
    assert ended, "the check's process outlived strata preflight"


# -- the sandbox ---------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP server on the host's 127.0.0.1 that counts the connections it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3).close()\n"
    "except OSError as exc:\n"
    "    print('refused:', exc.strerror); sys.exit(3)\n"
    "print('connected')\n"
)


@pytest.mark.sandbox
def test_the_check_runs_sandboxed_with_no_network(
    published: Repository, scratch: Path, listener: tuple[int, list[int]]
) -> None:
    needs_bwrap()
    port, accepted = listener
    draft = published.draft()
    agent_edit(draft.path)
    (draft.path / "connect.py").write_text(CONNECT)
    python = "/usr/bin/python3"  # the system's: the sandbox shows /usr read-only
    if not os.path.exists(python):
        pytest.skip(f"{python} is needed inside the sandbox")
    argv = [python, "connect.py", str(port)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch.parent)}
    result = published.preflight(check=argv, environ=env, scratch=scratch)
    check = result.check
    assert check is not None and check["sandbox"] == "bwrap"
    assert check["exit_code"] == 3 and check["output_tail"].startswith("refused:")
    assert not result.ok and accepted == []
    # the same check without the sandbox reaches the server: the test can tell
    result = published.preflight(check=argv, environ=env, sandbox="none", scratch=scratch)
    assert result.ok and result.check["output_tail"] == "connected\n"  # type: ignore[index]
    assert accepted == [1]
    # inside, the files are at the workspace's own path; the repository is not there
    where = "pwd; test -f src/new.py && echo draft-files; ls -a .strata 2>/dev/null | wc -l"
    result = published.preflight(check=where, environ=env, scratch=scratch)
    assert result.ok, result.check
    lines = result.check["output_tail"].split()  # type: ignore[index]
    assert lines == [str(published.root), "draft-files", "0"]
    assert list(scratch.iterdir()) == []


@pytest.mark.sandbox
def test_publish_preflight_in_the_sandbox(ws: Path, run_cli: CliRunner) -> None:
    needs_bwrap()
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    (ws / ".strata" / "draft" / "files" / "a.txt").write_text("a, in the Draft\n")
    code, out, err = run_cli("publish", "--preflight", "grep -q Draft a.txt", "--json", cwd=ws)
    assert code == 0, err
    assert json.loads(out)["preflight"]["ok"] is True
    assert (ws / "a.txt").read_text() == "a, in the Draft\n"


def test_without_bubblewrap_a_check_is_refused_unless_sandbox_none(
    ws: Path, run_cli: CliRunner
) -> None:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("draft", "start", cwd=ws)[0] == 0
    if sandbox_problem() is not None:
        pytest.skip("needs a bubblewrap to forbid namespaces with")

    def strata_where_namespaces_are_forbidden(*args: str) -> subprocess.CompletedProcess[str]:
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

    before = json.loads(run_cli("op", "log", "--json", cwd=ws)[1])
    done = strata_where_namespaces_are_forbidden("preflight", "--check", "true")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: cannot run in a sandbox: bubblewrap cannot create")
    assert "--sandbox none" in done.stderr and len(done.stderr.splitlines()) == 2
    assert json.loads(run_cli("op", "log", "--json", cwd=ws)[1]) == before  # nothing recorded
    done = strata_where_namespaces_are_forbidden(
        "preflight", "--check", "true", "--sandbox", "none"
    )
    assert done.returncode == 0, done.stderr
    assert "(no isolation): exit 0" in done.stdout
    # rebuilding and verifying alone needs no sandbox
    done = strata_where_namespaces_are_forbidden("preflight")
    assert done.returncode == 0, done.stderr


# -- the command line ----------------------------------------------------------------------


def test_json_shapes(ws: Path, run_cli: CliRunner, make_tree: Callable[..., Path]) -> None:
    make_tree(ws, {"a.txt": "a\n"})
    assert run_cli("init", cwd=ws)[0] == 0
    patch = ws.parent / "fix.diff"
    patch.write_bytes(b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    code, out, err = run_cli(
        "preflight", "--patch", str(patch), "--sandbox", "none", "--json", "--",
        "grep", "-q", "A", "a.txt",
        cwd=ws,
    )  # fmt: skip
    assert code == 0, err
    ok = json.loads(out)
    validator.validate(ok)
    assert ok["schema"] == 1 and ok["ok"] is True and ok["kind"] == "patch"
    assert ok["proposal"]["name"] == "fix.diff"
    assert ok["check"]["command"] == ["grep", "-q", "A", "a.txt"]
    code, out, err = run_cli(
        "preflight", "--patch", str(patch), "--sandbox", "none", "--json", "--check", "exit 4",
        cwd=ws,
    )  # fmt: skip
    assert code == 1 and err == ""
    failed = json.loads(out)
    validator.validate(failed)
    assert failed["ok"] is False and failed["check"]["exit_code"] == 4
    with patch.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "strata", "preflight", "--patch", "-", "--json"],
            cwd=ws,
            env=run_cli.env(),
            stdin=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    from_stdin = json.loads(done.stdout)
    validator.validate(from_stdin)
    assert from_stdin["proposal"]["name"] == "stdin" and from_stdin["check"] is None
    assert from_stdin["expected_tree"] == ok["expected_tree"]
    # the human form says the same
    code, out, _ = run_cli("preflight", "--patch", str(patch), cwd=ws)
    assert code == 0
    assert out.startswith("preflight ok: patch fix.diff (1 path) onto ")
    assert "report: " in out


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["preflight", "--patch", "no-such.diff"], 2, "'no-such.diff': No such file"),
        (["preflight", "--check", ""], 2, "the check command is empty"),
        (["preflight", "--check", "  "], 2, "the check command is empty"),
        (["preflight", "--check", "true", "--", "true"], 2, "either with --check or after"),
        (["preflight", "--timeout", "0", "--check", "true"], 2, "--timeout"),
        (["preflight", "--patch", "empty.diff"], 2, "the patch is empty"),
        (["preflight"], 1, "no Draft is open"),
        (["publish", "--timeout", "5"], 2, "--timeout and --sandbox apply to --preflight"),
    ],
    ids=[
        "missing-patch",
        "empty-check",
        "blank-check",
        "check-twice",
        "zero-timeout",
        "empty-patch",
        "nothing-to-check",
        "timeout-without-preflight",
    ],
)
def test_bad_input_is_one_line(
    ws: Path, run_cli: CliRunner, args: list[str], code: int, says: str
) -> None:
    (ws / "a.txt").write_text("a\n")
    (ws / "empty.diff").write_text("")
    assert run_cli("init", cwd=ws)[0] == 0
    before = json.loads(run_cli("op", "log", "--json", cwd=ws)[1])
    assert_user_error(run_cli(*args, cwd=ws), code=code, says=says)
    assert json.loads(run_cli("op", "log", "--json", cwd=ws)[1]) == before


def test_a_patch_that_does_not_apply_on_the_command_line(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.txt").write_text("a\n")
    assert run_cli("init", cwd=ws)[0] == 0
    (ws.parent / "bad.diff").write_bytes(b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-b\n+c\n")
    assert_user_error(
        run_cli("preflight", "--patch", str(ws.parent / "bad.diff"), cwd=ws),
        says="the patch does not apply: patch failed: a.txt:1; a.txt: patch does not apply",
    )


def test_the_library_refuses_bad_arguments(published: Repository, scratch: Path) -> None:
    with pytest.raises(NoDraft):
        published.preflight(scratch=scratch)
    published.draft()
    for kwargs in (
        {"check": ""},
        {"check": []},
        {"sandbox": "docker"},
        {"timeout_s": -1},
        {"timeout_s": float("nan")},
        {"patch": b"  \n"},
        {"scratch": published.root / "src"},
    ):
        with pytest.raises(UsageError):
            published.preflight(**{"scratch": scratch, **kwargs})
    assert preflights(published) == []


def test_publish_preflight_runs_in_the_calling_process_not_the_watcher() -> None:
    """A watcher runs served commands for the command line; a check must not run in it."""
    from strata.watch.monitor import servable

    assert servable(["publish", "-m", "x"])
    assert not servable(["publish", "--preflight"])
    assert not servable(["publish", "--preflight=pytest -q"])
    assert not servable(["publish", "-m", "x", "--preflight", "pytest -q"])
    assert not servable(["preflight", "--check", "true"])  # not a served command at all
