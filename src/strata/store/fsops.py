"""Writing into a workspace without ever following a symlink.

Paths in stored trees and Drafts are agent-made, and an agent can swap a folder
for a symlink at any moment, even while a restore is running. A path-based
``open("sub/deep/f", "w")`` would then write wherever the symlink points. So
:class:`WorkspaceWriter` never hands the kernel a path with more than one
component: it opens the workspace root once, then walks each folder on the way
with ``openat(O_DIRECTORY | O_NOFOLLOW)`` relative to the folder before it. A
component that is (or has just become) a symlink or a file makes that open
fail, and the call raises :class:`~strata.errors.UnsafeWorkspacePath`. Once a
folder is open, its descriptor names that folder for good: renaming it away or
planting a symlink in its place afterwards cannot redirect the write.

Files and symlinks are written to a temporary name in their folder (see
:data:`strata.atomic.TEMP_PREFIX`) and renamed into place. ``rename`` replaces whatever entry
is at the destination (a file, a hard link, a symlink) without following it, so
a symlink at the path is replaced, never written through.

A file that replaces another is swapped with it in one step
(``renameat2(RENAME_EXCHANGE)``: the path names the old entry, then the new
one, never nothing), and the old entry, now under the temporary name, is
moved into the writer's *trash* folder when it has one (see
:func:`empty_trash`), else unlinked. With a trash on the same file system,
the new file is made in the trash in the first place and swapped across:
the replaced file is then in the trash at once, and the folder sees one
swap rather than a temporary file made, written, renamed twice (fewer
system calls, and fewer events for a watcher to read). A folder whose new
files take something from it (its group when it is set-group-ID, its
default access list) has them made in it. Freeing a replaced file's blocks is the
slow part of replacing it (and a rename over a file makes ext4 start writing
the new file's data at once, ``auto_da_alloc``): with a trash both happen
later, off the path of the command. Where the swap is not supported (an old
kernel, a file system without it) the temporary file is renamed over the
path as before.

A caller that planned a write from a scan passes what the scan saw there
(:class:`AsScanned`): immediately before the rename (or unlink) the entry is
compared with it once more (permission bits, size, mtime, ctime, inode) and,
when its times are racy (:func:`~strata.store.statcache.is_racy`: within
the file system's timestamp granularity of now, so a same-size edit may
have kept the same stat), its content is hashed and compared with the
object the scan recorded. An entry that changed raises
:class:`~strata.errors.WorkspaceChanged` and is left as it is: an edit made
between a scan and its write is never overwritten.

Nothing here calls ``fsync`` per file: a caller writing many files makes them
durable at once with :func:`strata.atomic.sync_filesystem` before it records the result.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from strata.atomic import TEMP_PREFIX
from strata.errors import EntryInTheWay, ProtectedPath, UnsafeWorkspacePath, WorkspaceChanged
from strata.sandbox.paths import check_relative, is_internal
from strata.store.objects import hash_fd
from strata.store.statcache import is_racy, unchanged

try:  # built by setup.py where a C compiler is found
    import strata._walk as _walk
except ImportError:  # pragma: no cover - depends on the build
    _walk = None  # type: ignore[assignment]

__all__ = [
    "AsScanned",
    "TrashIndex",
    "WorkspaceWriter",
    "empty_trash",
]

#: (workspace path, object id) -> (name in the trash, (size, mtime_ns, ctime_ns, inode)):
#: the files a trash holds and what they held (see ``strata.watch.served.trash_index``)
TrashIndex = dict[tuple[str, str], tuple[str, tuple[int, int, int, int]]]


@dataclass(frozen=True)
class AsScanned:
    """What a scan saw at a path: the entry must still be that when it is replaced.

    ``seen`` is a :data:`~strata.store.statcache.FileStat` (mode, size,
    mtime_ns, ctime_ns, inode, object id), or None for "absent".
    """

    seen: Sequence[Any] | None

    def holds(self, dir_fd: int, name: str) -> bool:
        """True when ``name`` in ``dir_fd`` is still what the scan saw (content too if racy)."""
        st = _lstat_at(dir_fd, name)
        if not unchanged(st, self.seen):
            return False
        if st is None or self.seen is None or not stat.S_ISREG(st.st_mode):
            return True
        now = time.time_ns()
        if not is_racy(st.st_mtime_ns, now) and not is_racy(st.st_ctime_ns, now):
            return True  # its stat has not moved since long before: no edit can hide in it
        if len(self.seen) < 6 or not self.seen[5]:
            return False  # racy and nothing to compare the content with
        return bool(_hash_at(dir_fd, name, st) == self.seen[5])


# A folder on the way: never a symlink, only a folder. O_PATH needs no read
# permission (search permission suffices, as for a path walk) and is a valid dir_fd.
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The final entry itself, whatever it is; a symlink is opened as the link.
_ENTRY_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK so that a FIFO planted at the path cannot hang a read.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PARENT_MODE = 0o755
#: a chunk of at least this many zero bytes is written as a hole: a sparse file
#: stays sparse (an agent's 70 GB of zeros cannot fill the disk at publish)
_HOLE_MIN = 64 * 1024
_PERMISSION_BITS = 0o777
_TEMP_ATTEMPTS = 16
_PROC_FD = "/proc/self/fd"
#: ``renameat2`` flag: swap the two entries atomically (both must exist)
_RENAME_EXCHANGE = 2


class WorkspaceWriter:
    """Writes files into a workspace through directory handles, never following symlinks.

    Every ``path`` argument is a workspace path (see
    :func:`strata.sandbox.paths.check_relative`). A folder on the way that is a
    symlink or not a folder raises :class:`~strata.errors.UnsafeWorkspacePath`.
    Paths inside ``.strata`` or ``.git`` are never changed unless
    ``allow_internal`` is set; reading them is allowed.

    With ``trash``, replaced files are moved there instead of being unlinked
    (see :func:`empty_trash`). With ``reuse_folders``, the handle of the
    folder of the last path is kept for the next path in the same folder
    (until a folder is made or removed through this writer): a writer that
    goes through a sorted list of paths walks each folder once. A kept handle
    names its folder as a fresh walk would have when it was opened: a symlink
    planted on the way afterwards is not followed, as for one call.

    Use it as a context manager, or call :meth:`close`::

        with WorkspaceWriter(root) as writer:
            st = writer.write_file("src/app.py", chunks, mode=0o644)
    """

    def __init__(
        self,
        root: Path,
        *,
        allow_internal: bool = False,
        trash: Path | None = None,
        reuse_folders: bool = False,
        trash_index: TrashIndex | None = None,
    ) -> None:
        if _walk is not None:
            _walk.forget()  # a listing prefetched before this write must not be taken by a scan
        self.root = Path(os.path.realpath(root))
        self._allow_internal = allow_internal
        self._root_fd = os.open(self.root, _DIR_FLAGS)
        #: keep the handle of the last folder used for the next path in it (a restore
        #: writes a folder's files one after the other: one walk per folder, not per file)
        self._reuse = reuse_folders
        self._kept: tuple[str, int] | None = None
        #: with ``reuse_folders``: the deepest folder walked last, kept so that a path below
        #: it is walked from there (a restore making a chain of 1,000 nested folders walks
        #: each once, not each from the root: 1,100 levels cost 1.2 million opens)
        self._above: tuple[str, int] | None = None
        #: the folder replaced files are moved to (None: they are unlinked at once)
        self._trash_fd = -1
        self._trash_prefix = f"{os.getpid()}-{os.urandom(4).hex()}-"
        self._trash_dev = os.fstat(self._root_fd).st_dev
        self._trashed = 0
        self._trashed_bytes = 0
        self._named = 0
        #: whether the kept folder's new files may be made in the trash (see _trash_takes)
        self._kept_in_trash: bool | None = None
        #: (path, object id) -> the file in the trash that held it, and its stat there
        self._index = trash_index
        #: path -> (its stat, object id) of each file taken back from the trash whose bytes
        #: were hashed long after they were last written (see :meth:`_put_back`): a scan
        #: may take it as read (``StatCache.note_read``)
        self.known: dict[str, tuple[os.stat_result, str]] = {}
        if trash is not None:
            self._trash_fd = _open_trash(trash, self._trash_dev)

    @property
    def trashed(self) -> int:
        """How many replaced files this writer moved to its trash (for :func:`empty_trash`)."""
        return self._trashed

    @property
    def trashed_bytes(self) -> int:
        """The disk space the files this writer moved to its trash hold (allocated blocks).

        Less the space of the files it took back out of the trash: below zero
        when it took back more than it left.
        """
        return self._trashed_bytes

    def close(self) -> None:
        """Close the handles on the workspace root and the trash; later calls raise ValueError."""
        self._forget_folder()
        self._forget_above()
        if self._trash_fd >= 0:
            fd, self._trash_fd = self._trash_fd, -1
            os.close(fd)
        if self._root_fd >= 0:
            fd, self._root_fd = self._root_fd, -1
            os.close(fd)

    def __enter__(self) -> WorkspaceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reading -----------------------------------------------------------

    def lstat(self, path: str) -> os.stat_result | None:
        """The ``lstat`` of ``path``, or None when it (or a folder on the way) is absent."""
        with self._parent(path, create=False) as (dir_fd, name):
            if dir_fd is None:
                return None
            return _lstat_at(dir_fd, name)

    def read_file(self, path: str) -> bytes:
        """The bytes of the regular file at ``path``.

        Raises:
            UnsafeWorkspacePath: ``path`` or a folder on the way is a symlink.
            EntryInTheWay: ``path`` is a folder or another non-regular file.
            FileNotFoundError: ``path`` is absent.

        """
        with self._parent(path, create=False) as (dir_fd, name):
            if dir_fd is None:
                raise _not_found(path)
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                raise _not_found(path) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafeWorkspacePath(path) from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise EntryInTheWay(path, f"cannot read {path}: not a regular file")
                with open(fd, "rb", closefd=False) as file:
                    return file.read()
            finally:
                os.close(fd)

    def read_link(self, path: str) -> str:
        """The target of the symlink at ``path``, as stored (never resolved).

        Raises:
            EntryInTheWay: ``path`` is not a symlink.
            FileNotFoundError: ``path`` is absent.

        """
        with self._parent(path, create=False) as (dir_fd, name):
            if dir_fd is None:
                raise _not_found(path)
            try:
                return os.readlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                raise _not_found(path) from None
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    raise EntryInTheWay(path, f"cannot read link {path}: not a symlink") from None
                raise

    # -- writing -----------------------------------------------------------

    def write_file(
        self,
        path: str,
        chunks: bytes | Iterable[bytes],
        *,
        mode: int,
        expect: AsScanned | None = None,
        oid: str | None = None,
    ) -> os.stat_result:
        """Write ``chunks`` to ``path`` atomically and give it exactly ``mode & 0o777``.

        Missing folders on the way are created (``0o755`` less the umask). The
        content goes to a temporary file in the same folder, which takes
        ``path``'s place (swapped with a file there, renamed over anything
        else): a file, hard link or symlink there is replaced, never written
        through, and the replaced entry goes to the trash (or is unlinked).
        On any failure the temporary file is removed and ``path`` is left as
        it was. The file is not fsynced.

        ``oid`` names the object ``chunks`` hold: with a trash index, a file
        this writer's trash holds that held ``oid`` at ``path`` is checked
        (hashed) and swapped back into place instead (``chunks`` unread).

        Returns:
            The ``lstat`` of the written file (taken on its descriptor after the
            rename, so it describes this file even if another replaces it).

        Raises:
            UnsafeWorkspacePath: a folder on the way is a symlink or not a folder.
            EntryInTheWay: a folder is at ``path``; the caller removes it first.
            WorkspaceChanged: with ``expect``, ``path`` changed since the scan (checked
                just before the rename); it is left as it is.

        """
        data = [chunks] if isinstance(chunks, bytes | bytearray | memoryview) else chunks
        with self._parent(path, create=True, write=True) as (dir_fd, name):
            assert dir_fd is not None
            if expect is None:  # (with it, a folder there fails its check)
                _refuse_folder(dir_fd, name, path)
            if oid is not None and self._index is not None:
                kept = self._index.pop((path, oid), None)
                if kept is not None:
                    put_back = self._put_back(dir_fd, name, path, kept, oid, mode, expect)
                    if put_back is not None:
                        return put_back
            # the new content is made in the trash when this folder allows it: swapped
            # with the replaced file, that file is then in the trash already
            in_trash = self._trash_takes(dir_fd)
            temp_dir = self._trash_fd if in_trash else dir_fd
            temp, fd = self._create_temp_file(temp_dir, path, in_trash)
            try:
                _write_chunks(fd, data)
                os.fchmod(fd, mode & _PERMISSION_BITS)
                if expect is not None and not expect.holds(dir_fd, name):
                    raise WorkspaceChanged([path])
                displaced = _swap_into_place(temp_dir, temp, dir_fd, name, path)
            except BaseException:
                _unlink_quietly(temp_dir, temp)
                os.close(fd)
                raise
            try:
                if displaced is not None and in_trash:  # ``temp``: the replaced file, in the trash
                    self._trashed += 1
                    self._trashed_bytes += displaced.st_blocks * 512
                    self._remember(path, expect, temp, displaced)
                elif displaced is not None:  # ``temp``: the replaced file, beside the new one
                    self._discard(dir_fd, temp, displaced)
                return os.fstat(fd)
            finally:
                os.close(fd)

    def _put_back(
        self,
        dir_fd: int,
        name: str,
        path: str,
        kept: tuple[str, tuple[int, int, int, int]],
        oid: str,
        mode: int,
        expect: AsScanned | None,
    ) -> os.stat_result | None:
        """Swap the trash's file ``kept`` (its name, its stat there) back to ``path``.

        Only a file still as it was left (same stat, one link) whose bytes
        hash to ``oid`` is taken; None when it is not, or is gone: the caller
        writes the file anew.
        """
        if not self._trash_takes(dir_fd):
            return None
        trash_name, key = kept
        try:
            fd = os.open(trash_name, _READ_FLAGS, dir_fd=self._trash_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_nlink != 1
                or (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) != key
            ):
                return None
            hashed_at = time.time_ns()
            if hash_fd(fd, st.st_size) != oid:
                return None
            if st.st_mode & _PERMISSION_BITS != mode & _PERMISSION_BITS:
                os.fchmod(fd, mode & _PERMISSION_BITS)
            if expect is not None and not expect.holds(dir_fd, name):
                raise WorkspaceChanged([path])
            try:
                displaced = _swap_into_place(self._trash_fd, trash_name, dir_fd, name, path)
            except (UnsafeWorkspacePath, OSError):
                if _lstat_at(self._trash_fd, trash_name) is None:
                    return None  # the trash was emptied meanwhile: written anew
                raise
            self._trashed_bytes -= st.st_blocks * 512
            if displaced is not None:  # ``trash_name`` names the replaced file now
                self._trashed += 1
                self._trashed_bytes += displaced.st_blocks * 512
                self._remember(path, expect, trash_name, displaced)
            now = os.fstat(fd)
            if not is_racy(st.st_mtime_ns, hashed_at) and (
                now.st_mtime_ns,
                now.st_size,
                now.st_ino,
            ) == (st.st_mtime_ns, st.st_size, st.st_ino):
                # its bytes were hashed well after its mtime, and no write moved that mtime
                # since: what a scan reading it then would have recorded (a later edit
                # gives it a new mtime)
                self.known[path] = (now, oid)
            return now
        finally:
            os.close(fd)

    def _remember(
        self, path: str, expect: AsScanned | None, name: str, displaced: os.stat_result
    ) -> None:
        """Note in the trash index that its file ``name`` held what the scan saw at ``path``."""
        seen = expect.seen if expect is not None else None
        if (
            self._index is None
            or seen is None
            or len(seen) < 6
            or not seen[5]
            or not stat.S_ISREG(displaced.st_mode)
            or displaced.st_nlink != 1
        ):
            return
        key = (displaced.st_size, displaced.st_mtime_ns, displaced.st_ctime_ns, displaced.st_ino)
        self._index[(path, seen[5])] = (name, key)

    def _trash_takes(self, dir_fd: int) -> bool:
        """True when a file for folder ``dir_fd`` may be made in the trash and moved there.

        A file takes its group from a set-group-ID folder and its access
        lists from a folder's default ones when it is made in it: such a
        folder's files are made in it. So are those of a folder on another
        file system (a mount inside the workspace), which a rename cannot reach.
        """
        if self._trash_fd < 0:
            return False
        kept = self._kept is not None and self._kept[1] == dir_fd
        if kept and self._kept_in_trash is not None:
            return self._kept_in_trash
        st = os.fstat(dir_fd)
        ok = st.st_dev == self._trash_dev and not st.st_mode & stat.S_ISGID
        if ok:
            try:
                os.getxattr(f"{_PROC_FD}/{dir_fd}", "system.posix_acl_default")
            except OSError as exc:
                ok = exc.errno in (errno.ENODATA, errno.EOPNOTSUPP, errno.ENOTSUP)
            else:
                ok = False
        if kept:
            self._kept_in_trash = ok
        return ok

    def _trash_name(self) -> str:
        """A name in the trash no other writer uses (process, random prefix, count)."""
        self._named += 1
        return f"{self._trash_prefix}{self._named}"

    def _create_temp_file(self, dir_fd: int, path: str, in_trash: bool) -> tuple[str, int]:
        """Make a temporary file in ``dir_fd`` (the trash when ``in_trash``): its name and fd."""
        if not in_trash:
            return _create_temp_file(dir_fd, path)
        name = self._trash_name()
        try:
            return name, os.open(name, _TEMP_FILE_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:  # not one of this writer's names after all
            return _create_temp_file(dir_fd, path)

    def _discard(self, dir_fd: int, name: str, st: os.stat_result) -> None:
        """Move the replaced file ``name`` (``st``, in ``dir_fd``) to the trash, or unlink it."""
        if self._trash_fd >= 0:
            try:
                os.rename(
                    name,
                    self._trash_name(),
                    src_dir_fd=dir_fd,
                    dst_dir_fd=self._trash_fd,
                )
            except OSError:  # another file system (a mount inside), or the trash went
                pass
            else:
                self._trashed += 1
                self._trashed_bytes += st.st_blocks * 512
                return
        _unlink_quietly(dir_fd, name)

    def write_symlink(
        self, path: str, target: str, *, expect: AsScanned | None = None
    ) -> os.stat_result:
        """Make ``path`` a symlink to ``target`` atomically, replacing a file or symlink there.

        ``target`` is stored as given and never followed; it may point anywhere.

        Returns:
            The ``lstat`` of the new symlink.

        Raises:
            UnsafeWorkspacePath: a folder on the way is a symlink or not a folder.
            EntryInTheWay: a folder is at ``path``, or ``target`` is empty or has a NUL.
            WorkspaceChanged: with ``expect``, ``path`` changed since the scan.

        """
        if not target or "\0" in target:
            raise EntryInTheWay(path, f"cannot make symlink {path}: invalid target {target!r}")
        with self._parent(path, create=True, write=True) as (dir_fd, name):
            assert dir_fd is not None
            _refuse_folder(dir_fd, name, path)
            temp = _create_temp_symlink(dir_fd, target, path)
            try:
                fd = os.open(temp, _ENTRY_FLAGS, dir_fd=dir_fd)
            except BaseException:
                _unlink_quietly(dir_fd, temp)
                raise
            try:
                if expect is not None and not expect.holds(dir_fd, name):
                    raise WorkspaceChanged([path])
                _rename_into_place(dir_fd, temp, dir_fd, name, path)
                return os.fstat(fd)
            except BaseException:
                _unlink_quietly(dir_fd, temp)
                raise
            finally:
                os.close(fd)

    def make_dir(self, path: str, *, mode: int = 0o755) -> None:
        """Create the folder ``path`` and its parents, like ``mkdir -p``.

        Parents are made with ``0o755`` less the umask; the folder itself, new
        or already there, gets exactly ``mode & 0o777``.

        Raises:
            UnsafeWorkspacePath: a folder on the way is a symlink or not a folder.
            EntryInTheWay: a file or symlink is at ``path``.

        """
        self._forget_folder()
        self._forget_above()  # making a folder walks afresh from the root
        with self._parent(path, create=True, write=True) as (dir_fd, name):
            assert dir_fd is not None
            existing = _lstat_at(dir_fd, name)
            if existing is not None and not stat.S_ISDIR(existing.st_mode):
                raise EntryInTheWay(
                    path,
                    f"cannot make folder {path}: a file or symlink is in the way",
                    hint="remove it first",
                )
            fd = _open_dir(dir_fd, name, path, create=True)
            assert fd is not None
            try:
                _chmod_at(dir_fd, name, fd, path, mode & _PERMISSION_BITS)
            finally:
                os.close(fd)

    def remove_file(self, path: str, *, expect: AsScanned | None = None) -> bool:
        """Unlink the file or symlink at ``path`` (never its target).

        Returns:
            True when something was removed, False when ``path`` was absent.

        Raises:
            EntryInTheWay: ``path`` is a folder.
            WorkspaceChanged: with ``expect``, ``path`` changed since the scan (checked
                just before the unlink); it is left as it is.

        """
        with self._parent(path, create=False, write=True) as (dir_fd, name):
            if dir_fd is None:
                return False
            if expect is not None and not expect.holds(dir_fd, name):
                raise WorkspaceChanged([path])
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.EPERM):
                    existing = _lstat_at(dir_fd, name)
                    if existing is not None and stat.S_ISDIR(existing.st_mode):
                        raise EntryInTheWay(
                            path, f"cannot remove {path} as a file: it is a folder"
                        ) from None
                raise
            return True

    def remove_dir(self, path: str) -> bool:
        """Remove the folder ``path`` if it is empty; never recursive.

        Returns:
            True when the folder was removed, False when it was absent or not empty.

        Raises:
            EntryInTheWay: ``path`` is a file or a symlink.

        """
        self._forget_folder()
        self._forget_above()  # (it may be the folder removed, or one below it)
        with self._parent(path, create=False, write=True) as (dir_fd, name):
            if dir_fd is None:
                return False
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return False
                if exc.errno == errno.ENOTDIR:
                    raise EntryInTheWay(
                        path, f"cannot remove {path} as a folder: it is a file or symlink"
                    ) from None
                raise
            return True

    def chmod(self, path: str, mode: int) -> None:
        """Give the file or folder at ``path`` exactly ``mode & 0o777``.

        A symlink (or a FIFO, socket or device) at ``path`` is left untouched.

        Raises:
            FileNotFoundError: ``path`` is absent.

        """
        with self._parent(path, create=False, write=True) as (dir_fd, name):
            if dir_fd is None:
                raise _not_found(path)
            try:
                fd = os.open(name, _ENTRY_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                raise _not_found(path) from None
            try:
                kind = stat.S_IFMT(os.fstat(fd).st_mode)
                if kind in (stat.S_IFREG, stat.S_IFDIR):
                    _chmod_at(dir_fd, name, fd, path, mode & _PERMISSION_BITS)
            finally:
                os.close(fd)

    # -- walking -----------------------------------------------------------

    @contextlib.contextmanager
    def _parent(
        self, path: str, *, create: bool, write: bool = False
    ) -> Iterator[tuple[int | None, str]]:
        """Open the folder that holds ``path``; yield its fd (None if absent) and the last name.

        The fd is closed on exit, or, for a writer that reuses folders, kept
        for the next path in the same folder. With ``create``, missing folders
        are made.
        """
        check_relative(path)
        if write and not self._allow_internal and is_internal(path):
            raise ProtectedPath(path)
        if self._root_fd < 0:
            raise ValueError("WorkspaceWriter is closed")
        *folders, name = path.split("/")
        key = "/".join(folders)
        if self._kept is not None:
            if self._kept[0] == key:
                yield self._kept[1], name
                return
            self._forget_folder()
        above = self._above
        if above is not None and (key == above[0] or key.startswith(above[0] + "/")):
            # below the folder walked last: walked on from its handle (each folder on the
            # way is opened with O_NOFOLLOW all the same)
            fd: int | None = os.dup(above[1])
            walk = folders[above[0].count("/") + 1 :]
        else:
            fd = os.dup(self._root_fd)
            walk = folders
        try:
            for folder in walk:
                assert fd is not None
                child = _open_dir(fd, folder, path, create=create)
                os.close(fd)
                fd = child
                if fd is None:
                    break
            if self._reuse and fd is not None and walk:
                self._forget_above()
                self._above = (key, os.dup(fd))
            if self._reuse and fd is not None and folders:
                self._kept, fd = (key, fd), None
                yield self._kept[1], name
            else:
                yield fd, name
        finally:
            if fd is not None:
                os.close(fd)

    def _forget_above(self) -> None:
        """Close the handle of the folder walked last (a folder was removed, or the end)."""
        if self._above is not None:
            fd, self._above = self._above[1], None
            os.close(fd)

    def _forget_folder(self) -> None:
        """Close the folder kept for the next path (a folder is made, removed or left)."""
        if self._kept is not None:
            fd, self._kept = self._kept[1], None
            self._kept_in_trash = None
            os.close(fd)


def empty_trash(trash: Path, *, stop: Callable[[], bool] | None = None) -> int:
    """Unlink every entry of the ``trash`` folder; return how many.

    What is in a trash was replaced: the restore that moved it there already
    recorded it (its auto-save), so it may be deleted at any time, by any
    process (entries another one removes meanwhile are passed over). Only
    files and symlinks are ever moved there; anything else is left.

    ``stop`` is asked every :data:`_EMPTY_BATCH` entries: when it says True
    the rest is left for later (a watcher gives way to a command that starts).
    """
    try:
        names = os.listdir(trash)
    except OSError:
        return 0
    try:
        fd = os.open(trash, _DIR_FLAGS)
    except OSError:
        return 0
    removed = 0
    try:
        for i, name in enumerate(names):
            if stop is not None and i % _EMPTY_BATCH == 0 and stop():
                break
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:  # gone already, or a folder (never put there by a writer)
                continue
            removed += 1
    finally:
        os.close(fd)
    return removed


#: :func:`empty_trash` asks whether to stop before each batch of this many entries
_EMPTY_BATCH = 64


def _open_trash(trash: Path, device: int) -> int:
    """A handle on the trash folder (made if missing), or -1 when it cannot serve.

    A trash on another file system than the workspace could take nothing
    (``rename`` fails across file systems): then there is none.
    """
    try:
        trash.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(trash, _DIR_FLAGS)
    except OSError:
        return -1
    if os.fstat(fd).st_dev != device:
        os.close(fd)
        return -1
    return fd


#: glibc's ``mallopt`` parameter for the size from which a block is its own mapping
_M_MMAP_THRESHOLD = -3
#: blocks of this size or more are mapped on their own and unmapped when freed
MMAP_THRESHOLD = 1 << 20


@functools.cache
def bound_malloc_cache() -> bool:
    """Make the C allocator return big freed blocks to the system; False where it cannot.

    By default glibc raises its mapping threshold to the largest block freed so
    far (up to 32 MiB) and keeps up to twice that unused at the top of every
    thread's arena: after reading a few 8 MiB files on a thread pool, each
    hashing thread holds tens of MiB it no longer uses. A fixed threshold
    (``mallopt(M_MMAP_THRESHOLD)``) turns that adjustment off: blocks of
    :data:`MMAP_THRESHOLD` or more are mapped on their own and given back
    when freed, and the arenas keep only their default 128 KiB of slack.
    Called once per process (the setting is the process's).
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def _open_dir(dir_fd: int, name: str, path: str, *, create: bool) -> int | None:
    """Open the folder ``name`` in ``dir_fd`` without following a symlink.

    Returns None when it is absent and not ``create``. With ``create`` a missing
    folder is made first. A symlink or non-folder raises UnsafeWorkspacePath.
    """
    try:
        return _open_dir_or_unsafe(dir_fd, name, path)
    except FileNotFoundError:
        if not create:
            return None
    try:
        os.mkdir(name, _PARENT_MODE, dir_fd=dir_fd)
    except FileExistsError:
        pass  # made meanwhile: the open below checks what it is
    except FileNotFoundError:  # the folder at dir_fd was removed while we walked
        raise UnsafeWorkspacePath(path) from None
    try:
        return _open_dir_or_unsafe(dir_fd, name, path)
    except FileNotFoundError:  # removed as soon as it was made
        raise UnsafeWorkspacePath(path) from None


def _open_dir_or_unsafe(dir_fd: int, name: str, path: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            raise UnsafeWorkspacePath(path) from None
        raise


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _hash_at(dir_fd: int, name: str, st: os.stat_result) -> str | None:
    """The object id of the regular file ``name`` (None if it is not the file ``st`` saw)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if opened.st_ino != st.st_ino:
            return None
        return str(hash_fd(fd, opened.st_size))
    finally:
        os.close(fd)


def _refuse_folder(dir_fd: int, name: str, path: str) -> None:
    existing = _lstat_at(dir_fd, name)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise _folder_in_the_way(path)


def _folder_in_the_way(path: str) -> EntryInTheWay:
    return EntryInTheWay(
        path, f"cannot write {path}: a folder is in the way", hint="remove it first"
    )


def _not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _temp_name() -> str:
    return TEMP_PREFIX + os.urandom(8).hex()  # (what secrets.token_hex reads)


def _create_temp_file(dir_fd: int, path: str) -> tuple[str, int]:
    for _ in range(_TEMP_ATTEMPTS):
        name = _temp_name()
        try:
            return name, os.open(name, _TEMP_FILE_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the folder was removed after we opened it
            raise UnsafeWorkspacePath(path) from None
    raise FileExistsError(errno.EEXIST, "no free temporary name", TEMP_PREFIX)


def _create_temp_symlink(dir_fd: int, target: str, path: str) -> str:
    for _ in range(_TEMP_ATTEMPTS):
        name = _temp_name()
        try:
            os.symlink(target, name, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the folder was removed after we opened it
            raise UnsafeWorkspacePath(path) from None
        return name
    raise FileExistsError(errno.EEXIST, "no free temporary name", TEMP_PREFIX)


def _rename_into_place(from_fd: int, temp: str, dir_fd: int, name: str, path: str) -> None:
    try:
        os.rename(temp, name, src_dir_fd=from_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise _folder_in_the_way(path) from None
        if exc.errno == errno.ENOENT:  # the folder, or our temporary entry, was removed
            raise UnsafeWorkspacePath(path) from None
        raise


def _swap_into_place(
    from_fd: int, temp: str, dir_fd: int, name: str, path: str
) -> os.stat_result | None:
    """Put the file ``temp`` (in ``from_fd``) at ``name`` (in ``dir_fd``).

    Returns the replaced entry's ``lstat`` when it was swapped: a file or
    symlink at ``name`` is exchanged with ``temp`` in one step (the caller
    then disposes of ``temp``, which names the replaced entry). With nothing
    there, or no support for the swap, ``temp`` is renamed over ``name``. A
    folder that took ``name``'s place just before the swap is swapped back:
    :class:`~strata.errors.EntryInTheWay`.
    """
    exchange = _renameat2()
    if exchange is not None:
        import ctypes  # (loaded by _renameat2 already)

        if exchange(from_fd, temp, dir_fd, name) == 0:
            displaced = _lstat_at(from_fd, temp)
            if displaced is None:  # removed at once by another: nothing left to dispose of
                return None
            if not stat.S_ISDIR(displaced.st_mode):
                return displaced
            # a folder put there meanwhile: back as it was; the rename below refuses it
            if exchange(from_fd, temp, dir_fd, name) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), path)
        else:
            code = ctypes.get_errno()
            if code not in (
                errno.ENOENT,
                errno.EINVAL,
                errno.ENOSYS,
                errno.EOPNOTSUPP,
                errno.EXDEV,
            ):
                raise OSError(code, os.strerror(code), path)
            # ENOENT: nothing at ``name`` (or the folder went: the rename below says which);
            # the others: this file system cannot swap (the rename below replaces)
    _rename_into_place(from_fd, temp, dir_fd, name, path)
    return None


@functools.cache
def _renameat2() -> Callable[[int, str, int, str], int] | None:
    """``renameat2(a_dir, a, b_dir, b, RENAME_EXCHANGE)``, or None where libc lacks it."""
    import ctypes  # (loaded by the commands that write: not by a scan)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int

    def call(a_dir: int, a: str, b_dir: int, b: str) -> int:
        return int(function(a_dir, os.fsencode(a), b_dir, os.fsencode(b), _RENAME_EXCHANGE))

    return call


def _write_chunks(fd: int, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write ``chunks`` to the new file ``fd``; a long run of zeros is left a hole."""
    holes = False
    for chunk in chunks:
        if (
            isinstance(chunk, bytes | bytearray)
            and len(chunk) >= _HOLE_MIN
            and chunk.count(0) == len(chunk)
        ):
            os.lseek(fd, len(chunk), os.SEEK_CUR)  # a run of zeros: a hole
            holes = True
        else:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    if holes:
        os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR))  # the file ends where the last chunk did


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def _chmod_at(dir_fd: int, name: str, fd: int, path: str, mode: int) -> None:
    """Chmod the file or folder ``name`` in ``dir_fd``, which ``fd`` (``O_PATH``) has open.

    ``/proc/self/fd/N`` names exactly the opened inode, so nothing is looked up
    by path again, and it works on a file its owner cannot read. Without
    ``/proc``, ``name`` is reopened without following a symlink, checked to be
    the same inode, and changed with ``fchmod``.
    """
    try:
        os.chmod(f"{_PROC_FD}/{fd}", mode)
    except FileNotFoundError:
        if os.path.isdir(_PROC_FD):
            raise
    else:
        return
    opened = os.fstat(fd)
    try:
        reopened = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT):
            raise UnsafeWorkspacePath(path) from None
        raise
    try:
        now = os.fstat(reopened)
        if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            raise UnsafeWorkspacePath(path)
        os.fchmod(reopened, mode)
    finally:
        os.close(reopened)
