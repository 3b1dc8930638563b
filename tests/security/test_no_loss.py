"""No silent loss: what Strata cannot read is reported and never deleted or overwritten.

Unreadable folders bite only an unprivileged user (root reads everything), so
the permission cases run as both (``person``); a path longer than the system
allows bites root too.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from conftest import CliRunner, Person, as_json, assert_user_error, ok
from strata import Repository
from strata.atomic import TEMP_PREFIX

#: a folder path under 4,096 bytes holding a name that takes the full path over it
LONG_DIR = "x" * 200
LONG_DEPTH = 19
LONG_NAME = "y" * 250

MAKE_LONG = f"""
import os
import sys
os.chdir({{where!r}})
for _ in range({LONG_DEPTH}):
    os.makedirs({LONG_DIR!r}, exist_ok=True)
    os.chdir({LONG_DIR!r})
with open({LONG_NAME!r}, "w") as f:
    f.write("precious\\n")
"""


def _long_path(folder: str) -> str:
    return "/".join([folder, *[LONG_DIR] * LONG_DEPTH, LONG_NAME])


def _make_long(person: Person, ws: Path, folder: str) -> None:
    """``folder/xxx…/yyy`` whose absolute path is over 4,096 bytes (its folder is not)."""
    (ws / folder).mkdir(exist_ok=True)
    os.chown(ws / folder, person.uid, person.gid)
    done = person.run([sys.executable, "-c", MAKE_LONG.format(where=str(ws / folder))])
    assert done.returncode == 0, done.stderr
    assert len(str(ws / _long_path(folder)).encode()) > 4096


def _long_exists(ws: Path, folder: str) -> bool:
    fd = os.open(ws / folder, os.O_RDONLY)
    try:
        for _ in range(LONG_DEPTH):
            try:
                nxt = os.open(LONG_DIR, os.O_RDONLY, dir_fd=fd)
            except FileNotFoundError:
                return False
            os.close(fd)
            fd = nxt
        with open(os.open(LONG_NAME, os.O_RDONLY, dir_fd=fd)) as f:
            return f.read() == "precious\n"
    finally:
        os.close(fd)


def _workspace(person: Person, home_of: Path, cli_as: CliRunner, files: dict[str, str]) -> Path:
    ws = home_of / "ws"
    person.run(["mkdir", str(ws)])
    assert cli_as("init", cwd=ws)[0] == 0
    for rel, text in files.items():
        person.run(["mkdir", "-p", str((ws / rel).parent)])
        person.run(["sh", "-c", f"printf %s '{text}' > '{rel}'"], cwd=ws)
    code, _, err = cli_as("snapshot", "-m", "start", cwd=ws)
    assert code == 0, err
    return ws


# -- 7. the scanner never drops an entry silently ------------------------------------


def test_a_path_longer_than_path_max_is_recorded_not_dropped(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"a.txt": "a"})
    _make_long(person, ws, "deep")
    status = json.loads(cli_as("status", "--json", cwd=ws)[1])
    assert not any(LONG_NAME in w for w in status["warnings"]), status
    assert any(c["path"].endswith(LONG_NAME) for c in status["changes"]), status
    code, out, err = cli_as("snapshot", "-m", "two", "--json", cwd=ws)
    assert code == 0, err
    assert not any(LONG_NAME in w for w in json.loads(out)["warnings"])
    after = json.loads(cli_as("status", "--json", cwd=ws)[1])
    assert after["changes"] == [] and after["warnings"] == [], after  # it is in the snapshot


def test_an_unsearchable_folder_keeps_its_recorded_files(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"d/f.txt": "old", "a.txt": "a"})
    person.run(["sh", "-c", "printf new > d/f.txt && chmod 644 d"], cwd=ws)
    code, out, err = cli_as("snapshot", "-m", "while unreadable", "--json", cwd=ws)
    assert code == 0, err
    warned = [w for w in json.loads(out)["warnings"] if "d/f.txt" in w]
    status = json.loads(cli_as("status", "--json", cwd=ws)[1])
    (ws / "d").chmod(0o755)
    after = json.loads(cli_as("status", "--json", cwd=ws)[1])
    if person.is_root:
        assert not warned  # root read it all: only the folder's mode differs now
        assert after["changes"] == [{"path": "d/", "status": "mode_changed", "old_path": None}]
        return
    assert warned, out
    assert any("d/f.txt" in w for w in status["warnings"]), status
    # the snapshot kept the recorded file: it was not taken for deleted
    changes = {c["path"]: c["status"] for c in after["changes"]}
    assert changes["d/f.txt"] == "modified", changes


def test_a_rollback_leaves_what_it_could_not_read(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"d/f.txt": "old", "a.txt": "a"})
    script = "printf new > d/f.txt; printf b > a.txt; chmod 644 d; exit 3"
    code, out, err = cli_as(
        "run", "--rollback-on-failure", "--json", "--", "sh", "-c", script, cwd=ws
    )
    assert code == 3, err
    assert "Traceback" not in err and "internal error" not in err, err
    result = json.loads(out)
    assert result["rolled_back"], result
    assert (ws / "a.txt").read_text() == "a"  # what it could record is rolled back
    (ws / "d").chmod(0o755)
    if person.is_root:
        assert (ws / "d/f.txt").read_text() == "old"
        assert result["rollback_skipped"] == []
        return
    assert (ws / "d/f.txt").read_text() == "new"  # never recorded: left on disk
    assert "d/f.txt" in result["rollback_skipped"]
    assert any("d/f.txt" in w for w in result["warnings"]), result


def test_a_rollback_takes_back_a_path_longer_than_path_max(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"a.txt": "a"})
    script = (
        f"cd new && for i in $(seq {LONG_DEPTH}); do mkdir {LONG_DIR} && cd {LONG_DIR}; done"
        f" && echo precious > {LONG_NAME}; exit 1"
    )
    (ws / "new").mkdir()
    os.chown(ws / "new", person.uid, person.gid)
    code, _, err = cli_as("run", "--rollback-on-failure", "--", "sh", "-c", script, cwd=ws)
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert not _long_exists(ws, "new")  # recorded by the after snapshot, so taken back
    assert "strata: left" not in err, err
    assert cli_as("undo", cwd=ws)[0] == 0  # and the undo of the rollback brings it again
    assert _long_exists(ws, "new")


# -- 8. restore, rewind and publish never overwrite an edit made after their scan -----


def _stat_row(path: Path, oid: str) -> list[object]:
    st = os.lstat(path)
    return [st.st_mode & 0o777, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, oid]


def test_a_same_size_edit_the_stat_cannot_see_is_not_overwritten(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("version one\n")
    (ws / "g.txt").write_text("gamma one\n")
    repo = Repository.init(ws)
    first = repo.snapshot("one").event
    assert first is not None
    (ws / "f.txt").write_text("version two\n")
    (ws / "g.txt").write_text("gamma two\n")
    repo.snapshot("two")
    # step one: the scan a rewind plans from, and its plan
    scan = repo.workspace.scan()
    actions = repo.workspace.plan(scan, repo.tree_of(first))
    assert {a.path for a in actions} == {"f.txt", "g.txt"}
    # an editor saves a same-size change after the scan
    with open(ws / "f.txt", "r+") as f:
        f.write("VERSION")
    # On a file system with coarse timestamps (FAT, some network ones, a kernel
    # without multigrain timestamps) the edit can keep every field of the stat
    # the scan saw; this kernel stamps it finer, so the plan is given the stat
    # now on disk, exactly as such a scan would have recorded it.
    for act in actions:
        assert act.before is not None
        act.before = _stat_row(ws / act.path, act.before[5])
    # step two: the write
    report = repo.workspace.apply(actions)
    assert (ws / "f.txt").read_text() == "VERSION two\n"  # the edit is still there
    assert report.skipped == ["f.txt"]
    assert (ws / "g.txt").read_text() == "gamma one\n"  # racy but unchanged: restored


def _inotify_on_create(folders: dict[Path, str], then: Callable[[], None]) -> threading.Thread:
    """A thread that calls ``then`` as soon as an entry named ``prefix…`` appears in a folder.

    ``folders``: folder -> prefix ("" for any entry).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0
    in_create = 0x100
    prefixes = {}
    for folder, prefix in folders.items():
        wd = libc.inotify_add_watch(fd, bytes(folder), in_create)
        assert wd >= 0
        prefixes[wd] = prefix.encode()

    def watch() -> None:
        try:
            while True:
                data = os.read(fd, 4096)
                at = 0
                while at < len(data):
                    wd, _, _, size = struct.unpack_from("iIII", data, at)
                    name = data[at + 16 : at + 16 + size].rstrip(b"\0")
                    at += 16 + size
                    if name.startswith(prefixes[wd]):
                        then()
                        return
        finally:
            os.close(fd)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_an_edit_made_while_a_rewind_writes_is_not_overwritten(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    big = ws / "big.bin"
    size = 96 << 20  # long enough to write that the editor acts before the rename
    big.write_bytes(b"a" * size)
    repo = Repository.init(ws)
    first = repo.snapshot("one").event
    assert first is not None
    big.write_bytes(b"b" * size)
    repo.snapshot("two")
    edited = threading.Event()

    def edit() -> None:  # a same-size edit, made once the rewind has begun writing
        with open(big, "r+b") as f:
            f.write(b"EDIT")
        edited.set()

    # the new file is made beside the old one, or in the trash (then swapped across)
    repo.layout.trash.mkdir(mode=0o700, exist_ok=True)
    watcher = _inotify_on_create({ws: TEMP_PREFIX, repo.layout.trash: ""}, edit)
    result = repo.rewind(first.id)
    watcher.join(10)
    assert edited.is_set()
    with open(big, "rb") as f:
        assert f.read(8) == b"EDITbbbb"  # the edit survived
    assert result.skipped_paths == ["big.bin"]
    assert not [p for p in ws.iterdir() if p.name.startswith(TEMP_PREFIX)]


# -- 10. a copied workspace never shares the original's store ---------------------------


def test_a_copied_workspace_pointing_at_the_original_store_is_refused(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    proj, store = tmp_path / "proj", tmp_path / "store"
    proj.mkdir()
    (proj / "a.txt").write_text("original\n")
    ok(run_cli("init", "--no-snapshot", "--store", store, cwd=proj))
    ok(run_cli("snapshot", "-m", "one", cwd=proj))
    copy = tmp_path / "proj-copy"
    subprocess.run(["cp", "-a", str(proj), str(copy)], check=True)
    (copy / "a.txt").write_text("copy\n")
    for argv in (("status",), ("snapshot", "-m", "from the copy"), ("init",)):
        err = assert_user_error(run_cli(*argv, cwd=copy), says=str(copy))
        assert str(proj) in err.splitlines()[0] and str(store) in err, err
        assert "hint: " in err and "strata init --store" in err, err
    code, _, err = run_cli("status", "--json", cwd=copy)
    assert code == 1 and json.loads(err)["error"]["type"] == "StoreOfAnotherWorkspace"
    history = as_json(run_cli("history", "--json", cwd=proj))
    assert len(history) == 1  # the original's history is untouched
    # the way out the hint gives: the copy becomes its own repository
    (copy / ".strata").unlink()
    ok(run_cli("init", "--no-snapshot", "--store", tmp_path / "store-copy", cwd=copy))
    ok(run_cli("snapshot", "-m", "copy", cwd=copy))
    assert (proj / "a.txt").read_text() == "original\n"


def test_a_copied_or_moved_workspace_with_its_own_repository_folder_works(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.txt").write_text("one\n")
    ok(run_cli("init", "--no-snapshot", cwd=proj))
    ok(run_cli("snapshot", "-m", "one", cwd=proj))
    copy = tmp_path / "proj-copy"
    subprocess.run(["cp", "-a", str(proj), str(copy)], check=True)
    (copy / "a.txt").write_text("two\n")
    ok(run_cli("snapshot", "-m", "copy", cwd=copy))  # an independent copy of the history
    assert len(as_json(run_cli("history", "--json", cwd=proj))) == 1
    # a workspace moved with --store keeps its store (nothing else claims it)
    moved, store = tmp_path / "moved", tmp_path / "store"
    other = tmp_path / "other"
    other.mkdir()
    ok(run_cli("init", "--store", store, cwd=other))
    other.rename(moved)
    ok(run_cli("status", cwd=moved))


# -- a rollback meets a folder the command made unwritable ----------------------------


def test_a_rollback_skips_an_unwritable_folder_and_rolls_back_the_rest(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"a/f": "a", "b/f": "b", "c/f": "c"})
    script = "echo bad > c/f; echo bad > a/f; chmod 500 a; exit 3"
    code, out, err = cli_as(
        "run", "--rollback-on-failure", "--json", "--", "sh", "-c", script, cwd=ws
    )
    assert code == 3, err  # the command's own exit code
    assert "Traceback" not in err and "internal error" not in err, err
    assert "cannot write" not in err, err
    result = json.loads(out)
    assert result["rolled_back"], result
    assert (ws / "c/f").read_text() == "c"  # every other path is rolled back
    (ws / "a").chmod(0o755)
    if person.is_root:
        assert (ws / "a/f").read_text() == "a"
        return
    assert (ws / "a/f").read_text() == "bad\n"  # left as it is, and said so
    assert "a/f" in result["rollback_skipped"], result
    again = "echo worse > a/f; chmod 500 a; exit 4"
    code, _, err = cli_as("run", "--rollback-on-failure", "--", "sh", "-c", again, cwd=ws)
    assert code == 4, err
    assert "strata: left a/f" in err, err


def test_a_rollback_never_records_as_deleted_what_is_on_disk(
    person: Person, home_of: Path, cli_as: CliRunner
) -> None:
    ws = _workspace(person, home_of, cli_as, {"a/f": "a", "b/f": "b", "c/f": "c"})
    script = 'echo "*" > .gitignore; echo bad > c/f; rm b/f; echo new > n.txt; chmod 000 a; exit 3'
    code, out, err = cli_as(
        "run", "--rollback-on-failure", "--json", "--", "sh", "-c", script, cwd=ws
    )
    assert code == 3, err
    assert "Traceback" not in err and "internal error" not in err, err
    result = json.loads(out)
    assert not (ws / ".gitignore").exists()
    assert (ws / "b/f").read_text() == "b"
    # c/f was hidden by the command's own rule when the failed state was scanned, so no
    # snapshot holds "bad": it is left as it is and reported, never silently overwritten
    assert (ws / "c/f").read_text() == "c" or "c/f" in result["rollback_skipped"], result
    (ws / "a").chmod(0o755)
    assert (ws / "a/f").exists()
    # HEAD records nothing as deleted that is on disk; n.txt is visible to status
    status = json.loads(ok(cli_as("status", "--json", cwd=ws)))
    changes = {c["path"]: c["status"] for c in status["changes"]}
    assert not [p for p, s in changes.items() if s == "deleted"], changes
    assert "a/f" not in changes and "b/f" not in changes, changes
    assert changes.get("n.txt") == "added", changes


def test_a_moved_workspace_claims_its_store_and_the_copy_is_refused(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    ws, store = tmp_path / "st", tmp_path / "store"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    ok(run_cli("init", "--no-snapshot", "--store", str(store), cwd=ws))
    ok(run_cli("snapshot", "-m", "one", cwd=ws))
    copy, moved = tmp_path / "st-copy", tmp_path / "st-moved"
    subprocess.run(["cp", "-a", str(ws), str(copy)], check=True)
    assert_user_error(run_cli("snapshot", "-m", "copy", cwd=copy))
    ws.rename(moved)
    (moved / "a.txt").write_text("moved")
    ok(run_cli("snapshot", "-m", "moved", cwd=moved))  # claims the store
    assert str(moved) in (store / "config.toml").read_text()
    (copy / "a.txt").write_text("copy")
    err = assert_user_error(run_cli("snapshot", "-m", "copy", cwd=copy))
    assert str(moved) in err
    ok(run_cli("snapshot", "-m", "moved again", cwd=moved))
