"""Atomic file writes: the one primitive every writer of a whole file uses.

A file is written to a temporary name beside it, flushed and fsynced, renamed
over the target, and the folder is fsynced, so a reader (or a machine that
lost power) sees either the old bytes or the new ones, never a mix. This is
the order dulwich's ``GitFile`` follows. Caches that can be rebuilt from the
repository may pass ``durable=False``: the rename is still atomic, but
nothing waits for the disk.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

#: temporary files of workspace writes start with this; a crash can leave one behind, and
#: scans ignore such files
TEMP_PREFIX = ".strata-tmp-"


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries durable (after a rename or unlink in it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: bytes | bytearray | Iterable[bytes],
    *,
    durable: bool = True,
    mode: int = 0o644,
) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync folder).

    ``data`` may be given in pieces (an iterable of bytes), written as they
    come: a big file is then never whole in memory. The temporary name
    carries the process and thread ids, so two writers of the same file
    never share a temporary file; the last rename wins whole.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes | bytearray):
                f.write(data)
            else:
                for piece in data:
                    f.write(piece)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def file_identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of ``path``, None when it is gone.

    A file replaced by an atomic write (or a folder swapped for another) has a
    new identity, which is how a holder of an open handle learns it is stale.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def sync_filesystem(path: Path) -> None:
    """Flush every write on the file system that holds ``path`` to disk.

    Calls Linux ``syncfs(2)`` on a descriptor of ``path`` (a file or folder),
    or ``sync(2)`` where ``syncfs`` is unavailable.
    """
    import ctypes  # (loaded by the commands that write: not by a scan)

    syncfs = _syncfs()
    if syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            if code != errno.ENOSYS:
                raise OSError(code, os.strerror(code), str(path))
            os.sync()
    finally:
        os.close(fd)


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int

    def call(fd: int) -> int:
        return int(function(fd))

    return call


def held_elsewhere(path: str | os.PathLike[str]) -> bool:
    """True when another open file holds a ``flock`` on ``path`` (a live process's lock).

    False when the file does not exist; other errors (an unreadable file) are raised.
    The kernel drops such a lock when its process dies, which is how the watcher's,
    the background MCP server's and a run's liveness is told without trusting a pid.
    """
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
