"""The storage budget: ``[retention] max_size`` kept after every writing command."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import as_json, assert_user_error, open_repo
from strata import Repository, SnapshotPruned
from strata.layout import load_config, parse_size

KB = 1024
BUDGET = f"""
[retention]
prune_grace_minutes = 0
keep_last = 3
max_size = {300 * KB}
"""


def _configure(repo: Repository, text: str) -> None:
    with repo.layout.config.open("a") as f:
        f.write(text)
    repo.config = load_config(repo.layout)


def _states(repo: Repository, ws: Path, n: int) -> list[str]:
    """``n`` snapshots, each adding 40 KiB nothing compresses; their event ids, oldest first."""
    ids = []
    for i in range(n):
        (ws / f"big{i:02}.bin").write_bytes(os.urandom(40 * KB))
        result = repo.snapshot(message=f"state {i}")
        assert result.event is not None
        ids.append(result.event.id)
        (ws / f"big{i:02}.bin").unlink()  # the next state does not carry it along
    return ids


def test_the_budget_prunes_the_oldest_states_but_never_a_bookmark_or_the_last_ones(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        _configure(repo, BUDGET)
        first = _states(repo, ws, 2)
        repo.bookmark("add", "keep-me", ref=first[1])
        rest = _states(repo, ws, 14)
        used = repo.budget()
        assert used.max_size == 300 * KB
        assert used.used <= 300 * KB, used  # 16 states of 40 KiB would be 640 KiB
        assert not used.over
        # the oldest went, the bookmarked one and the last three stayed
        with pytest.raises(SnapshotPruned):
            repo.show(first[0], "big00.bin")
        assert len(repo.show(first[1], "big01.bin")) == 40 * KB
        for i, event in enumerate(rest[-3:], start=11):
            assert len(repo.show(event, f"big{i:02}.bin")) == 40 * KB
        assert repo.check() == []


def test_status_and_du_say_when_the_budget_cut_undo_history(tmp_path: Path, run_cli: Any) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        _configure(repo, BUDGET)
        _states(repo, ws, 16)
        used = repo.budget()
    # every state is minutes old: the tiers keep them all, so each one pruned cut history
    assert used.history_cut >= 3, used
    assert used.last_cut is not None and used.last_cut.endswith("Z")
    status = as_json(run_cli("status", "--json", cwd=ws))
    assert status["budget"]["history_cut"] == used.history_cut
    code, out, _ = run_cli("status", cwd=ws)
    assert code == 0 and f"cut undo history: {used.history_cut} states" in out, out
    code, out, _ = run_cli("du", cwd=ws)
    assert code == 0 and f"cut undo history: {used.history_cut} states" in out, out
    du = json.loads(run_cli("du", "--json", cwd=ws)[1])
    assert du["budget"]["history_cut"] == used.history_cut


def test_a_plain_gc_cuts_no_history(tmp_path: Path, run_cli: Any) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        _configure(repo, BUDGET.replace(f"max_size = {300 * KB}", "max_size = 0"))
        _states(repo, ws, 4)
        repo.gc()
        assert repo.budget().history_cut == 0
    code, out, _ = run_cli("du", cwd=ws)
    assert code == 0 and "cut undo history" not in out, out


@pytest.mark.parametrize("driver", ["sqlite", "jsonl"])
def test_the_budget_counts_the_ledger(tmp_path: Path, driver: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    with open_repo(ws, ledger=driver) as repo:
        repo.snapshot(message="one")
        objects = sum(f.stat().st_size for f in repo.layout.objects.rglob("*") if f.is_file())
        before = repo.budget().used
        assert before > objects  # the ledger's bytes come on top of the objects'
        # events alone, with no new object, grow what the budget counts
        for i in range(300):
            repo.bookmark("add", f"mark-{i}", ref="HEAD")
        assert repo.budget().used - before >= 300 * 100


def test_no_budget_prunes_nothing(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        _configure(repo, BUDGET.replace(f"max_size = {300 * KB}", "max_size = 0"))
        ids = _states(repo, ws, 10)
        assert len(repo.show(ids[0], "big00.bin")) == 40 * KB
        assert repo.budget().used > 350 * KB


def test_status_and_du_show_the_budget(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    (ws / "a.txt").write_text("a\n")
    assert run_cli("snapshot", cwd=ws)[0] == 0
    status = as_json(run_cli("status", "--json", cwd=ws))
    assert status["budget"]["max_size"] == 0
    code, out, _ = run_cli("du", cwd=ws)
    assert code == 0 and "Storage budget: none" in out
    with (ws / ".strata" / "config.toml").open("a") as f:
        f.write('\n[retention]\nmax_size = "2 MB"\n')
    status = as_json(run_cli("status", "--json", cwd=ws))
    assert status["budget"]["max_size"] == 2 * 1024 * 1024
    assert 0 < status["budget"]["used"] < 2 * 1024 * 1024 and not status["budget"]["over"]
    code, out, _ = run_cli("status", cwd=ws)
    assert "Storage budget: " in out and "of 2.0 MiB" in out, out
    du = json.loads(run_cli("du", "--json", cwd=ws)[1])
    assert du["budget"]["max_size"] == 2 * 1024 * 1024


def test_a_budget_that_is_no_size_is_refused_in_one_line(ws: Path, run_cli: Any) -> None:
    assert run_cli("init", cwd=ws)[0] == 0
    with (ws / ".strata" / "config.toml").open("a") as f:
        f.write('\n[retention]\nmax_size = "lots"\n')
    assert_user_error(run_cli("gc", cwd=ws), says="max_size")


def test_sizes_are_read_as_people_write_them() -> None:
    assert parse_size(1000) == 1000
    assert parse_size("500 MB") == 500 * 1024 * 1024
    assert parse_size("2G") == 2 * 1024**3
    assert parse_size("1.5 GiB") == int(1.5 * 1024**3)
    for bad in ("lots", -1, True, "5 XB"):
        with pytest.raises(ValueError):
            parse_size(bad)
