"""Ignore rules, seen the way a user sees them: which paths a real snapshot records."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import File, Link
from strata import Repository
from strata.store.tree import walk_tree


def recorded(repo: Repository, *, dirs: bool = False) -> set[str]:
    """The paths HEAD's snapshot holds (files and symlinks; folders too with ``dirs``)."""
    head = repo.head()
    assert head is not None, "nothing was recorded"
    tree = repo.resolve("HEAD").tree
    return {p for p, e in walk_tree(repo.objects, tree) if dirs or e.kind != "dir"}


def snap(repo: Repository) -> set[str]:
    repo.snapshot("test")
    return recorded(repo)


# -- agreement with git --------------------------------------------------------------

# Each case: ignore files and content, judged by both git and strata. Names avoid
# strata's default ignores (.venv, node_modules, __pycache__), which git lacks.
GIT_CASES: dict[str, dict[str, Any]] = {
    "glob and negation": {
        ".gitignore": "*.log\n!keep.log\n",
        "a.log": "x",
        "keep.log": "x",
        "sub/b.log": "x",
        "sub/keep.log": "x",
        "sub/c.txt": "x",
    },
    "nested gitignore overrides its parent": {
        ".gitignore": "*.tmp\nlocal/\n",
        "x.tmp": "x",
        "sub/.gitignore": "!important.tmp\n/only-here.txt\n",
        "sub/important.tmp": "x",
        "sub/other.tmp": "x",
        "sub/only-here.txt": "x",
        "sub/deeper/only-here.txt": "x",
        "sub/local/f": "x",
        "local/f": "x",
        "only-here.txt": "x",
    },
    "directory-only patterns": {
        ".gitignore": "build/\ncache\n",
        "build/out.o": "x",
        "src/build/out.o": "x",
        "src/tools/build": "a file named build is kept",
        "cache": "a file named cache is ignored too",
        "src/cache/x": "x",
        "src/app.py": "x",
    },
    "anchored and double-star patterns": {
        ".gitignore": "/top.txt\ndocs/**/*.md\na/**/b\n**/gen/\n",
        "top.txt": "x",
        "sub/top.txt": "x",
        "docs/readme.md": "x",
        "docs/x/y/deep.md": "x",
        "docs/keep.txt": "x",
        "a/b": "x",
        "a/x/y/b": "x",
        "a/x/c": "x",
        "p/q/gen/out": "x",
        "gen.txt": "x",
    },
    "a negation cannot reach inside an ignored folder": {
        ".gitignore": "out/\n!out/keep.txt\nlogs/*\n!logs/keep.txt\n",
        "out/keep.txt": "x",
        "out/drop.txt": "x",
        "logs/keep.txt": "x",
        "logs/drop.txt": "x",
    },
    "whitelist": {
        ".gitignore": "*\n!*/\n!*.py\n!.gitignore\n",
        "a.py": "x",
        "a.txt": "x",
        "pkg/b.py": "x",
        "pkg/b.pyc": "x",
        "pkg/deep/c.py": "x",
    },
    "comments, escapes, classes and spaces": {
        ".gitignore": "# a comment\n\\#hash\n[abc].txt\n?.md\ntrailing \n\\!bang\n",
        "#hash": "x",
        "# a comment": "x",
        "a.txt": "x",
        "d.txt": "x",
        "x.md": "x",
        "xy.md": "x",
        "trailing": "x",
        "!bang": "x",
    },
    "ignored symlinks and folders named like files": {
        ".gitignore": "link-*\nnotes.txt/\n",
        "link-a": Link("target"),
        "plain-link": Link("missing"),
        "notes.txt/inside": "x",
        "sub/notes.txt": "a file, not a folder",
    },
}


@pytest.mark.parametrize(
    "case",
    sorted(GIT_CASES),
)
def test_recorded_paths_match_git(
    case: str,
    ws: Path,
    make_tree: Callable[..., Path],
    make_repo: Callable[..., Repository],
    git: Callable[..., Any],
) -> None:
    make_tree(ws, GIT_CASES[case])
    repo = make_repo(ws)
    git("init", "-q", cwd=ws)
    listed = git("ls-files", "--others", "--exclude-standard", "-z", cwd=ws).stdout
    git_paths = {p.decode() for p in listed.split(b"\0") if p}
    assert git_paths, "the case must leave something for git to list"
    assert snap(repo) == git_paths


def test_git_check_ignore_agrees_on_every_path(
    ws: Path,
    make_tree: Callable[..., Path],
    make_repo: Callable[..., Repository],
    git: Callable[..., Any],
) -> None:
    spec: dict[str, Any] = {}
    for case in GIT_CASES.values():
        for path, value in case.items():
            if not path.endswith(".gitignore"):
                spec[f"{len(spec)}/{path}"] = value
    spec[".gitignore"] = "*.log\n/0/\n**/keep*\n!**/keep.log\n"
    make_tree(ws, spec)
    repo = make_repo(ws)
    kept = snap(repo)
    git("init", "-q", cwd=ws)
    candidates = sorted(p for p in spec if p != ".gitignore")
    out = git(
        "check-ignore",
        "--no-index",
        "--stdin",
        "-z",
        cwd=ws,
        check=False,
        input=b"\0".join(p.encode() for p in candidates) + b"\0",
    ).stdout
    ignored_by_git = {p.decode() for p in out.split(b"\0") if p}
    # check-ignore judges each path by the patterns alone; a path below an ignored
    # folder is ignored too, so count it as ignored when any folder above it is
    ignored_dirs = {p for p in ignored_by_git if any(c.startswith(p + "/") for c in candidates)}
    expected = {
        p
        for p in candidates
        if p not in ignored_by_git and not any(p.startswith(d + "/") for d in ignored_dirs)
    }
    assert kept == expected | {".gitignore"}


