"""The Repository API, exercised the way a user (or the CLI) drives it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Dir, File, Link, clear_workspace
from strata import Author, Repository
from strata.errors import (
    CorruptRepository,
    NestedRepository,
    NotARepository,
    PathNotFound,
    TargetNotEmpty,
    UnknownRef,
    UsageError,
)
from strata.ids import is_event_id, is_object_id
from strata.store.objects import hash_bytes

MakeTree = Callable[..., Path]
Manifest = Callable[..., dict[str, Any]]
MakeRepo = Callable[..., Repository]


def object_file(repo: Repository, oid: str) -> Path:
    """The loose file that stores ``oid``."""
    path = repo.layout.objects / oid[:2] / oid[2:]
    assert path.is_file(), f"object {oid} is not a loose file"
    return path


# -- snapshot ----------------------------------------------------------------------


def test_snapshot_reports_what_changed(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"a.txt": "one\ntwo\n", "src/b.py": "x = 1\n", "img.bin": b"\0\1\2"})
    first = repo.snapshot("first").to_json()
    assert set(first) >= {
        "event_id",
        "snapshot_id",
        "files_changed",
        "insertions",
        "deletions",
        "changed_paths",
    }
    assert is_event_id(first["event_id"])
    assert is_object_id(first["snapshot_id"])
    assert first["unchanged"] is False
    assert first["changed_paths"] == ["a.txt", "img.bin", "src/b.py"]
    assert (first["files_changed"], first["insertions"], first["deletions"]) == (3, 3, 0)

    (ws / "a.txt").write_text("one\nTWO\nthree\n")
    (ws / "src/b.py").unlink()
    second = repo.snapshot("second").to_json()
    assert second["changed_paths"] == ["a.txt", "src/b.py"]
    assert (second["files_changed"], second["insertions"], second["deletions"]) == (2, 2, 2)
    assert second["snapshot_id"] != first["snapshot_id"]

    event = repo.head()
    assert event is not None and event.id == second["event_id"]
    assert event.parent_event_id == first["event_id"]
    assert event.rationale == "second"
    assert event.files == ("a.txt", "src/b.py")


def test_an_unchanged_workspace_records_no_event(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"a.txt": "x"})
    first = repo.snapshot("first")
    again = repo.snapshot("again")
    assert again.unchanged
    assert again.to_json()["event_id"] is None
    assert again.to_json()["changed_paths"] == []
    assert again.snapshot_id == first.snapshot_id
    assert len(repo.history()) == 1


def test_snapshot_of_an_empty_workspace(repo: Repository) -> None:
    result = repo.snapshot("nothing yet")
    assert result.event is not None
    assert result.to_json()["files_changed"] == 0
    assert repo.snapshot().unchanged


def test_same_injected_clock_and_seed_give_the_same_ledger(
    tmp_path: Path, make_tree: MakeTree, make_repo: MakeRepo
) -> None:
    ledgers = []
    for name in ("one", "two"):
        ws = make_tree(tmp_path / name, {"a.txt": "x", "d/b.txt": "y"})
        repo = make_repo(ws, seed=7)
        repo.snapshot("s1")
        (ws / "a.txt").write_text("changed")
        repo.snapshot("s2", author=Author("bot", "agent"))
        ledgers.append([e.to_json() for e in repo.history()])
    assert ledgers[0] == ledgers[1]
    assert [e["ts"] for e in ledgers[0]] == sorted({e["ts"] for e in ledgers[0]}, reverse=True)


# -- history -----------------------------------------------------------------------


def test_history_filters(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"src/a.py": "1", "srcx/other.py": "1", "README": "1"})
    e1 = repo.snapshot("all").event
    (ws / "src" / "sub").mkdir()
    (ws / "src/sub/deep.py").write_text("2")
    e2 = repo.snapshot("deep", author=Author("alice", "agent")).event
    (ws / "srcx/other.py").write_text("2")
    e3 = repo.snapshot("srcx").event
    (ws / "README").write_text("2")
    e4 = repo.snapshot("readme", author=Author("alice", "agent")).event
    assert e1 and e2 and e3 and e4

    def ids(**kwargs: Any) -> list[str]:
        return [e.id for e in repo.history(**kwargs)]

    assert ids() == [e4.id, e3.id, e2.id, e1.id]
    assert ids(path="src") == [e2.id, e1.id], "a folder prefix, not a string prefix"
    assert ids(path="src/sub") == [e2.id]
    assert ids(path="src/a.py") == [e1.id]
    assert ids(path="srcx") == [e3.id, e1.id]
    assert ids(path="nowhere") == []
    assert ids(author="alice") == [e4.id, e2.id]
    assert ids(author="tester") == [e3.id, e1.id]
    assert ids(limit=2) == [e4.id, e3.id]
    assert ids(path="src", author="alice", limit=5) == [e2.id]
    with pytest.raises(UsageError):
        repo.history(limit=0)


# -- refs --------------------------------------------------------------------------


def test_refs_resolve(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"f": "1"})
    first = repo.snapshot().event
    (ws / "f").write_text("2")
    second = repo.snapshot().event
    assert first and second and first.snapshot_ref
    assert repo.resolve("HEAD").event == second
    assert repo.resolve("@").event == second
    assert repo.resolve("HEAD~1").event == first
    assert repo.resolve("HEAD~").event == first
    assert repo.resolve(f"{second.id}~1").event == first
    assert repo.resolve(first.id[:6]).event == first
    assert repo.resolve(first.snapshot_ref[:10]).event == first
    for bad in ("HEAD~2", "zzzzzz", "abcdef12", "not a ref", ""):
        with pytest.raises(UnknownRef):
            repo.resolve(bad)
    rewound = repo.rewind(first.id).event
    assert repo.resolve(rewound.id).event == first, "a rewind event names its target"


def test_head_of_an_empty_repository_is_unknown(repo: Repository) -> None:
    assert repo.head() is None
    with pytest.raises(UnknownRef) as info:
        repo.resolve("HEAD")
    assert "snapshot" in (info.value.hint or "")


# -- diff --------------------------------------------------------------------------


def test_diff_statuses(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(
        ws,
        {
            "same.txt": "same\n",
            "mod.txt": "a\nb\n",
            "del.txt": "bye\n",
            "old_name.txt": "rename me\n" * 5,
            "file_to_link": "x\n",
            "link_to_file": Link("same.txt"),
            "to600.txt": File("secret\n", 0o644),
            "to755.sh": File("#!/bin/sh\n", 0o644),
            "dir_to_file/inner.txt": "i\n",
            "link": Link("same.txt"),
        },
    )
    a = repo.snapshot("A").event
    (ws / "mod.txt").write_text("a\nB\nc\n")
    (ws / "del.txt").unlink()
    (ws / "old_name.txt").rename(ws / "new_name.txt")
    (ws / "file_to_link").unlink()
    (ws / "file_to_link").symlink_to("mod.txt")
    (ws / "link_to_file").unlink()
    (ws / "link_to_file").write_text("now a file\n")
    (ws / "to600.txt").chmod(0o600)
    (ws / "to755.sh").chmod(0o755)
    (ws / "dir_to_file/inner.txt").unlink()
    (ws / "dir_to_file").rmdir()
    (ws / "dir_to_file").write_text("f\n")
    (ws / "link").unlink()
    (ws / "link").symlink_to("mod.txt")
    (ws / "added.txt").write_text("new\n")
    b = repo.snapshot("B").event
    assert a and b

    files = {f.path: f for f in repo.diff(a.id, b.id).files}
    assert {p: f.status for p, f in files.items()} == {
        "added.txt": "added",
        "del.txt": "deleted",
        "dir_to_file": "added",
        "dir_to_file/inner.txt": "deleted",
        "file_to_link": "type_changed",
        "link": "modified",
        "link_to_file": "type_changed",
        "mod.txt": "modified",
        "new_name.txt": "renamed",
        "to600.txt": "mode_changed",
        "to755.sh": "mode_changed",
    }
    assert files["new_name.txt"].old_path == "old_name.txt"
    assert files["new_name.txt"].hash_before == files["new_name.txt"].hash_after
    assert (files["mod.txt"].insertions, files["mod.txt"].deletions) == (2, 1)
    for path, before, after in [("to600.txt", "644", "600"), ("to755.sh", "644", "755")]:
        shown = files[path].to_json()
        assert (shown["mode_before"], shown["mode_after"]) == (before, after)
        assert shown["hash_before"] == shown["hash_after"]
    assert files["added.txt"].hash_before is None
    assert files["added.txt"].hash_after == hash_bytes(b"new\n")
    assert files["del.txt"].hash_after is None

    backwards = {f.path: f.status for f in repo.diff(b.id, a.id).files}
    assert backwards["old_name.txt"] == "renamed"
    assert backwards["added.txt"] == "deleted"
    assert repo.diff(a.id, b.id, paths=["dir_to_file"]).files_changed == 2
    assert repo.diff(a.id, a.id).files == []


def test_binary_files_are_diffed_by_bytes(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    old = b"\x89PNG\0" + bytes(range(256)) * 4
    new = old[:100] + b"CHANGED" + old[107:]
    make_tree(ws, {"img.png": old})
    a = repo.snapshot().event
    (ws / "img.png").write_bytes(new)
    b = repo.snapshot().event
    assert a and b
    (f,) = repo.diff(a.id, b.id).files
    shown = f.to_json()
    assert shown["binary"] is True
    assert shown["status"] == "modified"
    assert (shown["insertions"], shown["deletions"]) == (0, 0)
    assert shown["bytes_changed"] == 7
    assert shown["hash_before"] == hash_bytes(old)
    assert shown["hash_after"] == hash_bytes(new)
    assert b"GIT binary patch" in repo.diff(a.id, b.id).patch()


def test_diff_against_the_working_tree_stores_nothing(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"a.txt": "1\n", "b.txt": "b\n"})
    repo.snapshot()
    stored = set(repo.objects.ids())
    (ws / "a.txt").write_text("1\n2\n")
    (ws / "c.txt").write_text("brand new content\n")
    (ws / "b.txt").unlink()
    result = repo.diff("HEAD")
    assert {f.path: f.status for f in result.files} == {
        "a.txt": "modified",
        "b.txt": "deleted",
        "c.txt": "added",
    }
    assert (result.insertions, result.deletions) == (2, 1)
    assert b"+brand new content" in result.patch()
    status = repo.status()
    assert not status.clean
    assert [(c.path, c.status) for c in status.changes] == [
        ("a.txt", "modified"),
        ("b.txt", "deleted"),
        ("c.txt", "added"),
    ]
    assert set(repo.objects.ids()) == stored, "diff and status must not store anything"
    assert len(repo.history()) == 1


# -- what a snapshot holds -----------------------------------------------------------


def test_empty_folders_are_recorded_and_restored(
    ws: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(ws, {"empty": Dir(0o700), "a/b/c": Dir(), "f.txt": "x"})
    want = manifest(ws)
    first = repo.snapshot().event
    assert first is not None
    (ws / "empty").rmdir()
    for d in ("a/b/c", "a/b", "a"):
        (ws / d).rmdir()
    second = repo.snapshot()
    assert not second.unchanged, "removing empty folders is a change"
    repo.rewind(first.id)
    assert manifest(ws) == want


def test_an_edit_that_keeps_size_and_mtime_is_recorded(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"deep/er/a.txt": "aaaa", "deep/b.txt": "b"})
    a = ws / "deep/er/a.txt"
    for path in (a, ws / "deep/b.txt"):
        os.utime(path, ns=(10**18, 10**18))  # old enough not to be "racy"
    repo.snapshot()
    a.write_bytes(b"bbbb")  # same size, same inode
    os.utime(a, ns=(10**18, 10**18))  # and the same mtime: only the ctime tells
    result = repo.snapshot()
    assert result.to_json()["changed_paths"] == ["deep/er/a.txt"]
    assert repo.show("HEAD", "deep/er/a.txt") == b"bbbb"
    assert repo.snapshot().unchanged


def test_fifo_is_skipped_with_a_warning_and_never_opened(
    ws: Path, make_tree: MakeTree, run_cli: Callable[..., Any]
) -> None:
    make_tree(ws, {"a.txt": "x", "sub/b.txt": "y"})
    os.mkfifo(ws / "sub" / "pipe")
    # a child process with a timeout: a scan that opened the FIFO would block forever
    code, out, err = run_cli("init", "--json", cwd=ws, timeout=30)  # its first snapshot too
    assert code == 0, err
    first = json.loads(out)["snapshot"]
    assert first["files"] == 2
    assert any("sub/pipe" in w and "FIFO" in w for w in first["warnings"])
    assert err == ""  # with --json the warnings are in the JSON only; stderr is for an error
    (ws / "a.txt").write_text("changed")
    code, out, err = run_cli("snapshot", "--json", cwd=ws, timeout=30)
    assert code == 0, err
    result = json.loads(out)
    assert result["changed_paths"] == ["a.txt"]
    assert any("sub/pipe" in w and "FIFO" in w for w in result["warnings"])
    assert err == ""
    for args in (["status"], ["snapshot"]):
        code, _, err = run_cli(*args, cwd=ws, timeout=30)
        assert code == 0 and "sub/pipe" in err
    code, out, err = run_cli("diff", "HEAD", cwd=ws, timeout=30)
    assert (code, out) == (0, ""), err


def test_permission_bits_are_restored_exactly(
    ws: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(
        ws,
        {
            "p600": File("a", 0o600),
            "p640": File("b", 0o640),
            "p644": File("c", 0o644),
            "p700": File("d", 0o700),
            "p755": File("e", 0o755),
            "p400": File("f", 0o400),
            "private": Dir(0o700),
            "shared": Dir(0o750),
            "shared/x": File("g", 0o604),
        },
    )
    want = manifest(ws)
    first = repo.snapshot().event
    assert first is not None
    for path in ws.rglob("*"):
        if ".strata" not in path.parts:
            path.chmod(0o777)
    (ws / "p644").write_text("changed")
    repo.snapshot()
    old_umask = os.umask(0o077)  # restored modes must not depend on the umask
    try:
        result = repo.rewind(first.id)
    finally:
        os.umask(old_umask)
    assert result.skipped_paths == []
    assert manifest(ws) == want


# -- rewind ------------------------------------------------------------------------


def test_rewind_auto_saves_unrecorded_work(
    ws: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(ws, {"notes.txt": "v1\n", "keep.txt": "k\n"})
    v1 = repo.snapshot("v1").event
    (ws / "notes.txt").write_text("v2\n")
    v2 = repo.snapshot("v2").event
    (ws / "notes.txt").write_text("v3, never recorded\n")
    (ws / "scratch.txt").write_text("also unrecorded\n")
    unrecorded = manifest(ws)
    assert v1 and v2

    result = repo.rewind(v1.id)
    assert result.auto_save is not None
    shown = result.to_json()
    assert shown["auto_save_event_id"] == result.auto_save.id
    assert shown["target_event_id"] == v1.id
    assert shown["restored_paths"] == ["notes.txt", "scratch.txt"]
    assert shown["skipped_paths"] == []
    assert (ws / "notes.txt").read_text() == "v1\n"
    assert not (ws / "scratch.txt").exists()
    assert repo.head() == v1

    auto = repo.history(limit=2)[1]
    assert auto.id == result.auto_save.id
    assert auto.action_type == "auto_save"
    assert auto.author.kind == "system"
    assert repo.history()[0].action_type == "rewind"
    assert repo.status().clean

    back = repo.rewind(result.auto_save.id)
    assert back.auto_save is None, "nothing unrecorded: no second auto-save"
    assert manifest(ws) == unrecorded
    # history only grows: every earlier point is still reachable
    assert [e.id for e in repo.history() if e.action_type == "snapshot"] == [v2.id, v1.id]
    repo.rewind(v2.id)
    assert (ws / "notes.txt").read_text() == "v2\n"
    assert repo.check() == []


def test_rewind_writes_only_the_paths_that_differ(
    ws: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(ws, {f"d{i % 10}/f{i:03}.txt": f"file {i}\n" for i in range(500)})
    start = manifest(ws)
    first = repo.snapshot().event
    (ws / "d1/f001.txt").write_text("modified\n")
    (ws / "d2/f002.txt").unlink()
    (ws / "d3/new.txt").write_text("added\n")
    repo.snapshot()
    touched = {"d1/f001.txt", "d2/f002.txt", "d3/new.txt"}

    def stats() -> dict[str, tuple[int, int, int]]:
        return {
            str(p.relative_to(ws)): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_ctime_ns)
            for p in ws.rglob("*")
            if ".strata" not in p.parts
        }

    before = stats()
    assert first is not None
    result = repo.rewind(first.id)
    after = stats()
    assert sorted(result.restored_paths) == sorted(touched)
    untouched = set(before) - touched - {"d1", "d2", "d3"}
    assert len(untouched) == 498 + 7  # files and folders
    assert {p: after[p] for p in untouched} == {p: before[p] for p in untouched}
    assert manifest(ws) == start


def test_rewind_never_deletes_or_overwrites_an_ignored_file(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"build/x": "recorded build output\n", "src.c": "int main;\n"})
    old = repo.snapshot("build/x recorded").event
    (ws / ".gitignore").write_text("build/\n")
    (ws / "build/x").write_text("fresh output, ignored, never recorded\n")
    (ws / "build/y").write_text("another ignored file\n")
    later = repo.snapshot("build/ ignored").event
    assert old and later and "build/x" in later.files

    result = repo.rewind(old.id)
    assert (ws / "build/x").read_text() == "fresh output, ignored, never recorded\n"
    assert (ws / "build/y").read_text() == "another ignored file\n"
    assert "build/x" in result.skipped_paths
    assert not (ws / ".gitignore").exists()

    # back again: build/x is not ignored now (no .gitignore), so the auto-save records
    # it before the rewind removes it, as git removes a file the target does not track
    back = repo.rewind(later.id)
    assert back.auto_save is not None
    assert repo.show(back.auto_save.id, "build/x") == b"fresh output, ignored, never recorded\n"
    assert repo.show(back.auto_save.id, "build/y") == b"another ignored file\n"


def test_rewind_leaves_an_ignored_folder_alone(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"a.txt": "1"})
    first = repo.snapshot().event
    make_tree(ws, {".gitignore": "cache/\n", "cache/blob": b"\0" * 100, "cache/sub/y": "y"})
    repo.snapshot()
    assert first is not None
    repo.rewind(first.id)
    assert not (ws / ".gitignore").exists()
    assert (ws / "cache/blob").read_bytes() == b"\0" * 100
    assert (ws / "cache/sub/y").read_text() == "y"


def test_rewind_skips_a_fifo_where_the_target_has_a_file(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"p": "a file once"})
    first = repo.snapshot().event
    (ws / "p").unlink()
    os.mkfifo(ws / "p")
    assert first is not None
    result = repo.rewind(first.id)
    assert result.skipped_paths == ["p"]
    assert (ws / "p").is_fifo()


# -- restore -----------------------------------------------------------------------


def test_restore_some_paths_only(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"src/a.py": "A1", "src/b.py": "B1", "docs/x.md": "X1", "docs/y.md": "Y1"})
    old = repo.snapshot().event
    make_tree(ws, {"src/a.py": "A2", "src/b.py": "B2", "docs/x.md": "X2", "src/new.py": "N"})
    (ws / "docs/y.md").unlink()
    later = repo.snapshot().event
    (ws / "src/b.py").write_text("B3 unrecorded")
    assert old and later

    result = repo.restore(old.id, ["src/a.py", "docs", "src/new.py"])
    assert sorted(result.restored_paths) == ["docs/x.md", "docs/y.md", "src/a.py", "src/new.py"]
    assert (ws / "src/a.py").read_text() == "A1"
    assert (ws / "docs/x.md").read_text() == "X1"
    assert (ws / "docs/y.md").read_text() == "Y1"
    assert not (ws / "src/new.py").exists()
    assert (ws / "src/b.py").read_text() == "B3 unrecorded", "paths not named stay as they are"
    assert result.auto_save is not None
    head = repo.head()
    assert head is not None and head.id == result.auto_save.id, "restore does not move HEAD"
    assert repo.history()[0].action_type == "restore"
    assert repo.show(result.auto_save.id, "src/b.py") == b"B3 unrecorded"

    with pytest.raises(PathNotFound):
        repo.restore(old.id, ["no/such/file"])
    with pytest.raises(UsageError):
        repo.restore(old.id, [])


# -- reading -------------------------------------------------------------------------


def test_show(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"a.txt": "v1\n", "d/e/f.bin": b"\0\1", "d/link": Link("../a.txt")})
    first = repo.snapshot().event
    (ws / "a.txt").write_text("v2\n")
    repo.snapshot()
    assert first is not None
    assert repo.show(first.id, "a.txt") == b"v1\n"
    assert repo.show("HEAD", "a.txt") == b"v2\n"
    assert repo.show("HEAD", "d/e/f.bin") == b"\0\1"
    assert repo.show("HEAD", "d/link") == b"../a.txt"
    assert repo.show("HEAD", "d") == b"e/\nlink\n"
    with pytest.raises(PathNotFound):
        repo.show("HEAD", "missing.txt")
    with pytest.raises(PathNotFound):
        repo.show("HEAD", "a.txt/below")


def test_export_is_byte_identical(
    ws: Path, tmp_path: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(
        ws,
        {
            "a.txt": "text\n",
            "run.sh": File("#!/bin/sh\n", 0o755),
            "secret": File("s", 0o600),
            "bin/data": bytes(range(256)),
            "empty": Dir(0o700),
            "link": Link("a.txt"),
            "dangling": Link("../nowhere"),
            "deep/er/file": "",
        },
    )
    want = manifest(ws)
    repo.snapshot()
    (ws / "a.txt").write_text("later change")

    out = tmp_path / "export"
    assert repo.export("HEAD", out) == 5
    assert manifest(out) == want

    empty = tmp_path / "empty-dir"
    empty.mkdir()
    repo.export("HEAD", empty)
    assert manifest(empty) == want


def test_export_refuses_a_folder_that_is_not_empty(
    ws: Path, tmp_path: Path, make_tree: MakeTree, manifest: Manifest, repo: Repository
) -> None:
    make_tree(ws, {"a.txt": "x"})
    repo.snapshot()
    busy = make_tree(tmp_path / "busy", {"mine.txt": "do not touch"})
    with pytest.raises(TargetNotEmpty):
        repo.export("HEAD", busy)
    assert manifest(busy) == {"mine.txt": ("file", 0o644, b"do not touch")}
    a_file = busy / "mine.txt"
    with pytest.raises(TargetNotEmpty):
        repo.export("HEAD", a_file)


# -- where the repository lives --------------------------------------------------------


def test_a_store_outside_the_workspace_survives_rm_rf(
    tmp_path: Path, make_tree: MakeTree, make_repo: MakeRepo
) -> None:
    ws = make_tree(tmp_path / "ws", {"a.txt": "1"})
    store = tmp_path / "stores" / "ws"
    repo = make_repo(ws, store=store)
    assert (ws / ".strata").is_file()
    assert repo.layout.repo == store.resolve()
    event = repo.snapshot("kept safe").event
    assert event is not None
    repo.close()

    subprocess.run(["rm", "-rf", ".strata"], cwd=ws, check=True)
    with pytest.raises(NotARepository):
        Repository.open(ws)
    assert (store / "config.toml").is_file()

    (ws / ".strata").write_text(f"strata-dir: {store.resolve()}\n")
    again = make_repo(ws, init=False)
    assert [e.id for e in again.history()] == [event.id]
    assert again.check() == []


def test_a_store_inside_the_workspace_is_refused(tmp_path: Path, make_repo: MakeRepo) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(UsageError):
        make_repo(ws, store=ws / "inside")
    assert not (ws / ".strata").exists()


def test_init_is_idempotent(ws: Path, make_tree: MakeTree, make_repo: MakeRepo) -> None:
    make_tree(ws, {"a.txt": "1"})
    first = make_repo(ws)
    first.snapshot()
    config = (ws / ".strata" / "config.toml").read_bytes()
    second = make_repo(ws)
    assert second.layout == first.layout
    assert [e.id for e in second.history()] == [e.id for e in first.history()]
    assert (ws / ".strata" / "config.toml").read_bytes() == config


@pytest.mark.parametrize("outer_store", [False, True], ids=["folder", "pointer"])
def test_nested_init_is_refused(tmp_path: Path, make_repo: MakeRepo, outer_store: bool) -> None:
    ws = tmp_path / "ws"
    (ws / "sub" / "deeper").mkdir(parents=True)
    make_repo(ws, store=tmp_path / "store" if outer_store else None)
    for inner in (ws / "sub", ws / "sub" / "deeper"):
        with pytest.raises(NestedRepository) as info:
            make_repo(inner)
        assert info.value.parent == str(ws)
        assert not (inner / ".strata").exists()


def test_opening_outside_any_workspace(tmp_path: Path) -> None:
    with pytest.raises(NotARepository):
        Repository.open(tmp_path)


# -- check ---------------------------------------------------------------------------


def test_check_passes_on_a_healthy_repository(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    assert repo.check() == []
    make_tree(ws, {"a.txt": "1", "d/e": Link("x"), "empty": Dir()})
    repo.snapshot()
    (ws / "a.txt").write_text("2")
    first = repo.history()[-1]
    repo.rewind(first.id)
    assert repo.check() == []


def test_check_names_a_corrupted_object(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"a.txt": "precious content\n" * 20, "b.txt": "fine\n"})
    repo.snapshot()
    oid = hash_bytes(b"precious content\n" * 20)
    path = object_file(repo, oid)
    raw = bytearray(path.read_bytes())
    for i in range(4, len(raw), 7):
        raw[i] ^= 0x5A
    path.chmod(0o644)
    path.write_bytes(bytes(raw))
    problems = repo.check()
    assert problems, "a corrupted object must be reported"
    assert all(oid in p for p in problems)
    with pytest.raises(CorruptRepository):
        repo.show("HEAD", "a.txt")
    assert repo.show("HEAD", "b.txt") == b"fine\n"


def test_check_names_a_missing_object(ws: Path, make_tree: MakeTree, repo: Repository) -> None:
    make_tree(ws, {"a.txt": "gone soon\n", "b.txt": "fine\n"})
    repo.snapshot()
    oid = hash_bytes(b"gone soon\n")
    object_file(repo, oid).unlink()
    problems = repo.check()
    assert len(problems) == 1
    assert oid in problems[0] and "missing" in problems[0]


def test_status_sees_a_removed_empty_folder(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {"a.txt": "x", "empty": Dir()})
    repo.snapshot()
    (ws / "empty").rmdir()
    assert not repo.status().clean
    assert repo.snapshot().event is not None


def test_a_non_utf8_file_name_is_recorded_and_restored(
    ws: Path, manifest: Manifest, repo: Repository
) -> None:
    name = os.fsdecode(b"caf\xe9-latin1.txt")
    with open(os.path.join(os.fsencode(ws), os.fsencode(name)), "wb") as f:
        f.write(b"bytes\n")
    want = manifest(ws)
    first = repo.snapshot().event
    assert first is not None and "caf\\xe9-latin1.txt" in first.files
    clear_workspace(ws)
    repo.rewind(first.id)
    assert manifest(ws) == want


def test_check_finds_damage_in_packed_objects(
    ws: Path, make_tree: MakeTree, repo: Repository
) -> None:
    make_tree(ws, {f"f{i:03}.txt": f"content {i}\n" * 20 for i in range(300)})
    repo.snapshot()
    assert repo.check() == []
    packs = sorted(repo.layout.objects.rglob("*.pack"))
    assert packs, "a 300-file snapshot is expected to use a pack"
    raw = bytearray(packs[0].read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 32] = bytes(b ^ 0xFF for b in raw[middle : middle + 32])
    packs[0].chmod(0o644)
    packs[0].write_bytes(bytes(raw))
    problems = repo.check()
    assert problems
    assert all("corrupt" in p or "missing" in p or "pack" in p for p in problems), problems
