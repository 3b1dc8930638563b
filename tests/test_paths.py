from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.errors import PathError, PathOutsideWorkspace, StrataError
from strata.sandbox.paths import check_relative, is_internal, workspace_relative

GOOD = [
    "a",
    "a/b/c.txt",
    ".hidden",
    "...",
    "..a",
    "a..",
    "a/.b/..c",
    "with space/and\ttab",
    "back\\slash",  # a backslash is a name character on POSIX
    "ünïcödé/файл",
    "a/b/" + "x" * 300,
]

OUTSIDE = ["/", "/etc/passwd", "..", "../a", "a/..", "a/../b", "a/b/../../..", "//a"]

MALFORMED = [
    "",
    ".",
    "./a",
    "a/.",
    "a/./b",
    "a/",
    "a//b",
    "a\0b",
    "\0",
]


@pytest.mark.parametrize("path", GOOD)
def test_check_relative_accepts_and_returns_unchanged(path: str) -> None:
    assert check_relative(path) is path


@pytest.mark.parametrize("path", OUTSIDE)
def test_check_relative_refuses_paths_that_leave(path: str) -> None:
    with pytest.raises(PathOutsideWorkspace) as info:
        check_relative(path)
    assert info.value.path == path
    assert repr(path) in str(info.value)


@pytest.mark.parametrize("path", MALFORMED)
def test_check_relative_refuses_malformed_paths(path: str) -> None:
    with pytest.raises(PathError) as info:
        check_relative(path)
    assert not isinstance(info.value, PathOutsideWorkspace)
    assert "path" in str(info.value)


@given(st.text())
def test_check_relative_raises_only_strata_errors(path: str) -> None:
    with contextlib.suppress(StrataError):
        assert check_relative(path) == path


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "\0", "c/d", "/"]), max_size=6))
def test_accepted_paths_stay_strictly_below_the_root(parts: list[str]) -> None:
    path = "/".join(parts)
    root = "/srv/ws"
    try:
        check_relative(path)
    except StrataError:
        return
    joined = os.path.normpath(os.path.join(root, path))
    assert joined.startswith(root + "/")
    assert joined == f"{root}/{path}"  # nothing to normalise: the path is already canonical


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".strata", True),
        (".git", True),
        (".git/config", True),
        ("a/.strata/objects", True),
        ("vendor/lib/.git", True),
        (".gitignore", False),
        (".strataignore", False),
        ("a/.github/workflows", False),
        ("git", False),
        ("src/app.py", False),
    ],
)
def test_is_internal(path: str, expected: bool) -> None:
    assert is_internal(path) is expected


# -- workspace_relative -------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return root


@pytest.mark.parametrize(
    ("cwd", "arg", "expected"),
    [
        ("", "a.txt", "a.txt"),
        ("", ".", ""),
        ("", "src/", "src"),
        ("", "./src//pkg/./m.py", "src/pkg/m.py"),
        ("src", "m.py", "src/m.py"),
        ("src/pkg", ".", "src/pkg"),
        ("src/pkg", "..", "src"),
        ("src/pkg", "../..", ""),
        ("src/pkg", "../../top.txt", "top.txt"),
        ("src/pkg", "../other/../x.py", "src/x.py"),
        ("src", "no/such/dir/f", "src/no/such/dir/f"),
    ],
)
def test_workspace_relative_inside(ws: Path, cwd: str, arg: str, expected: str) -> None:
    assert workspace_relative(arg, cwd=ws / cwd, root=ws) == expected


@pytest.mark.parametrize(
    ("cwd", "arg"),
    [
        ("", ".."),
        ("", "../outside/f"),
        ("src/pkg", "../../.."),
        ("src/pkg", "../../../ws2/f"),
        ("src", "../../ws-sibling"),
    ],
)
def test_workspace_relative_refuses_paths_that_leave(ws: Path, cwd: str, arg: str) -> None:
    with pytest.raises(PathOutsideWorkspace) as info:
        workspace_relative(arg, cwd=ws / cwd, root=ws)
    assert info.value.path == arg


