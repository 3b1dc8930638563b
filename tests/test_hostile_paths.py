"""Paths the kernel will not take in one call, names that are not UTF-8, trees deeper than
Python's recursion limit: each is recorded, shown, diffed, checked and brought back.

A path of 4,096 bytes or more (``PATH_MAX``) fails every call that takes a
whole path (``ENAMETOOLONG``); the scan and the restore reach it through
folder descriptors (``openat``). A tree deeper than ``sys.getrecursionlimit()``
is walked with stacks, never recursion.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import CliRunner, Person, ok
from strata import Repository
from strata.store.tree import lookup

#: deeper than the interpreter's recursion limit, so a recursive walk of it fails
DEPTH = sys.getrecursionlimit() + 100


def _open_at(root: Path, parts: list[str]) -> int:
    """A descriptor of the folder ``root/parts...``, opened one folder at a time."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts:
        nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def _make_chain(root: Path, parts: list[str], name: str, data: bytes) -> None:
    """Make the folders ``parts`` below ``root`` and the file ``name`` holding ``data``."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            os.mkdir(part, dir_fd=fd)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    finally:
        os.close(fd)


def _read_at(root: Path, parts: list[str], name: str) -> bytes | None:
    """The bytes of ``root/parts.../name``, or None when it is absent."""
    try:
        fd = _open_at(root, parts)
    except FileNotFoundError:
        return None
    try:
        out = os.open(name, os.O_RDONLY, dir_fd=fd)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)
    try:
        return os.read(out, 1 << 16)
    finally:
        os.close(out)


def _long_parts(root: Path) -> list[str]:
    """Folders of 200-byte names below ``root`` whose file ``f.txt`` passes 4,096 bytes."""
    parts = [f"{i:02d}" + "d" * 198 for i in range(22)]
    assert len(os.fsencode(str(root))) + sum(len(p) + 1 for p in parts) + len("/f.txt") > 4096
    return parts


def _remove_tree(path: Path) -> None:
    """Delete ``path`` whatever its depth (``shutil.rmtree`` recurses, ``rm -rf`` does not)."""
    subprocess.run(["rm", "-rf", "--", str(path)], check=True)


def _give(folder: Path, person: Person) -> None:
    """Make ``person`` the owner of ``folder`` and all below (``chown -R`` takes any depth)."""
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", "--", str(folder)], check=True)


@pytest.fixture
def deep_cleanup() -> Iterator[list[Path]]:
    """Folders to delete with ``rm -rf`` after the test (pytest's own clean-up recurses)."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        subprocess.run(["rm", "-rf", "--", str(folder)], check=False)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside pytest's temp folder, for trees deeper than the recursion limit.

    pytest removes old temp folders with ``shutil.rmtree``, which recurses: a deep tree
    left there by a killed run would end the next run in ``RecursionError``. Here it
    costs nothing, and the folders of runs whose process is gone are removed (``rm -rf``).
    """
    for old in Path(tempfile.gettempdir()).glob("strata-deep-*-*"):
        owner = old.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            subprocess.run(["rm", "-rf", "--", str(old)], check=False)
    folder = Path(tempfile.mkdtemp(prefix=f"strata-deep-{os.getpid()}-"))
    yield folder
    subprocess.run(["rm", "-rf", "--", str(folder)], check=False)


def test_a_file_past_path_max_is_recorded_shown_and_rewound(ws: Path, repo: Repository) -> None:
    (ws / "a.txt").write_text("a\n")
    parts = _long_parts(ws)
    _make_chain(ws, parts, "f.txt", b"past PATH_MAX\n")
    path = "/".join([*parts, "f.txt"])

    first = repo.snapshot("long")
    assert first.warnings == []
    entry = lookup(repo.objects, repo.resolve("HEAD").tree, path)
    assert entry is not None and entry.size == len(b"past PATH_MAX\n")
    assert repo.status().clean

    fd = _open_at(ws, parts)
    os.unlink("f.txt", dir_fd=fd)
    os.close(fd)
    status = repo.status()
    assert [(f.name, f.status) for f in status.changes] == [(path, "deleted")]
    repo.rewind("HEAD", force=True)
    assert _read_at(ws, parts, "f.txt") == b"past PATH_MAX\n"
    assert repo.status().clean
    assert repo.check() == []


def test_a_tree_deeper_than_the_recursion_limit_is_recorded_checked_and_rewound(
    outside: Path, make_repo: Callable[..., Repository]
) -> None:
    ws = outside / "ws"
    ws.mkdir()
    repo = make_repo(ws)
    parts = ["a"] * DEPTH
    _make_chain(ws, parts, "leaf.txt", b"deep\n")
    (ws / "top.txt").write_text("top\n")

    result = repo.snapshot("deep")
    assert result.warnings == []
    assert result.diff is not None and result.diff.files_changed == 2
    assert repo.check() == []
    assert repo.export("HEAD", outside / "out") == 2
    assert _read_at(outside / "out", parts, "leaf.txt") == b"deep\n"

    _remove_tree(ws / "a")
    deleted = [f.name for f in repo.status().changes]
    assert deleted == ["/".join([*parts, "leaf.txt"])]
    repo.rewind("HEAD", force=True)
    assert _read_at(ws, parts, "leaf.txt") == b"deep\n"
    assert repo.status().clean


def test_run_rollback_brings_back_every_hostile_path(
    person: Person, home_of: Path, cli_as: CliRunner, deep_cleanup: list[Path]
) -> None:
    """A command deletes a long path, names that are not UTF-8 and a deep tree, then fails.

    Run by root and by an unprivileged user: each walks the paths through
    folder descriptors it may open, and rollback writes them back.
    """
    ws = home_of / "ws"
    ws.mkdir()
    deep_cleanup.append(ws)
    parts = _long_parts(ws)
    _make_chain(ws, parts, "f.txt", b"long\n")
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name\n")
    (ws / os.fsdecode(b"d\xff")).mkdir()
    (ws / os.fsdecode(b"d\xff") / os.fsdecode(b"x\xfe")).write_bytes(b"inside\n")
    (ws / "kept.txt").write_text("kept\n")
    _give(ws, person)

    out = ok(cli_as("init", cwd=ws))
    assert "4 files" in out, out
    code, _out, err = cli_as(
        "run",
        "--rollback-on-failure",
        "--",
        "sh",
        "-c",
        f"rm -rf {parts[0]} caf* d?; exit 3",
        cwd=ws,
    )
    assert code == 3, err
    assert "could not read" not in err and "left " not in err, err
    assert _read_at(ws, parts, "f.txt") == b"long\n"
    assert (ws / os.fsdecode(b"caf\xe9.txt")).read_bytes() == b"latin-1 name\n"
    assert (ws / os.fsdecode(b"d\xff") / os.fsdecode(b"x\xfe")).read_bytes() == b"inside\n"
    status = ok(cli_as("status", cwd=ws))
    assert "Working tree matches HEAD" in status, status


@pytest.mark.parametrize("command", ["status", "snapshot", "run"])
def test_an_unreadable_path_is_named_and_kept(
    person: Person, home_of: Path, cli_as: CliRunner, command: str
) -> None:
    """What the platform forbids this user to read is named in a warning, never dropped."""
    ws = home_of / "ws"
    ws.mkdir()
    os.chown(ws, person.uid, person.gid)
    ok(cli_as("init", cwd=ws))
    parts = _long_parts(ws)
    _make_chain(ws, parts, "secret.txt", b"secret\n")
    _give(ws, person)
    fd = _open_at(ws, parts)
    os.chmod("secret.txt", 0o000, dir_fd=fd)
    os.close(fd)
    argv = ("run", "--", "true") if command == "run" else (command,)
    code, _out, err = cli_as(*argv, cwd=ws)
    assert code == 0, err
    if person.is_root:  # root reads it: recorded (snapshot, run) or shown as new (status)
        assert "could not read" not in err, err
    else:
        assert "could not read" in err and "secret.txt" in err, err
    fd = _open_at(ws, parts)
    try:  # still there, whoever ran the command
        assert os.stat("secret.txt", dir_fd=fd, follow_symlinks=False).st_size == 7
    finally:
        os.close(fd)


@pytest.mark.slow
def test_run_rollback_brings_back_a_tree_deeper_than_the_recursion_limit(
    outside: Path, run_cli: CliRunner
) -> None:
    ws = outside / "ws"
    ws.mkdir()
    _make_chain(ws, ["a"] * DEPTH, "leaf.txt", b"deep\n")
    (ws / "top.txt").write_text("top\n")
    assert "2 files" in ok(run_cli("init", cwd=ws))
    code, _out, err = run_cli(
        "run", "--rollback-on-failure", "--", "sh", "-c", "rm -rf a; exit 3", cwd=ws, timeout=600
    )
    assert code == 3, err
    assert _read_at(ws, ["a"] * DEPTH, "leaf.txt") == b"deep\n"
    assert "Working tree matches HEAD" in ok(run_cli("status", cwd=ws))


def test_a_draft_holds_and_publishes_a_path_past_path_max(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    """The Draft's copy of Published reaches a long path through folder descriptors too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    parts = _long_parts(ws)
    _make_chain(ws, parts, "f.txt", b"long\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    assert _read_at(ws / ".strata" / "draft" / "files", parts, "f.txt") == b"long\n"
    ok(run_cli("draft", "run", "--", "sh", "-c", f"rm -r {parts[0]}; echo new > new.txt", cwd=ws))
    review = ok(run_cli("review", cwd=ws))
    assert "new.txt" in review and "f.txt" in review, review
    ok(run_cli("publish", cwd=ws))
    assert _read_at(ws, parts, "f.txt") is None and (ws / "new.txt").exists()
    ok(run_cli("undo", cwd=ws))
    assert _read_at(ws, parts, "f.txt") == b"long\n"
