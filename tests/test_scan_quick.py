"""A full walk that takes an unchanged folder from the stat cache's quick record.

Without a change monitor every scan lists every folder; a folder whose names
and stats match the cache's digest is taken as recorded without building its
rows. These tests make the changes that digest must not miss, each after a
scan that left every folder eligible (old mtimes, so nothing is racy). Each
runs twice: with the listing and ``lstat`` calls made by ``strata._walk`` (the
C module setup.py builds) and with them made in Python.
"""

from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

import pytest

import strata.store.scan as scan_module
from conftest import Dir, File, Link
from strata import Repository
from strata.store.ignore import IgnoreRules
from strata.store.objects import MemoryObjectStore
from strata.store.scan import Scanner
from strata.store.statcache import StatCache, forget_memory
from strata.store.tree import lookup, read_tree

OLD_NS = 10**18  # 2001: never racy


@pytest.fixture(autouse=True, params=["C", "Python"])
def walker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with the C walker (strata._walk) and without it."""
    if request.param == "Python":
        monkeypatch.setattr(scan_module, "native_walk", None)
    elif scan_module.native_walk is None and os.environ.get("STRATA_NO_NATIVE_BUILD") == "1":
        pytest.skip("installed with STRATA_NO_NATIVE_BUILD=1: no strata._walk")
    else:
        assert scan_module.native_walk is not None, "strata._walk is not built (setup.py)"
    return str(request.param)


def age(root: Path) -> None:
    """Give every file and folder below ``root`` an old mtime (not racy)."""
    for folder, dirs, files in os.walk(root):
        if ".strata" in dirs:
            dirs.remove(".strata")
        for name in files + dirs:
            os.utime(os.path.join(folder, name), ns=(OLD_NS, OLD_NS), follow_symlinks=False)


def settled(repo: Repository, root: Path) -> None:
    """Snapshot twice: the second scan saves the digests of a tree with nothing racy."""
    age(root)
    repo.snapshot()
    assert repo.snapshot().unchanged


def quick_records(root: Path) -> dict[str, tuple[object, ...]]:
    """Every folder's quick record as the next scan reads it."""
    forget_memory()
    cache = StatCache(root / ".strata" / "statcache")
    found = {folder: cache.quick(folder) for folder in cache.folders()}
    return {folder: quick for folder, quick in found.items() if quick is not None}


TREE = {
    "a/one.txt": "one\n",
    "a/two.txt": "two\n",
    "a/sub/deep.txt": "deep\n",
    "a/sub/x.log": "log\n",
    "b/link": Link("../a/one.txt"),
    "b/plain.txt": "plain\n",
    "top.txt": "top\n",
}


