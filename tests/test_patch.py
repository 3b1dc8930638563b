"""Patches from strata.diff.patch, checked against real git.

Every case builds a git repository holding the OLD state, applies our patch
with ``git apply`` and checks that the worktree then holds exactly the NEW
state (bytes, git modes, symlink targets). Where git's output is
deterministic the patch must also be byte-identical to ``git diff``'s, and
``line_stats`` must agree with ``git diff --numstat``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.diff.patch import (
    FileSide,
    LineStats,
    git_blob_id,
    git_mode,
    is_binary,
    line_stats,
    render_patch,
    render_patches,
)
from strata.errors import DiffError

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

Pair = tuple[FileSide | None, FileSide | None]
State = dict[str, tuple[str, str, bytes]]  # path -> (kind, git mode, data)


def f(path: str, data: bytes, mode: int = 0o644) -> FileSide:
    return FileSide(path=path, kind="file", mode=mode, data=data)


def link(path: str, target: str) -> FileSide:
    return FileSide(path=path, kind="symlink", mode=0o777, data=target.encode())


# --- a git repository in a temporary folder ---------------------------------------------


class Repo:
    """A scratch git repository, isolated from the user's and system's git config."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root.parent / (root.name + "-home")
        home.mkdir(exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "LC_ALL": "C",
        }
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", ".")

    def git(self, *args: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(
            [
                "git",
                "-c",
                "user.name=Strata Tests",
                "-c",
                "user.email=tests@strata.invalid",
                "-c",
                "core.autocrlf=false",
                "-c",
                "core.symlinks=true",
                *args,
            ],
            cwd=self.root,
            env=self.env,
            input=stdin,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"git {' '.join(args)} failed ({done.returncode}):\n"
                + done.stderr.decode(errors="replace")
            )
        return done.stdout

    def write(self, sides: Iterable[FileSide]) -> None:
        for side in sides:
            target = self.root / side.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            if side.kind == "symlink":
                os.symlink(os.fsdecode(side.data), target)
            else:
                target.write_bytes(side.data)
                target.chmod(side.mode)

    def commit(self, sides: Iterable[FileSide]) -> None:
        self.write(sides)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", "old")

    def apply(self, patch: bytes) -> None:
        self.git("apply", "--check", "-", stdin=patch)
        self.git("apply", "-", stdin=patch)

    def state(self) -> State:
        found: State = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames:
                full = Path(dirpath, name)
                rel = full.relative_to(self.root).as_posix()
                info = full.lstat()
                if stat.S_ISLNK(info.st_mode):
                    found[rel] = ("symlink", "120000", os.fsencode(os.readlink(full)))
                else:
                    mode = "100755" if info.st_mode & 0o100 else "100644"
                    found[rel] = ("file", mode, full.read_bytes())
        return found

    def staged_diff(self, *args: str) -> bytes:
        self.git("add", "-A")
        return self.git("diff", "--cached", *args, "HEAD")


def expected_state(sides: Iterable[FileSide]) -> State:
    return {s.path: (s.kind, git_mode(s), s.data) for s in sides}


def numstat(repo: Repo, *, renames: bool = True) -> list[tuple[bytes, bytes]]:
    """(insertions, deletions) per line of ``git diff --numstat`` for the staged change."""
    out = repo.staged_diff("--numstat", "-M" if renames else "--no-renames")
    counts = []
    for line in out.splitlines():
        insertions, deletions, _ = line.split(b"\t", 2)
        counts.append((insertions, deletions))
    return counts


def as_numstat(stats: LineStats) -> tuple[bytes, bytes]:
    if stats.binary:
        return (b"-", b"-")
    return (str(stats.insertions).encode(), str(stats.deletions).encode())


def split_binary_body(patch: bytes) -> bytes:
    """Keep a patch's headers; drop the compressed data git and libgit2 may encode differently."""
    head, sep, _ = patch.partition(b"GIT binary patch\n")
    return head + sep


# --- the cases ------------------------------------------------------------------------------

C_SOURCE = b"".join(
    [b"#include <stdio.h>\n", b"\n", b"static int helper(int x)\n", b"{\n"]
    + [b"    x += %d;\n" % i for i in range(12)]
    + [b"    return x;\n", b"}\n", b"\n", b"int main(void)\n", b"{\n"]
    + [b'    printf("%%d\\n", helper(%d));\n' % i for i in range(12)]
    + [b"    return 0;\n", b"}\n"]
)
C_EDITED = (
    C_SOURCE.replace(b"x += 3;", b"x -= 3;")
    .replace(b"helper(9)", b"helper(90)")
    .replace(b"return 0;", b"return 1;")
)
NUMBERS = b"".join(b"line %d\n" % i for i in range(1, 41))
NUMBERS_EDITED = NUMBERS.replace(b"line 3\n", b"").replace(b"line 37", b"LINE 37")
PNG_LIKE = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)) * 4
PNG_EDITED = PNG_LIKE[:100] + b"\xff\xfe" + PNG_LIKE[102:] + b"tail"


