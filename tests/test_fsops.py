from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.atomic import TEMP_PREFIX, sync_filesystem
from strata.errors import (
    EntryInTheWay,
    ObjectMissing,
    PathError,
    PathOutsideWorkspace,
    ProtectedPath,
    StrataError,
    UnsafeWorkspacePath,
)
from strata.store import fsops
from strata.store.fsops import WorkspaceWriter


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the workspace that nothing may ever write into."""
    out = tmp_path / "outside"
    (out / "deep").mkdir(parents=True)
    (out / "victim.txt").write_bytes(b"precious")
    return out


@pytest.fixture
def writer(ws: Path) -> Iterator[WorkspaceWriter]:
    with WorkspaceWriter(ws) as w:
        yield w


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def tree(folder: Path) -> dict[str, tuple[str, bytes | str | None]]:
    """Every entry below ``folder`` (never following symlinks): kind and content."""
    found: dict[str, tuple[str, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = str(full.relative_to(folder))
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(mode):
                found[rel] = ("dir", None)
            else:
                found[rel] = ("file", full.read_bytes())
    return found


def temp_leftovers(folder: Path) -> list[str]:
    return [
        os.path.join(dirpath, name)
        for dirpath, dirnames, filenames in os.walk(folder)
        for name in dirnames + filenames
        if name.startswith(TEMP_PREFIX)
    ]


def open_fds() -> int:
    # what earlier tests left for the garbage collector is closed first, so that it is not
    # closed while this is counted
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


# -- write_file ----------------------------------------------------------------


def test_write_file_creates_the_file_and_returns_its_lstat(
    ws: Path, writer: WorkspaceWriter
) -> None:
    st_written = writer.write_file("a.txt", b"hello", mode=0o644)
    assert (ws / "a.txt").read_bytes() == b"hello"
    st_disk = (ws / "a.txt").lstat()
    assert stat.S_ISREG(st_written.st_mode)
    for field in ("st_ino", "st_dev", "st_size", "st_mode", "st_mtime_ns", "st_ctime_ns"):
        assert getattr(st_written, field) == getattr(st_disk, field), field
    assert temp_leftovers(ws) == []


def test_write_file_overwrites_by_replacing_the_entry(ws: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("a.txt", b"old content that is longer", mode=0o644)
    old_ino = (ws / "a.txt").lstat().st_ino
    st_new = writer.write_file("a.txt", [b"new"], mode=0o644)
    assert (ws / "a.txt").read_bytes() == b"new"
    assert st_new.st_ino != old_ino


def test_write_file_does_not_write_through_a_hard_link(
    ws: Path, outside: Path, writer: WorkspaceWriter
) -> None:
    os.link(outside / "victim.txt", ws / "linked.txt")
    writer.write_file("linked.txt", b"new", mode=0o644)
    assert (ws / "linked.txt").read_bytes() == b"new"
    assert (outside / "victim.txt").read_bytes() == b"precious"


@pytest.mark.parametrize("target_name", ["victim.txt", "deep", "missing"])
def test_write_file_replaces_a_symlink_at_the_path(
    ws: Path, outside: Path, writer: WorkspaceWriter, target_name: str
) -> None:
    before = tree(outside)
    (ws / "a.txt").symlink_to(outside / target_name)
    writer.write_file("a.txt", b"mine", mode=0o644)
    assert not (ws / "a.txt").is_symlink()
    assert (ws / "a.txt").read_bytes() == b"mine"
    assert tree(outside) == before


def test_write_file_creates_missing_parents(
    ws: Path, writer: WorkspaceWriter, umask: Callable[[int], None]
) -> None:
    umask(0o022)
    writer.write_file("a/b/c/d.txt", b"x", mode=0o644)
    assert (ws / "a/b/c/d.txt").read_bytes() == b"x"
    for folder in ("a", "a/b", "a/b/c"):
        assert stat.S_ISDIR((ws / folder).lstat().st_mode)
        assert stat.S_IMODE((ws / folder).lstat().st_mode) == 0o755


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755, 0o777, 0o000, 0o640])
@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o777])
def test_write_file_mode_is_exact_regardless_of_umask(
    ws: Path, writer: WorkspaceWriter, umask: Callable[[int], None], mode: int, mask: int
) -> None:
    umask(mask)
    st_written = writer.write_file("f", b"x", mode=mode)
    assert stat.S_IMODE((ws / "f").lstat().st_mode) == mode
    assert stat.S_IMODE(st_written.st_mode) == mode


def test_write_file_drops_setuid_setgid_and_sticky_bits(ws: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("f", b"x", mode=0o7755)
    assert stat.S_IMODE((ws / "f").lstat().st_mode) == 0o755
    writer.write_file("g", b"x", mode=stat.S_IFREG | 0o644)
    assert stat.S_IMODE((ws / "g").lstat().st_mode) == 0o644


def test_write_file_accepts_chunks_of_any_shape(ws: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("gen", (bytes([i]) * 1000 for i in range(256)), mode=0o644)
    assert (ws / "gen").read_bytes() == b"".join(bytes([i]) * 1000 for i in range(256))
    writer.write_file("empty", [], mode=0o644)
    assert (ws / "empty").read_bytes() == b""
    writer.write_file("empty2", b"", mode=0o644)
    assert (ws / "empty2").read_bytes() == b""
    writer.write_file("mv", memoryview(b"view"), mode=0o644)
    assert (ws / "mv").read_bytes() == b"view"


def test_write_file_failure_removes_the_temp_file_and_keeps_the_old_file(
    ws: Path, writer: WorkspaceWriter
) -> None:
    writer.write_file("d/f", b"original", mode=0o644)

    def failing() -> Iterator[bytes]:
        yield b"partial"
        raise ObjectMissing("0" * 64)

    with pytest.raises(ObjectMissing):
        writer.write_file("d/f", failing(), mode=0o644)
    assert (ws / "d/f").read_bytes() == b"original"
    assert temp_leftovers(ws) == []
    assert sorted(os.listdir(ws / "d")) == ["f"]


def test_write_file_refuses_a_folder_in_the_way(ws: Path, writer: WorkspaceWriter) -> None:
    (ws / "d" / "inner").mkdir(parents=True)
    with pytest.raises(EntryInTheWay, match="folder is in the way") as info:
        writer.write_file("d", b"x", mode=0o644)
    assert not isinstance(info.value, UnsafeWorkspacePath)
    assert (ws / "d" / "inner").is_dir()
    assert temp_leftovers(ws) == []


# -- the static symlink case ---------------------------------------------------


@pytest.mark.parametrize("path", ["esc/f", "esc/deep/f", "esc/new/newer/f", "real/esc/deep/f"])
def test_write_through_a_planted_symlink_is_refused(
    ws: Path, outside: Path, writer: WorkspaceWriter, path: str
) -> None:
    (ws / "real").mkdir()
    (ws / "esc").symlink_to(outside)
    (ws / "real" / "esc").symlink_to(outside)
    before = tree(outside)
    with pytest.raises(UnsafeWorkspacePath) as info:
        writer.write_file(path, b"pwned", mode=0o644)
    assert info.value.path == path
    with pytest.raises(UnsafeWorkspacePath):
        writer.write_symlink(path, "/etc/passwd")
    with pytest.raises(UnsafeWorkspacePath):
        writer.make_dir(path)
    with pytest.raises(UnsafeWorkspacePath):
        writer.remove_file(path.rsplit("/", 1)[0] + "/victim.txt")
    with pytest.raises(UnsafeWorkspacePath):
        writer.chmod(path.rsplit("/", 1)[0] + "/victim.txt", 0o777)
    assert tree(outside) == before
    assert stat.S_IMODE((outside / "victim.txt").stat().st_mode) != 0o777


def test_a_file_on_the_way_is_unsafe_too(ws: Path, writer: WorkspaceWriter) -> None:
    (ws / "file").write_bytes(b"x")
    with pytest.raises(UnsafeWorkspacePath):
        writer.write_file("file/f", b"y", mode=0o644)
    with pytest.raises(UnsafeWorkspacePath):
        writer.lstat("file/f")
    assert (ws / "file").read_bytes() == b"x"


# -- symlinks ------------------------------------------------------------------


def test_write_symlink(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    st_link = writer.write_symlink("a/link", "../target")
    assert os.readlink(ws / "a" / "link") == "../target"
    assert stat.S_ISLNK(st_link.st_mode)
    assert st_link.st_ino == (ws / "a" / "link").lstat().st_ino
    assert writer.read_link("a/link") == "../target"

    # A symlink may point anywhere; writing it never touches the target.
    before = tree(outside)
    writer.write_symlink("a/link", str(outside / "victim.txt"))
    assert os.readlink(ws / "a" / "link") == str(outside / "victim.txt")
    # Replacing a file, and a symlink that points at a folder.
    (ws / "file").write_bytes(b"x")
    writer.write_symlink("file", "elsewhere")
    assert os.readlink(ws / "file") == "elsewhere"
    (ws / "dirlink").symlink_to(outside / "deep")
    writer.write_symlink("dirlink", "x")
    assert os.readlink(ws / "dirlink") == "x"
    assert tree(outside) == before
    assert temp_leftovers(ws) == []


def test_write_symlink_refuses_a_folder_and_bad_targets(ws: Path, writer: WorkspaceWriter) -> None:
    (ws / "d").mkdir()
    with pytest.raises(EntryInTheWay, match="folder is in the way"):
        writer.write_symlink("d", "x")
    for target in ["", "a\0b"]:
        with pytest.raises(EntryInTheWay, match="invalid target"):
            writer.write_symlink("l", target)
    assert sorted(os.listdir(ws)) == ["d"]


def test_read_file_and_read_link(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("d/f", b"content", mode=0o600)
    assert writer.read_file("d/f") == b"content"
    (ws / "d" / "link").symlink_to(outside / "victim.txt")
    with pytest.raises(UnsafeWorkspacePath):
        writer.read_file("d/link")
    assert writer.read_link("d/link") == str(outside / "victim.txt")
    with pytest.raises(EntryInTheWay, match="not a symlink"):
        writer.read_link("d/f")
    with pytest.raises(EntryInTheWay, match="not a regular file"):
        writer.read_file("d")
    for missing in ["d/missing", "nope/f"]:
        with pytest.raises(FileNotFoundError):
            writer.read_file(missing)
        with pytest.raises(FileNotFoundError):
            writer.read_link(missing)


def test_read_file_does_not_hang_on_a_fifo(ws: Path, writer: WorkspaceWriter) -> None:
    os.mkfifo(ws / "fifo")
    with pytest.raises(EntryInTheWay, match="not a regular file"):
        writer.read_file("fifo")


def test_lstat(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("d/f", b"abc", mode=0o644)
    (ws / "d" / "link").symlink_to(outside)
    st_file = writer.lstat("d/f")
    assert st_file is not None and st_file.st_size == 3
    st_link = writer.lstat("d/link")
    assert st_link is not None and stat.S_ISLNK(st_link.st_mode)
    dir_st = writer.lstat("d")
    assert dir_st is not None and stat.S_ISDIR(dir_st.st_mode)
    assert writer.lstat("d/missing") is None
    assert writer.lstat("missing/f") is None
    with pytest.raises(UnsafeWorkspacePath):
        writer.lstat("d/link/victim.txt")


# -- removing ------------------------------------------------------------------


def test_remove_file(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("d/f", b"x", mode=0o644)
    (ws / "d" / "link").symlink_to(outside / "victim.txt")
    (ws / "d" / "dirlink").symlink_to(outside)
    before = tree(outside)
    assert writer.remove_file("d/f") is True
    assert writer.remove_file("d/link") is True
    assert writer.remove_file("d/dirlink") is True
    assert tree(outside) == before
    assert os.listdir(ws / "d") == []
    assert writer.remove_file("d/f") is False
    assert writer.remove_file("missing/f") is False
    with pytest.raises(EntryInTheWay, match="it is a folder"):
        writer.remove_file("d")
    assert (ws / "d").is_dir()


def test_remove_dir(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    (ws / "empty").mkdir()
    (ws / "full").mkdir()
    (ws / "full" / "f").write_bytes(b"x")
    (ws / "file").write_bytes(b"x")
    (ws / "dirlink").symlink_to(outside / "deep")
    assert writer.remove_dir("empty") is True
    assert not (ws / "empty").exists()
    assert writer.remove_dir("empty") is False
    assert writer.remove_dir("missing/x") is False
    assert writer.remove_dir("full") is False
    assert (ws / "full" / "f").read_bytes() == b"x"
    with pytest.raises(EntryInTheWay, match="file or symlink"):
        writer.remove_dir("file")
    with pytest.raises(EntryInTheWay, match="file or symlink"):
        writer.remove_dir("dirlink")
    assert (outside / "deep").is_dir()
    assert (ws / "dirlink").is_symlink()


# -- folders and modes ---------------------------------------------------------


def test_make_dir(ws: Path, writer: WorkspaceWriter, umask: Callable[[int], None]) -> None:
    umask(0o077)
    writer.make_dir("a/b/c", mode=0o775)
    assert stat.S_IMODE((ws / "a/b/c").lstat().st_mode) == 0o775
    assert stat.S_IMODE((ws / "a").lstat().st_mode) == 0o700  # parents: 0o755 less the umask
    writer.make_dir("a/b/c", mode=0o700)  # already there: chmod only
    assert stat.S_IMODE((ws / "a/b/c").lstat().st_mode) == 0o700
    writer.make_dir("a/b/c")
    assert stat.S_IMODE((ws / "a/b/c").lstat().st_mode) == 0o755


def test_make_dir_refuses_a_file_or_symlink_in_the_way(
    ws: Path, outside: Path, writer: WorkspaceWriter
) -> None:
    (ws / "file").write_bytes(b"x")
    (ws / "link").symlink_to(outside / "deep")
    mode_before = stat.S_IMODE((outside / "deep").stat().st_mode)
    for path in ["file", "link"]:
        with pytest.raises(EntryInTheWay, match="in the way"):
            writer.make_dir(path, mode=0o700)
    assert stat.S_IMODE((outside / "deep").stat().st_mode) == mode_before
    assert (ws / "file").read_bytes() == b"x"


def test_chmod(ws: Path, outside: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("d/f", b"x", mode=0o644)
    writer.chmod("d/f", 0o755)
    assert stat.S_IMODE((ws / "d/f").lstat().st_mode) == 0o755
    writer.chmod("d", 0o700)
    assert stat.S_IMODE((ws / "d").lstat().st_mode) == 0o700
    writer.chmod("d", 0o755)
    (ws / "d" / "link").symlink_to(outside / "victim.txt")
    before = stat.S_IMODE((outside / "victim.txt").stat().st_mode)
    writer.chmod("d/link", 0o777)  # symlinks are left untouched, the target too
    assert stat.S_IMODE((outside / "victim.txt").stat().st_mode) == before
    with pytest.raises(FileNotFoundError):
        writer.chmod("d/missing", 0o644)
    with pytest.raises(FileNotFoundError):
        writer.chmod("missing/f", 0o644)


def test_chmod_of_an_unreadable_file(ws: Path, writer: WorkspaceWriter) -> None:
    writer.write_file("f", b"x", mode=0o000)
    writer.chmod("f", 0o644)
    assert stat.S_IMODE((ws / "f").lstat().st_mode) == 0o644


def test_chmod_without_proc(
    ws: Path, outside: Path, writer: WorkspaceWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fsops, "_PROC_FD", str(ws.parent / "no-proc-here"))
    writer.write_file("d/f", b"x", mode=0o644)
    writer.chmod("d/f", 0o600)
    assert stat.S_IMODE((ws / "d/f").lstat().st_mode) == 0o600
    writer.make_dir("d", mode=0o711)
    assert stat.S_IMODE((ws / "d").lstat().st_mode) == 0o711


# -- arguments -----------------------------------------------------------------

METHODS: list[tuple[str, Callable[[WorkspaceWriter, str], object]]] = [
    ("lstat", lambda w, p: w.lstat(p)),
    ("read_file", lambda w, p: w.read_file(p)),
    ("read_link", lambda w, p: w.read_link(p)),
    ("write_file", lambda w, p: w.write_file(p, b"x", mode=0o644)),
    ("write_symlink", lambda w, p: w.write_symlink(p, "t")),
    ("make_dir", lambda w, p: w.make_dir(p)),
    ("remove_file", lambda w, p: w.remove_file(p)),
    ("remove_dir", lambda w, p: w.remove_dir(p)),
    ("chmod", lambda w, p: w.chmod(p, 0o644)),
]
MUTATING = {"write_file", "write_symlink", "make_dir", "remove_file", "remove_dir", "chmod"}


@pytest.mark.parametrize(("name", "call"), METHODS, ids=[m[0] for m in METHODS])
def test_every_method_validates_its_path(
    tmp_path: Path, ws: Path, writer: WorkspaceWriter, name: str, call: Callable[..., object]
) -> None:
    decoy = tmp_path / "decoy" / "passwd"  # an absolute path outside, never the host's
    decoy.parent.mkdir(exist_ok=True)
    decoy.write_text("root:x:0:0\n")
    before = tree(tmp_path)
    for bad in ["../outside/victim.txt", str(decoy), "a/../../x"]:
        with pytest.raises(PathOutsideWorkspace):
            call(writer, bad)
    for bad in ["", "a//b", "a/", "./a", "a\0b"]:
        with pytest.raises(PathError):
            call(writer, bad)
    assert tree(tmp_path) == before


@pytest.mark.parametrize(("name", "call"), METHODS, ids=[m[0] for m in METHODS])
def test_internal_paths_are_never_changed(
    ws: Path, writer: WorkspaceWriter, name: str, call: Callable[..., object]
) -> None:
    (ws / ".strata").mkdir()
    (ws / ".strata" / "config.toml").write_bytes(b"cfg")
    (ws / "sub" / ".git").mkdir(parents=True)
    before = tree(ws)
    for path in [".strata/config.toml", "sub/.git/HEAD", ".git"]:
        if name in MUTATING:
            with pytest.raises(ProtectedPath):
                call(writer, path)
        else:
            with contextlib.suppress(StrataError, OSError):
                call(writer, path)  # reading is allowed
    assert tree(ws) == before


def test_allow_internal(ws: Path) -> None:
    with WorkspaceWriter(ws, allow_internal=True) as writer:
        writer.write_file(".strata/x", b"y", mode=0o644)
    assert (ws / ".strata" / "x").read_bytes() == b"y"


# -- lifecycle -----------------------------------------------------------------


def test_a_symlinked_root_is_resolved_once(tmp_path: Path, ws: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(ws)
    with WorkspaceWriter(alias) as writer:
        assert writer.root == ws.resolve()
        writer.write_file("f", b"x", mode=0o644)
    assert (ws / "f").read_bytes() == b"x"


def test_close(ws: Path) -> None:
    before = open_fds()
    writer = WorkspaceWriter(ws)
    assert open_fds() == before + 1
    with writer:
        writer.write_file("f", b"x", mode=0o644)
    assert open_fds() == before
    writer.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        writer.write_file("g", b"x", mode=0o644)


def test_no_descriptor_leaks(ws: Path, outside: Path) -> None:
    (ws / "esc").symlink_to(outside)
    (ws / "folder").mkdir()
    (ws / "folder" / "inner").mkdir()

    def failing() -> Iterator[bytes]:
        yield b"x"
        raise StrataError("boom")

    with WorkspaceWriter(ws) as writer:
        before = open_fds()
        for i in range(50):
            writer.write_file(f"a/b/f{i}", b"x", mode=0o644)
            writer.write_symlink(f"a/b/l{i}", "t")
            writer.make_dir(f"a/d{i}", mode=0o700)
            writer.chmod(f"a/b/f{i}", 0o600)
            writer.chmod(f"a/b/l{i}", 0o600)
            writer.lstat(f"a/b/f{i}")
            writer.lstat("nope/x")
            writer.read_file(f"a/b/f{i}")
            writer.read_link(f"a/b/l{i}")
            writer.remove_file(f"a/b/l{i}")
            writer.remove_dir(f"a/d{i}")
            attempts: list[Callable[[], object]] = [
                lambda: writer.write_file("esc/deep/f", b"x", mode=0o644),
                lambda: writer.write_file("folder", b"x", mode=0o644),
                lambda: writer.write_file("a/g", failing(), mode=0o644),
                lambda: writer.read_file("a/b/missing"),
                lambda: writer.read_file("a/b"),
                lambda: writer.read_link("a/b/f0"),
                lambda: writer.remove_file("folder"),
                lambda: writer.remove_dir("a/b/f0"),
                lambda: writer.make_dir("a/b/f0"),
                lambda: writer.chmod("a/missing", 0o644),
                lambda: writer.lstat("../x"),
            ]
            for attempt in attempts:
                # any refusal will do (which one depends on the race): nothing may leak
                with pytest.raises((StrataError, OSError)):
                    attempt()
        assert open_fds() == before
    assert temp_leftovers(ws) == []
    assert tree(outside) == {"deep": ("dir", None), "victim.txt": ("file", b"precious")}


def test_sync_filesystem(ws: Path) -> None:
    (ws / "f").write_bytes(b"x")
    before = open_fds()
    sync_filesystem(ws)
    sync_filesystem(ws / "f")
    assert open_fds() == before
    with pytest.raises(FileNotFoundError):
        sync_filesystem(ws / "missing")


@settings(max_examples=50, deadline=None)
@given(
    name=st.text(
        st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=40,
    ).filter(lambda s: s not in {".", "..", ".git", ".strata"}),
    chunks=st.lists(st.binary(max_size=300), max_size=5),
    mode=st.integers(0, 0o777),
)
def test_write_then_read_round_trip(name: str, chunks: list[bytes], mode: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, WorkspaceWriter(Path(tmp)) as writer:
        path = f"dir/{name}"
        st_written = writer.write_file(path, chunks, mode=mode)
        assert writer.read_file(path) == b"".join(chunks)
        assert stat.S_IMODE(st_written.st_mode) == mode
        assert os.listdir(Path(tmp) / "dir") == [name]


# -- THE RACE ------------------------------------------------------------------


def _renameat2_exchange() -> Callable[[Path, Path], None] | None:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def exchange(a: Path, b: Path) -> None:
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return exchange


@pytest.mark.parametrize("component", ["sub", "sub/deep"])
@pytest.mark.parametrize("strategy", ["exchange", "rename"])
def test_race_folder_swapped_for_a_symlink(
    ws: Path, outside: Path, component: str, strategy: str
) -> None:
    """A folder on the way flips to a symlink and back while thousands of files are written.

    Whatever the interleaving, nothing appears outside the workspace, and every
    write that reported success left its file inside the workspace.
    """
    exchange = _renameat2_exchange()
    if strategy == "exchange" and exchange is None:
        pytest.skip("renameat2 is not available")
    (ws / component).mkdir(parents=True)
    target = ws / component
    link = ws / "parked-link"
    # If followed, the symlink leads to a folder where sub/deep/fN would land.
    link.symlink_to(outside if component == "sub" else outside / "deep")
    before = tree(outside)
    stop = threading.Event()
    swaps = 0
    errors: list[BaseException] = []

    def swap_by_exchange() -> None:
        assert exchange is not None
        exchange(target, link)  # atomic: the path is always either a folder or the symlink
        time.sleep(0)

    def swap_by_rename() -> None:
        # Folder out, symlink in, symlink out, folder back: in the gaps the path
        # is absent and the writer may recreate a real folder there.
        parked = ws / f"parked-dir-{swaps}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, parked)
        try:
            os.rename(link, target)
        except OSError:  # the writer recreated the folder first
            return
        time.sleep(0)
        os.rename(target, link)
        with contextlib.suppress(OSError):  # the writer may have recreated it meanwhile
            os.rename(parked, target)
        time.sleep(0)

    swap = swap_by_exchange if strategy == "exchange" else swap_by_rename

    def swapper() -> None:
        nonlocal swaps
        try:
            while not stop.is_set():
                swap()
                swaps += 1
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=swapper, daemon=True)
    written = refused = 0
    fds = open_fds()
    try:
        with WorkspaceWriter(ws) as writer:
            fds = open_fds()
            thread.start()
            # write until the race was met from both sides (under load, the swapper may need
            # more than a second for its first swaps), for at least 1 s and at most 20 s
            start = time.monotonic()
            for i in range(200_000):
                elapsed = time.monotonic() - start
                raced = swaps > 20 and written > 0 and refused > 0
                if elapsed > 20.0 or (elapsed > 1.0 and raced):
                    break
                try:
                    writer.write_file(f"sub/deep/f{i}", b"payload %d" % i, mode=0o644)
                    written += 1
                except UnsafeWorkspacePath:
                    refused += 1
            stop.set()
            thread.join()
            assert open_fds() == fds
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old_interval)

    assert errors == []
    assert tree(outside) == before, "a write escaped the workspace"
    assert swaps > 20
    assert written > 0 and refused > 0, (written, refused)  # both sides of the race happened
    landed = [
        name
        for _dirpath, _dirnames, filenames in os.walk(ws)
        for name in filenames
        if name.startswith("f")
    ]
    assert len(landed) == written
    assert temp_leftovers(ws) == []
