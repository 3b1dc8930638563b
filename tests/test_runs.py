"""Instrumented runs: ``strata run`` and ``Repository.execute_run``, both backends.

Real git repositories and real child processes throughout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import AUTO, as_json, ok, wait_until
from strata import Repository, RunResult, WorkspaceOptions
from strata.core.lease import active_leases, stale_leases
from strata.errors import NotARepository, UsageError

Git = Callable[..., subprocess.CompletedProcess[bytes]]
sh = "/bin/sh"


# -- helpers -----------------------------------------------------------------------


def git_state(git: Git, root: Path) -> dict[str, Any]:
    """Everything of the user's git repository a run must leave alone."""

    def out(*args: str) -> str:
        # --no-optional-locks: 'git status' itself must not refresh the index it is checking
        return git("--no-optional-locks", *args, cwd=root, check=False).stdout.decode()

    return {
        "status": out("status", "--porcelain", "--untracked-files=all", "--ignored"),
        "index": (root / ".git" / "index").read_bytes(),
        "head": out("rev-parse", "HEAD"),
        "symbolic_head": out("symbolic-ref", "HEAD"),
        "branches": out("for-each-ref", "refs/heads"),
        "stash": out("stash", "list"),
        "tags": out("tag", "-l"),
        "untracked": out("ls-files", "--others", "--exclude-standard"),
    }


@pytest.fixture
def gitws(tmp_path: Path, git: Git) -> Path:
    """A git work tree with a commit, a staged change, a stash, a tag and untracked files."""
    root = tmp_path / "gitws"
    root.mkdir()
    git("init", "-q", "-b", "main", cwd=root)
    (root / "a.txt").write_text("one\n")
    (root / "keep.txt").write_text("keep\n")
    (root / ".gitignore").write_text("*.log\n")
    git("add", "-A", cwd=root)
    git("commit", "-qm", "first", cwd=root)
    git("tag", "v1", cwd=root)
    (root / "a.txt").write_text("stashed\n")
    git("stash", "-q", cwd=root)
    (root / "keep.txt").write_text("staged\n")
    git("add", "keep.txt", cwd=root)
    (root / "notes.md").write_text("untracked\n")
    (root / "debug.log").write_text("ignored\n")
    return root


def events(run_cli: Any, cwd: Path, action: str) -> list[dict[str, Any]]:
    code, out, err = run_cli("history", "--json", "--action", action, cwd=cwd)
    assert code == 0, err
    found: list[dict[str, Any]] = json.loads(out)
    return found


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def strata_popen(run_cli: Any, *args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "strata", *args],
        cwd=cwd,
        env=run_cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


# -- the git backend leaves the user's repository alone ------------------------------


