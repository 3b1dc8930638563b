"""Finishing the moves an interrupted command left: the journals.

A command that moves files (restore, publish, undo, a rollback) writes a
journal first, then the files, then its ledger operation, then drops the
journal. :func:`recover` finishes what a journal describes on the next
writer's open (:meth:`Core.writing <strata.core.core.Core.writing>`), or
gives it up and says what it left. :func:`check_before_writing` is the check
every plan passes before its first write, here and in
:func:`~strata.core.restore.restore_into`.

This module sits below :mod:`strata.core.core`: it reads an open repository
through :class:`Opened`, the few members it uses.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strata.atomic import atomic_write, fsync_dir
from strata.core.workspace import Workspace
from strata.errors import CorruptRepository, DiskFull, FolderNotWritable, JournalError
from strata.ids import ObjectId
from strata.layout import Layout
from strata.ledger.ledger import Ledger, Operation
from strata.sandbox.paths import display_path
from strata.store.fsops import empty_trash
from strata.store.longpath import lstat_path, open_path, parent_of, readlink_path
from strata.store.objects import ObjectStore, hash_bytes, verified_chunks

if TYPE_CHECKING:
    from strata.store.materialize import Action


class Opened(Protocol):
    """What :func:`recover` uses of an open repository (a :class:`~strata.core.core.Core`)."""

    layout: Layout
    objects: ObjectStore
    root: Path
    workspace: Workspace
    ledger: Ledger


def journals_left(layout: Layout) -> bool:
    """Whether an interrupted command left a journal (what ``Journal.pending`` reads)."""
    return any(layout.journal.glob("*.json"))


#: objects up to this size that a plan writes are kept in memory once read and checked
KEPT_OBJECT = 1 << 20
#: and up to this many bytes of them in all (a rewind of 5,000 files of 20 KB: 100 MB, all
#: kept; with 64 MiB a third of them were read and checked twice)
KEPT_OBJECTS = 128 << 20


def check_before_writing(store: ObjectStore, root: Path, actions: list[Action]) -> dict[str, bytes]:
    """Refuse a plan that could stop half-done, before its first write.

    Every object the plan writes must be in the store and read back whole
    (:class:`~strata.errors.ObjectMissing` or
    :class:`~strata.errors.CorruptRepository` otherwise), and every folder it
    writes into must be writable by this user (:class:`FolderNotWritable`).

    Returns the small objects read (object id -> bytes, checked against the
    id), for the apply to write without reading them again.
    """
    verified: dict[str, bytes] = {}
    room = KEPT_OBJECTS
    for oid in sorted({a.oid for a in actions if a.op in ("write", "symlink")}):
        chunks: list[bytes] | None = []
        size = 0
        for chunk in verified_chunks(store, ObjectId(oid)):
            size += len(chunk)
            if chunks is not None:
                chunks.append(chunk)
                if size > KEPT_OBJECT or size > room:
                    chunks = None  # written from the store
        if chunks is not None:  # reached only once the bytes matched the id
            verified[oid] = b"".join(chunks)
            room -= size
    blocked = unwritable_folders(root, actions)
    if blocked:
        raise FolderNotWritable(sorted(set(blocked.values())))
    return verified


def unwritable_folders(root: Path, actions: list[Action]) -> dict[str, str]:
    """Action path -> the (display) folder it writes into that this user cannot write.

    Each folder is looked at once (a deep chain of folders the plan makes
    costs one ``lstat`` each, not one per folder above it), by descriptors
    where its path passes PATH_MAX (:mod:`strata.store.longpath`).
    """
    blocked: dict[str, str] = {}
    base = str(root)
    #: folder -> whether it is a real folder on disk now (not a symlink)
    real: dict[str, bool] = {"": True}
    #: folder an action writes into -> the folder that must be writable, and whether it is not
    seen: dict[str, tuple[str, bool]] = {}

    def is_real(folder: str) -> bool:
        known = real.get(folder)
        if known is None:
            try:
                known = stat.S_ISDIR(lstat_path(f"{base}/{folder}").st_mode)
            except OSError:
                known = False
            real[folder] = known
        return known

    for act in actions:
        if act.op == "chmod":
            continue
        parent = act.path.rpartition("/")[0]
        found = seen.get(parent)
        if found is None:
            # made (or replaced) by the plan: the nearest real folder above must be writable
            chain = []
            folder = parent
            while folder not in seen and not is_real(folder):
                chain.append(folder)
                folder = folder.rpartition("/")[0]
            if folder in seen:
                found = seen[folder]
            else:
                found = (folder, not _writable(f"{base}/{folder}" if folder else base))
            for made in chain:
                seen[made] = found
            seen[parent] = found
        folder, denied = found
        if denied:
            blocked[act.path] = display_path(folder) if folder else "."
    return blocked


def _writable(path: str) -> bool:
    """Whether this user may make entries in the folder ``path`` (True if it is gone)."""
    try:
        with parent_of(path) as (dir_fd, name):
            if os.access(name, os.W_OK | os.X_OK, dir_fd=dir_fd, follow_symlinks=False):
                return True
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return True  # gone meanwhile: the apply reports it
    return not stat.S_ISDIR(st.st_mode)


@dataclass
class Recovery:
    """What :func:`recover` did with one journal."""

    journal: str
    command: str
    finished: bool
    #: why it could not finish (abandoned), "" when it finished
    problem: str = ""
    #: paths left as they were (changed meanwhile, or not reached before it stopped)
    skipped: list[str] = field(default_factory=list)
    #: where the abandoned journal was kept
    kept: str = ""

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata recover --json`` prints for one journal."""
        return {
            "journal": self.journal,
            "command": self.command,
            "finished": self.finished,
            "problem": self.problem or None,
            "skipped_paths": self.skipped,
            "kept": self.kept or None,
        }