@dataclass(frozen=True)
class Case:
    name: str
    old: FileSide | None
    new: FileSide | None
    # Whether git's own ``git diff`` prints the very same bytes (renames that
    # git would not detect, for instance, are printed differently by git).
    same_as_git: bool = True


CASES = [
    Case("add", None, f("a.txt", b"one\ntwo\n")),
    Case("delete", f("a.txt", b"one\ntwo\n"), None),
    Case("modify", f("a.txt", b"one\ntwo\nthree\n"), f("a.txt", b"one\n2\nthree\n")),
    Case("modify-hunks-with-function-context", f("main.c", C_SOURCE), f("main.c", C_EDITED)),
    Case("modify-far-apart", f("n.txt", NUMBERS), f("n.txt", NUMBERS_EDITED)),
    Case("add-no-trailing-newline", None, f("a.txt", b"one\ntwo")),
    Case("delete-no-trailing-newline", f("a.txt", b"one\ntwo"), None),
    Case("remove-trailing-newline", f("a.txt", b"one\ntwo\n"), f("a.txt", b"one\ntwo")),
    Case("add-trailing-newline", f("a.txt", b"one\ntwo"), f("a.txt", b"one\ntwo\n")),
    Case("both-without-newline", f("a.txt", b"one\ntwo"), f("a.txt", b"one\nthree")),
    Case("crlf", f("w.txt", b"a\r\nb\r\nc\r\n"), f("w.txt", b"a\r\nB\r\nc\r\nd\r\n")),
    Case("lf-to-crlf", f("w.txt", b"a\nb\n"), f("w.txt", b"a\r\nb\r\n")),
    Case("lone-cr", f("w.txt", b"a\rb\n"), f("w.txt", b"a\rc\n")),
    Case("empty-added", None, f("empty", b"")),
    Case("empty-deleted", f("empty", b""), None),
    Case("empty-filled", f("e.txt", b""), f("e.txt", b"now\n")),
    Case("emptied", f("e.txt", b"was\n"), f("e.txt", b"")),
    Case("exec-bit-added", f("run.sh", b"echo hi\n"), f("run.sh", b"echo hi\n", 0o755)),
    Case(
        "exec-bit-removed-and-edited",
        f("run.sh", b"echo hi\n", 0o755),
        f("run.sh", b"echo bye\n", 0o644),
    ),
    Case("add-executable", None, f("bin/tool", b"#!/bin/sh\necho tool\n", 0o755)),
    Case("delete-executable", f("bin/tool", b"#!/bin/sh\n", 0o700), None),
    Case("symlink-added", None, link("current", "releases/v1")),
    Case("symlink-retargeted", link("current", "releases/v1"), link("current", "releases/v2")),
    Case("symlink-deleted", link("current", "releases/v1"), None),
    Case("file-to-symlink", f("cfg", b"inline\n"), link("cfg", "shared/cfg")),
    Case("symlink-to-file", link("cfg", "shared/cfg"), f("cfg", b"inline\n", 0o755)),
    Case("rename-identical", f("old.txt", NUMBERS), f("new.txt", NUMBERS)),
    Case(
        "rename-with-edits",
        f("old.txt", NUMBERS),
        f("new.txt", NUMBERS.replace(b"line 20\n", b"twenty\n")),
    ),
    Case("rename-with-mode-change", f("old.sh", NUMBERS), f("new.sh", NUMBERS, 0o755)),
    Case(
        "rename-with-mode-and-content",
        f("old.sh", NUMBERS, 0o755),
        f("new.sh", NUMBERS + b"more\n", 0o644),
    ),
    Case("rename-into-subfolder", f("top.py", b"x = 1\n"), f("pkg/sub/top.py", b"x = 1\n")),
    Case("rename-empty", f("e1", b""), f("e2", b"")),
    Case("rename-symlink", link("l1", "there"), link("l2", "there")),
    Case(
        "rename-unrecognisable",
        f("old.txt", b"a\nb\nc\n"),
        f("new.txt", b"x\ny\nz\n"),
        same_as_git=False,
    ),
    Case("rename-file-to-symlink", f("old", b"text\n"), link("new", "old"), same_as_git=False),
    Case("binary-added", None, f("img.png", PNG_LIKE)),
    Case("binary-modified", f("img.png", PNG_LIKE), f("img.png", PNG_EDITED)),
    Case("binary-deleted", f("img.png", PNG_LIKE), None),
    Case("binary-renamed-edited", f("a.png", PNG_LIKE), f("b.png", PNG_EDITED)),
    Case("binary-to-text", f("blob", b"\0\1\2"), f("blob", b"text now\n")),
    Case("text-to-binary", f("blob", b"text\n"), f("blob", b"text\0\n")),
    Case("binary-emptied", f("blob", b"\0\1\2"), f("blob", b"")),
    Case("space-in-name", f("my notes.txt", b"a\n"), f("my notes.txt", b"b\n")),
    Case("space-added", None, f("dir with space/new file.txt", b"a\n")),
    Case("unicode-name", f("docs/résumé.md", b"# CV\n"), f("docs/résumé.md", b"# CV\n\nhi\n")),
    Case("unicode-and-space-rename", f("ünï cödé.txt", NUMBERS), f("ñew näme.txt", NUMBERS)),
    Case("quote-and-backslash", None, f('say "hi" \\ bye.txt', b"hi\n")),
    Case("tab-and-newline-in-name", f("a\tb\nc", b"1\n"), f("a\tb\nc", b"2\n")),
    Case("control-and-del-in-name", None, f("x\x01y\x7fz", b"odd\n")),
    Case(
        "deep-subfolder",
        f("src/pkg/mod/deep.py", b"pass\n"),
        f("src/pkg/mod/deep.py", b"pass\nprint()\n"),
    ),
]

