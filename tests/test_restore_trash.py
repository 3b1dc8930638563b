"""Replacing files by swapping them out to a trash, and what a restore keeps from its check.

A restore replaces a file by exchanging it with the new one in one step
(``renameat2(RENAME_EXCHANGE)``) and moving the old one to the repository's
trash, emptied after the command; the path never lacks a file, an edit made
after the scan is still never overwritten, and nothing outside the workspace
is ever written.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strata import Repository
from strata.atomic import TEMP_PREFIX
from strata.core.restore import check_before_writing
from strata.errors import CorruptRepository, EntryInTheWay, UnsafeWorkspacePath
from strata.ids import ObjectId
from strata.store import fsops
from strata.store.fsops import WorkspaceWriter, empty_trash
from strata.store.materialize import Action
from strata.store.objects import hash_bytes

HAS_EXCHANGE = fsops._renameat2() is not None


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    return root


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_replaced_file_goes_to_the_trash_and_the_trash_empties(ws: Path, tmp_path: Path) -> None:
    trash = tmp_path / "trash"
    (ws / "sub" / "a.txt").write_text("old\n")
    (ws / "sub" / "b.txt").write_text("kept\n")
    with WorkspaceWriter(ws, trash=trash) as writer:
        writer.write_file("sub/a.txt", b"new\n", mode=0o644)
        writer.write_file("sub/c.txt", b"created\n", mode=0o644)  # nothing replaced
        assert writer.trashed == 1
    assert (ws / "sub" / "a.txt").read_text() == "new\n"
    assert _names(ws / "sub") == ["a.txt", "b.txt", "c.txt"]  # no temporary file left
    [old] = _names(trash)
    assert (trash / old).read_text() == "old\n"
    assert empty_trash(trash) == 1
    assert _names(trash) == []
    assert empty_trash(tmp_path / "no-such-trash") == 0


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_the_new_file_is_made_in_the_trash_and_only_its_name_appears(
    ws: Path, tmp_path: Path
) -> None:
    trash = tmp_path / "trash"
    (ws / "sub" / "a.txt").write_text("old\n")
    seen: list[list[str]] = []

    def watch_folder(*_: object) -> None:
        seen.append(_names(ws / "sub"))

    with WorkspaceWriter(ws, trash=trash) as writer:
        real_fchmod = os.fchmod
        try:
            os.fchmod = lambda fd, mode: (watch_folder(), real_fchmod(fd, mode))[1]
            writer.write_file("sub/a.txt", b"new\n", mode=0o644)
        finally:
            os.fchmod = real_fchmod
    assert seen == [["a.txt"]]  # while the new content was written, no temporary name beside
    assert (ws / "sub" / "a.txt").read_text() == "new\n"
    [old] = _names(trash)
    assert (trash / old).read_text() == "old\n"


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_set_group_id_folder_gives_its_group_to_a_rewritten_file(
    ws: Path, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder another group needs root")
    group = 4242
    os.chown(ws / "sub", -1, group)
    os.chmod(ws / "sub", 0o2775)
    (ws / "sub" / "a.txt").write_text("old\n")
    assert os.stat(ws / "sub" / "a.txt").st_gid == group
    with WorkspaceWriter(ws, trash=tmp_path / "trash", reuse_folders=True) as writer:
        writer.write_file("sub/a.txt", b"new\n", mode=0o644)
        writer.write_file("sub/b.txt", b"created\n", mode=0o644)
    assert os.stat(ws / "sub" / "a.txt").st_gid == group  # as a file made in the folder
    assert os.stat(ws / "sub" / "b.txt").st_gid == group


#: a default access list granting user 1234 rwx (the kernel's xattr form, as setfacl writes it)
_DEFAULT_ACL = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, qualifier)
    for tag, perm, qualifier in [
        (0x01, 7, 0xFFFFFFFF),  # owner
        (0x02, 7, 1234),  # user 1234
        (0x04, 5, 0xFFFFFFFF),  # owning group
        (0x10, 7, 0xFFFFFFFF),  # mask
        (0x20, 5, 0xFFFFFFFF),  # others
    ]
)


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_folder_with_a_default_access_list_gives_it_to_a_rewritten_file(
    ws: Path, tmp_path: Path
) -> None:
    try:
        os.setxattr(ws / "sub", "system.posix_acl_default", _DEFAULT_ACL)
    except OSError:
        pytest.skip("this file system keeps no access lists")
    (ws / "sub" / "a.txt").write_text("old\n")
    inherited = os.getxattr(ws / "sub" / "a.txt", "system.posix_acl_access")
    with WorkspaceWriter(ws, trash=tmp_path / "trash", reuse_folders=True) as writer:
        writer.write_file("sub/a.txt", b"new\n", mode=0o640)
    # the list a file made in the folder gets (its mask follows the mode's group bits)
    assert os.getxattr(ws / "sub" / "a.txt", "system.posix_acl_access")[:20] == inherited[:20]
    assert (ws / "sub" / "a.txt").read_text() == "new\n"


def _index_entry(trash: Path, name: str) -> tuple[str, tuple[int, int, int, int]]:
    st = (trash / name).lstat()
    return name, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_file_in_the_trash_is_taken_back_only_when_it_holds_the_object(
    ws: Path, tmp_path: Path
) -> None:
    trash = tmp_path / "trash"
    trash.mkdir()
    (ws / "sub" / "a.txt").write_text("current\n")
    wanted = b"wanted\n"
    oid = hash_bytes(wanted)
    (trash / "kept").write_bytes(b"other!\n")  # same size, other bytes, its stat recorded
    index = {("sub/a.txt", str(oid)): _index_entry(trash, "kept")}
    with WorkspaceWriter(ws, trash=trash, trash_index=index) as writer:
        writer.write_file("sub/a.txt", wanted, mode=0o644, oid=oid)
    assert (ws / "sub" / "a.txt").read_bytes() == wanted  # written anew
    assert (trash / "kept").read_bytes() == b"other!\n"

    (trash / "good").write_bytes(wanted)
    os.chmod(trash / "good", 0o600)
    good = (trash / "good").stat().st_ino
    index = {("sub/a.txt", str(oid)): _index_entry(trash, "good")}
    (ws / "sub" / "a.txt").write_text("current\n")
    with WorkspaceWriter(ws, trash=trash, trash_index=index) as writer:
        st = writer.write_file("sub/a.txt", wanted, mode=0o751, oid=oid)
        assert writer.known == {}  # written just now: an edit could still hide in its mtime
    assert st.st_ino == good == (ws / "sub" / "a.txt").stat().st_ino  # taken back
    assert (ws / "sub" / "a.txt").stat().st_mode & 0o777 == 0o751  # with the mode asked for
    assert (ws / "sub" / "a.txt").read_bytes() == wanted
    assert (trash / "good").read_text() == "current\n"  # the replaced file took its name

    (trash / "old").write_bytes(wanted)
    os.utime(trash / "old", ns=(time.time_ns() - 10**10,) * 2)  # last written 10 s ago
    index = {("sub/b.txt", str(oid)): _index_entry(trash, "old")}
    with WorkspaceWriter(ws, trash=trash, trash_index=index) as writer:
        st = writer.write_file("sub/b.txt", wanted, mode=0o644, oid=oid)
        assert writer.known == {"sub/b.txt": (st, str(oid))}  # a scan may take it as read


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_file_in_the_trash_with_another_link_is_not_taken_back(ws: Path, tmp_path: Path) -> None:
    trash = tmp_path / "trash"
    trash.mkdir()
    wanted = b"wanted\n"
    (trash / "linked").write_bytes(wanted)
    os.link(trash / "linked", ws / "twin.txt")  # swapped back, the path would share it
    index = {("a.txt", str(hash_bytes(wanted))): _index_entry(trash, "linked")}
    with WorkspaceWriter(ws, trash=trash, trash_index=index) as writer:
        writer.write_file("a.txt", wanted, mode=0o644, oid=hash_bytes(wanted))
    assert (ws / "a.txt").stat().st_ino != (ws / "twin.txt").stat().st_ino
    assert (ws / "a.txt").read_bytes() == wanted
    assert (trash / "linked").exists()


def test_without_a_trash_the_replaced_file_is_unlinked(ws: Path) -> None:
    (ws / "sub" / "a.txt").write_text("old\n")
    os.link(ws / "sub" / "a.txt", ws / "twin.txt")
    with WorkspaceWriter(ws) as writer:
        writer.write_file("sub/a.txt", b"new\n", mode=0o600)
        assert writer.trashed == 0
    assert (ws / "sub" / "a.txt").read_text() == "new\n"
    assert (ws / "twin.txt").read_text() == "old\n"  # a hard link is replaced, not written
    assert os.stat(ws / "twin.txt").st_nlink == 1  # the swapped-out name is gone
    assert _names(ws / "sub") == ["a.txt"]


def test_a_trash_on_another_file_system_is_not_used(ws: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(ws).st_dev:
        pytest.skip("no second file system to put the trash on")
    trash = shm / f"strata-test-trash-{os.getpid()}"
    try:
        (ws / "a.txt").write_text("old\n")
        with WorkspaceWriter(ws, trash=trash) as writer:
            writer.write_file("a.txt", b"new\n", mode=0o644)
            assert writer.trashed == 0
        assert (ws / "a.txt").read_text() == "new\n"
        assert _names(ws) == ["a.txt", "sub"]
        assert _names(trash) == []
    finally:
        empty_trash(trash)
        trash.rmdir()


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_folder_that_takes_the_place_of_the_file_is_swapped_back(ws: Path) -> None:
    (ws / "sub" / "late").mkdir()
    (ws / "sub" / "late" / "inside.txt").write_text("user's\n")
    temp = TEMP_PREFIX + "test"
    (ws / "sub" / temp).write_text("new\n")
    fd = os.open(ws / "sub", os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(EntryInTheWay):
            fsops._swap_into_place(fd, temp, fd, "late", "sub/late")
    finally:
        os.close(fd)
    assert (ws / "sub" / "late" / "inside.txt").read_text() == "user's\n"
    assert (ws / "sub" / temp).read_text() == "new\n"  # the caller removes its temporary file


def test_a_kept_folder_handle_never_follows_a_symlink_planted_after(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with WorkspaceWriter(ws, reuse_folders=True) as writer:
        writer.write_file("sub/a.txt", b"a\n", mode=0o644)
        os.rename(ws / "sub", tmp_path / "parked")
        (ws / "sub").symlink_to(outside)
        writer.write_file("sub/b.txt", b"b\n", mode=0o644)  # the folder it had open
        assert _names(outside) == []
        assert _names(tmp_path / "parked") == ["a.txt", "b.txt"]
        with pytest.raises(UnsafeWorkspacePath):  # making a folder walks afresh
            writer.make_dir("sub/new")
        with pytest.raises(UnsafeWorkspacePath):  # and drops the kept handle
            writer.write_file("sub/c.txt", b"c\n", mode=0o644)
    assert _names(tmp_path / "parked") == ["a.txt", "b.txt"]
    assert _names(outside) == []


def test_an_edit_made_after_the_scan_is_kept_while_the_rest_is_rewound(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"one {i}\n")
    repo = Repository.init(ws)
    first = repo.snapshot("one").event
    assert first is not None
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"two {i}\n")
    repo.snapshot("two")
    core = repo
    scan = core.workspace.scan()
    actions = core.workspace.plan(scan, repo.resolve(first.id).tree)
    (ws / "f7.txt").write_text("touched during the rewind\n")  # after the scan
    report = core.workspace.apply(actions)
    assert report.skipped == ["f7.txt"]
    assert (ws / "f7.txt").read_text() == "touched during the rewind\n"
    assert all((ws / f"f{i}.txt").read_text() == f"one {i}\n" for i in range(20) if i != 7)
    assert report.trashed == 19
    assert _names(core.layout.trash) == []  # emptied at the end of a command run locally


def _write_actions(repo: Repository, sizes: list[int]) -> tuple[list[Action], list[bytes]]:
    contents = [bytes([65 + i]) * size for i, size in enumerate(sizes)]
    actions = []
    for i, data in enumerate(contents):
        oid = repo.objects.put(data)
        actions.append(Action("write", f"f{i}", oid=oid, mode=0o644))
    repo.objects.flush()
    return actions, contents


def test_the_check_refuses_a_corrupt_object_before_any_write(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path)
    actions, _ = _write_actions(repo, [100, 200])
    loose = Path(repo.objects._loose(ObjectId(actions[1].oid)))  # type: ignore[attr-defined]
    os.chmod(loose, 0o644)
    loose.write_bytes(b"not a zstd frame")
    with pytest.raises(CorruptRepository):
        check_before_writing(repo.objects, tmp_path, actions)
    assert not (tmp_path / "f0").exists() and not (tmp_path / "f1").exists()


@pytest.fixture
def keeping_watcher() -> Iterator[Callable[[int], None]]:
    """``keep(cap)``: this process keeps its trash as a watcher does (undone at the end)."""
    from strata.watch import served

    yield served.keep_trash
    served.keep_trash(None)
    served.take_kept_trash()


def _rewind_served(repo: Repository, ref: str) -> None:
    """``repo.rewind(ref)`` as a watcher runs it for an asker, then the answer is sent."""
    from strata.watch import served

    served.serving()
    try:
        repo.rewind(ref)
    finally:
        served.replied()


def _states(ws: Path, count: int) -> tuple[Repository, list[str]]:
    """A repository whose ten files of 40 kB hold other bytes in each of ``count`` snapshots."""
    ws.mkdir()
    repo = Repository.init(ws)
    ids = []
    for n in range(count):
        for i in range(10):
            (ws / f"f{i}.bin").write_bytes(bytes([i + 16 * n]) * 40_000)
        event = repo.snapshot(f"state {n}").event
        assert event is not None
        ids.append(event.id)
    return repo, ids


def _holds_state(ws: Path, n: int) -> bool:
    return all((ws / f"f{i}.bin").read_bytes() == bytes([i + 16 * n]) * 40_000 for i in range(10))


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_watcher_keeps_the_replaced_files_until_its_cap_then_empties_at_once(
    tmp_path: Path, keeping_watcher: Callable[[int], None]
) -> None:
    """Replaced files wait in a watcher's trash, up to a cap; a rewind past it empties it.

    Without a watcher (the first rewind) the trash is emptied before the
    command ends; a watcher leaves it for when the workspace is quiet, unless
    what it would then hold passes the cap: then it is emptied once the
    asker has its answer, with what earlier commands left.
    """
    from strata.watch import served

    ws = tmp_path / "ws"
    repo, ids = _states(ws, 4)
    trash = repo.layout.trash

    repo.rewind(ids[0])  # no watcher: emptied at once
    assert _names(trash) == []

    keeping_watcher(1 << 20)
    _rewind_served(repo, ids[1])
    assert len(_names(trash)) == 10  # left for the watcher: 400 kB of its 1 MiB
    assert served.kept_trash() == {
        str(trash): sum((trash / n).lstat().st_blocks * 512 for n in _names(trash))
    }
    assert _holds_state(ws, 1)
    _rewind_served(repo, ids[2])
    assert len(_names(trash)) == 20  # 800 kB

    _rewind_served(repo, ids[3])  # 1.2 MB would pass the cap: emptied after the answer
    deadline = time.monotonic() + 10
    while _names(trash):
        assert time.monotonic() < deadline, "the trash past its cap was not emptied"
        time.sleep(0.02)
    assert served.kept_trash() == {}
    assert _holds_state(ws, 3)
    assert repo.check() == []


def _inodes(ws: Path) -> list[int]:
    return [(ws / f"f{i}.bin").stat().st_ino for i in range(10)]


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_going_back_and_forth_swaps_the_same_files_back_from_the_trash(
    tmp_path: Path, keeping_watcher: Callable[[int], None]
) -> None:
    """A rewind back to where a watcher's rewind came from takes the replaced files back."""
    from strata.watch import served

    ws = tmp_path / "ws"
    repo, ids = _states(ws, 2)
    trash = repo.layout.trash
    keeping_watcher(1 << 30)
    at_two = _inodes(ws)
    _rewind_served(repo, ids[0])
    assert _holds_state(ws, 0)
    at_one = _inodes(ws)
    assert not set(at_one) & set(at_two)  # written anew: nothing to take back yet
    _rewind_served(repo, ids[1])
    assert _holds_state(ws, 1)
    assert _inodes(ws) == at_two  # the very files the first rewind replaced
    assert len(_names(trash)) == 10  # and state one's files wait there in their place
    _rewind_served(repo, ids[0])
    assert _holds_state(ws, 0)
    assert _inodes(ws) == at_one
    assert served.kept_trash()[str(trash)] == sum(
        (trash / n).lstat().st_blocks * 512 for n in _names(trash)
    )
    assert repo.check() == []
    assert repo.status().clean


