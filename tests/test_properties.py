"""Round trips over random workspaces: whatever was recorded comes back byte for byte.

A workspace is built and edited by random operations (nested folders, unicode
names, empty files and folders, binary files, relative and dangling symlinks,
permission bits 600/644/700/755). The expected state is always read from disk
right before it is recorded, as a full manifest (path -> kind, mode bits,
content or link target; folders included), so the tests need no model of what
a snapshot should contain.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from conftest import open_repo, read_manifest
from strata import Repository
from strata.errors import PathNotFound

NAMES = ["a", "b", "é", "日本", "sp ace", "x.txt", "-dash", "Ω.bin"]
FILE_MODES = [0o600, 0o644, 0o700, 0o755]
DIR_MODES = [0o700, 0o755]
LINK_TARGETS = ["a", "../a", "b/x.txt", "nowhere", "/nonexistent/absolute", "日本", "."]

paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
contents = st.one_of(
    st.just(b""),
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda t: t.encode()),
    st.binary(min_size=1, max_size=32).map(lambda b: b"\0" + b * 300),  # binary, larger
)


@dataclass(frozen=True)
class Write:
    path: str
    data: bytes
    mode: int
    in_place: bool  # rewrite the same inode (a same-size rewrite keeps size and inode)


@dataclass(frozen=True)
class Delete:
    path: str


@dataclass(frozen=True)
class Chmod:
    path: str
    mode_index: int


@dataclass(frozen=True)
class Symlink:
    path: str
    target: str


@dataclass(frozen=True)
class Mkdir:
    path: str
    mode: int


Op = Write | Delete | Chmod | Symlink | Mkdir

ops = st.one_of(
    st.builds(Write, paths, contents, st.sampled_from(FILE_MODES), st.booleans()),
    st.builds(Delete, paths),
    st.builds(Chmod, paths, st.integers(0, 3)),
    st.builds(Symlink, paths, st.sampled_from(LINK_TARGETS)),
    st.builds(Mkdir, paths, st.sampled_from(DIR_MODES)),
)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _parents_are_folders(root: Path, rel: str) -> bool:
    """True when every folder above ``rel`` is a real folder (no symlink, no file)."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current / part
        st_ = _lstat(current)
        if st_ is None or not stat.S_ISDIR(st_.st_mode):
            return False
    return True


