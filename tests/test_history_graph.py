"""``strata history --graph``: branches, forks and merges drawn as git log --graph does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import assert_user_error, ok
from strata.cli.graph import draw


def _picture(nodes: list[tuple[str, list[str]]], head: str) -> list[str]:
    return [f"{p} {nodes[i][0]}" if i >= 0 else p for p, i in draw(nodes, head)]


def test_a_straight_line_is_one_column() -> None:
    assert _picture([("c", ["b"]), ("b", ["a"]), ("a", [])], "c") == ["@ c", "* b", "* a"]


def test_a_fork_joins_its_parent_and_a_merge_opens_a_column() -> None:
    fork = [("c2", ["a"]), ("b1", ["a"]), ("a", [])]
    assert _picture(fork, "b1") == ["* c2", "| @ b1", "|/", "* a"]
    merge = [("m", ["c", "b"]), ("b", ["a"]), ("c", ["a"]), ("a", [])]
    assert _picture(merge, "m") == ["@ m", "|\\", "| * b", "* | c", "|/", "* a"]


def test_history_graph_draws_the_fork_a_rewind_starts(ws: Path, run_cli: Any) -> None:
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    (ws / "a.txt").write_text("1\n")
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    (ws / "a.txt").write_text("2\n")
    ok(run_cli("snapshot", "-m", "two", cwd=ws))
    ok(run_cli("rewind", "HEAD~1", cwd=ws))
    (ws / "b.txt").write_text("3\n")
    ok(run_cli("snapshot", "-m", "three", cwd=ws))
    ok(run_cli("bookmark", "add", "keep", "HEAD", cwd=ws))
    lines = ok(run_cli("history", "--graph", cwd=ws)).splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("@ ") and "three" in lines[0]
    assert "(main-2, bookmark keep)" in lines[0]
    assert lines[1].startswith("| * ") and "two" in lines[1] and "(main)" in lines[1]
    assert lines[2] == "|/"
    assert lines[3].startswith("* ") and "one" in lines[3]
    # a filter would cut the lines of descent: refused, as --json is
    assert_user_error(run_cli("history", "--graph", "--file", "a.txt", cwd=ws), code=2)
    code, _, err = run_cli("history", "--graph", "--json", cwd=ws)
    assert code == 2 and "--graph draws for people" in err
