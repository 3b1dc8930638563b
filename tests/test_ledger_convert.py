"""Choosing the ledger driver and converting between drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ALICE
from strata import Repository
from strata.errors import UsageError


def _history(repo: Repository) -> list[tuple[str, str, str | None]]:
    return [(e.id, e.action_type, e.snapshot_ref) for e in repo.history()]


@pytest.mark.parametrize("first", ["sqlite", "jsonl"])
def test_convert_round_trips_with_the_same_ids_and_chain_head(tmp_path: Path, first: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Repository.init(ws, ledger=first, author=ALICE) as repo:
        (ws / "a.txt").write_text("one\n")
        one = repo.snapshot("one").event
        (ws / "a.txt").write_text("two\n")
        repo.snapshot("two")
        assert one is not None
        repo.rewind(one.id)
        repo.bookmark("add", "start", ref=one.id)
        head, history, view = repo.ledger.chain_head(), _history(repo), repo.view()
        other = "jsonl" if first == "sqlite" else "sqlite"
        result = repo.convert_ledger(other)
        assert result.head == head and result.driver == other
    with Repository.open(ws) as repo:
        assert repo.ledger.driver.name == other
        assert repo.ledger.chain_head() == head
        assert _history(repo) == history
        assert repo.view() == view
        assert repo.check() == []
        repo.convert_ledger(first)  # and back
    with Repository.open(ws) as repo:
        assert repo.ledger.driver.name == first
        assert repo.ledger.chain_head() == head
        assert _history(repo) == history
        (ws / "a.txt").write_text("three\n")
        assert repo.snapshot("after the round trip").event is not None
        assert repo.check() == []


def test_converting_to_the_current_driver_is_refused(tmp_path: Path) -> None:
    with Repository.init(tmp_path, author=ALICE) as repo, pytest.raises(UsageError):
        repo.convert_ledger("sqlite")


def test_a_jsonl_repository_records_rewinds_and_undoes(tmp_path: Path) -> None:
    with Repository.init(tmp_path, ledger="jsonl", author=ALICE) as repo:
        (tmp_path / "f").write_text("1")
        first = repo.snapshot("1").event
        (tmp_path / "f").write_text("2")
        repo.snapshot("2")
        assert first is not None
        repo.rewind(first.id)
        assert (tmp_path / "f").read_text() == "1"
        repo.undo()
        assert (tmp_path / "f").read_text() == "2"
        assert repo.ledger.verify() is None
        assert repo.check() == []
    assert (tmp_path / ".strata" / "ledger" / "events.jsonl").is_file()
