"""Workspace paths: checked at the edge, before anything reads or writes them.

Two kinds of path meet Strata:

* **Workspace paths** are POSIX ``str`` paths relative to the workspace root,
  as they appear in stored trees, Drafts and API calls (``"src/app.py"``).
  They are agent-made, so :func:`check_relative` refuses anything that could
  name a place other than one entry below the root.
* **Command-line paths** are what a person types, relative to the current
  folder or absolute. :func:`workspace_relative` turns one into a workspace
  path, or refuses it when it lies outside the workspace.

Checking a path lexically is not enough to write it safely (a folder on the
way may be a symlink); :mod:`strata.store.fsops` does the writing.
"""

from __future__ import annotations

import os
from pathlib import Path

from strata.errors import PathError, PathOutsideWorkspace, StrataError

__all__ = ["INTERNAL_NAMES", "check_relative", "is_internal", "workspace_relative"]

#: Folder names that are never recorded, restored or written into a workspace.
INTERNAL_NAMES = frozenset({".strata", ".git"})


def check_relative(path: str) -> str:
    """Check that ``path`` is a well-formed workspace path and return it unchanged.

    A workspace path is non-empty, relative, uses ``/`` as its separator, has
    no empty, ``.`` or ``..`` component, no trailing ``/`` and no NUL byte.
    Any other character (a backslash included) is part of a name.

    Raises:
        PathOutsideWorkspace: the path is absolute or has a ``..`` component.
        PathError: the path is malformed in another way.

    """
    if not path:
        raise PathError("empty workspace path")
    if "\0" in path:
        raise PathError(f"workspace path {path!r} contains a NUL byte")
    if path.startswith("/"):
        raise PathOutsideWorkspace(path)
    parts = path.split("/")
    if ".." in parts:
        raise PathOutsideWorkspace(path)
    if path.endswith("/"):
        raise PathError(f"workspace path {path!r} ends with '/'")
    if "" in parts:
        raise PathError(f"workspace path {path!r} has an empty component ('//')")
    if "." in parts:
        raise PathError(f"workspace path {path!r} has a '.' component")
    return path


def workspace_relative(arg: str, *, cwd: Path, root: Path) -> str:
    """Turn a path typed on the command line into a workspace path.

    ``arg`` is relative to ``cwd`` or absolute; ``cwd`` and ``root`` should be
    absolute. The joined path is normalised lexically (``a/../b`` is ``b``,
    as a shell's ``cd`` sees it) and must lie inside ``root``; the root itself
    gives ``""``, meaning the whole workspace. Symlinks are never resolved in
    the final component. So that a ``cwd`` (or ``root``) reached through a
    symlink still works, the lexical and the resolved forms of both are tried,
    and last the path with its parent folder resolved.

    Raises:
        PathOutsideWorkspace: the path lies outside the workspace.
        PathError: the path is empty or contains a NUL byte.

    """
    if not arg:
        raise PathError("empty path", hint="use '.' for the current folder")
    if "\0" in arg:
        raise PathError(f"path {arg!r} contains a NUL byte")
    roots = _unique([os.path.normpath(root), os.path.realpath(root)])
    starts = _unique([os.path.normpath(cwd), os.path.realpath(cwd)])
    candidates = [os.path.normpath(os.path.join(start, arg)) for start in starts]
    candidates += [_resolve_parent(candidate) for candidate in candidates]
    for candidate in _unique(candidates):
        for base in roots:
            relative = _inside(candidate, base)
            if relative is None:
                continue
            if relative:
                try:
                    check_relative(relative)
                except StrataError:
                    raise PathOutsideWorkspace(arg) from None
            return relative
    raise PathOutsideWorkspace(arg)


def display_path(path: str) -> str:
    """A path safe for JSON, the ledger and terminals.

    Names that are not valid UTF-8 arrive as lone surrogates
    (``surrogateescape``); their bytes are shown as ``\\xNN``. Trees keep the
    exact bytes: this form is only for showing and indexing.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def is_internal(path: str) -> bool:
    """True when any component of ``path`` is ``.strata`` or ``.git``."""
    return any(part in INTERNAL_NAMES for part in path.split("/"))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _inside(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` when it is ``base`` or below it, else None."""
    if path == base:
        return ""
    prefix = base if base.endswith("/") else base + "/"
    if path.startswith(prefix):
        return path[len(prefix) :]
    return None


def _resolve_parent(path: str) -> str:
    """``path`` with its parent folder's symlinks resolved, its last name kept."""
    parent, name = os.path.split(path)
    if not name:
        return path
    return os.path.join(os.path.realpath(parent or "."), name)