# -- strata's own rules ----------------------------------------------------------------


def test_strataignore_wins_over_gitignore_in_the_same_folder(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(
        ws,
        {
            ".gitignore": "*.txt\n!shown-to-git.dat\n",
            ".strataignore": "!notes.txt\n*.dat\n",
            "notes.txt": "re-included by .strataignore",
            "other.txt": "ignored by .gitignore",
            "shown-to-git.dat": "re-included by .gitignore, ignored by .strataignore",
            "sub/deep.txt": "ignored",
            "sub/notes.txt": "re-included: the pattern has no slash",
        },
    )
    assert snap(make_repo(ws)) == {".gitignore", ".strataignore", "notes.txt", "sub/notes.txt"}


def test_a_deeper_ignore_file_wins_over_a_shallower_one(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(
        ws,
        {
            ".strataignore": "*.dat\n",
            "top.dat": "x",
            "sub/.gitignore": "!keep.dat\n",
            "sub/keep.dat": "x",
            "sub/drop.dat": "x",
        },
    )
    assert snap(make_repo(ws)) == {".strataignore", "sub/.gitignore", "sub/keep.dat"}


def test_default_ignores(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(
        ws,
        {
            ".venv/bin/python": "x",
            "node_modules/pkg/index.js": "x",
            "web/node_modules/pkg/index.js": "x",
            "__pycache__/m.cpython-311.pyc": b"\0",
            "pkg/__pycache__/m.cpython-311.pyc": b"\0",
            "pkg/m.py": "x",
            "docs/node_modules": "a file of that name is not a folder: kept",
        },
    )
    repo = make_repo(ws)
    assert snap(repo) == {"pkg/m.py", "docs/node_modules"}
    assert "node_modules" not in recorded(repo, dirs=True)


def test_gitignore_can_reinclude_a_default(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(ws, {".gitignore": "!node_modules/\n", "node_modules/vendored.js": "x"})
    assert snap(make_repo(ws)) == {".gitignore", "node_modules/vendored.js"}


def test_git_and_strata_folders_are_never_recorded(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(
        ws,
        {
            ".gitignore": "!.git\n!.git/\n!.strata\n!.strata/\n",
            ".strataignore": "!.git/**\n!.strata/**\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            "sub/.git": "gitdir: ../.git/worktrees/sub\n",  # a git worktree's file
            "vendor/lib/.git/config": "x",
            "vendor/lib/code.c": "x",
            "nested/.strata/config.toml": "x",
        },
    )
    repo = make_repo(ws)
    paths = snap(repo)
    assert paths == {".gitignore", ".strataignore", "vendor/lib/code.c"}
    everything = recorded(repo, dirs=True)
    assert not any(part in (".git", ".strata") for p in everything for part in p.split("/"))


def test_changing_ignore_rules_changes_what_the_next_snapshot_records(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(ws, {"a/data.csv": "1", "a/b/data.csv": "2", "a/b/code.py": "x"})
    repo = make_repo(ws)
    assert snap(repo) == {"a/data.csv", "a/b/data.csv", "a/b/code.py"}

    (ws / "a" / ".gitignore").write_text("*.csv\n")
    assert snap(repo) == {"a/.gitignore", "a/b/code.py"}
    assert (ws / "a/b/data.csv").read_text() == "2", "ignoring a file never deletes it"

    (ws / "a" / ".gitignore").write_text("*.csv\n!b/data.csv\n")
    assert snap(repo) == {"a/.gitignore", "a/b/data.csv", "a/b/code.py"}

    (ws / "a" / ".gitignore").unlink()
    assert snap(repo) == {"a/data.csv", "a/b/data.csv", "a/b/code.py"}


def test_a_change_to_an_ignored_file_records_nothing(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(ws, {".gitignore": "*.log\n", "app.log": "one", "app.py": "x"})
    repo = make_repo(ws)
    repo.snapshot("first")
    (ws / "app.log").write_text("two, longer")
    result = repo.snapshot("second")
    assert result.unchanged
    assert repo.status().clean


def test_an_ignored_folder_is_not_descended_into(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(ws, {".gitignore": "secret/\n", "secret/deep/f": "x", "ok.txt": "x"})
    os.mkfifo(ws / "secret" / "deep" / "pipe")  # a scan that descended would warn about it
    result = make_repo(ws).snapshot("s")
    assert result.warnings == []
    assert result.to_json()["changed_paths"] == [".gitignore", "ok.txt"]


def test_ignore_files_that_ignore_themselves_still_apply_and_are_recorded(
    ws: Path, make_tree: Callable[..., Path], make_repo: Callable[..., Repository]
) -> None:
    make_tree(ws, {".gitignore": ".gitignore\n*.bak\n", "a.bak": "x", "a": File("x", 0o600)})
    # the rules are always recorded, so a rollback can always restore them (issue 10, item 9)
    assert snap(make_repo(ws)) == {".gitignore", "a"}