BYSTANDERS = [f("README", b"untouched\n"), f("src/keep.py", b"keep = True\n")]


def case_states(case: Case) -> tuple[list[FileSide], list[FileSide]]:
    old = [*BYSTANDERS, *([case.old] if case.old else [])]
    new = [*BYSTANDERS, *([case.new] if case.new else [])]
    return old, new


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_git_apply_reproduces_the_new_state(case: Case, tmp_path: Path) -> None:
    old_state, new_state = case_states(case)
    repo = Repo(tmp_path / "repo")
    repo.commit(old_state)
    patch = render_patch(case.old, case.new)
    assert patch
    repo.apply(patch)
    assert repo.state() == expected_state(new_state)


@pytest.mark.parametrize("case", [c for c in CASES if c.same_as_git], ids=lambda c: c.name)
def test_patch_is_what_git_diff_prints(case: Case, tmp_path: Path) -> None:
    old_state, new_state = case_states(case)
    repo = Repo(tmp_path / "repo")
    repo.commit(old_state)
    repo.write(new_state)
    if case.old is not None and (case.new is None or case.old.path != case.new.path):
        (repo.root / case.old.path).unlink()
    git_patch = repo.staged_diff("--full-index", "--binary", "-M")
    ours = render_patch(case.old, case.new)
    assert split_binary_body(ours) == split_binary_body(git_patch)
    if b"GIT binary patch" not in ours:
        assert ours == git_patch


