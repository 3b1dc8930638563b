"""A restore that writes many files shares them between two threads.

What a user sees must not change: the target tree exactly, the files listed
in the plan's order, an edit made after the scan kept wherever it falls, the
replaced files in the trash, and a corrupt object stopping the restore.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strata import Repository
from strata.errors import CorruptRepository
from strata.store import materialize
from strata.store.materialize import PARALLEL_WRITES, apply_actions
from strata.store.objects import compress

FOLDERS = 6
PER_FOLDER = 60  # 360 writes: more than PARALLEL_WRITES


def _two_states(tmp_path: Path) -> tuple[Repository, str, str]:
    ws = tmp_path / "ws"
    for state in ("one", "two"):
        for d in range(FOLDERS):
            (ws / f"d{d}").mkdir(parents=True, exist_ok=True)
            for i in range(PER_FOLDER):
                (ws / f"d{d}" / f"f{i}.txt").write_text(f"{state} {d} {i}\n" * 20)
        if state == "one":
            repo = Repository.init(ws)
            one = repo.snapshot("one").event
        else:
            two = repo.snapshot("two").event
    assert one is not None and two is not None
    return repo, one.id, two.id


def _plan(repo: Repository, target: str) -> list[materialize.Action]:
    scan = repo.workspace.scan()
    return repo.workspace.plan(scan, repo.resolve(target).tree)


def test_a_large_rewind_writes_on_two_threads_and_reports_in_plan_order(tmp_path: Path) -> None:
    assert FOLDERS * PER_FOLDER >= PARALLEL_WRITES
    repo, one, _two = _two_states(tmp_path)
    ws = repo.root
    actions = _plan(repo, one)
    writes = [a.path for a in actions if a.op == "write"]
    assert len(writes) == FOLDERS * PER_FOLDER
    # edits after the scan, in the first and in the last folder (each thread's share)
    (ws / "d0" / "f3.txt").write_text("edited in the first share\n")
    (ws / f"d{FOLDERS - 1}" / "f7.txt").write_text("edited in the last share\n")
    threads: set[int] = set()
    apply_one = materialize._apply_one

    def spy(*args: object, **kwargs: object) -> None:
        import threading

        threads.add(threading.get_ident())
        apply_one(*args, **kwargs)  # type: ignore[arg-type]

    materialize._apply_one = spy  # type: ignore[assignment]
    try:
        report = repo.workspace.apply(actions)
    finally:
        materialize._apply_one = apply_one  # type: ignore[assignment]
    assert len(threads) == min(2, len(os.sched_getaffinity(0)))
    kept = {"d0/f3.txt", f"d{FOLDERS - 1}/f7.txt"}
    assert sorted(report.skipped) == sorted(kept)
    assert report.written == [p for p in writes if p not in kept]  # the plan's order
    assert report.trashed == len(writes) - 2
    for d in range(FOLDERS):
        for i in range(PER_FOLDER):
            path = f"d{d}/f{i}.txt"
            text = (ws / path).read_text()
            assert text == (f"one {d} {i}\n" * 20 if path not in kept else text)
    assert (ws / "d0" / "f3.txt").read_text() == "edited in the first share\n"
    assert os.listdir(repo.layout.trash) == []  # no watcher: emptied at once
    assert not [p for p in ws.rglob(".strata-tmp-*")]


@pytest.mark.parametrize("share", ["first", "second"])
def test_a_corrupt_object_stops_a_rewind_written_on_two_threads(tmp_path: Path, share: str) -> None:
    """Whichever thread meets it, the restore raises and never installs what it read."""
    repo, one, _two = _two_states(tmp_path)
    actions = _plan(repo, one)
    writes = [a for a in actions if a.op == "write"]
    half = writes[: len(writes) // 3] if share == "first" else writes[-len(writes) // 3 :]
    store = repo.objects
    bad = half[len(half) // 2]
    packed = store._in_pack(bad.oid)  # type: ignore[attr-defined]
    if packed is not None:  # (read from its pack: no longer a zstd frame there)
        pack, offset, length = packed
        with open(pack, "r+b") as f:
            f.seek(offset)
            f.write(b"\xff" * length)
    else:
        path = store.root / bad.oid[:2] / bad.oid[2:]
        os.chmod(path, 0o644)
        path.write_bytes(compress(b"not what was stored\n"))
    with pytest.raises(CorruptRepository) as info:
        apply_actions(store, repo.root, actions)
    assert bad.oid in str(info.value)
    assert (repo.root / bad.path).read_text() != "not what was stored\n"