def test_a_settled_tree_has_a_digest_for_every_folder(
    ws: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    quick = quick_records(ws)
    assert set(quick) == {"", "a", "a/sub", "b"}
    assert all(record[3] for record in quick.values())
    assert repo.snapshot().unchanged


def test_a_same_size_edit_that_keeps_the_mtime_is_seen(
    ws: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    path = ws / "a/sub/deep.txt"
    path.write_text("DEEP\n")
    os.utime(path, ns=(OLD_NS, OLD_NS))  # only the ctime says it changed
    result = repo.snapshot()
    assert result.to_json()["changed_paths"] == ["a/sub/deep.txt"]
    assert repo.show("HEAD", "a/sub/deep.txt") == b"DEEP\n"


def test_a_mode_change_alone_is_seen_for_files_and_folders(
    ws: Path, tmp_path: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    os.chmod(ws / "a/two.txt", 0o755)
    assert not repo.snapshot().unchanged
    os.chmod(ws / "a/sub", 0o700)  # nothing else in "a" changes
    assert not repo.snapshot().unchanged
    repo.export("HEAD", tmp_path / "out")
    assert (tmp_path / "out/a/two.txt").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "out/a/sub").stat().st_mode & 0o777 == 0o700


def test_a_folder_replaced_by_a_file_and_back(
    ws: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    for name in ("deep.txt", "x.log"):
        (ws / "a/sub" / name).unlink()
    (ws / "a/sub").rmdir()
    (ws / "a/sub").write_text("now a file\n")
    os.utime(ws / "a/sub", ns=(OLD_NS, OLD_NS))
    first = repo.snapshot()
    assert repo.show("HEAD", "a/sub") == b"now a file\n"
    assert "a/sub/deep.txt" in first.to_json()["changed_paths"]
    (ws / "a/sub").unlink()
    (ws / "a/sub").mkdir()
    (ws / "a/sub/deep.txt").write_text("back\n")
    age(ws)
    repo.snapshot()
    assert repo.show("HEAD", "a/sub/deep.txt") == b"back\n"


def test_a_symlink_retargeted_to_a_same_length_target_is_seen(
    ws: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    link = ws / "b/link"
    link.unlink()
    link.symlink_to("../a/two.txt")
    os.utime(link, ns=(OLD_NS, OLD_NS), follow_symlinks=False)
    repo.snapshot()
    assert repo.show("HEAD", "b/link") == b"../a/two.txt"


def test_a_parent_ignore_rule_reaches_an_unchanged_subfolder(
    ws: Path, tmp_path: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    (ws / ".gitignore").write_text("*.log\n")
    repo.snapshot()
    repo.export("HEAD", tmp_path / "out")
    assert (tmp_path / "out/a/sub/deep.txt").exists()
    assert not (tmp_path / "out/a/sub/x.log").exists()
    (ws / ".gitignore").unlink()
    repo.snapshot()
    assert repo.show("HEAD", "a/sub/x.log") == b"log\n"


def scan(root: Path, cache_path: Path, store: MemoryObjectStore, now_ns: int) -> Scanner:
    cache = StatCache(cache_path)
    scanner = Scanner(root, store, rules=IgnoreRules.root(), cache=cache, clock_ns=lambda: now_ns)
    result = scanner.scan()
    cache.replace(result.dirs, started_ns=result.started_ns, inherited=result.inherited)
    cache.save()
    scanner.result = result  # type: ignore[attr-defined]
    return scanner


@pytest.mark.parametrize(
    ("mtime", "window"),
    [
        # a fraction of a second: a fine file system (ext4, tmpfs…), racy for 100 ms
        (1_795_000_000_123_456_789, 10**8),
        # a whole second: maybe a coarse one (FAT writes 2 s steps), racy for 2 s
        (1_795_000_000_000_000_000, 2 * 10**9),
    ],
)
def test_a_racy_file_is_read_again_by_every_scan_until_it_is_old(
    tmp_path: Path, mtime: int, window: int
) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt"):
        (root / "sub" / name).write_text(name)
    age(root)
    racy = root / "sub" / "a.txt"
    os.utime(racy, ns=(mtime, mtime))
    cache_path = tmp_path / "statcache"
    store = MemoryObjectStore()
    assert scan(root, cache_path, store, mtime + window // 4).result.files_hashed == 2  # type: ignore[attr-defined]
    # still within the racy window: the same-size edit may hide from the stat, so it is read
    again = scan(root, cache_path, store, mtime + window // 2)
    assert again.result.files_hashed == 1  # type: ignore[attr-defined]
    assert not quick_digest(cache_path, "sub")
    # just past the window: the file is settled, the folder gets its digest, nothing is read
    later = scan(root, cache_path, store, mtime + window + 10**6)
    assert later.result.files_hashed == 1  # type: ignore[attr-defined]
    assert quick_digest(cache_path, "sub")
    last = scan(root, cache_path, store, mtime + window + 2 * 10**6)
    assert last.result.files_hashed == 0  # type: ignore[attr-defined]
    assert last.result.unchanged  # type: ignore[attr-defined]


def quick_digest(cache_path: Path, folder: str) -> bytes:
    """The folder's stat digest as the next scan reads it (the base and the saves logged since)."""
    forget_memory()
    quick = StatCache(cache_path).quick(folder)
    return quick[3] if quick is not None else b""


def test_a_damaged_folder_blob_behind_a_valid_digest_still_scans_right(
    ws: Path, make_tree: object, repo: Repository
) -> None:
    make_tree(ws, TREE)  # type: ignore[operator]
    settled(repo, ws)
    path = ws / ".strata" / "statcache"
    raw = marshal.loads(path.read_bytes())
    raw["dirs"]["a"] = b"not a marshal blob"
    path.write_bytes(marshal.dumps(raw))
    (ws / "a/sub/deep.txt").write_text("changed below a\n")
    result = repo.snapshot()
    assert result.to_json()["changed_paths"] == ["a/sub/deep.txt"]
    assert repo.show("HEAD", "a/one.txt") == b"one\n"
    assert repo.show("HEAD", "a/sub/deep.txt") == b"changed below a\n"


def test_folders_and_files_of_every_kind_round_trip_through_the_quick_path(
    ws: Path, make_tree: object, manifest: object, repo: Repository
) -> None:
    make_tree(  # type: ignore[operator]
        ws,
        {
            **TREE,
            "exec.sh": File("#!/bin/sh\n", 0o755),
            "empty": Dir(0o700),
            "c/d/e/f.txt": "f\n",
        },
    )
    settled(repo, ws)
    want = manifest(ws)  # type: ignore[operator]
    first = repo.snapshot()
    assert first.unchanged
    (ws / "c/d/e/f.txt").write_text("edited\n")
    repo.snapshot()
    repo.rewind("HEAD~1")
    assert manifest(ws) == want  # type: ignore[operator]


def test_trees_list_names_in_byte_order_whatever_their_encoding(tmp_path: Path) -> None:
    from strata.store.tree import encode_tree, read_tree

    root = tmp_path / "ws"
    root.mkdir()
    # "é" is C3 A9 in UTF-8; a raw 0x80 byte sorts before it, though its text does not
    for name in (b"\x80raw", "é".encode(), b"z", b"A"):
        (root / os.fsdecode(name)).write_bytes(name)
    store = MemoryObjectStore()
    result = Scanner(
        root, store, rules=IgnoreRules.root(), cache=StatCache(tmp_path / "statcache")
    ).scan()
    entries = read_tree(store, result.tree)
    assert [os.fsencode(e.name) for e in entries] == [b"A", b"z", b"\x80raw", "é".encode()]
    assert store.get(result.tree) == encode_tree(entries)  # the one canonical tree


def test_an_ignored_folder_replaced_by_a_file_of_its_name_is_recorded(
    ws: Path, repo: Repository
) -> None:
    """``build/`` ignores only a folder: a file called ``build`` is the user's work."""
    (ws / ".strataignore").write_text("build/\n")
    (ws / "build").mkdir()
    (ws / "build" / "x.o").write_text("object\n")
    (ws / "a.txt").write_text("a\n")
    settled(repo, ws)  # the root folder has its quick record
    (ws / "build" / "x.o").unlink()
    (ws / "build").rmdir()
    (ws / "build").write_text("the user's file\n")
    assert repo.status().to_json()["changes"] != []
    result = repo.snapshot("build is a file now")
    assert "build" in result.to_json()["changed_paths"]
    assert repo.show("HEAD", "build") == b"the user's file\n"
    # and back: a folder of that name is ignored again
    (ws / "build").unlink()
    (ws / "build").mkdir()
    (ws / "build" / "y.o").write_text("object\n")
    (ws / "a.txt").write_text("a, edited\n")  # the folder is listed row by row this time
    assert sorted(repo.snapshot("build is a folder").to_json()["changed_paths"]) == [
        "a.txt",
        "build",
    ]
    assert repo.status().to_json()["changes"] == []


def test_a_big_scan_that_builds_folders_while_hashing_makes_the_same_trees(
    tmp_path: Path, make_tree: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # past ENCODED_PAST files to read, each folder's tree is built as soon as its files
    # and subfolders are hashed (its rows never all exist at once): the trees, counts and
    # stat cache must be those a scan that builds after hashing everything makes
    from strata.store import scan as scan_module

    root = tmp_path / "root"
    files: dict[str, object] = {f"p{i % 3}/m{i % 7}/f{i:03d}.txt": f"{i}\n" for i in range(150)}
    files.update(
        {
            **TREE,
            ".gitignore": "*.log\nbuild/\n",
            "build/out.o": "ignored\n",
            "exec.sh": File("#!/bin/sh\n", 0o755),
            "empty": Dir(0o700),
            "c/d/e/f.txt": "f\n",
            "bin.dat": b"\0\1\2",
            "c/d/big.bin": b"\1\2" * (1 << 19),  # read first by a big scan
        }
    )
    make_tree(root, files)  # type: ignore[operator]
    age(root)
    racy = root / "p1/m1/f001.txt"
    soon = time.time_ns() + 600 * 10**9  # racy for every scan below: read again each time
    os.utime(racy, ns=(soon, soon))
    results = {}
    for past in (10**9, 0):
        monkeypatch.setattr(scan_module, "ENCODED_PAST", past)
        store = MemoryObjectStore()
        first = scan(root, tmp_path / f"cache{past}", store, time.time_ns()).result  # type: ignore[attr-defined]
        (root / "c/d/e/f.txt").write_text("edited\n")
        (root / "p2/m3/new.txt").write_text("new\n")
        second = scan(root, tmp_path / f"cache{past}", store, time.time_ns()).result  # type: ignore[attr-defined]
        (root / "c/d/e/f.txt").write_text("f\n")
        (root / "p2/m3/new.txt").unlink()
        age(root)
        os.utime(racy, ns=(soon, soon))
        results[past] = [
            (r.tree, r.files_hashed, r.files_seen, r.warnings) for r in (first, second)
        ]
        # the big scan kept the folders it built encoded (nothing racy but p1/m1)
        assert ("p0/m0" in first.inherited) == (past == 0)
        assert first.files_hashed == 160 and second.files_hashed == 3  # racy, edit, new
        assert [e.name for e in read_tree(store, second.tree)][:3] == [".gitignore", "a", "b"]
    assert results[0] == results[10**9]


def _long_chain(ws: Path, last: str) -> str:
    """Folders below ``ws`` down to one whose path is short of PATH_MAX by less than a name.

    ``last`` (a folder holding ``f.txt``) is made in it: its own path passes
    4,096 bytes, so its ``lstat`` by path fails. Returns the chain's path.
    """
    fd = os.open(ws, os.O_RDONLY)
    length, parts = len(os.fsencode(str(ws))), []
    try:
        while length + 1 + len(last) < 4100:  # the chain ends 4,100 - 1 - len(last) long
            step = "d" * min(200, 4100 - 1 - len(last) - length - 1)
            os.mkdir(step, dir_fd=fd)
            nxt = os.open(step, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, length = nxt, length + 1 + len(step)
            parts.append(step)
        os.mkdir(last, dir_fd=fd)
        inner = os.open(last, os.O_RDONLY, dir_fd=fd)
        try:
            file_fd = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=inner)
            os.write(file_fd, b"past PATH_MAX\n")
            os.close(file_fd)
        finally:
            os.close(inner)
    finally:
        os.close(fd)
    assert length + 1 + len(last) >= 4096
    return "/".join(parts)


def test_a_folder_past_path_max_is_recorded_with_its_files(ws: Path, repo: Repository) -> None:
    """A folder whose path passes PATH_MAX is opened folder by folder: recorded whole.

    Its file is in the tree with its content (neither left out with a
    warning nor recorded as an empty folder, which would be a snapshot
    claiming the file was deleted), and the next scan, from the stat cache,
    finds it unchanged.
    """
    (ws / "a.txt").write_text("a\n")
    last = "x" * 250
    chain = _long_chain(ws, last)
    first = repo.snapshot("first")
    assert first.warnings == [], first
    head = repo.resolve("HEAD").tree
    entry = lookup(repo.objects, head, f"{chain}/{last}/f.txt")
    assert entry is not None
    assert repo.objects.get(entry.oid) == b"past PATH_MAX\n"
    assert lookup(repo.objects, head, "a.txt") is not None
    again = repo.snapshot("again")
    assert again.unchanged and again.warnings == []