@pytest.mark.parametrize("case", [c for c in CASES if c.same_as_git], ids=lambda c: c.name)
def test_line_stats_match_git_numstat(case: Case, tmp_path: Path) -> None:
    old_state, _ = case_states(case)
    repo = Repo(tmp_path / "repo")
    repo.commit(old_state)
    repo.apply(render_patch(case.old, case.new))
    [git_counts] = numstat(repo)
    ours = line_stats(case.old and case.old.data, case.new and case.new.data)
    assert as_numstat(ours) == git_counts


@pytest.mark.parametrize("context", [0, 1, 5])
def test_context_lines_match_git(context: int, tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    old, new = f("c.c", C_SOURCE), f("c.c", C_EDITED)
    repo.commit([old])
    repo.write([new])
    git_patch = repo.staged_diff("--full-index", f"-U{context}")
    assert render_patch(old, new, context=context) == git_patch


def test_render_patches_applies_many_changes_at_once(tmp_path: Path) -> None:
    applicable = [c for c in CASES if c.name != "rename-file-to-symlink"]
    repo = Repo(tmp_path / "repo")
    # Give each case its own folder so that their paths do not collide.
    moved = [
        (
            None if c.old is None else _under(f"case{i}", c.old),
            None if c.new is None else _under(f"case{i}", c.new),
        )
        for i, c in enumerate(applicable)
    ]
    repo.commit([old for old, _ in moved if old is not None])
    repo.apply(render_patches(moved))
    assert repo.state() == expected_state(new for _, new in moved if new is not None)


def _under(folder: str, side: FileSide) -> FileSide:
    return FileSide(f"{folder}/{side.path}", side.kind, side.mode, side.data)


# --- nothing to show ------------------------------------------------------------------------


def test_identical_sides_render_nothing() -> None:
    assert render_patch(f("a", b"x\n"), f("a", b"x\n")) == b""
    assert render_patch(link("l", "t"), link("l", "t")) == b""
    assert render_patch(None, None) == b""
    assert render_patches([]) == b""
    assert render_patches([(f("a", b"1"), f("a", b"1")), (None, None)]) == b""


def test_permission_change_git_does_not_record_renders_nothing() -> None:
    assert render_patch(f("a", b"x\n", 0o644), f("a", b"x\n", 0o600)) == b""
    assert render_patch(f("a", b"x\n", 0o755), f("a", b"x\n", 0o700)) == b""
    # Only the kind and the target of a symlink count, never its mode.
    assert render_patch(link("l", "t"), FileSide("l", "symlink", 0o755, b"t")) == b""


def test_pure_mode_change_prints_only_mode_lines() -> None:
    patch = render_patch(f("run.sh", b"x\n"), f("run.sh", b"x\n", 0o755))
    assert patch == b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"


def test_type_change_is_a_deletion_then_an_addition() -> None:
    patch = render_patch(f("p", b"text\n"), link("p", "elsewhere"))
    sections = patch.split(b"diff --git ")[1:]
    assert len(sections) == 2
    assert b"deleted file mode 100644" in sections[0]
    assert b"new file mode 120000" in sections[1]


def test_binary_index_line_has_full_ids() -> None:
    old, new = b"\0old", b"\0new"
    patch = render_patch(f("b", old), f("b", new))
    ids = f"index {git_blob_id(old)}..{git_blob_id(new)} 100644\n".encode()
    assert ids in patch
    assert b"GIT binary patch\nliteral " in patch


# --- the helpers ------------------------------------------------------------------------------


def test_git_blob_id_matches_git_hash_object(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    for data in [b"", b"hello\n", b"\0\xff" * 1000]:
        expected = repo.git("hash-object", "--stdin", stdin=data).decode().strip()
        assert git_blob_id(data) == expected


def test_git_mode() -> None:
    assert git_mode(f("a", b"", 0o644)) == "100644"
    assert git_mode(f("a", b"", 0o600)) == "100644"
    assert git_mode(f("a", b"", 0o755)) == "100755"
    assert git_mode(f("a", b"", 0o744)) == "100755"
    assert git_mode(f("a", b"", 0o655)) == "100644"  # group/other exec alone: git ignores it
    assert git_mode(link("a", "t")) == "120000"


def test_binary_detection_looks_at_the_first_8000_bytes(tmp_path: Path) -> None:
    assert is_binary(b"a\0b")
    assert not is_binary(b"plain text\n")
    assert not is_binary(b"")
    assert is_binary(b"x" * 7999 + b"\0")
    assert not is_binary(b"x" * 8000 + b"\0")
    # ... and git draws the line at the same place.
    repo = Repo(tmp_path / "repo")
    repo.commit([f("at7999", b"x" * 7999 + b"\0"), f("at8000", b"x" * 8000 + b"\0")])
    (repo.root / "at7999").write_bytes(b"y" + b"x" * 7998 + b"\0")
    (repo.root / "at8000").write_bytes(b"y" + b"x" * 7999 + b"\0")
    assert numstat(repo) == [(b"-", b"-"), (b"1", b"1")]
    assert line_stats(b"x" * 7999 + b"\0", b"y" + b"x" * 7998 + b"\0").binary
    assert line_stats(b"x" * 8000 + b"\0", b"y" + b"x" * 7999 + b"\0") == LineStats(1, 1, False)


def test_line_stats() -> None:
    assert line_stats(None, None) == LineStats(0, 0, False)
    assert line_stats(None, b"") == LineStats(0, 0, False)
    assert line_stats(None, b"a\nb\n") == LineStats(2, 0, False)
    assert line_stats(b"a\nb", None) == LineStats(0, 2, False)
    assert line_stats(b"a\nb\nc\n", b"a\nB\nc\n") == LineStats(1, 1, False)
    assert line_stats(b"same\n", b"same\n") == LineStats(0, 0, False)
    assert line_stats(b"\0", b"text\n") == LineStats(0, 0, True)
    assert line_stats(None, b"\0") == LineStats(0, 0, True)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (f("", b"a"), None),
        (None, f("a\0b", b"a")),
        (FileSide("a", "folder", 0o755, b""), None),
        (None, FileSide("a", "fifo", 0o644, b"")),
    ],
)
def test_unusable_sides_raise_diff_error(old: FileSide | None, new: FileSide | None) -> None:
    with pytest.raises(DiffError):
        render_patch(old, new)


