"""Recursive inotify watches, read on demand: the change monitor's notifier (Linux).

A :class:`Notifier` watches whole folder trees with one inotify instance
(every folder below a root, symbolic links not followed, folders whose name
``skip`` refuses left out) and turns the kernel's events into paths relative
to their root. :meth:`Notifier.read` returns what is queued, without waiting.

The kernel queues an event before the system call that caused it returns.
So once :meth:`~Notifier.read` has emptied the queue, every change made
before the read began has been returned (by it or by an earlier read): that
is the change monitor's point of synchronisation, with no file written and
no delay (``strata.watch.monitor``).

* A folder that appears (created, moved in, made readable) is watched, with
  everything below it, while its event is read, before that event is
  returned. A change made inside it before its watch was in place is covered
  by the folder's own event: a scan lists a changed path with everything
  below it.
* A folder moved away or deleted loses its watches (later events of the
  moved folder would carry its old name).
* A queue overflow (``IN_Q_OVERFLOW``: the kernel dropped events) is
  reported, never hidden; the caller starts over with a new notifier.
* A root's own folder deleted or moved away is reported (:attr:`Batch.lost`).

Only the C library is called (``ctypes``): ``inotify_init1``,
``inotify_add_watch`` and ``inotify_rm_watch``; the events are read with
``os.read``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: what every folder is watched for: any change to a name in it or to what a name holds
MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_SIZE = 1 << 18


class WatchLimit(OSError):
    """The kernel refused another watch: ``fs.inotify.max_user_watches`` (or memory) ran out."""


@dataclass
class Batch:
    """What one :meth:`Notifier.read` found."""

    #: (root, path relative to it) of every change, in the order seen
    changes: list[tuple[str, str]] = field(default_factory=list)
    #: the kernel dropped events: changes may be missing (start over)
    overflowed: bool = False
    #: roots whose own folder was deleted or moved away (no longer watched)
    lost: set[str] = field(default_factory=set)


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        if not hasattr(lib, "inotify_init1"):
            raise OSError(errno.ENOSYS, "no inotify on this system")
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = lib
    return _libc


def _check(result: int, what: str, path: str | None = None) -> int:
    if result < 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSPC, errno.ENOMEM):
            raise WatchLimit(code, f"{what}: {os.strerror(code)}", path)
        raise OSError(code, f"{what}: {os.strerror(code)}", path)
    return result


class Notifier:
    """One inotify instance watching the trees of named roots; see the module.

    ``skip(name)`` is True for folder names never watched (nor anything below
    them); their own events, in the folder that holds them, are still read.
    Not thread-safe: the caller serialises every call.
    """

    def __init__(self, skip: Callable[[str], bool]) -> None:
        self.skip = skip
        self.fd = _check(_lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        #: watch descriptor -> every (root, folder relative to it) it watches
        self._at: dict[int, list[tuple[str, str]]] = {}
        #: root -> folder relative to it -> watch descriptor
        self._wds: dict[str, dict[str, int]] = {}
        #: root -> folder -> its watched subfolders (a subtree is dropped without a scan)
        self._kids: dict[str, dict[str, set[str]]] = {}
        self._paths: dict[str, str] = {}

    def close(self) -> None:
        """Drop every watch (closing the instance does it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._at.clear()
        self._wds.clear()
        self._kids.clear()

    @property
    def watches(self) -> int:
        """How many folders are watched."""
        return len(self._at)

    # -- roots -----------------------------------------------------------------------

    def add_root(self, name: str, path: Path) -> None:
        """Watch ``path`` and every folder below it as root ``name``.

        :class:`WatchLimit` when the kernel refuses a watch; a root folder
        that cannot be watched (gone, not a folder, unreadable) raises OSError.
        """
        self._paths[name] = str(path)
        self._wds[name] = {}
        self._kids[name] = {}
        self._watch_tree(name, "", top=True)

    def remove_root(self, name: str) -> None:
        """Stop watching root ``name``."""
        if name in self._wds:
            self._unwatch(name, "")
            del self._wds[name]
            del self._kids[name]
            del self._paths[name]

    def _watch_tree(self, root: str, rel: str, *, top: bool = False) -> None:
        """Watch folder ``rel`` of ``root`` and everything below it (each watch before listing)."""
        base = self._paths[root]
        lib = _lib()
        wds = self._wds[root]
        kids = self._kids[root]
        stack = [rel]
        while stack:
            folder = stack.pop()
            full = f"{base}/{folder}" if folder else base
            encoded = os.fsencode(full)
            wd = lib.inotify_add_watch(self.fd, encoded, MASK)
            if wd < 0:
                code = ctypes.get_errno()
                if code in (errno.ENOSPC, errno.ENOMEM) or (top and folder == rel):
                    _check(wd, "inotify_add_watch", full)
                continue  # gone, not a folder, unreadable: its parent's events tell
            old = wds.get(folder)
            if old is not None and old != wd:
                self._drop(old, root, folder)
            wds[folder] = wd
            if folder:
                kids.setdefault(folder.rpartition("/")[0], set()).add(folder)
            places = self._at.setdefault(wd, [])
            if (root, folder) not in places:
                places.append((root, folder))
            try:
                with os.scandir(encoded) as entries:
                    for entry in entries:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            continue
                        if is_dir:
                            name = os.fsdecode(entry.name)
                            if not self.skip(name):
                                stack.append(f"{folder}/{name}" if folder else name)
            except OSError:
                continue

    def _drop(self, wd: int, root: str, folder: str) -> None:
        places = self._at.get(wd)
        if places is None:
            return
        if (root, folder) in places:
            places.remove((root, folder))
        if not places:
            del self._at[wd]
            # fails only when the kernel already dropped it (the folder is gone)
            _lib().inotify_rm_watch(self.fd, wd)

    def _unwatch(self, root: str, rel: str) -> None:
        """Stop watching folder ``rel`` of ``root`` and every folder below it."""
        wds, kids = self._wds.get(root), self._kids.get(root)
        if wds is None or kids is None:
            return
        if rel:
            siblings = kids.get(rel.rpartition("/")[0])
            if siblings is not None:
                siblings.discard(rel)
        stack = [rel]
        while stack:
            folder = stack.pop()
            wd = wds.pop(folder, None)
            if wd is not None:
                self._drop(wd, root, folder)
            stack.extend(kids.pop(folder, ()))

    # -- reading ---------------------------------------------------------------------

    def read(self) -> Batch:
        """Every event queued now, as changed paths; never waits."""
        batch = Batch()
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return batch
            except InterruptedError:
                continue
            if not data:
                return batch
            self._parse(data, batch)

    def _parse(self, data: bytes, batch: Batch) -> None:
        changes = batch.changes
        at = self._at
        pos, end = 0, len(data)
        unpack = _EVENT.unpack_from
        size = _EVENT.size
        while pos < end:
            wd, mask, _cookie, length = unpack(data, pos)
            pos += size
            raw = data[pos : pos + length].rstrip(b"\0")
            pos += length
            if mask & IN_Q_OVERFLOW:
                batch.overflowed = True
                continue
            places = at.get(wd)
            if places is None:
                continue  # a watch dropped since (a folder moved away or deleted)
            if mask & IN_IGNORED:  # the kernel dropped the watch: its folder is gone
                for root, folder in at.pop(wd):
                    wds = self._wds.get(root)
                    if wds is not None and wds.get(folder) == wd:
                        self._unwatch(root, folder)  # (what is left below it)
                    if not folder:
                        batch.lost.add(root)
                continue
            if not raw:  # the watched folder itself: its parent's watch tells the rest
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    batch.lost.update(root for root, folder in places if not folder)
                continue
            name = os.fsdecode(raw)
            for root, folder in list(places):
                path = f"{folder}/{name}" if folder else name
                changes.append((root, path))
                if not mask & IN_ISDIR:
                    continue
                if mask & (IN_MOVED_FROM | IN_DELETE):
                    self._unwatch(root, path)
                elif mask & (IN_CREATE | IN_MOVED_TO):
                    self._unwatch(root, path)  # a folder replaced by another of its name
                    if not self.skip(name):
                        self._watch_tree(root, path)
                elif mask & IN_ATTRIB and path not in self._wds[root] and not self.skip(name):
                    self._watch_tree(root, path)  # made readable, perhaps
