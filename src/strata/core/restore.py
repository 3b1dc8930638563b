"""Moving Published's files to a point of history, and finishing interrupted moves.

:func:`restore_into` is the journaled move every command that writes
Published uses (rewind, restore, branch switch, undo, redo, rollback,
checkpoint restore): it auto-saves unrecorded work in the same operation,
plans the writes against what the scan saw, records an annotation event
and applies the plan through the transaction's journal.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.atomic import atomic_write, fsync_dir
from strata.core.results import Point
from strata.core.results_ops import RewindResult
from strata.diff.tree import diff_trees
from strata.errors import (
    CorruptRepository,
    DiskFull,
    FolderNotWritable,
    JournalError,
    StrataError,
)
from strata.ids import ObjectId
from strata.ledger.events import EventType
from strata.ledger.ledger import Operation, View, moved
from strata.sandbox.paths import display_path
from strata.store.fsops import empty_trash
from strata.store.longpath import lstat_path, open_path, parent_of, readlink_path
from strata.store.materialize import Action, Journal, actions_from_record
from strata.store.objects import ObjectStore, hash_bytes, verified_chunks
from strata.store.tree import lookup
from strata.watch import served

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.transaction import Transaction


def branch_at(view: View, event_id: str) -> str:
    """The branch HEAD should name when it moves to ``event_id``.

    A Draft's branch (``draft/<id>``) is never chosen from elsewhere: its tip
    may be the Draft's base on Published's line, and landing there would make
    Published's next snapshots extend a Draft's (perhaps ended) branch.
    """
    if view.branches.get(view.head_branch) == event_id:
        return view.head_branch
    tips = sorted(
        name
        for name, tip in view.branches.items()
        if tip == event_id and not name.startswith("draft/")
    )
    return tips[0] if tips else view.head_branch


def restore_into(
    tx: Transaction,
    target: Point,
    ref: str,
    *,
    paths: list[str] | None,
    event_type: str,
    new_branch: str | None = None,
    after_view: View | None = None,
    details: dict[str, Any] | None = None,
) -> RewindResult:
    """Move Published (all of it, or ``paths``) to ``target`` within ``tx``.

    Unrecorded work is auto-saved first, in the same operation. HEAD moves to
    the target (on ``new_branch`` if given) unless ``paths`` are given;
    ``after_view`` sets the whole view instead (undo, redo, rollback).
    """
    core = tx.core
    before_head = tx.head()
    quiet = event_type in (EventType.UNDO, EventType.REDO)
    auto, scan = tx.auto_save(event_type.replace("_", " ") + ("" if quiet else f" to {ref}"))
    current = scan.tree  # every path as just captured, with its stat for the no-loss checks
    if target.event is not None and target.event.action_type == EventType.DRAFT_REVISION:
        _refuse_external_symlinks(core, current, target.tree, event_type, paths)
    actions = core.workspace.plan(scan, target.tree, paths=paths or None)
    # what the scan could not read is never deleted or overwritten: it may hold unrecorded work
    # (a chmod loses nothing: a folder's mode is put back, a file's is stat-checked)
    unreadable = [a.path for a in actions if a.op != "chmod" and _touches(a.path, scan.errors)]
    actions = [a for a in actions if a.op == "chmod" or not _touches(a.path, scan.errors)]
    if event_type == EventType.ROLLBACK:
        # a rollback puts back what it can: a folder the failed command made unwritable
        # is left as it is (with everything below it) and reported, never the whole plan
        blocked = unwritable_folders(core.root, actions)
        unreadable += sorted(blocked)
        actions = [a for a in actions if a.path not in blocked]
    anchor = target.event.id if target.event else None
    if after_view is not None:
        tx.set_view(after_view)
    elif paths is None and anchor is not None:
        head_branch = new_branch or branch_at(tx.before, anchor)
        tx.set_view(moved(tx.view, head_branch=head_branch, head_event=anchor))
    tx.details.update(
        {
            **(details or {}),
            "tree_before": current,
            "tree_after": target.tree if paths is None else None,
            **(
                {"restore": {"event": anchor, "paths": [display_path(p) for p in paths]}}
                if paths
                else {}
            ),
        }
    )
    # the annotation points at where HEAD goes (or at the auto-save when an undo empties
    # the view: with no state event left, the operation record alone tells what happened)
    anchor_id = anchor or (auto.id if auto else None)
    event = None
    if anchor_id is not None:
        event = tx.annotate(
            event_type,
            anchor=anchor_id,
            rationale=f"{event_type.replace('_', ' ')} to {ref}",
            files=sorted(
                {display_path(a.path) for a in actions if a.op in ("write", "symlink", "remove")}
            ),
            data={
                "target_event_id": anchor,
                "target_snapshot_id": target.snapshot_id,
                "from_event_id": before_head.id if before_head else None,
                "auto_save_event_id": auto.id if auto else None,
                **({"paths": [display_path(p) for p in paths]} if paths else {}),
            },
            branch=tx.view.head_branch,
        )
    verified = check_before_writing(core.objects, core.root, actions)
    known: dict[str, tuple[os.stat_result, str]] = {}
    if any(a.op in ("write", "symlink", "remove") for a in actions):
        # every file written differs from the stat cache: a watcher, once the asker has its
        # answer, reads them so the next command's scan finds them known (first: it holds
        # the write lock, deleting the replaced files does not); the files taken back from
        # the trash with their bytes checked are not read again
        served.in_background(lambda: _refresh_stat_cache(core, known), only_served=True)
    report = tx.apply(actions, verified=verified)
    known.update(report.known)
    verified.clear()
    report.skipped.extend(unreadable)
    skipped = [display_path(p) for p in report.skipped]
    if event is not None:
        tx.update_data(event.id, skipped_paths=skipped)
    restored = [display_path(p) for p in report.restored_paths]
    return RewindResult(event, target, auto, restored, skipped)


def _refresh_stat_cache(core: Core, known: dict[str, tuple[os.stat_result, str]]) -> None:
    """Scan Published and keep its stat cache (objects made durable first), recording nothing.

    What a restore wrote is then known to the next scan (an auto-save before
    the next rewind) by its stat. Only a head start: the next command scans
    whatever it finds, so a failure here is passed over.
    """
    core.progress = None  # the command has answered: nobody watches a progress line now
    try:
        with core.writing():
            scan = core.workspace.scan(known=known)
            core.objects.flush()
            if scan.worth_saving:
                scan.save_cache()
    except (StrataError, OSError):
        pass


def _touches(path: str, unreadable: dict[str, str]) -> bool:
    """True when ``path`` is, holds or lies inside a path the scan could not read."""
    return any(
        u == "." or path == u or path.startswith(u + "/") or u.startswith(path + "/")
        for u in unreadable
    )


def _refuse_external_symlinks(
    core: Core, current: ObjectId, tree: ObjectId, event_type: str, paths: list[str] | None
) -> None:
    """A Draft revision reaches Published only through publish's symlink check."""
    from strata.diff.symlinks import escaping_symlinks
    from strata.errors import ExternalSymlink

    bad = escaping_symlinks(core.objects, current, tree)
    if paths:
        bad = [p for p in bad if any(p == q or p.startswith(q.rstrip("/") + "/") for q in paths)]
    if bad:
        command = "rewind" if event_type == EventType.REWIND else event_type.replace("_", " ")
        raise ExternalSymlink([display_path(p) for p in bad], command=command)


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


def recover(core: Core, *, abandon: bool = False) -> list[Recovery]:
    """Finish every journal an interrupted command left (the write lock is held).

    A journal that cannot be finished (unreadable, malformed, a missing
    object, a folder that cannot be written) raises :class:`JournalError`,
    or with ``abandon`` is given up: its operation is recorded with the paths
    it did not reach (``skipped_paths``, ``abandoned``), the files are left as
    they are, and the journal is kept under ``journal/abandoned/``. A full
    disk raises :class:`DiskFull` either way: the journal finishes once
    space returns.
    """
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


def changed_paths(core: Core, before: ObjectId, after: ObjectId) -> list[str]:
    """The paths that put ``after`` back to ``before``: each change, or its new or gone folder.

    What a rollback restores, and the undo of a run or of an agent's change.
    """

    def outermost(path: str) -> str:
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if any(lookup(core.objects, tree, prefix) is None for tree in (before, after)):
                return prefix  # a folder the run created or removed: restored as a whole
        return path

    paths: set[str] = set()
    for change in diff_trees(core.objects, before, after):
        paths.add(outermost(change.path))
        if change.old_path is not None:
            paths.add(outermost(change.old_path))
    return sorted(paths)
