"""Behaviour a user expects: what init, rewind, status and run say and do around git.

Real git repositories and the real command line throughout.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Git = Callable[..., subprocess.CompletedProcess[bytes]]
sh = "/bin/sh"


@pytest.fixture
def gitws(ws: Path, git: Git) -> Path:
    """A git work tree on branch main with one commit and a staged change."""
    git("init", "-q", "-b", "main", cwd=ws)
    git("config", "user.name", "agent", cwd=ws)  # commands under 'strata run' commit too
    git("config", "user.email", "agent@example.com", cwd=ws)
    (ws / "a.txt").write_text("one\n")
    git("add", "-A", cwd=ws)
    git("commit", "-qm", "first", cwd=ws)
    (ws / "staged.txt").write_text("staged\n")
    git("add", "staged.txt", cwd=ws)
    return ws


def out_json(result: tuple[int, str, str]) -> Any:
    code, out, err = result
    assert code == 0, err
    return json.loads(out)


def git_out(git: Git, cwd: Path, *args: str) -> str:
    return git(*args, cwd=cwd).stdout.decode().strip()


# -- 1. init imports the runs the git backend recorded before ---------------------------


def test_init_in_a_git_work_tree_imports_earlier_git_backed_runs(gitws: Path, run_cli: Any) -> None:
    code, _, err = run_cli("run", "--label", "first", "--", sh, "-c", "echo x > x.txt", cwd=gitws)
    assert code == 0, err
    code, _, err = run_cli(
        "run",
        "--label",
        "second",
        "--",
        sh,
        "-c",
        "echo y > y.txt",
        cwd=gitws,
        env={"STRATA_AUTHOR": "agent-7"},
    )
    assert code == 0, err
    before = out_json(run_cli("history", "--json", cwd=gitws))

    code, out, err = run_cli("init", cwd=gitws)
    assert code == 0, err
    assert "Imported 2 git-backed runs" in out
    assert (gitws / ".strata").is_dir()
    history = out_json(run_cli("history", "--json", cwd=gitws))
    # every event, in order, with its id, time and author
    assert [(e["id"], e["ts"], e["author"]) for e in history] == [
        (e["id"], e["ts"], e["author"]) for e in before
    ]
    runs = out_json(run_cli("history", "--json", "--action", "run", cwd=gitws))
    assert [r["data"]["label"] for r in runs] == ["second", "first"]
    assert runs[0]["author"]["name"] == "agent-7"
    # HEAD came along: the files are what the last run left
    status = out_json(run_cli("status", "--json", cwd=gitws))
    assert status["clean"] is True and status["branch"] == "main"
    assert run_cli("check", cwd=gitws)[0] == 0

    # init again imports nothing and changes nothing
    again = out_json(run_cli("init", "--json", cwd=gitws))
    assert again["created"] is False and again["imported_events"] == 0
    assert out_json(run_cli("history", "--json", cwd=gitws)) == history


def test_init_reconnecting_a_store_imports_runs_made_while_the_pointer_was_gone(
    tmp_path: Path, gitws: Path, run_cli: Any
) -> None:
    store = tmp_path / "store"
    assert run_cli("init", "--no-snapshot", "--store", store, cwd=gitws)[0] == 0
    assert run_cli("snapshot", "-m", "mine", cwd=gitws)[0] == 0
    (gitws / ".strata").unlink()  # an agent's 'git clean -fdx'
    code, out, err = run_cli("run", "--json", "--", sh, "-c", "echo z > z.txt", cwd=gitws)
    assert code == 0 and json.loads(out)["backend"] == "git", err

    result = out_json(run_cli("init", "--json", "--store", store, cwd=gitws))
    assert result["created"] is False
    assert result["imported_runs"] == 1
    runs = out_json(run_cli("history", "--json", "--action", "run", cwd=gitws))
    assert len(runs) == 1 and runs[0]["data"]["argv"][-1] == "echo z > z.txt"
    # the repository's own line stays as it was; the imported one is beside it
    code, out, err = run_cli("branch", "list", cwd=gitws)
    assert code == 0, err
    assert "* main" in out and "git-runs/main" in out
    mine = out_json(run_cli("history", "--json", "--branch", "main", cwd=gitws))
    assert [e["rationale"] for e in mine] == ["mine"]
    assert run_cli("check", cwd=gitws)[0] == 0
    assert out_json(run_cli("init", "--json", "--store", store, cwd=gitws))["imported_events"] == 0


# -- 2. rewind and status name the branch -------------------------------------------------


def test_rewind_off_a_tip_says_which_branch_the_next_snapshot_starts(
    ws: Path, run_cli: Any
) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    for text in ("1\n", "2\n"):
        (ws / "f.txt").write_text(text)
        assert run_cli("snapshot", cwd=ws)[0] == 0
    status = out_json(run_cli("status", "--json", cwd=ws))
    assert (status["branch"], status["detached"], status["next_branch"]) == ("main", False, None)
    code, out, err = run_cli("status", cwd=ws)
    assert code == 0 and "On branch main" in out, err

    code, out, err = run_cli("rewind", "HEAD~1", cwd=ws)
    assert code == 0, err
    assert "the next snapshot will start branch main-2" in out
    status = out_json(run_cli("status", "--json", cwd=ws))
    assert (status["branch"], status["detached"], status["next_branch"]) == (None, True, "main-2")
    code, out, err = run_cli("status", cwd=ws)
    assert "HEAD detached" in out and "will start branch main-2" in out

    # the name said is the name used
    (ws / "f.txt").write_text("3\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    assert out_json(run_cli("status", "--json", cwd=ws))["branch"] == "main-2"

    # --json says it too; null when the rewind lands on a tip
    rewound = out_json(run_cli("rewind", "--json", "main~1", cwd=ws))
    assert rewound["next_branch"] == "main-3"
    assert out_json(run_cli("rewind", "--json", "main", cwd=ws))["next_branch"] is None
    named = out_json(run_cli("rewind", "--json", "--branch", "try", "main~1", cwd=ws))
    assert named["next_branch"] == "try"


# -- 3. init --store keeps the pointer out of git ----------------------------------------


def test_init_store_excludes_the_pointer_from_git(
    tmp_path: Path, gitws: Path, git: Git, run_cli: Any
) -> None:
    (gitws / ".gitignore").write_text("*.log\n")
    exclude = gitws / ".git" / "info" / "exclude"
    exclude.unlink(missing_ok=True)
    code, _, err = run_cli("init", "--store", tmp_path / "store", cwd=gitws)
    assert code == 0, err
    assert (gitws / ".strata").is_file()
    assert exclude.read_text() == "/.strata\n"
    untracked = git_out(git, gitws, "status", "--porcelain", "--untracked-files=all")
    assert ".strata" not in untracked
    assert (gitws / ".gitignore").read_text() == "*.log\n"
    # again: the line is not added twice; existing lines are kept
    exclude.write_text("# mine\n*.tmp")
    assert run_cli("init", "--store", tmp_path / "store", cwd=gitws)[0] == 0
    assert run_cli("init", "--store", tmp_path / "store", cwd=gitws)[0] == 0
    assert exclude.read_text() == "# mine\n*.tmp\n/.strata\n"
    assert out_json(run_cli("init", "--json", cwd=gitws))["git_exclude"] == str(exclude)


def test_init_store_outside_git_names_no_exclude_file(
    tmp_path: Path, ws: Path, run_cli: Any
) -> None:
    result = out_json(run_cli("init", "--json", "--store", tmp_path / "store", cwd=ws))
    assert result["git_exclude"] is None


# -- 4. runs record git's HEAD; --rollback-git --------------------------------------------


def test_a_run_records_gits_head_before_and_after(gitws: Path, git: Git, run_cli: Any) -> None:
    first = git_out(git, gitws, "rev-parse", "HEAD")
    result = out_json(
        run_cli("run", "--json", "--", sh, "-c", "echo b >> a.txt; git commit -qam two", cwd=gitws)
    )
    second = git_out(git, gitws, "rev-parse", "HEAD")
    assert second != first
    assert result["git_head_before"] == {"commit": first, "branch": "main"}
    assert result["git_head_after"] == {"commit": second, "branch": "main"}
    run = out_json(run_cli("history", "--json", "--action", "run", cwd=gitws))[0]
    assert run["data"]["git_head_before"] == result["git_head_before"]
    assert run["data"]["git_head_after"] == result["git_head_after"]


def test_a_run_outside_git_records_null_heads(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    result = out_json(run_cli("run", "--json", "--", "true", cwd=ws))
    assert result["git_head_before"] is None and result["git_head_after"] is None


def test_rollback_on_failure_says_the_commits_remain(gitws: Path, git: Git, run_cli: Any) -> None:
    first = git_out(git, gitws, "rev-parse", "HEAD")
    code, _, err = run_cli(
        "run",
        "--rollback-on-failure",
        "--",
        sh,
        "-c",
        "echo b >> a.txt; git commit -qam agent; exit 3",
        cwd=gitws,
    )
    assert code == 3, err
    assert (gitws / "a.txt").read_text() == "one\n"  # the files were rolled back
    assert git_out(git, gitws, "rev-parse", "HEAD") != first  # the commit was not
    assert "the commits remain on branch main" in err
    assert "--rollback-git" in err


def test_rollback_git_moves_the_branch_back_and_keeps_the_commits(
    gitws: Path, git: Git, run_cli: Any
) -> None:
    first = git_out(git, gitws, "rev-parse", "HEAD")
    status = git_out(git, gitws, "status", "--porcelain")
    code, out, err = run_cli(
        "run",
        "--rollback-git",
        "--json",
        "--",
        sh,
        "-c",
        "echo b >> a.txt; git commit -qam agent; exit 3",
        cwd=gitws,
    )
    assert code == 3, err
    result = json.loads(out)
    run_id = result["run_id"]
    assert result["rolled_back"] is True
    assert result["git_rollback"] == {
        "branch": "main",
        "moved_to": first,
        "kept_on": f"failed/{run_id}",
    }
    assert f"failed/{run_id}" in err
    # git is as it was: branch, HEAD, index and files
    assert git_out(git, gitws, "rev-parse", "HEAD") == first
    assert git_out(git, gitws, "symbolic-ref", "--short", "HEAD") == "main"
    assert git_out(git, gitws, "status", "--porcelain") == status
    # the run's commit is kept, and the run id is what strata knows it by
    kept = git_out(git, gitws, "log", "-1", "--format=%s", f"failed/{run_id}")
    assert kept == "agent"
    assert git_out(git, gitws, "show", f"failed/{run_id}:a.txt") == "one\nb"
    code, _, err = run_cli("diff", run_id, cwd=gitws)
    assert code == 0, err


def test_rollback_git_is_refused_where_it_cannot_work(
    tmp_path: Path, gitws: Path, git: Git, run_cli: Any
) -> None:
    # not in git
    plain = tmp_path / "plain"
    plain.mkdir()
    assert run_cli("init", cwd=plain)[0] == 0
    code, out, err = run_cli("run", "--rollback-git", "--", "touch", "ran", cwd=plain)
    assert code == 125 and out == ""
    assert err.startswith("error: --rollback-git needs a git work tree")
    assert "Traceback" not in err and not (plain / "ran").exists()
    # HEAD detached before the run
    git("checkout", "-q", "--detach", cwd=gitws)
    code, _, err = run_cli("run", "--rollback-git", "--", "touch", "ran", cwd=gitws)
    assert code == 125 and "HEAD is detached" in err.splitlines()[0]
    assert not (gitws / "ran").exists()
    # HEAD changes branch during the run: the files are rolled back, the branches left alone
    git("checkout", "-q", "main", cwd=gitws)
    first = git_out(git, gitws, "rev-parse", "HEAD")
    code, _, err = run_cli(
        "run",
        "--rollback-git",
        "--",
        sh,
        "-c",
        "git checkout -qb other; echo b >> a.txt; git commit -qam agent; exit 4",
        cwd=gitws,
    )
    assert code == 4
    assert "error: not moving git's branch back: HEAD moved from branch main to branch other" in err
    assert "Traceback" not in err
    assert git_out(git, gitws, "rev-parse", "main") == first
    assert (gitws / "a.txt").read_text() == "one\n"
