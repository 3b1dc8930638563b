"""Writing trees back to disk: restore (into the workspace) and export (into a new folder).

A restore is planned as a list of :class:`Action` from the tree that was just
captured (the auto-save) to the target tree, so only differing paths are
touched. The plan is written to a journal before the first write; every
action is idempotent and checks the path first:

* a path the plan expects to be absent must be absent (something there was
  not captured: an ignored file, or one made after the scan) — else skipped;
* a path the plan expects to hold captured content must still have the stat
  the scan recorded — else it changed since and is skipped;

so a restore never deletes or overwrites anything that was not recorded.
Skipped paths are reported. If the process dies, the next command replays
the journal: actions whose path already holds the target are done; actions
whose path still holds the captured state are applied; anything else is left
alone and reported.

All workspace writes go through :class:`strata.store.fsops.WorkspaceWriter`
(directory handles, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from strata.atomic import TEMP_PREFIX, atomic_write, fsync_dir, sync_filesystem
from strata.errors import CorruptRepository, JournalError, StrataError, TargetNotEmpty
from strata.ids import ObjectId
from strata.store.fsops import AsScanned, TrashIndex, WorkspaceWriter
from strata.store.longpath import open_path, parent_of
from strata.store.objects import ObjectStore, hash_bytes, verified_chunks
from strata.store.scan import available_cpus
from strata.store.statcache import FileStat, unchanged
from strata.store.tree import Nested, TreeEntry, read_tree, unnest

Op = Literal["write", "symlink", "mkdir", "remove", "rmdir", "chmod"]
JOURNAL_VERSION = 1


@dataclass
class Action:
    """One step of a restore."""

    op: Op
    path: str
    oid: str = ""
    mode: int = 0
    # what the scan saw at the path: (mode, size, mtime_ns, ctime_ns, inode, oid) or None = absent
    before: list[Any] | None = None


@dataclass
class RestoreReport:
    """What a restore did."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: replaced files moved to the trash (not yet deleted)
    trashed: int = 0
    #: the disk space those hold (allocated blocks)
    trashed_bytes: int = 0
    #: path -> (stat, object id) of the files a scan may take as read (``WorkspaceWriter.known``)
    known: dict[str, tuple[os.stat_result, str]] = field(default_factory=dict)

    @property
    def restored_paths(self) -> list[str]:
        """Every path written or removed, sorted."""
        return sorted(set(self.written) | set(self.removed))


def _index(store: ObjectStore, oid: ObjectId | None) -> dict[str, TreeEntry]:
    return {e.name: e for e in read_tree(store, oid)} if oid else {}


def plan_restore(
    store: ObjectStore,
    current: ObjectId,
    target: ObjectId,
    *,
    stat_of: Any,
    paths: list[str] | None = None,
) -> list[Action]:
    """Actions that turn the captured tree ``current`` into ``target``.

    ``stat_of(path)`` returns the stat the scan recorded for a file or symlink.
    ``paths`` limits the plan to those paths and what lies below them.
    """
    actions: list[Action] = []

    def wanted(path: str) -> bool:
        if not paths:
            return True
        return any(path == p or path.startswith(p + "/") or p.startswith(path + "/") for p in paths)

    def inside(path: str) -> bool:
        return not paths or any(path == p or path.startswith(p + "/") for p in paths)

    def before(path: str) -> list[Any] | None:
        st: FileStat | None = stat_of(path)
        return list(st) if st is not None else None

    # each function below yields its calls to itself (store.tree.unnest): no recursion
    def remove(path: str, entry: TreeEntry) -> Nested[None]:
        if entry.kind == "dir":
            for name, child in sorted(_index(store, entry.oid).items()):
                yield remove(f"{path}/{name}", child)
            actions.append(Action("rmdir", path))
        else:
            actions.append(Action("remove", path, before=before(path)))

    def create(path: str, entry: TreeEntry) -> Nested[None]:
        if entry.kind == "dir":
            actions.append(Action("mkdir", path, mode=entry.mode))
            for name, child in sorted(_index(store, entry.oid).items()):
                yield create(f"{path}/{name}", child)
        elif entry.kind == "symlink":
            actions.append(Action("symlink", path, oid=entry.oid))
        else:
            actions.append(Action("write", path, oid=entry.oid, mode=entry.mode))

    def walk(a: ObjectId | None, b: ObjectId | None, prefix: str) -> Nested[None]:
        left, right = _index(store, a), _index(store, b)
        for name in sorted(left.keys() | right.keys()):
            path = prefix + name
            if not wanted(path):
                continue
            old, new = left.get(name), right.get(name)
            if old is not None and new is not None and old.kind == new.kind == "dir":
                if old.oid != new.oid:
                    yield walk(old.oid, new.oid, path + "/")
                if old.mode != new.mode and inside(path):
                    actions.append(Action("chmod", path, mode=new.mode))
                continue
            if old == new:
                continue
            if old is not None and new is not None and old.kind == new.kind == "file":
                if old.oid == new.oid:
                    actions.append(Action("chmod", path, mode=new.mode, before=before(path)))
                else:
                    actions.append(
                        Action("write", path, oid=new.oid, mode=new.mode, before=before(path))
                    )
                continue
            if old is not None and new is not None and old.kind == new.kind == "symlink":
                actions.append(Action("symlink", path, oid=new.oid, before=before(path)))
                continue
            if old is not None and (inside(path) or old.kind != "dir"):
                yield remove(path, old)
            elif old is not None:
                # a folder above the requested paths: only descend
                yield walk(old.oid, None, path + "/")
            if new is not None:
                if new.kind == "dir" and not inside(path):
                    actions.append(Action("mkdir", path, mode=new.mode))
                    yield walk(None, new.oid, path + "/")
                elif inside(path):  # a file above the requested paths is not theirs to create
                    yield create(path, new)

    unnest(walk(current, target, ""))
    return actions


