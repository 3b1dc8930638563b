"""Strata ignores exactly what git ignores, for any pattern git accepts (issue 10, item 11).

A fixed tree is scanned under one ``.gitignore`` pattern at a time; the files
Strata records must be the untracked, not-ignored files ``git ls-files
--others --exclude-standard`` lists for the same tree. Patterns cover what git
accepts and a naive matcher trips on: ``!`` alone, ``\\`` escapes and a lone
trailing ``\\``, trailing spaces, reversed ranges ``[z-a]``, ``**``, ``[!...]``,
POSIX classes and an unterminated ``[``. A hypothesis test does the same for
patterns built from those characters. A scan never ends in an internal error.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.store.ignore import IgnoreRules
from strata.store.objects import MemoryObjectStore
from strata.store.scan import Scanner
from strata.store.statcache import StatCache
from strata.store.tree import walk_tree

FILES = [
    "a", "b", "ab", "a b", "a ", "a  ", "!a", "#a", "*", "]", "[", "-", "z", "1", "x.txt",
    "a\\", "\\", "abc", "?", "^", "B", "dir/a", "dir/b", "dir/x/a", "dir/x/y/z",
    "dir/a b", "d2/dir/a", "d2/[a]", "d2/.hidden", "d2/x.txt",
]  # fmt: skip

PATTERNS = [
    "!", "\\", "a\\", "\\\\", "[z-a]", "[z-a]*", "[!z-a]", "x[z-a]", "[a-z]", "[!a]*",
    "[^a]*", "[", "a[", "[a", "[]", "[]]", "[]a]", "[\\]]", "[!]", "[!]]", "\\[", "[[]",
    "**", "**/a", "dir/**", "dir/**/a", "**/x/**", "a**b", "***", "***/a", "/**", "**/",
    "a ", "a\\ ", "a \\ ", "a  ", "\\!a", "\\#a", "#a", "!a", "*", "*.txt", "/a", "a/",
    "dir/", "dir/a", "/dir/a", "\\a", "\\*", "a?", "?", "[[:alpha:]]", "[[:digit:]]*",
    "[[:upper:]]", "[[:space:]]", "[[:bogus:]]", "[a-]", "[-a]", "[a-c-z]", "dir/*",
    "d2/*", "d2/[[]a]", "**/*.txt", "x/", "*/a", "*/", ".*", "\\ ", " ", "a/**/",
]  # fmt: skip


def _make(root: Path) -> None:
    for rel in FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def _git_keeps(root: Path, git: Callable[..., subprocess.CompletedProcess[bytes]]) -> set[str]:
    out = git("ls-files", "--others", "--exclude-standard", "-z", cwd=root).stdout
    return {os.fsdecode(p) for p in out.split(b"\0") if p} - {".gitignore"}


def _strata_keeps(root: Path) -> set[str]:
    store = MemoryObjectStore()
    scan = Scanner(root, store, rules=IgnoreRules.root(defaults=()), cache=StatCache(None)).scan()
    return {path for path, entry in walk_tree(store, scan.tree) if entry.kind != "dir"} - {
        ".gitignore"
    }


@pytest.fixture
def tree(
    tmp_path: Path, git: Callable[..., subprocess.CompletedProcess[bytes]]
) -> Callable[[bytes], tuple[set[str], set[str]]]:
    root = tmp_path / "tree"
    root.mkdir()
    git("init", "-q", cwd=root)
    _make(root)

    def compare(gitignore: bytes) -> tuple[set[str], set[str]]:
        (root / ".gitignore").write_bytes(gitignore)
        return _git_keeps(root, git), _strata_keeps(root)

    return compare


@pytest.mark.parametrize("pattern", PATTERNS)
def test_each_pattern_ignores_what_git_ignores(
    tree: Callable[[bytes], tuple[set[str], set[str]]], pattern: str
) -> None:
    git_sees, strata_sees = tree(pattern.encode() + b"\n")
    assert strata_sees == git_sees, (
        f"pattern {pattern!r}: strata alone records {sorted(strata_sees - git_sees)}, "
        f"git alone lists {sorted(git_sees - strata_sees)}"
    )


def test_negations_and_layers_agree_with_git(
    tree: Callable[[bytes], tuple[set[str], set[str]]],
) -> None:
    for text in (
        b"*\n!a\n", b"dir/\n!dir/a\n", b"dir/*\n!dir/x/\n", b"*\n!*/\n!*.txt\n",
        b"a*\n!ab\n\\!a\n", b"[z-a]\n!\n*.txt\n", b"**/a\n!dir/**\n",
    ):  # fmt: skip
        git_sees, strata_sees = tree(text)
        assert strata_sees == git_sees, text


ALPHABET = st.sampled_from(["a", "b", "x", "*", "?", "[", "]", "!", "^", "-", "\\", "/", " ", "#"])


def test_generated_patterns_agree_with_git(
    tree: Callable[[bytes], tuple[set[str], set[str]]],
) -> None:
    @settings(
        max_examples=200,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(st.lists(ALPHABET, min_size=1, max_size=8).map("".join))
    def check(pattern: str) -> None:
        git_sees, strata_sees = tree(pattern.encode() + b"\n")
        assert strata_sees == git_sees, pattern

    check()