def test_workspace_relative_refuses_a_sibling_with_the_root_as_prefix(ws: Path) -> None:
    sibling = ws.parent / (ws.name + "-evil")
    sibling.mkdir()
    with pytest.raises(PathOutsideWorkspace):
        workspace_relative(str(sibling / "f"), cwd=ws, root=ws)


def test_workspace_relative_absolute_paths(ws: Path) -> None:
    assert workspace_relative(str(ws / "src" / "m.py"), cwd=ws / "src", root=ws) == "src/m.py"
    assert workspace_relative(str(ws), cwd=ws / "src", root=ws) == ""
    assert workspace_relative(str(ws) + "/", cwd=ws, root=ws) == ""
    with pytest.raises(PathOutsideWorkspace):
        workspace_relative(str(ws.parent / "outside" / "f"), cwd=ws / "src", root=ws)
    with pytest.raises(PathOutsideWorkspace):
        workspace_relative("/", cwd=ws, root=ws)


def test_workspace_relative_from_a_symlinked_cwd(ws: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(ws / "src")  # `cd alias` lands in ws/src through a symlink
    assert workspace_relative("m.py", cwd=alias, root=ws) == "src/m.py"
    assert workspace_relative("pkg/..", cwd=alias, root=ws) == "src"
    assert workspace_relative("..", cwd=alias, root=ws) == ""
    assert workspace_relative(str(alias / "pkg" / "m.py"), cwd=ws, root=ws) == "src/pkg/m.py"
    with pytest.raises(PathOutsideWorkspace):
        workspace_relative("../../outside", cwd=alias, root=ws)


def test_workspace_relative_with_a_symlinked_root(ws: Path, tmp_path: Path) -> None:
    alias = tmp_path / "ws-alias"
    alias.symlink_to(ws)
    assert workspace_relative("m.py", cwd=ws / "src", root=alias) == "src/m.py"
    assert workspace_relative("m.py", cwd=alias / "src", root=alias) == "src/m.py"
    assert workspace_relative("m.py", cwd=alias / "src", root=ws) == "src/m.py"


def test_workspace_relative_keeps_a_final_symlink_unresolved(ws: Path, tmp_path: Path) -> None:
    (ws / "escape").symlink_to(tmp_path / "outside")
    (ws / "inner").symlink_to(ws / "src")
    # The workspace path names the symlink itself, not where it points.
    assert workspace_relative("escape", cwd=ws, root=ws) == "escape"
    assert workspace_relative("inner", cwd=ws, root=ws) == "inner"
    # A symlink inside the workspace on the way is kept lexically too.
    assert workspace_relative("escape/f", cwd=ws, root=ws) == "escape/f"


@pytest.mark.parametrize("arg", ["", "a\0b"])
def test_workspace_relative_refuses_malformed_arguments(ws: Path, arg: str) -> None:
    with pytest.raises(PathError):
        workspace_relative(arg, cwd=ws, root=ws)


FAKE_ROOT = Path("/nonexistent-strata-test/ws")  # no symlinks: the lexical answer is the answer


@given(
    cwd_parts=st.lists(st.sampled_from(["a", "b", ".."]), max_size=3),
    arg_parts=st.lists(st.sampled_from(["a", "b", ".", "..", ""]), min_size=1, max_size=6),
)
def test_workspace_relative_agrees_with_lexical_joining(
    cwd_parts: list[str], arg_parts: list[str]
) -> None:
    cwd = Path(os.path.normpath(os.path.join(FAKE_ROOT, *cwd_parts)))
    arg = "/".join(arg_parts) or "."
    target = os.path.normpath(os.path.join(cwd, arg))
    inside = target == str(FAKE_ROOT) or target.startswith(f"{FAKE_ROOT}/")
    try:
        result = workspace_relative(arg, cwd=cwd, root=FAKE_ROOT)
    except PathOutsideWorkspace:
        assert not inside
        return
    assert inside
    if result:
        check_relative(result)
    assert os.path.normpath(os.path.join(FAKE_ROOT, result)) == target
