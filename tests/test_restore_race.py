"""A rewind can never be made to write outside the workspace."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from strata import Repository
from strata.errors import FolderNotWritable


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = Path(dirpath, name)
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_a_symlink_planted_where_a_folder_was_is_replaced_not_followed(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (ws / "sub").mkdir()
    (ws / "sub" / "a.txt").write_text("recorded")
    repo = Repository.init(ws)
    first = repo.snapshot("first").event
    assert first is not None
    # an agent swaps the folder for a symlink to outside
    (ws / "sub" / "a.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(outside)
    result = repo.rewind(first.id)
    assert result.auto_save is not None  # the symlink was recorded first
    assert (ws / "sub").is_dir() and not (ws / "sub").is_symlink()
    assert (ws / "sub" / "a.txt").read_text() == "recorded"
    assert _files(outside) == {"keep.txt": b"mine"}
    assert repo.check() == []


def test_a_folder_swapped_for_a_symlink_during_a_rewind_writes_nothing_outside(
    tmp_path: Path,
) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    deep = ws / "sub" / "deep"
    deep.mkdir(parents=True)
    for i in range(300):
        (deep / f"f{i}.txt").write_text(f"version one {i}\n")
    repo = Repository.init(ws)
    first = repo.snapshot("one").event
    assert first is not None
    for i in range(300):
        (deep / f"f{i}.txt").write_text(f"version two {i}\n")
    repo.snapshot("two")

    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        link = tmp_path / "link"
        parked = tmp_path / "parked"
        while not stop.is_set():
            try:
                os.symlink(outside, link)
                os.rename(ws / "sub", parked)  # take the real folder away
                os.rename(link, ws / "sub")  # a symlink to outside takes its place
                swaps += 1
                os.unlink(ws / "sub")
                os.rename(parked, ws / "sub")  # and back
            except OSError:
                if (ws / "sub").is_symlink():
                    os.unlink(ws / "sub")
                if parked.exists() and not (ws / "sub").exists():
                    os.rename(parked, ws / "sub")
                if link.is_symlink():
                    link.unlink()

    thread = threading.Thread(target=swapper)
    thread.start()
    result = None
    try:
        result = repo.rewind(first.id)
    except FolderNotWritable:
        pass  # the race made a folder look unwritable: refused before the first write
    finally:
        stop.set()
        thread.join()
    assert swaps > 0
    assert _files(outside) == {}, "a write escaped the workspace"
    # whatever the race did, nothing unrecorded was lost and the repository is sound
    assert repo.check() == []
    if result is not None:
        written = {p for p in result.restored_paths if p.startswith("sub/deep/")}
        skipped = set(result.skipped_paths)
        assert written | skipped  # the rewind did work or reported why not
    # a second rewind, without interference, finishes the job exactly
    repo.rewind(first.id)
    assert all((deep / f"f{i}.txt").read_text() == f"version one {i}\n" for i in range(300))