def _remove(path: Path) -> None:
    st_ = _lstat(path)
    if st_ is None:
        return
    if stat.S_ISDIR(st_.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _make_parents(root: Path, rel: str) -> Path:
    """The disk path of ``rel``, with every folder above it made a real folder."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current / part
        st_ = _lstat(current)
        if st_ is not None and not stat.S_ISDIR(st_.st_mode):
            current.unlink()
            st_ = None
        if st_ is None:
            current.mkdir(0o755)
            current.chmod(0o755)
    return root / rel


def apply(root: Path, op: Op) -> None:
    """Carry out one edit on disk, whatever is in the way (never through a symlink)."""
    if isinstance(op, Delete | Chmod) and not _parents_are_folders(root, op.path):
        return
    if isinstance(op, Delete):
        _remove(root / op.path)
        return
    if isinstance(op, Chmod):
        target = root / op.path
        st_ = _lstat(target)
        if st_ is None or stat.S_ISLNK(st_.st_mode):
            return
        modes = DIR_MODES if stat.S_ISDIR(st_.st_mode) else FILE_MODES
        target.chmod(modes[op.mode_index % len(modes)])
        return
    path = _make_parents(root, op.path)
    st_ = _lstat(path)
    if isinstance(op, Mkdir):
        if st_ is not None and not stat.S_ISDIR(st_.st_mode):
            path.unlink()
        path.mkdir(exist_ok=True)
        path.chmod(op.mode)
    elif isinstance(op, Symlink):
        _remove(path)
        os.symlink(op.target, path)
    else:
        if st_ is not None and (not stat.S_ISREG(st_.st_mode) or not op.in_place):
            _remove(path)
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.write(op.data)
            f.truncate()
        path.chmod(op.mode)


def apply_all(root: Path, edits: list[Op]) -> dict[str, Any]:
    for op in edits:
        apply(root, op)
    return read_manifest(root)


def _repo(root: Path) -> Repository:
    return open_repo(root)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.lists(ops, max_size=14), edits=st.lists(ops, min_size=1, max_size=8))
def test_rewind_brings_back_both_snapshots_byte_for_byte(first: list[Op], edits: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        with _repo(root) as repo:
            state_a = apply_all(root, first)
            a = repo.snapshot("A").event
            assert a is not None
            state_b = apply_all(root, edits)
            b = repo.snapshot("B").event or a
            assert repo.check() == []

            result = repo.rewind(a.id)
            assert result.skipped_paths == []
            assert result.auto_save is None, "everything was recorded"
            assert read_manifest(root) == state_a
            assert repo.status().clean
            assert repo.check() == []

            repo.rewind(b.id)
            assert read_manifest(root) == state_b
            assert repo.check() == []

            out = Path(tmp) / "export"
            repo.export(a.id, out)
            assert read_manifest(out) == state_a


@settings(max_examples=25, deadline=None)
@given(first=st.lists(ops, max_size=10), unrecorded=st.lists(ops, min_size=1, max_size=6))
def test_rewind_never_loses_unrecorded_work(first: list[Op], unrecorded: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        with _repo(root) as repo:
            state_a = apply_all(root, first)
            a = repo.snapshot("A").event
            assert a is not None
            work = apply_all(root, unrecorded)
            result = repo.rewind(a.id)
            assert read_manifest(root) == state_a
            if work == state_a:
                assert result.auto_save is None
                return
            assert result.auto_save is not None
            repo.rewind(result.auto_save.id)
            assert read_manifest(root) == work
            assert repo.check() == []


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


class WorkspaceMachine(RuleBasedStateMachine):
    """Random edits, snapshots, rewinds and restores; every recorded state stays reachable."""

    events = Bundle("events")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="strata-prop-")
        self.root = Path(self.tmp) / "ws"
        self.root.mkdir()
        self.repo = _repo(self.root)
        self.states: dict[str, dict[str, Any]] = {}
        self.head_state: dict[str, Any] = {}

    def teardown(self) -> None:
        self.repo.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(edits=st.lists(ops, min_size=1, max_size=4))
    def edit(self, edits: list[Op]) -> None:
        apply_all(self.root, edits)

    @rule(target=events)
    def snapshot(self) -> str:
        state = read_manifest(self.root)
        result = self.repo.snapshot("s")
        event = result.event or self.repo.head()
        assert event is not None
        self.states[event.id] = state
        self.head_state = state
        return event.id

    @rule(event=events)
    def rewind(self, event: str) -> None:
        before = read_manifest(self.root)
        result = self.repo.rewind(event)
        assert result.skipped_paths == []
        if result.auto_save is not None:
            self.states[result.auto_save.id] = before
        assert read_manifest(self.root) == self.states[event]
        self.head_state = self.states[event]

    @precondition(lambda self: bool(self.states))
    @rule(event=events, data=st.data())
    def restore(self, event: str, data: st.DataObject) -> None:
        before = read_manifest(self.root)
        old = self.states[event]
        candidates = sorted(set(before) | set(old))
        if not candidates:
            return
        top = data.draw(st.sampled_from(candidates))
        if top not in old and top not in self.head_state:
            with pytest.raises(PathNotFound):  # unrecorded on both sides, as git refuses it
                self.repo.restore(event, [top])
            assert read_manifest(self.root) == before
            return
        result = self.repo.restore(event, [top])
        assert result.skipped_paths == []
        if result.auto_save is not None:
            self.states[result.auto_save.id] = before
        self.head_state = before
        expected = {p: v for p, v in before.items() if not _under(p, top)}
        expected.update({p: v for p, v in old.items() if _under(p, top)})
        parts = top.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in old and (parent not in before or before[parent][0] != "dir"):
                expected[parent] = old[parent]
        assert read_manifest(self.root) == expected

    @invariant()
    def repository_is_sound(self) -> None:
        assert self.repo.check() == []


TestWorkspaceMachine = pytest.mark.slow(WorkspaceMachine.TestCase)
TestWorkspaceMachine.settings = settings(
    max_examples=20, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)