def _problem(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return str(exc)


def recover(core: Opened, *, abandon: bool = False) -> list[Recovery]:
    """Finish every journal an interrupted command left (the write lock is held).

    A journal that cannot be finished (unreadable, malformed, a missing
    object, a folder that cannot be written) raises :class:`JournalError`,
    or with ``abandon`` is given up: its operation is recorded with the paths
    it did not reach (``skipped_paths``, ``abandoned``), the files are left as
    they are, and the journal is kept under ``journal/abandoned/``. A full
    disk raises :class:`DiskFull` either way: the journal finishes once
    space returns.
    """
    from strata.store.materialize import Journal, actions_from_record  # (not for a snapshot)

    done: list[Recovery] = []
    folder = core.layout.journal
    while True:
        try:
            item = next(iter(Journal.pending(folder)), None)
        except JournalError as exc:
            if not abandon:
                raise
            bad = Path(exc.path)
            done.append(Recovery(bad.name, "?", False, exc.problem, kept=_keep(bad, exc.problem)))
            bad.unlink(missing_ok=True)
            continue
        if item is None:
            if done:  # what the interrupted restores moved to the trash: nobody else empties it
                empty_trash(core.layout.trash)
            return done
        path, record = item
        try:
            actions = actions_from_record(record)
            op = Operation.from_json(record["operation"])
            if not isinstance(op.events, list) or not all(isinstance(e, dict) for e in op.events):
                raise ValueError("its events are not objects")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = f"is malformed ({exc})" if isinstance(exc, ValueError) else "is malformed"
            if not abandon:
                raise JournalError(str(path), problem) from None
            done.append(Recovery(path.name, "?", False, problem, kept=_keep(path, problem)))
            path.unlink(missing_ok=True)
            continue
        problem = ""
        try:
            verified = check_before_writing(core.objects, core.root, actions)
            skipped = core.workspace.apply(actions, recovering=True, verified=verified).skipped
        except (CorruptRepository, FolderNotWritable, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(exc.filename) from None
            problem = _problem(exc)
            if not abandon:
                raise JournalError(str(path), f"cannot be finished: {problem}") from None
            skipped = [a.path for a in actions if not _holds(core.root, a)]
        committed = bool(op.events) and core.ledger.driver.seek_event(op.events[0]["id"])
        if not committed and (op.events or op.after != op.before or op.details):
            for body in op.events:
                body.setdefault("data", {}).update(
                    recovered=True,
                    skipped_paths=[display_path(p) for p in skipped],
                    **({"abandoned": problem} if problem else {}),
                )
            core.ledger.commit(op)
        if record.get("ends_draft"):  # an interrupted publish: its Draft ends with it
            state = core.layout.draft_state
            if state.exists():
                state.unlink()
                fsync_dir(state.parent)
        kept = _keep(path, problem) if problem else ""
        path.unlink(missing_ok=True)
        done.append(
            Recovery(
                path.name,
                op.command,
                not problem,
                problem,
                [display_path(p) for p in skipped],
                kept,
            )
        )


def _keep(path: Path, problem: str) -> str:
    """Copy an abandoned journal to ``journal/abandoned/`` (with why); return where."""
    target = path.parent / "abandoned" / path.name
    target.parent.mkdir(exist_ok=True)
    try:
        raw: Any = json.loads(path.read_bytes())
    except (OSError, ValueError):
        raw = None
    atomic_write(target, json.dumps({"problem": problem, "journal": raw}, indent=2).encode())
    return str(target)


def _holds(root: Path, act: Action) -> bool:
    """True when ``act``'s path already holds what the action puts there (read only)."""
    disk = f"{root}/{act.path}"  # (its path may pass PATH_MAX: store.longpath)
    try:
        st = lstat_path(disk)
    except (FileNotFoundError, NotADirectoryError):
        return act.op in ("remove", "rmdir")
    except OSError:
        return False
    try:
        if act.op == "write":
            if not stat.S_ISREG(st.st_mode):
                return False
            with open(open_path(disk, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
                return hash_bytes(f.read()) == act.oid
        if act.op == "symlink":
            return stat.S_ISLNK(st.st_mode) and hash_bytes(readlink_path(disk)) == act.oid
    except OSError:
        return False
    if act.op == "mkdir":
        return stat.S_ISDIR(st.st_mode)
    return act.op == "chmod"