def test_negative_context_raises_diff_error() -> None:
    with pytest.raises(DiffError):
        render_patch(f("a", b"1\n"), f("a", b"2\n"), context=-1)


def test_importing_the_module_does_not_load_pygit2() -> None:
    # Command-line start-up time depends on it: pygit2 loads libgit2.
    code = "import sys, strata.diff.patch; print('pygit2' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.strip() == b"False"


def test_git_mode_rejects_unknown_kind() -> None:
    with pytest.raises(DiffError):
        git_mode(FileSide("a", "socket", 0, b""))


# --- property: any change applies and reproduces the new content -----------------------------

LINES = st.sampled_from([b"a", b"b", b"c", b"", b"  indented", b"x\r", b"{", b"}", b"a" * 70])


@st.composite
def texts(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(LINES, max_size=40))
    body = b"\n".join(lines)
    if lines and draw(st.booleans()):
        body += b"\n"
    return body


binaries = st.binary(max_size=400).map(lambda b: b if b"\0" in b else b + b"\0")
targets = st.sampled_from([b"a", b"../up", b"sub/dir/file", b"with space", "ünï".encode()])


@st.composite
def sides(draw: st.DrawFn, path: str) -> FileSide | None:
    kind = draw(st.sampled_from(["absent", "text", "text", "binary", "symlink"]))
    if kind == "absent":
        return None
    if kind == "symlink":
        return FileSide(path, "symlink", 0o777, draw(targets))
    data = draw(texts() if kind == "text" else binaries)
    return FileSide(path, "file", draw(st.sampled_from([0o644, 0o755, 0o600])), data)


NAMES = ["plain.txt", "sub/dir/file", "with space", "ünï", 'q"uote']


