"""Opening paths longer than ``PATH_MAX``, one folder at a time.

The kernel refuses a path of ``PATH_MAX`` (4,096) bytes or more in one call
(``ENAMETOOLONG``), though a file system holds such paths without trouble: a
deep nesting of long names. A path that long is opened here by walking it:
its longest leading part that fits is opened as a folder, then each further
folder is opened relative to the one before (``openat`` with
``O_NOFOLLOW``: a folder below the first part that is, or has become, a
symlink fails the open), and the last component is handed to the caller's
call with ``dir_fd``. A shorter path is used as it is, with no cost added.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: the kernel's limit on a path handed to one system call, its NUL included
PATH_MAX = 4096
#: a str path with fewer characters than this is short: a character is at most 4 bytes
SHORT = PATH_MAX // 4
_WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HEAD_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def is_long(path: str) -> bool:
    """True when ``path`` cannot be handed to the kernel in one call."""
    return len(path) >= SHORT and len(os.fsencode(path)) >= PATH_MAX


@contextlib.contextmanager
def parent_of(path: str) -> Iterator[tuple[int | None, str]]:
    """``(dir_fd, name)`` for a call with ``dir_fd=`` that reaches ``path``.

    For a short path, ``(None, path)``: the call takes the path as it is. For
    a long one, a descriptor of the folder holding it (opened folder by
    folder, closed on exit) and its last component.

    Raises:
        OSError: a folder on the way cannot be opened (ELOOP: a symlink
            below the first part; ENOTDIR, ENOENT, EACCES as ``open`` does).

    """
    if not is_long(path):
        yield None, path
        return
    raw = os.fsencode(path)
    head, _, name = raw.rpartition(b"/")
    fd = _open_folder(head)
    try:
        yield fd, os.fsdecode(name)
    finally:
        os.close(fd)


def open_path(path: str, flags: int, mode: int = 0o777) -> int:
    """``os.open(path, flags, mode)``, also for a path of ``PATH_MAX`` bytes or more."""
    if len(path) < SHORT:
        return os.open(path, flags, mode)
    with parent_of(path) as (dir_fd, name):
        return os.open(name, flags, mode, dir_fd=dir_fd)


def lstat_path(path: str) -> os.stat_result:
    """``os.lstat(path)``, also for a long path."""
    if len(path) < SHORT:
        return os.lstat(path)
    with parent_of(path) as (dir_fd, name):
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def readlink_path(path: str) -> bytes:
    """The target of the symlink ``path`` (as bytes), also for a long path."""
    if len(path) < SHORT:
        return os.readlink(os.fsencode(path))
    with parent_of(path) as (dir_fd, name):
        return os.readlink(os.fsencode(name), dir_fd=dir_fd)


def _open_folder(raw: bytes) -> int:
    """A descriptor of the folder ``raw`` (bytes, absolute or relative), walked if long."""
    if len(raw) < PATH_MAX:
        return os.open(raw or b".", _HEAD_FLAGS)
    parts = raw.split(b"/")
    # the longest leading part that fits, opened as one path
    size = 0
    count = 0
    for part in parts:
        if size + len(part) + 1 >= PATH_MAX:
            break
        size += len(part) + 1
        count += 1
    head = b"/".join(parts[:count]) or (b"/" if raw.startswith(b"/") else b".")
    fd = os.open(head, _HEAD_FLAGS)
    try:
        for part in parts[count:]:
            if not part or part == b".":
                continue
            if part == b"..":
                raise OSError(22, "a path walked folder by folder may not hold '..'", raw)
            nxt = os.open(part, _WALK_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd
