"""The store maintains itself: packs merged geometrically, loose objects packed, crash-safe."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import open_repo, write_tree
from strata import Repository
from strata.core import upkeep
from strata.core.upkeep import geometric_split
from strata.layout import load_config
from strata.store.objects import DiskObjectStore
from test_crash import assert_repository_sound, kill_at_step, record_steps, strata


def test_geometric_split_merges_the_smallest_packs_until_the_progression_holds() -> None:
    assert geometric_split([]) == 0
    assert geometric_split([100]) == 0
    assert geometric_split([100, 200, 400]) == 0  # a progression already
    assert geometric_split([100, 100]) == 2
    assert geometric_split([100, 100, 200]) == 3  # the merged 200 breaks it with the next
    assert geometric_split([100, 100, 1000]) == 2
    assert geometric_split([10, 5000, 5000, 100_000]) == 3
    assert geometric_split([1000, 4000], extra=900) == 1  # the loose ones join the smallest
    assert geometric_split([1000, 4000], extra=0) == 0


def _event(repo: Repository, ws: Path, n: int, files: int = 100) -> None:
    """One state event bringing ``files`` new objects (more than 64: they go to a pack)."""
    write_tree(
        ws, {f"d{i % 10}/f{i:04}.txt": f"event {n} file {i}\n".encode() for i in range(files)}
    )
    repo.snapshot(message=f"event {n}")


def _store(repo: Repository) -> DiskObjectStore:
    store = repo.objects
    assert isinstance(store, DiskObjectStore)
    return store


def test_packs_stay_few_over_many_large_events_and_every_state_restores(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        counts = []
        for n in range(24):
            _event(repo, ws, n)
            counts.append(len(_store(repo).packs()))
        assert max(counts) <= upkeep.PACK_LIMIT + 1, counts
        # without upkeep every event would have left a pack of its own
        assert len(_store(repo).packs()) < 8
        assert repo.check() == []
        states = {e.rationale: e.id for e in repo.history(action="snapshot")}
        for n in (0, 11, 23):
            repo.rewind(states[f"event {n}"])
            assert (ws / "d3" / "f0003.txt").read_text() == f"event {n} file 3\n"


def test_auto_repack_can_be_turned_off(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        with (repo.layout.config).open("a") as f:
            f.write("\n[retention]\nauto_repack = false\n")
        repo.config = load_config(repo.layout)
        for n in range(8):
            _event(repo, ws, n)
        assert len(_store(repo).packs()) == 8


def test_many_small_events_do_not_pile_up_loose_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "LOOSE_LIMIT", 256)  # the default 2,048 takes 40 events
    ws = tmp_path / "ws"
    ws.mkdir()
    with open_repo(ws) as repo:
        for n in range(30):  # 30 files each: below the pack threshold, written loose
            _event(repo, ws, n, files=30)
        store = _store(repo)
        loose = sum(1 for _ in store.loose_ids())
        assert loose < 700, loose  # 30 x (30 blobs + trees + manifest) without upkeep
        assert store.packs()
        assert repo.check() == []


def _five_packs(ws: Path) -> None:
    ws.mkdir()
    with open_repo(ws) as repo:
        with (repo.layout.config).open("a") as f:
            f.write("\n[retention]\nauto_repack = false\n")
        repo.config = load_config(repo.layout)
        for n in range(5):
            _event(repo, ws, n)
        config = repo.layout.config
        config.write_text(config.read_text().replace("auto_repack = false", ""))
    write_tree(ws, {f"new/f{i:03}.txt": f"new {i}\n".encode() for i in range(100)})


@pytest.mark.slow
def test_a_snapshot_killed_at_any_step_of_its_repack_leaves_a_sound_repository(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    _five_packs(base)
    with Repository.open(base) as repo:
        first_event = repo.history(action="snapshot")[-1].id
    probe = tmp_path / "probe"
    shutil.copytree(base, probe, symlinks=True)
    steps = record_steps(["snapshot", "-m", "sixth"], probe)
    with Repository.open(probe) as repo:
        assert len(_store(repo).packs()) < 6, "the snapshot did not repack"
    # the repack's steps: from the first write into a pack made by the repack on
    first = next(
        i
        for i, s in enumerate(steps, 1)
        if any("/packs/" in p for p in s.paths) and s.func == "replace"
    )
    # six kill points spread over them, up to a few steps before the end: a copy's run may
    # take a step or two fewer than the probe's (files the stat cache finds racily clean)
    span = len(steps) - 3 - first
    chosen = sorted({first + span * k // 5 for k in range(6)})
    for number in chosen:
        ws = tmp_path / f"kill{number}"
        shutil.copytree(base, ws, symlinks=True)
        kill_at_step(["snapshot", "-m", "sixth"], ws, number)
        assert_repository_sound(ws)
        assert strata("rewind", first_event, cwd=ws).returncode == 0
        assert (ws / "d3" / "f0003.txt").read_text() == "event 0 file 3\n"
        shutil.rmtree(ws)