@st.composite
def change_sets(draw: st.DrawFn) -> list[Pair]:
    """Up to six independent changes, each in its own folder; some are renames."""
    pairs: list[Pair] = []
    for i in range(draw(st.integers(min_value=1, max_value=6))):
        path = f"{i}/{NAMES[i % len(NAMES)]}"
        old = draw(sides(path))
        moved = old is not None and draw(st.booleans())
        new = draw(sides(f"{i}/moved {NAMES[(i + 1) % len(NAMES)]}" if moved else path))
        # Leaving the content unchanged now and then makes pure renames and mode changes.
        if old is not None and new is not None and draw(st.integers(0, 3)) == 0:
            new = FileSide(new.path, old.kind, new.mode, old.data)
        pairs.append((old, new))
    return pairs


def expected_numstat(pairs: Iterable[Pair]) -> dict[bytes, tuple[bytes, bytes]]:
    """What ``git diff --numstat --no-renames`` should print, path by path."""
    expected = {}
    for old, new in pairs:
        if not render_patch(old, new):
            continue
        if old is not None and new is not None and old.path != new.path:
            expected[old.path.encode()] = as_numstat(line_stats(old.data, None))
            expected[new.path.encode()] = as_numstat(line_stats(None, new.data))
        else:
            side = old or new
            assert side is not None
            expected[side.path.encode()] = as_numstat(
                line_stats(old and old.data, new and new.data)
            )
    return expected


def git_numstat(repo: Repo) -> dict[bytes, tuple[bytes, bytes]]:
    out = repo.staged_diff("--numstat", "--no-renames", "-z")
    counts = {}
    for record in out.split(b"\0")[:-1]:
        insertions, deletions, path = record.split(b"\t", 2)
        counts[path] = (insertions, deletions)
    return counts


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change_sets())
def test_any_change_applies_with_git_and_counts_like_numstat(pairs: list[Pair]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        repo = Repo(Path(scratch) / "repo")
        repo.commit(old for old, _ in pairs if old is not None)
        patch = render_patches(pairs)
        if patch:
            repo.apply(patch)
        assert repo.state() == expected_state(new for _, new in pairs if new is not None)
        assert git_numstat(repo) == expected_numstat(pairs)


def _edited(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with lines inserted, deleted or rewritten at one or two places."""
    lines = base.split(b"\n")
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(lines)))
        cut = draw(st.integers(0, 3))
        lines[at : at + cut] = draw(st.lists(LINES | st.just(b"new line"), max_size=4))
    return b"\n".join(lines)


@st.composite
def edits(draw: st.DrawFn) -> tuple[bytes, bytes]:
    old = draw(texts())
    return old, draw(texts()) if draw(st.integers(0, 4)) == 0 else _edited(draw, old)


@given(edits())
@settings(max_examples=600, deadline=None)
def test_line_stats_agree_with_libgit2_xdiff(pair: tuple[bytes, bytes]) -> None:
    """Counts made without libgit2 (typical edits) are the ones its xdiff gives."""
    import pygit2
    from pygit2.enums import DiffOption

    old, new = pair
    flag = DiffOption.INDENT_HEURISTIC | DiffOption.FORCE_TEXT
    patch = pygit2.Patch.create_from(old, new, "x", "x", flag=flag, context_lines=0)
    _, insertions, deletions = patch.line_stats
    assert line_stats(old, new) == LineStats(insertions, deletions, False)


def test_a_typical_edit_is_counted_without_loading_libgit2() -> None:
    """Lines added or rewritten in place: counting them does not import pygit2 (≈ 100 ms)."""
    code = (
        "import sys\n"
        "from strata.diff.patch import LineStats, line_stats\n"
        "old = b''.join(b'line %d\\n' % i for i in range(100))\n"
        "added = old.replace(b'line 50\\n', b'line 50\\nnew\\nnew\\n')\n"
        "assert line_stats(old, added) == LineStats(2, 0, False)\n"
        "assert line_stats(old, old.replace(b'line 7\\n', b'seven\\n')) == LineStats(1, 1, False)\n"
        "assert line_stats(old, old[:-1]) == LineStats(1, 1, False)\n"
        "assert 'pygit2' not in sys.modules\n"
        "assert line_stats(b'a\\nb\\na\\n', b'b\\na\\nb\\n') == LineStats(1, 1, False)\n"
        "assert 'pygit2' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
