"""Finding and reconnecting repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata import Repository
from strata.errors import UsageError


def test_init_with_the_same_store_reconnects_a_workspace_whose_pointer_was_deleted(
    tmp_path: Path,
) -> None:
    ws, store = tmp_path / "ws", tmp_path / "store"
    ws.mkdir()
    (ws / "a.txt").write_text("kept\n")
    with Repository.init(ws, store=store) as repo:
        first = repo.snapshot("one").event
    assert first is not None
    (ws / ".strata").unlink()  # what 'git clean -fdx' or 'rm -rf .strata' does
    with Repository.init(ws, store=store) as repo:
        assert [e.id for e in repo.history()] == [first.id]
        assert repo.check() == []


def test_a_store_of_another_workspace_is_refused(tmp_path: Path) -> None:
    one, two, store = tmp_path / "one", tmp_path / "two", tmp_path / "store"
    one.mkdir()
    two.mkdir()
    Repository.init(one, store=store).close()
    with pytest.raises(UsageError, match="belongs to the workspace"):
        Repository.init(two, store=store)
    assert not (two / ".strata").exists()