def _background_done() -> None:
    """Wait for the work a served command left for after its answer."""
    for thread in threading.enumerate():
        if thread.name == "strata-background":
            thread.join(30)


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_files_taken_back_from_the_trash_are_not_read_again_by_the_next_scan(
    tmp_path: Path, keeping_watcher: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their bytes were checked as they came back: the watcher's refresh takes them as read."""
    from strata.store.scan import Scanner

    ws = tmp_path / "ws"
    repo, ids = _states(ws, 2)
    keeping_watcher(1 << 30)
    _rewind_served(repo, ids[0])
    _background_done()
    time.sleep(0.2)
    repo.status()  # state one's files, just written, are read once more (racy until now)
    read: list[str] = []
    hash_one = Scanner._hash_one

    def spy(self: Scanner, job: Any) -> Any:
        read.append(str(job))
        return hash_one(self, job)

    monkeypatch.setattr(Scanner, "_hash_one", spy)
    _rewind_served(repo, ids[1])  # every file taken back
    _background_done()
    assert read == []
    monkeypatch.undo()
    assert _holds_state(ws, 1)
    assert repo.status().clean
    (ws / "f4.bin").write_bytes(b"x" * 40_000)  # a same-size edit right after
    status = repo.status()
    assert [c.path for c in status.changes] == ["f4.bin"]


@pytest.mark.skipif(not HAS_EXCHANGE, reason="renameat2 is not available")
def test_a_replaced_file_written_to_after_is_not_taken_back(
    tmp_path: Path, keeping_watcher: Callable[[int], None]
) -> None:
    """A process that still had a replaced file open may change it in the trash."""
    ws = tmp_path / "ws"
    repo, ids = _states(ws, 2)
    keeping_watcher(1 << 30)
    with open(ws / "f3.bin", "r+b") as held:  # state two's file, open across the rewinds
        _rewind_served(repo, ids[0])
        held.seek(100)
        held.write(b"written through the old handle")
        held.flush()
        _rewind_served(repo, ids[1])
    assert _holds_state(ws, 1)
    assert repo.status().clean
