"""strata._walk: the C listing and ``lstat`` calls of a full scan.

``match`` must hand back, for a folder that is as the stat cache recorded it,
the very bytes the Python scan digests (``marshal`` version 2 of the stat
keys): then a no-op scan takes every folder through it. Anything it cannot
vouch for (a name more or less, a symlink, a special file, a folder it
cannot read) must come back as None, so that the Python scan lists it.
"""

from __future__ import annotations

import json
import marshal
import os
import sys
from pathlib import Path

import pytest

import strata.store.scan as scan_module
from conftest import Person
from strata import Repository

native = scan_module.native_walk

#: installed with STRATA_NO_NATIVE_BUILD=1 (setup.py): the Python walk alone
NOT_BUILT = os.environ.get("STRATA_NO_NATIVE_BUILD") == "1"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (NOT_BUILT and native is None),
    reason="strata._walk is built on Linux only, and not with STRATA_NO_NATIVE_BUILD=1",
)


def test_the_module_is_built_where_a_compiler_is() -> None:
    # setup.py builds it wherever the native client builds; a silent failure to build would
    # only show as a slow no-op, so it is checked here (CI installs with a compiler)
    assert native is not None


def python_keys(folder: Path, ignored: frozenset[str] = frozenset()) -> tuple[str, bytes]:
    """The listing order and the keys' bytes as the Python scan makes them."""
    keys: list[object] = []
    with os.scandir(folder) as it:
        listed = list(it)
    for entry in listed:
        if entry.name in ignored:
            continue
        st = entry.stat(follow_symlinks=False)
        if entry.is_dir(follow_symlinks=False):
            keys.append(st.st_mode & 0o777)
        else:
            mode = st.st_mode & 0o777
            keys.append((mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return "/".join(e.name for e in listed), marshal.dumps(keys, 2)


def test_the_keys_are_the_bytes_the_python_scan_digests(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    times = [0, 1, 999_999_999, -5_000_000_001, 2**31 * 10**9 + 7, 2**33 * 10**9 + 123_456_789]
    for i, ns in enumerate(times):
        path = folder / f"file{i}"
        path.write_bytes(b"x" * (i * 70_000))  # sizes past 2**16 and one of 0
        path.chmod(0o600 + i)
        os.utime(path, ns=(ns, ns))
    (folder / "sub").mkdir(mode=0o751)
    (folder / "sub").chmod(0o751)
    order, expected = python_keys(folder)
    [found] = native.match([(str(folder), order, ())], 1)
    assert found is not None
    keys, subfolders, kinds = found
    assert keys == expected
    assert subfolders == ["sub"]
    assert kinds == []


def test_an_empty_folder_has_an_empty_list(tmp_path: Path) -> None:
    assert native.match([(str(tmp_path), "", ())], 1) == [(marshal.dumps([], 2), [], [])]


def test_ignored_entries_are_named_with_their_kind_and_not_stated(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / "out.log").write_text("log\n")
    (tmp_path / "kept.txt").write_text("kept\n")
    ignored = frozenset({"build", "out.log"})
    order, expected = python_keys(tmp_path, ignored)
    [found] = native.match([(str(tmp_path), order, tuple(ignored))], 1)
    assert found is not None
    assert found[0] == expected
    assert sorted(found[2]) == [("build", True), ("out.log", False)]
    assert found[1] == []  # an ignored folder is not a subfolder to walk


@pytest.mark.parametrize("change", ["added", "removed", "renamed", "symlink", "fifo", "gone"])
def test_a_folder_it_cannot_vouch_for_is_left_to_python(tmp_path: Path, change: str) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / name).write_text(name)
    order, _ = python_keys(folder)
    if change == "added":
        (folder / "d").write_text("d")
    elif change == "removed":
        (folder / "b").unlink()
    elif change == "renamed":
        (folder / "c").rename(folder / "C")
    elif change == "symlink":
        (folder / "b").unlink()
        (folder / "b").symlink_to("a")  # its key holds its target: Python's to make
        order, _ = python_keys(folder)
    elif change == "fifo":
        (folder / "b").unlink()
        os.mkfifo(folder / "b")
        order, _ = python_keys(folder)
    else:
        for name in ("a", "b", "c"):
            (folder / name).unlink()
        folder.rmdir()
    assert native.match([(str(folder), order, ())], 1) == [None]


def test_a_prefix_of_the_order_is_not_a_match(tmp_path: Path) -> None:
    (tmp_path / "ab").write_text("x")
    order, _ = python_keys(tmp_path)
    assert order == "ab"
    assert native.match([(str(tmp_path), "a", ())], 1) == [None]
    assert native.match([(str(tmp_path), "ab/c", ())], 1) == [None]
    assert native.match([(str(tmp_path), "abc", ())], 1) == [None]


def test_names_that_are_not_utf8_come_back_as_python_names_them(tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9")  # Latin-1: a surrogate escape in Python
    (tmp_path / name).mkdir()
    (tmp_path / name / "x").write_text("x")
    order, expected = python_keys(tmp_path)
    [found] = native.match([(str(tmp_path), order, ())], 1)
    assert found is not None and found[0] == expected and found[1] == [name]
    inner, inner_keys = python_keys(tmp_path / name)
    [deeper] = native.match([(str(tmp_path / name), inner, ())], 1)
    assert deeper is not None and deeper[0] == inner_keys


def test_many_folders_on_many_threads_give_what_one_thread_gives(tmp_path: Path) -> None:
    items = []
    for i in range(60):
        folder = tmp_path / f"d{i}"
        folder.mkdir()
        for k in range(i % 7):
            (folder / f"f{k}").write_text("y" * k)
        items.append((str(folder), python_keys(folder)[0], ()))
    items.append((str(tmp_path / "missing"), "", ()))
    one = native.match(items, 1)
    assert native.match(items, 4) == one
    assert one[-1] is None
    assert all(found is not None for found in one[:-1])
    assert [found[0] for found in one[:-1]] == [
        python_keys(Path(path))[1] for path, _, _ in items[:-1]
    ]


def test_bad_items_are_refused_with_a_python_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        native.match([(str(tmp_path), "")], 1)
    with pytest.raises(TypeError):
        native.match([(b"/tmp", "", ())], 1)
    with pytest.raises(ValueError):
        native.match([(str(tmp_path) + "\0x", "", ())], 1)


def test_a_folder_the_user_cannot_read_is_left_to_python(
    tmp_path: Path, unprivileged: Person
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run as the unprivileged user")
    home = Path("/tmp") / f"strata-walk-{os.getpid()}"
    home.mkdir()
    try:
        (home / "shut").mkdir()
        (home / "shut" / "x").write_text("x")
        (home / "open").mkdir()
        (home / "open" / "y").write_text("y")
        os.chown(home, unprivileged.uid, unprivileged.gid)
        for sub in ("shut", "open"):
            os.chown(home / sub, unprivileged.uid, unprivileged.gid)
        (home / "shut").chmod(0)
        probe = (
            "import json, sys; from strata import _walk; "
            "print(json.dumps([r is None for r in _walk.match("
            "[(sys.argv[1] + '/shut', 'x', ()), (sys.argv[1] + '/open', 'y', ())], 2)]))"
        )
        done = unprivileged.run([sys.executable, "-c", probe, str(home)], cwd=Path("/"))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [True, False]
    finally:
        (home / "shut").chmod(0o700)
        for path in (home / "shut" / "x", home / "open" / "y"):
            path.unlink()
        (home / "shut").rmdir()
        (home / "open").rmdir()
        home.rmdir()


def settle(ws: Path, repo: Repository) -> None:
    """Old mtimes everywhere (nothing racy), then two snapshots: every folder has a digest."""
    for folder, dirs, files in os.walk(ws):
        if ".strata" in dirs:
            dirs.remove(".strata")
        for name in files + dirs:
            os.utime(os.path.join(folder, name), ns=(10**18, 10**18))
    repo.snapshot()
    assert repo.snapshot().unchanged


def test_a_no_op_scan_takes_every_folder_through_it(
    ws: Path, make_tree: object, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(ws, {f"d{i}/e{k}/f.txt": f"{i}{k}\n" for i in range(4) for k in range(3)})  # type: ignore[operator]
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "d0" / "skip.log").write_text("ignored\n")
    settle(ws, repo)
    listed: list[str] = []
    real_list = scan_module.Scanner._list

    def spy(self: scan_module.Scanner, folder: object, *args: object) -> None:
        listed.append(folder.key)  # type: ignore[attr-defined]
        real_list(self, folder, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scan_module.Scanner, "_list", spy)
    assert repo.snapshot().unchanged
    assert listed == [""]  # only the root, which holds an ignore file, is listed in Python
    (ws / "d2" / "e1" / "f.txt").write_text("changed\n")
    listed.clear()
    result = repo.snapshot()
    assert result.to_json()["changed_paths"] == ["d2/e1/f.txt"]
    # the edited file's folder is compared by the walk's stat keys: not listed a second time
    assert listed == [""]


def test_a_folder_compared_by_the_walks_keys_misses_no_change(
    ws: Path, make_tree: object, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same names in the same order, stats changed: each change is found as a listing finds it.

    The oracle is a scan without any stat cache: it must find the tree the
    keys' comparison recorded.
    """
    from strata.store import statcache

    make_tree(ws, {f"d/{n}": f"{n}\n" for n in ("a.txt", "b.txt", "c.txt", "d.txt")})  # type: ignore[operator]
    (ws / "d" / "sub").mkdir()
    (ws / "d" / "sub" / "x.txt").write_text("x\n")
    settle(ws, repo)
    listed: list[str] = []
    real_list = scan_module.Scanner._list

    def spy(self: scan_module.Scanner, folder: object, *args: object) -> None:
        listed.append(folder.key)  # type: ignore[attr-defined]
        real_list(self, folder, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scan_module.Scanner, "_list", spy)
    a, b = ws / "d" / "a.txt", ws / "d" / "b.txt"
    before = a.stat()
    a.write_text("A.txt\n")  # same size, the old mtime put back: only the ctime tells
    os.utime(a, ns=(before.st_atime_ns, before.st_mtime_ns))
    with open(b, "r+") as f:
        f.write("B")  # in place, same size, a new mtime
    (ws / "d" / "sub").chmod(0o700)  # a subfolder's permission bits
    result = repo.snapshot()
    assert sorted(result.to_json()["changed_paths"]) == ["d/a.txt", "d/b.txt", "d/sub/"]
    assert "d" not in listed  # compared by the walk's keys, not listed again
    # racy: written again within the same mtime tick as the snapshot that read it
    b.write_text("b2.txt\n")
    repo.snapshot()
    b.write_text("b3.txt\n")
    assert "d/b.txt" in repo.snapshot().to_json()["changed_paths"]
    for name in ("statcache", "statcache.log"):
        (ws / ".strata" / name).unlink(missing_ok=True)
    statcache.forget_memory()
    assert repo.snapshot().unchanged  # a walk without a cache finds nothing more


# -- prefetch: the walk started before the scan's modules load (strata.store.prefetch) --------


def test_a_prefetched_result_is_taken_by_the_next_match_then_forgotten(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    order, before = python_keys(tmp_path)
    native.prefetch([(str(tmp_path), order, ())], 1)
    native.match([], 1)  # (waits for the prefetch to finish)
    (tmp_path / "a").write_text("longer")  # after the prefetch listed it
    try:
        [found] = native.match([(str(tmp_path), order, ())], 2)
        assert found is not None and found[0] == before  # as it was when prefetched
    finally:
        native.forget()
    [fresh] = native.match([(str(tmp_path), order, ())], 2)
    assert fresh is not None and fresh[0] == python_keys(tmp_path)[1] != before


def test_a_prefetch_fits_only_the_same_order_and_ignored_names(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    order, _ = python_keys(tmp_path)
    native.prefetch([(str(tmp_path), order, ())], 1)
    native.match([], 1)  # (waits for the prefetch to finish)
    (tmp_path / "a").write_text("longer")
    try:
        [ignoring] = native.match([(str(tmp_path), order, ("b",))], 1)
        [reordered] = native.match([(str(tmp_path), "/".join(reversed(order.split("/"))), ())], 1)
    finally:
        native.forget()
    assert ignoring is not None and ignoring[0] == python_keys(tmp_path, frozenset({"b"}))[1]
    assert reordered is None


def test_a_write_to_the_workspace_drops_the_prefetch(tmp_path: Path) -> None:
    from strata.store.fsops import WorkspaceWriter

    (tmp_path / "a").write_text("a")
    order, before = python_keys(tmp_path)
    native.prefetch([(str(tmp_path), order, ())], 1)
    native.match([], 1)  # (waits for the prefetch to finish)
    with WorkspaceWriter(tmp_path) as writer:
        writer.write_file("a", [b"written by this process"], mode=0o644)
    [found] = native.match([(str(tmp_path), order, ())], 1)
    assert found is not None and found[0] == python_keys(tmp_path)[1] != before


def test_a_command_prefetches_the_folders_its_cache_describes(
    ws: Path, make_tree: object, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strata.store.prefetch as prefetch
    from strata.store.ignore import IGNORE_FILES
    from strata.store.statcache import forget_memory

    assert prefetch._IGNORE_FILES == IGNORE_FILES
    make_tree(ws, {f"d{i}/f.txt": f"{i}\n" for i in range(5)})  # type: ignore[operator]
    settle(ws, repo)
    offered: list[list[str]] = []
    real = native.prefetch

    def spy(items: list[tuple[str, str, tuple[str, ...]]], threads: int) -> None:
        offered.append(sorted(path for path, _, _ in items))
        real(items, threads)

    monkeypatch.setattr(prefetch._walk, "prefetch", spy)
    monkeypatch.chdir(ws / "d3")
    forget_memory()  # the stat cache is read from its files, as by a new process
    prefetch.start(["snapshot", "-m", "x"])
    assert offered == [sorted([str(ws)] + [str(ws / f"d{i}") for i in range(5)])]
    assert prefetch._base is not None
    native.match([], 1)  # (waits for the prefetch to finish)
    (ws / "d1" / "f.txt").write_text("changed after the prefetch\n")
    os.utime(ws / "d1" / "f.txt", ns=(10**18, 10**18))
    result = repo.snapshot()  # as if the walk had reached d1 before the edit
    assert result.unchanged
    assert prefetch._base is None  # the stat cache's load took what start() read
    assert repo.snapshot().to_json()["changed_paths"] == ["d1/f.txt"]  # the next scan sees it
    for argv in (["log"], [], ["status", "--json"]):
        offered.clear()
        prefetch.start(argv)
        assert len(offered) == (1 if argv[:1] == ["status"] else 0)
        native.forget()


def test_no_prefetch_on_one_core_or_when_turned_off(
    ws: Path, make_tree: object, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strata.store.prefetch as prefetch
    from strata.store.statcache import forget_memory

    make_tree(ws, {"a/f.txt": "a\n"})  # type: ignore[operator]
    repo.snapshot()
    calls: list[int] = []
    monkeypatch.setattr(prefetch._walk, "prefetch", lambda items, threads: calls.append(threads))
    monkeypatch.chdir(ws)
    forget_memory()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    prefetch.start(["status"])
    assert calls == []  # nothing would run beside the imports: no thread is started
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    prefetch.start(["status"])
    assert calls == [3]
    calls.clear()
    monkeypatch.setenv("STRATA_NO_PREFETCH", "1")
    prefetch.start(["status"])
    assert calls == []
    prefetch._base = None


def test_a_forked_child_does_not_wait_for_its_parents_prefetch(tmp_path: Path) -> None:
    import time

    for i in range(3000):  # enough that the prefetch still runs when the process forks
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_text("x")
    items = [(str(tmp_path / f"d{i}"), "f", ()) for i in range(3000)]
    native.prefetch(items, 1)
    pid = os.fork()
    if pid == 0:  # the child: its copy of the prefetch has no threads to join
        code = 1
        try:
            found = native.match(items, 1)  # works the items out itself
            code = 0 if all(f is not None for f in found) else 2
            native.forget()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    done, status = os.waitpid(pid, os.WNOHANG)
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
        done, status = os.waitpid(pid, os.WNOHANG)
    if not done:  # waiting for a thread only its parent has
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    native.forget()
    assert done and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