def test_git_run_and_rollback_leave_the_users_git_state_identical(
    gitws: Path, git: Git, run_cli: Any
) -> None:
    before = git_state(git, gitws)
    code, out, err = run_cli(
        "run", "--json", "--", sh, "-c", "echo two >> a.txt; echo n > new.txt", cwd=gitws
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["backend"] == "git"
    assert summary["diff"]["changed_paths"] == ["a.txt", "new.txt"]
    assert not (gitws / ".strata").exists()
    # the run's own changes show, nothing else moved
    after = git_state(git, gitws)
    assert after["index"] == before["index"]
    for key in ("head", "symbolic_head", "branches", "stash", "tags"):
        assert after[key] == before[key], key
    assert "?? new.txt" in after["status"]

    # a failing run rolled back leaves everything exactly as it found it
    state = git_state(git, gitws)
    code, out, err = run_cli(
        "run",
        "--rollback-on-failure",
        "--json",
        "--",
        sh,
        "-c",
        "echo three >> a.txt; rm notes.md; echo x > other.txt; "
        "mkdir -p d/e; echo f > d/e/f; exit 7",
        cwd=gitws,
    )
    assert code == 7, err
    result = json.loads(out)
    assert result["rolled_back"] is True
    assert git_state(git, gitws) == state
    assert (gitws / "a.txt").read_text() == "one\ntwo\n"
    assert (gitws / "notes.md").read_text() == "untracked\n"
    assert not (gitws / "d").exists()
    # the safety ref (not a tag) holds the failed state
    safety = result["safety_ref"]
    assert safety.startswith("refs/strata/safety/")
    shown = git("show", f"{safety}:a.txt", cwd=gitws).stdout.decode()
    assert shown == "one\ntwo\nthree\n"
    assert git("show", f"{safety}:d/e/f", cwd=gitws).stdout == b"f\n"
    assert git("tag", "-l", cwd=gitws).stdout.decode() == "v1\n"
    code, out, err = run_cli("check", cwd=gitws)
    assert code == 0, out + err


def test_git_snapshots_are_usable_refs(gitws: Path, git: Git, run_cli: Any) -> None:
    code, out, err = run_cli("run", "--json", "--", sh, "-c", "echo changed > a.txt", cwd=gitws)
    assert code == 0, err
    result = json.loads(out)
    before = result["before_snapshot"]
    assert before.startswith("git:")
    code, out, err = run_cli("diff", "--json", before, cwd=gitws)
    assert code == 0, err
    assert [f["path"] for f in json.loads(out)["files"]] == ["a.txt"]
    code, out, err = run_cli("rewind", before, cwd=gitws)
    assert code == 0, err
    assert (gitws / "a.txt").read_text() == "one\n"
    code, out, err = run_cli("show", "git:HEAD:a.txt", cwd=gitws)
    assert code == 0 and out == "one\n", err
    code, _, err = run_cli("diff", "git:no-such-thing", cwd=gitws)
    assert code == 1 and err.startswith("error: "), err


def test_the_git_backend_and_status_share_one_ignore_rule(
    gitws: Path, git: Git, run_cli: Any
) -> None:
    # folders Strata ignores by default, but which this project commits to git
    for folder in ("__pycache__", "node_modules", ".venv"):
        (gitws / folder).mkdir()
        (gitws / folder / "kept.txt").write_text(f"{folder} is tracked\n")
    git("add", "-f", "__pycache__", "node_modules", ".venv", cwd=gitws)
    git("commit", "-qm", "tracked caches", cwd=gitws)
    ok(run_cli("run", "--", sh, "-c", "true", cwd=gitws))
    status = as_json(run_cli("status", "--json", cwd=gitws))
    assert status["clean"] is True, status  # no phantom deletions of what git tracks
    code, out, err = run_cli("rewind", "HEAD", cwd=gitws)
    assert code == 0 and "nothing to do" in out, err
    view = as_json(run_cli("branch", "list", "--json", cwd=gitws))
    assert [b["name"] for b in view["branches"]] == ["main"]  # no main-2 forked


def test_git_backend_signs_commits_when_the_user_has_no_identity(
    gitws: Path, git: Git, run_cli: Any
) -> None:
    code, out, err = run_cli("run", "--json", "--", "true", cwd=gitws)
    assert code == 0, err
    sha = json.loads(out)["after_snapshot"].removeprefix("git:")
    committer = git("log", "-1", "--format=%cn <%ce>", sha, cwd=gitws).stdout.decode()
    assert committer.strip() in ("t <t@example.com>", "Strata <strata@localhost>")


# -- flow, events and options -----------------------------------------------------------


def test_a_successful_run_writes_two_snapshot_events_and_one_diff(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "f.txt").write_text("x\n")
    code, out, err = run_cli(
        "run", "--json", "--label", "build", "--", sh, "-c", "echo y > g.txt", cwd=ws
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["backend"] == "hash"
    taken = events(run_cli, ws, "workspace_snapshot_taken")
    diffs = events(run_cli, ws, "workspace_diff_computed")
    runs = events(run_cli, ws, "run")
    assert sorted(e["data"]["label"] for e in taken) == ["after", "before"]
    assert len(diffs) == 1 and len(runs) == 1
    assert diffs[0]["data"] == {
        "files_changed": 1,
        "insertions": 1,
        "deletions": 0,
        "has_patch": False,
    }
    run = runs[0]
    assert run["id"] == result["run_event_id"]
    assert run["data"]["argv"] == [sh, "-c", "echo y > g.txt"]
    assert run["data"]["exit_code"] == 0 and run["data"]["interrupted"] is False
    assert run["data"]["label"] == "build"
    assert run["data"]["cwd"] == str(ws)
    assert run["data"]["workspace"]["changed_paths"] == ["g.txt"]
    # anchored to the run's state events
    states = {e["id"]: e for e in events(run_cli, ws, "snapshot")}
    assert run["anchor_event_id"] in states
    assert states[run["anchor_event_id"]]["files"] == ["g.txt"]
    assert {e["anchor_event_id"] for e in taken} <= set(states)
    assert run_cli("check", cwd=ws)[0] == 0


def test_before_reuses_heads_snapshot_when_nothing_changed(ws: Path, make_repo: Any) -> None:
    repo: Repository = make_repo(ws)
    (ws / "f.txt").write_text("x\n")
    head = repo.snapshot("start").event
    assert head is not None
    result = repo.execute_run(["true"])
    assert result.workspace is not None
    assert result.workspace.before_snapshot == head.snapshot_ref
    assert result.workspace.after_snapshot == head.snapshot_ref
    assert [e.action_type for e in repo.history(action="snapshot")] == ["snapshot"]


def test_patch_is_kept_when_it_fits_and_flagged_when_it_does_not(
    ws: Path, make_repo: Any, git: Git
) -> None:
    repo: Repository = make_repo(ws)
    (ws / "f.txt").write_text("a\n")
    repo.snapshot("start")
    small = repo.execute_run(
        [sh, "-c", "echo b >> f.txt"], workspace=WorkspaceOptions(capture_patch=True)
    )
    assert small.workspace is not None
    diff = small.workspace.diff
    assert diff["has_patch"] is True and "+b" in diff["patch"]
    assert "patch_truncated" not in diff
    big = repo.execute_run(
        [sh, "-c", "seq 1 5000 > big.txt"],
        workspace=WorkspaceOptions(capture_patch=True, max_patch_bytes=1000),
    )
    assert big.workspace is not None
    diff = big.workspace.diff
    assert "patch" not in diff and diff["has_patch"] is False
    assert diff["patch_truncated"] is True and diff["patch_bytes"] > 1000
    run = repo.history(action="run", limit=1)[0]
    assert run.data["workspace"]["patch_truncated"] is True
    assert repo.history(action="workspace_diff_computed", limit=1)[0].data["has_patch"] is False
    # without capture_patch no patch is kept at all
    plain = repo.execute_run([sh, "-c", "echo c >> f.txt"])
    assert plain.workspace is not None and "patch" not in plain.workspace.diff


def test_callable_that_raises_is_a_failed_run_rolled_back(ws: Path, make_repo: Any) -> None:
    repo: Repository = make_repo(ws)
    (ws / "f.txt").write_text("before\n")
    repo.snapshot("start")

    def agent() -> None:
        (ws / "f.txt").write_text("broken\n")
        (ws / "junk.txt").write_text("junk\n")
        raise ValueError("the agent gave up")

    result = repo.execute_run(agent, workspace=WorkspaceOptions(rollback_on_failure=True))
    assert isinstance(result, RunResult)
    assert result.exit_code == 1 and not result.ok
    assert isinstance(result.error, ValueError)
    with pytest.raises(ValueError, match="the agent gave up"):
        result.raise_error()
    assert (ws / "f.txt").read_text() == "before\n"
    assert not (ws / "junk.txt").exists()
    assert result.workspace is not None and result.workspace.rolled_back
    # the failed state is kept on a branch
    failed = result.workspace.safety_ref
    assert failed is not None and failed in repo.view().branches
    assert repo.show(failed, "f.txt") == b"broken\n"
    taken = repo.history(action="workspace_snapshot_taken")
    assert sorted(e.data["label"] for e in taken) == ["after_failure", "before"]
    # a callable that returns is a success, its value kept
    ok = repo.run_once(lambda: 42)
    assert ok.ok and ok.value == 42 and ok.error is None
    assert repo.check() == []


def test_a_rollback_is_undone_by_undo(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "f.txt").write_text("before\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    code, _, err = run_cli(
        "run", "--rollback-on-failure", "--", sh, "-c", "echo after > f.txt; exit 2", cwd=ws
    )
    assert code == 2, err
    assert (ws / "f.txt").read_text() == "before\n"
    code, out, err = run_cli("undo", cwd=ws)
    assert code == 0, err
    assert "rollback" in out
    assert (ws / "f.txt").read_text() == "after\n"
    code, _, err = run_cli("redo", cwd=ws)
    assert code == 0, err
    assert (ws / "f.txt").read_text() == "before\n"
    assert run_cli("check", cwd=ws)[0] == 0


def test_ignored_paths_are_not_recorded_and_survive_a_rollback(ws: Path, make_repo: Any) -> None:
    repo: Repository = make_repo(ws)
    (ws / "f.txt").write_text("before\n")
    repo.snapshot("start")
    script = "echo after > f.txt; mkdir -p scratch; echo s > scratch/tmp; exit 1"
    result = repo.execute_run(
        [sh, "-c", script],
        workspace=WorkspaceOptions(rollback_on_failure=True, ignore=("scratch/",)),
    )
    assert result.exit_code == 1
    assert result.workspace is not None
    assert result.workspace.diff["changed_paths"] == ["f.txt"]
    assert (ws / "f.txt").read_text() == "before\n"
    assert (ws / "scratch" / "tmp").read_text() == "s\n"
    after = repo.history(action="snapshot", limit=1)[0]
    assert after.snapshot_ref is not None
    assert repo.manifest(after.snapshot_ref)["ignore_extra"] == ["scratch/"]
    assert repo.check() == []


def test_disabled_workspace_only_runs(ws: Path, make_repo: Any) -> None:
    repo: Repository = make_repo(ws)
    result = repo.execute_run([sh, "-c", "exit 3"], workspace=WorkspaceOptions(enabled=False))
    assert result.exit_code == 3 and result.workspace is None
    assert repo.history() == []


def test_bad_options_are_refused(ws: Path, make_repo: Any) -> None:
    with pytest.raises(UsageError):
        WorkspaceOptions(strategy="svn")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        WorkspaceOptions(max_patch_bytes=-1)
    repo: Repository = make_repo(ws)
    with pytest.raises(UsageError, match="list of arguments"):
        repo.execute_run("make test")
    with pytest.raises(UsageError, match="not the repository's workspace"):
        repo.execute_run(["true"], workspace=WorkspaceOptions(path=ws.parent))


# -- backends ---------------------------------------------------------------------------


def test_auto_picks_the_backend(tmp_path: Path, gitws: Path, git: Git, run_cli: Any) -> None:
    # a git work tree without a Strata repository: git
    code, out, err = run_cli("run", "--json", "--", "true", cwd=gitws)
    assert code == 0 and json.loads(out)["backend"] == "git", err
    # a Strata workspace (even inside a git work tree): hash
    both = tmp_path / "both"
    both.mkdir()
    git("init", "-q", cwd=both)
    assert run_cli("init", cwd=both)[0] == 0
    code, out, err = run_cli("run", "--json", "--", "true", cwd=both)
    assert code == 0 and json.loads(out)["backend"] == "hash", err
    # there, --strategy git asks for git explicitly
    code, out, err = run_cli("run", "--strategy", "git", "--json", "--", "true", cwd=both)
    assert code == 0 and json.loads(out)["backend"] == "git", err
    assert run_cli("check", cwd=both)[0] == 0
    # neither: an error naming 'strata init', exit 125
    plain = tmp_path / "plain"
    plain.mkdir()
    code, out, err = run_cli("run", "--", "true", cwd=plain)
    assert code == 125 and out == ""
    assert err.startswith("error: ") and "strata init" in err
    # a git strategy where there is no git work tree
    assert run_cli("init", cwd=plain)[0] == 0
    code, _, err = run_cli("run", "--strategy", "git", "--", "true", cwd=plain)
    assert code == 125 and "git work tree" in err


def test_exit_codes(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("run", "--", sh, "-c", "exit 42", cwd=ws)[0] == 42
    code, _, err = run_cli("run", "--", "no-such-command-xyz", cwd=ws)
    assert code == 127 and "command not found" in err
    (ws / "script.sh").write_text("#!/bin/sh\n")
    code, _, err = run_cli("run", "--", "./script.sh", cwd=ws)
    assert code == 126 and err.startswith("error: ")
    code, _, err = run_cli("run", "--max-patch-bytes", "nope", "--", "true", cwd=ws)
    assert code == 125 and "Traceback" not in err
    code, _, err = run_cli("run", cwd=ws)
    assert code == 125


# -- signals, leases, crashes ------------------------------------------------------------


CHILD = (
    "import pathlib, time\n"
    "pathlib.Path('made.txt').write_text('made\\n')\n"
    "import os\n"
    "pathlib.Path('ready').write_text(str(os.getpid()))\n"
    "time.sleep(60)\n"
)


def _killed_with_strata_only(proc: subprocess.Popen[str]) -> None:
    """SIGKILL strata (its own group); its command, in a group of its own, lives on."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()  # (the command still holds the pipes: nothing waits for it)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs now (not gone, not a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _ended(pid: int) -> bool:
    """Whether ``pid`` ends within 10 s."""
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def test_sigint_gives_an_after_snapshot_and_no_rollback(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    proc = strata_popen(
        run_cli, "run", "--rollback-on-failure", "--json", "--", sys.executable, "-c", CHILD, cwd=ws
    )
    try:
        wait_for(ws / "ready")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    result = json.loads(out)
    assert result["interrupted"] is True and result["rolled_back"] is False
    assert "made.txt" in result["diff"]["changed_paths"]
    assert (ws / "made.txt").exists()
    run = events(run_cli, ws, "run")[0]
    assert run["data"]["interrupted"] is True
    labels = [e["data"]["label"] for e in events(run_cli, ws, "workspace_snapshot_taken")]
    assert sorted(labels) == ["after_failure", "before"]
    assert run_cli("check", cwd=ws)[0] == 0


def test_a_killed_run_is_recorded_as_interrupted(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    proc = strata_popen(run_cli, "run", "--", sys.executable, "-c", CHILD, cwd=ws)
    try:
        wait_for(ws / "ready")
        assert len(active_leases(ws / ".strata" / "runs")) == 1
    finally:
        _killed_with_strata_only(proc)
    child = int((ws / "ready").read_text())
    assert _running(child)  # an orphan, until the next command that writes
    assert len(stale_leases(ws / ".strata" / "runs")) == 1
    code, out, err = run_cli("snapshot", "-m", "next", cwd=ws)  # the next command that writes
    assert code == 0, err
    assert _ended(child)  # it ended the orphaned command before recording the run
    runs = events(run_cli, ws, "run")
    assert len(runs) == 1
    data = runs[0]["data"]
    assert data["interrupted"] is True and data["recovered"] is True
    assert "made.txt" in data["workspace"]["changed_paths"]
    assert stale_leases(ws / ".strata" / "runs") == []
    code, out, err = run_cli("check", cwd=ws)
    assert code == 0, out + err


def test_rewind_from_another_process_is_refused_while_a_run_holds_the_lease(
    ws: Path, run_cli: Any
) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "f.txt").write_text("one\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    proc = strata_popen(run_cli, "run", "--", sys.executable, "-c", CHILD, cwd=ws)
    try:
        wait_for(ws / "ready")
        code, _, err = run_cli("rewind", "HEAD", cwd=ws)
        assert code == 1 and err.startswith("error: ") and "run" in err
        assert (ws / "made.txt").exists()
        code, _, err = run_cli("rewind", "--force", "HEAD", cwd=ws)
        assert code == 0, err
        assert not (ws / "made.txt").exists()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM
    assert run_cli("check", cwd=ws)[0] == 0


def test_an_interrupted_callable_rolls_back_only_when_asked(ws: Path, make_repo: Any) -> None:
    repo: Repository = make_repo(ws)
    (ws / "f.txt").write_text("before\n")
    repo.snapshot("start")

    def interrupted() -> None:
        (ws / "f.txt").write_text("half done\n")
        raise KeyboardInterrupt

    kept = repo.execute_run(interrupted, workspace=WorkspaceOptions(rollback_on_failure=True))
    assert kept.interrupted and kept.workspace is not None and not kept.workspace.rolled_back
    assert (ws / "f.txt").read_text() == "half done\n"
    assert isinstance(kept.error, KeyboardInterrupt)
    (ws / "f.txt").write_text("before\n")
    repo.snapshot("again")
    undone = repo.execute_run(interrupted, workspace=WorkspaceOptions(rollback_on_interrupt=True))
    assert undone.workspace is not None and undone.workspace.rolled_back
    assert (ws / "f.txt").read_text() == "before\n"


def test_a_killed_git_backed_run_is_recorded(gitws: Path, git: Git, run_cli: Any) -> None:
    state = git_state(git, gitws)
    proc = strata_popen(run_cli, "run", "--", sys.executable, "-c", CHILD, cwd=gitws)
    try:
        wait_for(gitws / "ready")
    finally:
        _killed_with_strata_only(proc)
    child = int((gitws / "ready").read_text())
    runs_folder = gitws / ".git" / "strata" / "repo" / "runs"
    assert len(stale_leases(runs_folder)) == 1
    code, _, err = run_cli("snapshot", cwd=gitws)
    assert code == 0, err
    assert _ended(child)
    run = events(run_cli, gitws, "run")[0]
    assert run["data"]["recovered"] is True
    assert run["data"]["workspace"]["backend"] == "git"
    assert run["data"]["workspace"]["after_snapshot"].startswith("git:")
    assert stale_leases(runs_folder) == []
    assert run_cli("check", cwd=gitws)[0] == 0
    after = git_state(git, gitws)
    assert after["index"] == state["index"] and after["stash"] == state["stash"]


def test_python_api_in_a_git_work_tree_without_strata(gitws: Path, git: Git) -> None:
    state = git_state(git, gitws)
    with Repository.open_for_run(gitws) as repo:

        def edit() -> str:
            (gitws / "a.txt").write_text("edited\n")
            raise RuntimeError("failed after editing")

        result = repo.execute_run(edit, workspace=WorkspaceOptions(rollback_on_failure=True))
        assert result.workspace is not None
        assert result.workspace.backend == "git"
        assert result.workspace.rolled_back
        assert isinstance(result.error, RuntimeError)
        assert repo.check() == []
    assert (gitws / "a.txt").read_text() == "one\n"
    assert git_state(git, gitws) == state
    with pytest.raises(NotARepository, match="not a strata workspace"):
        Repository.open_for_run(gitws.parent)


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.35, 0.5, 0.7, 0.9])
def test_sigkill_at_any_point_of_a_run_leaves_a_checkable_repository(
    ws: Path, run_cli: Any, delay: float
) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    for i in range(30):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    script = "for i in $(seq 0 29); do echo x >> f$i.txt; done; echo n > new.txt; exit 1"
    proc = strata_popen(run_cli, "run", "--rollback-on-failure", "--", sh, "-c", script, cwd=ws)
    time.sleep(delay)  # a kill point, not a measurement
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    code, _, err = run_cli("snapshot", "-m", "after the crash", cwd=ws)
    assert code == 0, err
    code, out, err = run_cli("check", cwd=ws)
    assert code == 0, out + err
    assert stale_leases(ws / ".strata" / "runs") == []
    assert len(events(run_cli, ws, "run")) <= 1


def test_run_options_that_do_not_fit_a_draft_are_refused_with_125(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("a\n")
    for args in (
        ("run", "--draft", "--rollback-on-failure", "--", "true"),
        ("run", "--draft", "--strategy", "git", "--", "true"),
        ("run", "--net", "allow", "--", "true"),
        ("run", "--bind-ro", str(ws), "--", "true"),
    ):
        code, _, err = run_cli(*args, cwd=ws)
        assert code == 125, (args, err)
        assert err.startswith("error: ") and "Traceback" not in err
    # nothing was run or recorded, and no Draft was started
    assert not (ws / ".strata" / "draft" / "draft.json").exists()
    code, out, _ = run_cli("history", "--json", cwd=ws)
    assert json.loads(out) == []


def test_undo_after_a_run_puts_back_what_the_command_changed_and_redo_reapplies_it(
    ws: Path, run_cli: Any, manifest: Callable[..., dict[str, Any]]
) -> None:
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    assert run_cli("snapshot", "-m", "base", cwd=ws)[0] == 0
    before = manifest(ws)
    code, out, err = run_cli(
        "run", "--json", "--", "sh", "-c", "echo x >> a.txt; echo n > new.txt; rm b.txt", cwd=ws
    )
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    base_head = json.loads(run_cli("history", "--json", "--action", "snapshot", cwd=ws)[1])[-1]
    after = manifest(ws)
    assert after != before

    code, out, err = run_cli("undo", cwd=ws)
    assert code == 0, err
    assert f"Undid run {run_id[:12]}" in out  # the id the run printed
    assert manifest(ws) == before  # one undo reverses what the command did
    status = json.loads(run_cli("status", "--json", cwd=ws)[1])
    assert status["clean"] and status["head_event_id"] == base_head["id"]

    code, _, err = run_cli("redo", cwd=ws)
    assert code == 0, err
    assert manifest(ws) == after
    assert json.loads(run_cli("status", "--json", cwd=ws)[1])["clean"]

    assert run_cli("undo", cwd=ws)[0] == 0
    assert manifest(ws) == before
    # the next undo goes past the run: the base snapshot (refs only), the files stay
    code, out, err = run_cli("undo", cwd=ws)
    assert code == 0 and "Undid snapshot" in out, (out, err)
    assert manifest(ws) == before
    assert run_cli("check", cwd=ws)[0] == 0


ORPHAN = (
    "import os, pathlib, sys, time\n"
    "if os.fork():\n"
    "    os.wait()\n"  # the command ends when its child does
    "else:\n"
    "    pathlib.Path('ready').write_text(f'{os.getppid()} {os.getpid()}')\n"
    "    while not pathlib.Path('go').exists():\n"
    "        time.sleep(0.02)\n"
    "    pathlib.Path('late.txt').write_text('written after strata died\\n')\n"
)


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


@pytest.mark.parametrize("watcher", [False, True], ids=["full", "thin"])
def test_a_command_left_by_a_killed_strata_is_ended_by_the_next_command(
    ws: Path, run_cli: Any, auto: Any, watcher: bool
) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "f.txt").write_text("one\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    if watcher:  # the thin client runs the command; the watcher began the run
        assert auto("status", cwd=ws)[0] == 0
        wait_until(lambda: as_json(run_cli("watch", "--status", "--json", cwd=ws))["running"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", "run", "--", sys.executable, "-c", ORPHAN],
        cwd=ws,
        env=run_cli.env(AUTO if watcher else None),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # the command keeps inherited pipes open after strata dies
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        wait_for(ws / "ready")
        pids = [int(p) for p in (ws / "ready").read_text().split()]
        os.kill(proc.pid, signal.SIGKILL)  # strata alone: its command goes on
        proc.wait()
        assert all(_alive(p) for p in pids)
        assert stale_leases(ws / ".strata" / "runs"), "the lease names the orphaned command"
        # the next command that writes ends the command, then records its run as interrupted
        code, _, err = run_cli("snapshot", "-m", "next", cwd=ws)
        assert code == 0, err
        assert not any(_alive(p) for p in pids), "the command outlived its run"
        (ws / "go").write_text("")
        time.sleep(0.2)  # what a survivor would need to write late.txt
        assert not (ws / "late.txt").exists()
    finally:
        (ws / "go").write_text("")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    runs = events(run_cli, ws, "run")
    assert len(runs) == 1 and runs[0]["data"]["recovered"] is True
    assert runs[0]["data"]["interrupted"] is True
    assert active_leases(ws / ".strata" / "runs") == []
    assert stale_leases(ws / ".strata" / "runs") == []
    assert run_cli("check", cwd=ws)[0] == 0


def test_a_killed_run_leaves_no_background_process_as_root_or_not(
    cli_as: Any, home_of: Path, person: Any
) -> None:
    ws = home_of / "ws"
    ws.mkdir()
    os.chown(ws, person.uid, person.gid)
    assert cli_as("init", cwd=ws)[0] == 0
    script = "sleep 1000 & echo $! > bg.pid; echo $$ > sh.pid; echo x > made.txt; wait"
    proc = subprocess.Popen(
        [*person.prefix(), sys.executable, "-m", "strata", "run", "--", "sh", "-c", script],
        cwd=ws,
        env=cli_as.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        wait_until(lambda: (ws / "bg.pid").read_text().strip() if (ws / "bg.pid").exists() else "")
        wait_until(lambda: (ws / "sh.pid").read_text().strip() if (ws / "sh.pid").exists() else "")
        pids = [int((ws / name).read_text()) for name in ("bg.pid", "sh.pid")]
        os.kill(proc.pid, signal.SIGKILL)  # strata alone, as the OOM killer would
        proc.wait()
        assert all(_alive(p) for p in pids)
        code, _, err = cli_as("status", cwd=ws)  # reads: records nothing, ends nothing
        assert code == 0, err
        assert all(_alive(p) for p in pids)
        code, _, err = cli_as("snapshot", "-m", "next", cwd=ws)
        assert code == 0, err
        assert not any(_alive(p) for p in pids), "sleep 1000 outlived its killed run"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    code, out, err = cli_as("history", "--json", "--action", "run", cwd=ws)
    (run,) = json.loads(out)
    assert run["data"]["recovered"] is True and run["data"]["interrupted"] is True
    assert "made.txt" in run["data"]["workspace"]["changed_paths"]
    assert cli_as("check", cwd=ws)[0] == 0


def _pty_strata(run_cli: Any, ws: Path, *args: str) -> tuple[int, int]:
    """Start ``strata ARGS`` on a terminal of its own (it leads the terminal's foreground)."""
    import pty

    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.chdir(ws)
        os.execve(sys.executable, [sys.executable, "-m", "strata", *args], run_cli.env())
    return pid, master


def _read_until(master: int, needle: bytes, timeout: float = 30) -> bytes:
    import select

    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        assert time.monotonic() < deadline, f"never saw {needle!r} in {seen!r}"
        if select.select([master], [], [], 0.1)[0]:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    return seen


def test_a_run_on_a_terminal_gives_its_command_the_terminal_and_ctrl_c(
    ws: Path, run_cli: Any
) -> None:
    """The command, in a process group of its own, reads and sets the terminal; Ctrl-C ends it."""
    assert run_cli("init", cwd=ws)[0] == 0
    # stty from a background group would be stopped (SIGTTOU): it must be the foreground
    script = 'stty -echo && echo ready && read line && echo "got:$line" > got.txt && sleep 30'
    pid, master = _pty_strata(run_cli, ws, "run", "--", "sh", "-c", script)
    try:
        _read_until(master, b"ready")
        os.write(master, b"hello\n")
        wait_until(lambda: (ws / "got.txt").exists() and (ws / "got.txt").read_text())
        os.write(master, b"\x03")  # Ctrl-C, typed at the terminal
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(master)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert (ws / "got.txt").read_text() == "got:hello\n"
    assert os.waitstatus_to_exitcode(status) == 130
    (run,) = events(run_cli, ws, "run")
    assert run["data"]["interrupted"] is True
