"""The workspace lease a run holds while its command executes.

A run writes ``RUNS/<run id>.lease`` (JSON: run id, pid, argv, start time and
the ``before`` snapshot) and holds an exclusive ``flock`` on it for as long as
the command runs. Another process asks :func:`active_leases` before moving the
files (``rewind``, ``branch switch``, ``restore``) and refuses while one is
held. A lease file nobody holds a lock on belongs to a strata that was killed:
:func:`stale_leases` returns it, so the next command can record that run as
interrupted. ``flock`` is released by the kernel when the process dies, so a
reused pid never makes a dead run look alive.

Only strata holds the lock, never the run's command: the command runs in a
process group of its own, which the lease records (``process_group``: group
id, session, leader's start time and boot). When strata is killed the lease
turns stale at once, and the next command that writes ends what is left of
that group (SIGTERM, then SIGKILL) before recording the run as interrupted,
with the files as the command left them. :func:`holders` names the processes
that still hold a lease.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUFFIX = ".lease"


@dataclass
class Lease:
    """A lease this process holds (release it with :meth:`release` or ``with``)."""

    path: Path
    info: dict[str, Any]
    _fd: int | None = None

    @classmethod
    def acquire(cls, folder: Path, run_id: str, info: dict[str, Any]) -> Lease:
        """Write and lock ``folder/<run_id>.lease`` holding ``info``."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{run_id}{SUFFIX}"
        if path.exists():
            raise FileExistsError(path)
        # locked before it gets its name, so no reader ever sees an unlocked live lease
        temp = folder / f".{run_id}.tmp"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, json.dumps({"run_id": run_id, **info}, sort_keys=True).encode())
            os.fsync(fd)
            os.replace(temp, path)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        return cls(path, {"run_id": run_id, **info}, fd)

    def fileno(self) -> int:
        """The locked descriptor, for a run's command to inherit (``pass_fds``)."""
        assert self._fd is not None
        return self._fd

    def update(self, **info: Any) -> None:
        """Rewrite the lease's content (the lock is kept)."""
        assert self._fd is not None
        self.info.update(info)
        body = json.dumps(self.info, sort_keys=True).encode()
        # over the old content (padded with blanks to its length), then cut: a process
        # killed meanwhile leaves the old content or the new, never half of each
        size = len(body)
        os.pwrite(self._fd, body.ljust(os.fstat(self._fd).st_size), 0)
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)

    def release(self) -> None:
        """Remove the lease file and drop the lock."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def abandon(self) -> None:
        """Drop the lock but keep the file: the run is recorded later as interrupted."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None

    def detach(self) -> int:
        """Give up this object's hold: return the locked file descriptor, which the caller owns.

        The descriptor can be handed to another process (``SCM_RIGHTS``): the
        lock lasts as long as any copy of it is open, so the run is recorded
        as interrupted once the last holder dies without releasing it.
        """
        assert self._fd is not None
        fd, self._fd = self._fd, None
        return fd

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _leases(folder: Path, *, held: bool) -> Iterator[dict[str, Any]]:
    if not folder.is_dir():
        return
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # released meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                locked_elsewhere = False
            except BlockingIOError:
                locked_elsewhere = True
            if locked_elsewhere != held:
                continue
            with suppress(ValueError, OSError):
                info = json.loads(os.pread(fd, 1 << 20, 0) or b"{}")
                if isinstance(info, dict):
                    yield {**info, "path": str(path)}
                    continue
            yield {"run_id": path.name[: -len(SUFFIX)], "path": str(path)}
        finally:
            os.close(fd)


def active_leases(folder: Path) -> list[dict[str, Any]]:
    """Leases held by a live run (its process holds the lock)."""
    return list(_leases(folder, held=True))


def stale_leases(folder: Path) -> list[dict[str, Any]]:
    """Leases whose run died without releasing them (nobody holds the lock)."""
    return list(_leases(folder, held=False))


def holders(path: Path | str) -> list[int]:
    """The pids of the processes that have ``path`` open (a lease's holders), as far as visible.

    Read from ``/proc/*/fd``: processes of other users are not visible to a
    non-root caller, so the list may be incomplete, never wrong.
    """
    try:
        target = os.stat(path)
    except OSError:
        return []
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    st = os.stat(fd.path)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                    found.append(int(entry.name))
                    break
    return sorted(found)
