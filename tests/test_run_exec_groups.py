"""A run and a gateway exec are each one operation group: one line of 'op log', one undo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CliRunner


@pytest.fixture
def workspace(ws: Path, run_cli: CliRunner) -> Path:
    assert run_cli("init", cwd=ws)[0] == 0
    return ws


def _op_lines(run_cli: CliRunner, ws: Path) -> list[str]:
    code, out, err = run_cli("op", "log", cwd=ws)
    assert code == 0, err
    return out.splitlines()


def test_a_run_is_one_line_of_op_log_and_one_undo_reverts_it(
    workspace: Path, run_cli: CliRunner
) -> None:
    (workspace / "a.txt").write_text("mine\n")
    assert run_cli("snapshot", "-m", "mine", cwd=workspace)[0] == 0
    before = len(_op_lines(run_cli, workspace))
    code, _, err = run_cli(
        "run", "--", "sh", "-c", "echo new > new.txt; echo run >> a.txt", cwd=workspace
    )
    assert code == 0, err
    lines = _op_lines(run_cli, workspace)
    assert len(lines) == before + 1, lines  # the before and after snapshots and the run, folded
    assert lines[0].split()[3] == "run" and "(3 steps)" in lines[0], lines[0]
    assert "echo new > new.txt" in lines[0]
    code, out, _ = run_cli("op", "log", "--json", cwd=workspace)
    steps = [o for o in json.loads(out) if (o.get("group") or {}).get("kind") == "run"]
    assert len(steps) == 3 and len({o["group"]["id"] for o in steps}) == 1
    # the run's events keep its id as their operation
    code, out, _ = run_cli("history", "--all", "--json", cwd=workspace)
    run_events = [e for e in json.loads(out) if e["action_type"] == "run"]
    assert run_events[0]["operation_id"] == steps[0]["group"]["id"]

    assert run_cli("undo", cwd=workspace)[0] == 0
    assert not (workspace / "new.txt").exists()
    assert (workspace / "a.txt").read_text() == "mine\n"
    # the next undo is the person's snapshot before the run, not a step of the run
    code, out, _ = run_cli("undo", cwd=workspace)
    assert code == 0 and "snapshot" in out and "run" not in out.split("(")[0], out
    assert run_cli("redo", cwd=workspace)[0] == 0 and run_cli("redo", cwd=workspace)[0] == 0
    assert (workspace / "new.txt").read_text() == "new\n"
    assert run_cli("check", cwd=workspace)[0] == 0


def test_an_exec_is_one_line_of_op_log_and_one_undo_reverts_it(
    workspace: Path, run_cli: CliRunner
) -> None:
    (workspace / "config.toml").write_text("x = 1\n")
    assert run_cli("snapshot", "-m", "mine", cwd=workspace)[0] == 0
    before = len(_op_lines(run_cli, workspace))
    code, _, err = run_cli("exec", "--yes", "--", "sh", "-c", "echo e > e.txt", cwd=workspace)
    assert code == 0, err
    assert (workspace / "e.txt").read_text() == "e\n"
    lines = _op_lines(run_cli, workspace)
    # the call, its approval, the run and its record: one line
    assert len(lines) == before + 1, lines
    assert lines[0].split()[3] == "exec" and "echo e > e.txt" in lines[0], lines[0]
    code, out, _ = run_cli("undo", cwd=workspace)
    assert code == 0 and "exec" in out, out
    assert not (workspace / "e.txt").exists()
    assert (workspace / "config.toml").read_text() == "x = 1\n"
    assert run_cli("redo", cwd=workspace)[0] == 0
    assert (workspace / "e.txt").read_text() == "e\n"
    assert run_cli("check", cwd=workspace)[0] == 0


def test_op_log_limit_counts_lines_and_never_cuts_a_group(
    workspace: Path, run_cli: CliRunner
) -> None:
    for i in range(3):
        assert run_cli("run", "--", "sh", "-c", f"echo {i} > r{i}.txt", cwd=workspace)[0] == 0
    whole = _op_lines(run_cli, workspace)
    code, out, err = run_cli("op", "log", "--limit", "2", cwd=workspace)
    assert code == 0, err
    assert out.splitlines() == whole[:2]  # two runs, each whole: "(3 steps)", not 2 operations
    assert all("(3 steps)" in line for line in out.splitlines())
    code, out, _ = run_cli("op", "log", "--limit", "2", "--json", cwd=workspace)
    assert len(json.loads(out)) == 2  # --json counts operations