class Journal:
    """An in-flight multi-file change, kept in ``journal/<name>.json`` until it completes."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.path = folder / f"{name}.json"

    def write(self, record: dict[str, Any]) -> None:
        """Write the journal durably (temp, fsync, rename, fsync folder)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"version": JOURNAL_VERSION, **record}).encode())

    def remove(self) -> None:
        """Forget the journal: the change is complete."""
        self.path.unlink(missing_ok=True)
        fsync_dir(self.folder)

    @staticmethod
    def pending(folder: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Every journal left behind by an interrupted command, oldest first."""
        if not folder.is_dir():
            return
        for path in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns):
            try:
                record = json.loads(path.read_bytes())
            except (OSError, ValueError):
                raise JournalError(str(path), "is unreadable") from None
            if not isinstance(record, dict):
                raise JournalError(str(path), "is malformed (not a JSON object)")
            if record.get("version") != JOURNAL_VERSION:
                raise JournalError(str(path), "has an unknown version")
            yield path, record


def apply_actions(
    store: ObjectStore,
    root: Path,
    actions: list[Action],
    *,
    recovering: bool = False,
    trash: Path | None = None,
    verified: Mapping[str, bytes] | None = None,
    trash_index: TrashIndex | None = None,
) -> RestoreReport:
    """Carry out a restore plan; each action checks the path before touching it.

    Files it replaces go to ``trash`` when given (the caller empties it:
    :func:`strata.store.fsops.empty_trash`; ``report.trashed`` says how many,
    ``report.trashed_bytes`` how much space they hold).
    ``verified``: object id -> the object's bytes, already read and checked
    against the id (:func:`strata.core.restore.check_before_writing`): those
    are written as they are, not read from the store again.
    ``trash_index``: what the files in ``trash`` held (see
    :class:`~strata.store.fsops.WorkspaceWriter`): a file written back to
    where it was is swapped back from there.
    """
    report = RestoreReport()
    skipped_dirs: list[str] = []
    threads = min(WRITE_THREADS, available_cpus())
    with WorkspaceWriter(root, trash=trash, reuse_folders=True, trash_index=trash_index) as ws:
        i = 0
        while i < len(actions):
            end = i + 1  # a run of file writes is measured once, from its first
            shared = threads > 1 and actions[i].op == "write"
            if shared:
                while end < len(actions) and actions[end].op == "write":
                    end += 1
            if (
                shared
                and end - i >= PARALLEL_WRITES
                and not _mostly_put_back(actions[i:end], trash_index)
            ):
                trashed = _write_in_parallel(
                    store,
                    root,
                    actions[i:end],
                    report,
                    skipped_dirs,
                    recovering,
                    verified,
                    trash,
                    trash_index,
                )
                report.trashed += trashed[0]
                report.trashed_bytes += trashed[1]
                i = end
                continue
            for act in actions[i:end]:
                _apply_or_skip(store, ws, act, report, skipped_dirs, recovering, verified or {})
            i = end
        if recovering:
            _remove_temp_files(ws, root, actions)
        report.known.update(ws.known)
        report.trashed += ws.trashed
        report.trashed_bytes += ws.trashed_bytes
    if actions:  # (nothing written, nothing to flush)
        sync_filesystem(root)
    return report


def _mostly_put_back(writes: list[Action], trash_index: TrashIndex | None) -> bool:
    """True when most of ``writes`` can take their file back from the trash.

    Taking a file back is a few short system calls with no file made: on
    two threads, each call's hand-over of the interpreter's lock costs more
    than the second thread saves (5,000 files: ~0.5 s on one thread, 0.55-0.75
    s on two).
    """
    if not trash_index:
        return False
    return sum((a.path, a.oid) in trash_index for a in writes) * 2 > len(writes)


#: a run of at least this many file writes in a row is shared between threads
PARALLEL_WRITES = 128
#: by at most this many threads (the system calls of a write release the GIL, and ext4
#: allocates inodes in them: two threads wrote 5,000 files of 20 KB in 0.75-0.95 s where
#: one took 0.92-1.0 s, on 2 cores)
WRITE_THREADS = 2


def _apply_or_skip(
    store: ObjectStore,
    ws: WorkspaceWriter,
    act: Action,
    report: RestoreReport,
    skipped_dirs: list[str],
    recovering: bool,
    verified: Mapping[str, bytes],
) -> None:
    """Carry out ``act``, or report it skipped when its path changed or is unsafe."""
    if any(act.path.startswith(d + "/") for d in skipped_dirs):
        report.skipped.append(act.path)
        return
    try:
        _apply_one(store, ws, act, report, skipped_dirs, recovering, verified)
    except (
        StrataError,
        FileNotFoundError,
        NotADirectoryError,
        IsADirectoryError,
        FileExistsError,
        PermissionError,
    ) as exc:
        if isinstance(exc, CorruptRepository):
            raise
        # the path was swapped, changed or made unreadable under us: leave it, report it
        report.skipped.append(act.path)


def _write_in_parallel(
    store: ObjectStore,
    root: Path,
    writes: list[Action],
    report: RestoreReport,
    skipped_dirs: list[str],
    recovering: bool,
    verified: Mapping[str, bytes] | None,
    trash: Path | None,
    trash_index: TrashIndex | None,
) -> tuple[int, int]:
    """Carry out file ``writes`` on :data:`WRITE_THREADS` threads; return what they trashed.

    Each thread takes a contiguous share of the writes (cut between two
    folders where it can) with a writer of its own; the report lists what
    they did in the order of ``writes``. Writes to distinct paths do not
    depend on one another: a folder two of them make is made once (the other
    finds it made).
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    cuts = [0]
    for n in range(1, WRITE_THREADS):
        cut = len(writes) * n // WRITE_THREADS
        folder = writes[cut].path.rpartition("/")[0]
        ahead = cut
        while ahead < len(writes) and writes[ahead].path.rpartition("/")[0] == folder:
            ahead += 1
        cuts.append(ahead if ahead - cut < len(writes) // (WRITE_THREADS * 4) else cut)
    cuts.append(len(writes))
    shares = [writes[a:b] for a, b in itertools.pairwise(cuts)]
    reports = [RestoreReport() for _ in shares]
    failed = threading.Event()  # a share that raised: the others stop at their next write

    def write(n: int) -> tuple[int, int]:
        done = False
        try:
            with WorkspaceWriter(
                root, trash=trash, reuse_folders=True, trash_index=trash_index
            ) as ws:
                for act in shares[n]:
                    if failed.is_set():
                        break
                    _apply_or_skip(
                        store, ws, act, reports[n], skipped_dirs, recovering, verified or {}
                    )
                done = True
                reports[n].known.update(ws.known)
                return ws.trashed, ws.trashed_bytes
        finally:
            if not done:
                failed.set()

    with ThreadPoolExecutor(len(shares) - 1) as pool:
        futures = [pool.submit(write, n) for n in range(1, len(shares))]
        trashed: list[tuple[int, int]] = []
        try:
            trashed.append(write(0))
        finally:  # (a failure here waits for the other shares to stop, then is raised)
            trashed += [future.result() for future in futures]
    for part in reports:
        report.known.update(part.known)
        report.written.extend(part.written)
        report.skipped.extend(part.skipped)
        report.removed.extend(part.removed)
    return sum(t[0] for t in trashed), sum(t[1] for t in trashed)


def _remove_temp_files(ws: WorkspaceWriter, root: Path, actions: list[Action]) -> None:
    """Delete the temporary files a killed restore left beside the paths it was writing."""
    folders = {a.path.rpartition("/")[0] for a in actions if a.op in ("write", "symlink")}
    for folder in sorted(folders):
        try:
            names = os.listdir(root / folder)
        except OSError:
            continue
        for name in names:
            if name.startswith(TEMP_PREFIX):
                # a folder swapped for a symlink meanwhile raises: it is never followed
                with contextlib.suppress(StrataError, OSError):
                    ws.remove_file(f"{folder}/{name}" if folder else name)


def _apply_one(
    store: ObjectStore,
    ws: WorkspaceWriter,
    act: Action,
    report: RestoreReport,
    skipped_dirs: list[str],
    recovering: bool,
    verified: Mapping[str, bytes],
) -> None:
    st = ws.lstat(act.path)
    if act.op == "mkdir":
        if st is None:
            ws.make_dir(act.path, mode=act.mode)
            report.written.append(act.path)
        elif stat.S_ISDIR(st.st_mode):
            if st.st_mode & 0o777 != act.mode:
                ws.chmod(act.path, act.mode)
        else:
            report.skipped.append(act.path)
            skipped_dirs.append(act.path)
        return
    if act.op == "rmdir":
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode) and ws.remove_dir(act.path):
            report.removed.append(act.path)
        else:
            report.skipped.append(act.path)
        return
    if act.op == "chmod":
        if (
            st is not None
            and not stat.S_ISLNK(st.st_mode)
            and (act.before is None or unchanged(st, act.before) or recovering)
        ):
            ws.chmod(act.path, act.mode)
            report.written.append(act.path)
        else:
            report.skipped.append(act.path)
        return
    done = _holds_target(ws, act, st)
    if done:
        return
    if not unchanged(st, act.before):
        report.skipped.append(act.path)
        return
    # checked again just before the rename or unlink, content too when the stat is racy
    expect = AsScanned(act.before)
    if act.op == "remove":
        ws.remove_file(act.path, expect=expect)
        report.removed.append(act.path)
    elif act.op == "write":
        if st is not None and stat.S_ISDIR(st.st_mode):
            report.skipped.append(act.path)
            return
        data = verified.get(act.oid)
        chunks = data if data is not None else verified_chunks(store, ObjectId(act.oid))
        ws.write_file(act.path, chunks, mode=act.mode, expect=expect, oid=act.oid)
        report.written.append(act.path)
    elif act.op == "symlink":
        target = verified.get(act.oid) or store.get(ObjectId(act.oid))
        ws.write_symlink(act.path, os.fsdecode(target), expect=expect)
        report.written.append(act.path)


def _holds_target(ws: WorkspaceWriter, act: Action, st: os.stat_result | None) -> bool:
    """True when the path already holds what the action would put there."""
    if act.op == "remove":
        return st is None
    if st is None:
        return False
    if act.op == "symlink" and stat.S_ISLNK(st.st_mode):
        return hash_bytes(os.fsencode(ws.read_link(act.path))) == act.oid
    if act.op == "write" and stat.S_ISREG(st.st_mode):
        if act.before is not None and unchanged(st, act.before):
            return False  # still the captured content: not written yet
        return st.st_mode & 0o777 == act.mode and hash_bytes(ws.read_file(act.path)) == act.oid
    return False


#: below this size a blob is read whole (one verified read) and written with one call;
#: from this size on it is streamed, and may be written by a helper thread
LARGE = 1024 * 1024


def export_threads(sizes: list[int], *, cpus: int | None = None) -> int:
    """How many threads an export of files of ``sizes`` bytes uses (1: the caller's alone).

    Creating a file is serialised (by the interpreter, and by its folder's lock in
    the kernel): helpers that create small files only slow each other down, so
    small files are always written by the calling thread. Large files spend their
    time decompressing, hashing and writing without the interpreter's lock; each
    CPU beyond the first this process may run on gets one, while there are any.
    """
    if cpus is None:
        cpus = available_cpus()
    large = sum(1 for size in sizes if size >= LARGE)
    return 1 + max(0, min(cpus - 1, large, 7))


def export_tree(
    store: ObjectStore, tree: ObjectId, target: Path, *, threads: int | None = None
) -> int:
    """Write the tree into ``target`` (absent or an empty folder); return the files written.

    Every folder is created by this call (``mkdir`` fails if anything is in the
    way) and every file is opened ``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing
    outside ``target`` is written even if a name was planted meanwhile.
    ``threads`` (default: chosen by :func:`export_threads`) write the files: the
    calling thread writes every small one, the others the large ones.
    """
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink() or any(target.iterdir()):
            raise TargetNotEmpty(str(target))
    else:
        target.mkdir(parents=True)
    jobs: list[tuple[str, int, int, ObjectId]] = []
    dirs: list[tuple[str, int]] = []

    def walk(oid: ObjectId, folder: str) -> Nested[None]:
        for entry in read_tree(store, oid):
            path = f"{folder}/{entry.name}"
            if entry.kind == "dir":
                with parent_of(path) as (dir_fd, name):  # (a path may pass PATH_MAX)
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
                dirs.append((path, entry.mode))
                yield walk(entry.oid, path)
            elif entry.kind == "symlink":
                with parent_of(path) as (dir_fd, name):
                    os.symlink(os.fsdecode(store.get(entry.oid)), name, dir_fd=dir_fd)
            else:
                jobs.append((path, entry.mode, entry.size, entry.oid))

    unnest(walk(tree, str(target)))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

    def write(job: tuple[str, int, int, ObjectId]) -> None:
        path, mode, size, oid = job
        fd = open_path(path, flags, 0o600)
        try:
            if size >= LARGE:
                for chunk in verified_chunks(store, oid):
                    _write_all(fd, chunk)
            elif size:
                _write_all(fd, store.get(oid))
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    if threads is None:
        threads = export_threads([job[2] for job in jobs])
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor  # (logging and more: only here)

        large = [job for job in jobs if job[2] >= LARGE]
        small = [job for job in jobs if job[2] < LARGE]
        with ThreadPoolExecutor(threads - 1) as pool:
            done = [pool.submit(write, job) for job in large]
            for job in small:
                write(job)
            for future in done:
                future.result()
    else:
        for job in jobs:
            write(job)
    for path, mode in reversed(dirs):
        with parent_of(path) as (dir_fd, name):
            os.chmod(name, mode, dir_fd=dir_fd)  # (a folder this call made: no symlink)
    return len(jobs)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def journal_record(actions: list[Action], **extra: Any) -> dict[str, Any]:
    """The JSON record of a restore plan (each action as :func:`dataclasses.asdict` has it)."""
    return {
        "actions": [
            {
                "op": a.op,
                "path": a.path,
                "oid": a.oid,
                "mode": a.mode,
                "before": None if a.before is None else list(a.before),
            }
            for a in actions
        ],
        **extra,
    }


_OPS = frozenset({"write", "symlink", "mkdir", "remove", "rmdir", "chmod"})


def actions_from_record(record: dict[str, Any]) -> list[Action]:
    """The inverse of :func:`journal_record`; ``ValueError`` for a record of the wrong shape."""
    raw = record.get("actions")
    if not isinstance(raw, list):
        raise ValueError("its actions are not a list")
    actions = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("an action is not an object")
        try:
            act = Action(**item)
        except TypeError:
            raise ValueError("an action has missing or unknown fields") from None
        before = act.before
        if (
            act.op not in _OPS
            or not isinstance(act.path, str)
            or not act.path
            or not isinstance(act.oid, str)
            or type(act.mode) is not int
            or not (
                before is None
                or (
                    isinstance(before, list)
                    and len(before) >= 5
                    and all(type(v) is int for v in before[:5])
                )
            )
        ):
            raise ValueError(f"the action on {act.path!r} has fields of the wrong type")
        actions.append(act)
    return actions
