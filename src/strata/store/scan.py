"""Scanning a workspace into trees: the heart of a snapshot.

A scan walks the workspace once with ``os.scandir``. For each folder it
decides what is ignored (reusing the stat cache's decision while the folder's
names and rules are unchanged), ``lstat``\\ s every kept entry, and hashes only
the regular files whose stat differs from the cache (or is racy). Hashing and
compressing run on a thread pool (BLAKE3, zstd and file reads release the GIL).
Trees are then built bottom-up; a folder whose rows equal the cached rows
reuses the cached tree id without encoding anything. A scan with more than
:data:`ENCODED_PAST` files to read (a first snapshot) reads its big files
first, then the folders from the last listed, and builds each folder's tree
(kept encoded, as the stat cache saves it) as soon as its files and
subfolders are done: the rows and stats of every file never exist at once.

Before any of that, a listed folder is compared with the cache's quick record
(:mod:`strata.store.statcache`): the same names in the same listing order and
the same digest of the kept entries' stats mean the folder is as recorded, so
its cached rows are not even decoded, and it stays encoded in the saved cache;
only when something below it changed are its rows taken from the cache to
build its new tree. The digest is made from the rows a scan records (after
hashing), never from a listing the rows may not match.

Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and re-checked with
``fstat`` after reading: a file that changed while being read is read again,
so a torn write is never recorded. Sockets, FIFOs and devices are skipped with
a warning and never opened.

Every folder is listed through a descriptor, opened folder by folder where its
path passes ``PATH_MAX`` (:mod:`strata.store.longpath`), and its entries are
read by name relative to it: a path of any length is recorded. Names need not
be UTF-8 (they are kept with ``surrogateescape``), and the walk is a queue, so
no depth is too deep.

Nothing is dropped silently. A path the scan cannot read (a folder that cannot
be listed, an entry whose ``lstat`` fails because its folder is readable but
not searchable, a file that cannot be opened) is named in
:attr:`ScanResult.errors` and in a warning. What the scan
records for it is what the previous scan recorded (the stat cache's row): the
snapshot neither claims the path was deleted nor invents content for it, and
a restore that compares the disk with that kept stat leaves the path alone.
The kept stat has an impossible mtime, so the folder is listed (and the path
tried) again by the next scan. A path the previous scan never saw is left out
of the tree (an unlistable folder is recorded as an empty folder); either
way it is reported, and callers that delete or overwrite (a rollback, a
rewind) leave every such path alone.

Given ``changed`` (the paths a change monitor saw change since the stat
cache was written), a scan looks only where those paths are: a changed path
that is a folder (created, moved in or replaced) is listed with everything
below it; the folder holding a changed path is *not* listed: its cached rows
are brought up to date from its changed names alone, one ``lstat`` each
(and the names of its racy files), as the monitor names every entry that
changed (:meth:`Scanner._patch`). A racy file the monitor does not name is
not read again when its stat matches the cached one in all but the erased
mtime and its blob is stored: the monitor names every write made after the
cache's token, and the scan that read the file began after taking it. Every other folder is taken
from the stat cache without a system call; a subtree that holds no changed
path keeps its cached tree id whole. Folders the cache does not know or
holds without a tree id (a status, which stores nothing, saw them change),
folders whose ignore rules differ from the cached ones, and a folder with a
changed entry a listing handles better (a special file, an unreadable
entry) are listed as in a full walk. A changed ignore file
(``.gitignore``, ``.strataignore``) or other root rules (config defaults, a
run's extra patterns) turn the scan into a full walk.
"""

from __future__ import annotations

import marshal
import os
import stat
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from strata.ids import ObjectId
from strata.store.ignore import IGNORE_FILES, IgnoreRules
from strata.store.large import LargeFiles
from strata.store.longpath import lstat_path, open_path, readlink_path
from strata.store.objects import STREAM_THRESHOLD, ObjectStore, hash_bytes, hash_fd
from strata.store.statcache import DirCache, FileStat, Quick, Row, StatCache
from strata.store.tree import EMPTY_TREE, encode_rows

try:  # compiled by setup.py where a C compiler is found: the walk's per-file calls, in C
    import strata._walk as native_walk
except ImportError:  # pragma: no cover - depends on the build
    native_walk = None  # type: ignore[assignment]

READ_ATTEMPTS = 4
#: the most a scan reads from a file at once
_READ_CHUNK = 1024 * 1024
#: a scan with more files to read than this, or more bytes, reads them on a thread pool
POOL_FILES = 32
POOL_BYTES = 4 << 20
#: a scan that read more files than this keeps each folder it built encoded, as the stat
#: cache saves it (a first snapshot of 80,000 files: 16 MB of blobs, not 50 MB of tuples)
ENCODED_PAST = 20_000
#: such a scan reads files of this size or more before all others
BIG_FIRST = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: the file type bits of ``st_mode`` (what ``stat.S_IFMT`` keeps)
_FILE_TYPE = 0o170000
#: a folder is opened as ``os.scandir(path)`` opens it (a symlink to a folder is followed)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass
class ScanResult:
    """What a scan found."""

    tree: ObjectId
    dirs: dict[str, DirCache]
    started_ns: int
    warnings: list[str] = field(default_factory=list)
    files_hashed: int = 0
    files_seen: int = 0
    #: True when every folder matched the stat cache (the cache needs no rewrite)
    unchanged: bool = False
    #: how many folders were listed (the others came from the stat cache)
    folders_listed: int = 0
    #: how a change monitor was used: "incremental", or why the whole tree was walked
    watcher: str = ""
    #: folders taken unchanged from the stat cache, still encoded (incremental scans)
    inherited: dict[str, bytes] = field(default_factory=dict)
    #: workspace path -> why the scan could not read it (what it recorded: see the module doc)
    errors: dict[str, str] = field(default_factory=dict)
    #: the quick records of the folders this scan built and kept encoded (in ``inherited``)
    quick: dict[str, Quick] = field(default_factory=dict)
    #: inherited folders already decoded by :meth:`stat_of`: folder -> its files
    _decoded: dict[str, dict[str, FileStat]] = field(default_factory=dict, repr=False)

    def stat_of(self, path: str) -> FileStat | None:
        """The stat recorded for a file or symlink path, or None."""
        folder, _, name = path.rpartition("/")
        cached = self.dirs.get(folder)
        if cached is None:
            files = self._decoded.get(folder)
            if files is None:
                blob = self.inherited.get(folder)
                if blob is None:
                    return None
                files = self._decoded[folder] = DirCache.load(marshal.loads(blob)).files
            return files.get(name)
        return cached.files.get(name)


class _Folder:
    __slots__ = (
        "abs",
        "cached",
        "children",
        "clean",
        "digest",
        "entries",
        "hint",
        "ignored",
        "kept",
        "listed",
        "names",
        "order",
        "prefix",
        "quick",
        "rules",
        "whole",
    )

    def __init__(self, prefix: str, abs_path: str, rules: IgnoreRules) -> None:
        self.prefix = prefix  # "" or "a/b/"
        self.abs = abs_path
        self.rules = rules
        self.cached: DirCache | None = None
        self.names: tuple[str, ...] = ()
        self.ignored: frozenset[str] = frozenset()
        # name -> [kind, mode, size, oid | None, FileStat | None]
        self.entries: dict[str, list[object]] = {}
        self.children: dict[str, int] = {}
        #: every entry matched the cache (subfolders are checked bottom-up)
        self.clean = False
        #: taken whole from the cache, subfolders included (nothing below changed)
        self.whole = False
        #: with ``whole``: the folder's tree id, as the cache has it
        self.hint = ""
        #: the names in listing order, joined with "/" (see :mod:`strata.store.statcache`)
        self.order = ""
        #: listed and compared row by row (its digest is made from its rows)
        self.listed = False
        #: the digest of the folder's stat keys (the cache's, for a folder taken from it)
        self.digest = b""
        #: the cache's quick record, when the listing matched it (no row was built)
        self.quick: Quick | None = None
        #: taken from the cache on the way to a changed folder: its rows, as cached, stand
        #: but for its subfolders' tree ids (no entry is built for its files)
        self.kept: tuple[Row, ...] | None = None

    @property
    def key(self) -> str:
        return self.prefix[:-1]


@dataclass(slots=True)
class _Job:
    folder: _Folder
    name: str

    @property
    def path(self) -> str:
        return self.folder.abs + "/" + self.name


class _Plan:
    """Which folders an incremental scan must list, from the paths that changed."""

    def __init__(self, changed: Collection[str], racy: Collection[str] = ()) -> None:
        #: changed paths: each is listed with everything below it
        self.roots = frozenset(changed)
        #: the folders holding a changed path, and the folders with racy entries
        self.parents = frozenset(p.rpartition("/")[0] for p in changed) | frozenset(racy)
        #: folder -> the names in it that changed (each one is looked at alone)
        self.names: dict[str, set[str]] = {}
        for path in changed:
            parent, _, name = path.rpartition("/")
            self.names.setdefault(parent, set()).add(name)
        #: every folder at or above a folder to list (where the walk must descend)
        above: set[str] = set()
        for p in self.roots | self.parents:
            while p not in above:
                above.add(p)
                if not p:
                    break
                p = p.rpartition("/")[0]
        self.above = above

    def must_list(self, key: str) -> bool:
        return key in self.parents or self.below_root(key)

    def below_root(self, key: str) -> bool:
        """True when ``key`` or a folder above it changed (it is listed with all below it)."""
        p = key
        while p:
            if p in self.roots:
                return True
            p = p.rpartition("/")[0]
        return False


#: every permission value as one shared int (one new int per file otherwise: 0o644 > 256)
_MODES = tuple(range(0o1000))


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    mtime, ctime = st.st_mtime_ns, st.st_ctime_ns
    if ctime == mtime:
        ctime = mtime  # one int object, not two: a first snapshot keeps one per file
    return (_MODES[st.st_mode & 0o777], st.st_size, mtime, ctime, st.st_ino)


def _settled(cached: FileStat, key: tuple[int, int, int, int, int]) -> bool:
    """Whether a racy cached row (its mtime erased) matches a file's stat in all else."""
    return (
        cached[0] == key[0] and cached[1] == key[1] and cached[3] == key[3] and cached[4] == key[4]
    )


def _row_name(row: Row) -> str:
    return row[4]


def _same_kinds(
    rules: IgnoreRules, prefix: str, listing: dict[str, os.DirEntry[str]], cached: DirCache
) -> bool:
    """True when the cache's ignored names still hold: no entry changed between folder and not.

    A rule like ``build/`` ignores only a folder, so a folder replaced by a file
    of the same name (or the other way) changes what is ignored though the
    names and the rules are the same.
    """
    folders = {r[4] for r in cached.rows if r[0] == "d"}
    for name, entry in listing.items():
        if name not in cached.ignored and entry.is_dir(follow_symlinks=False) != (name in folders):
            return False
    kinds = [(n, listing[n].is_dir(follow_symlinks=False)) for n in cached.ignored if n in listing]
    return rules.ignored_names(prefix, kinds) == cached.ignored


def _digest(keys: list[object]) -> bytes:
    """The digest of a folder's stat keys, in listing order.

    A kept entry's key is its permission bits (a folder), the first five fields
    of its :data:`FileStat` (a file) or its whole :data:`FileStat` (a symlink,
    whose object id names its target). marshal version 2 writes no references,
    so equal keys always give equal bytes.
    """
    return blake3.blake3(marshal.dumps(keys, 2)).digest()


def _rules_hold(
    prefix: str, rules: IgnoreRules, quick: Quick, kinds: list[tuple[str, bool]]
) -> bool:
    """True when a folder's quick record was made under ``rules`` and its ignored names hold.

    ``kinds``: (name, is a folder) of each listed entry the record names as
    ignored; an ignored folder that became a file (``build/`` no longer
    matches it) voids the record.
    """
    if rules.fingerprint != quick[1]:
        return False
    return not quick[2] or frozenset(quick[2]) == rules.ignored_names(prefix, kinds)


def _take_quick(
    folder: _Folder, folders: list[_Folder], rules: IgnoreRules, quick: Quick, subfolders: list[str]
) -> None:
    """Take ``folder`` as its quick record says (it matched), queueing its ``subfolders``."""
    folder.rules = rules
    folder.ignored = frozenset(quick[2])
    folder.quick = quick
    folder.clean = True
    prefix, base = folder.prefix, folder.abs + "/"
    for name in subfolders:
        folder.children[name] = len(folders)
        folders.append(_Folder(prefix + name + "/", base + name, rules))


def _holds_ignore_file(order: str) -> bool:
    """Whether a folder's listing (names joined with "/") may hold an ignore file."""
    return IGNORE_FILES[0] in order or IGNORE_FILES[1] in order


class _StaleCache(Exception):
    """A folder the listing matched cannot be decoded from the stat cache."""


class Scanner:
    """Scans one workspace into the object store."""

    def __init__(
        self,
        root: Path,
        store: ObjectStore,
        *,
        rules: IgnoreRules,
        cache: StatCache,
        threads: int | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        hash_only: bool = False,
        progress: Callable[[int, int], None] | None = None,
        changed: Collection[str] | None = None,
        large: LargeFiles | None = None,
    ) -> None:
        self.root = root
        #: the large-file guard: files it skips are not read (see :mod:`strata.store.large`)
        self.large = large
        self.store = store
        self.rules = rules
        self.cache = cache
        self.threads = threads or min(8, available_cpus())
        self.clock_ns = clock_ns
        self.hash_only = hash_only
        #: called with (files read so far, files to read) while hashing
        self.progress = progress
        #: with ``hash_only``: object id -> absolute path of files hashed but not stored
        self.sources: dict[ObjectId, str] = {}
        #: object id -> line count (None for binary) of the files hashed by this scan
        self.lines: dict[ObjectId, int | None] = {}
        if changed is not None and (
            cache.base_rules != rules.fingerprint
            or any(p.rpartition("/")[2] in IGNORE_FILES for p in changed)
        ):
            changed = None  # new ignore rules: every folder's decisions may change
        cache.base_rules = rules.fingerprint
        self._plan = _Plan(changed, self._racy_folders()) if changed is not None else None
        #: True when the scan lists only the folders ``changed`` names
        self.incremental = self._plan is not None
        #: folders listed by the last scan (all of them without ``changed``)
        self.folders_listed = 0
        #: folders brought up to date from their changed names alone (see :meth:`_patch`)
        self.folders_patched = 0
        self._errors: dict[str, str] = {}
        #: compare a listed folder with the cache's quick record first (see the module doc)
        self._fast = True
        #: the cache lacks quick records a folder now has (a no-op scan still saves it)
        self._rewrite = False

    def scan(self) -> ScanResult:
        """Walk the workspace, store every new blob and tree, return the root tree."""
        try:
            return self._scan()
        except _StaleCache:
            self._fast = False  # a folder's blob is unreadable: compare every row instead
            return self._scan()

    def _scan(self) -> ScanResult:
        start_ns = self.clock_ns()
        warnings: list[str] = []
        self._errors = {}
        self._rewrite = False
        folders = self._walk(warnings)
        jobs = [
            _Job(f, name)
            for f in folders
            for name, row in f.entries.items()
            if row[3] is None and row[0] == "f"
        ]
        if self.large is not None and self.large.limit:
            jobs = self._skip_large(jobs, self.large, warnings)
        hashed = len(jobs)
        dirs: dict[str, DirCache] = {}
        trees: list[str] = [""] * len(folders)
        seen = 0
        clean = [False] * len(folders)
        fast: list[str] = []
        # a big scan encodes each folder it built at once (its rows and stats are then one
        # bytes object each, not a tuple per file): what a save of the cache would write
        encode = not self.hash_only and hashed > ENCODED_PAST
        encoded: dict[str, bytes] = {}
        quicks: dict[str, Quick] = {}

        def build(index: int) -> None:
            """Give ``folders[index]`` its tree (every folder after it has one)."""
            nonlocal seen
            folder = folders[index]
            quick = folder.quick
            if quick is not None:
                if all(clean[i] for i in folder.children.values()):
                    # the listing matched the cache and nothing below changed
                    clean[index] = True
                    trees[index] = quick[4]
                    seen += quick[5]
                    fast.append(folder.key)
                    return
                self._from_cache(folder)
            cached = folder.cached
            if folder.whole:
                clean[index] = True
                trees[index] = folder.hint
                if cached is not None:
                    dirs[folder.key] = cached
                    seen += len(cached.files)
                return
            digest = folder.digest
            if (
                cached is not None
                and folder.clean
                and cached.tree
                and all(clean[i] for i in folder.children.values())
            ):
                # nothing in or below this folder changed: reuse it whole
                clean[index] = True
                trees[index] = cached.tree
                if folder.listed:
                    digest = self._folder_digest(folder, cached.rows, cached.files)
                if digest and (cached.digest != digest or cached.order != folder.order):
                    self._rewrite = cached.digest == b""  # a cache written without digests
                    cached.order, cached.digest = folder.order, digest
                dirs[folder.key] = cached
                seen += len(cached.files)
                return
            if folder.kept is not None and cached is not None:
                # the cached rows in their order, each subfolder's row with its new tree id
                row_tuple = tuple(
                    (k, m, s, trees[folder.children[n]] if k == "d" else o, n)
                    for k, m, s, o, n in folder.kept
                )
                seen += len(cached.files)
                data = encode_rows(row_tuple)
                kept_tree = hash_bytes(data)
                self.store.put(data, oid=kept_tree)
                trees[index] = kept_tree
                dirs[folder.key] = DirCache(
                    folder.names,
                    folder.rules.fingerprint,
                    folder.ignored,
                    cached.files,
                    kept_tree,
                    row_tuple,
                    folder.order,
                    digest,  # the permission bits of a subfolder and the files' stats: as cached
                )
                return
            rows: list[Row] = []
            files: dict[str, FileStat] = {}
            for name, row in folder.entries.items():
                kind, mode, size, oid, fstat = row[:5]
                if kind == "d":
                    oid = trees[folder.children[name]]
                elif oid is None:
                    continue  # skipped with a warning
                else:
                    seen += 1
                    assert isinstance(fstat, tuple)
                    files[name] = fstat
                rows.append((str(kind), int(mode), int(size), str(oid), name))  # type: ignore[call-overload]
            rows.sort(key=_row_name)
            if any(0xDC80 <= ord(c) <= 0xDCFF for r in rows if not r[4].isascii() for c in r[4]):
                rows.sort(key=lambda r: os.fsencode(r[4]))  # escaped bytes sort as bytes
            row_tuple = tuple(rows)
            if cached is not None and cached.rows == row_tuple and cached.tree:
                tree = cached.tree
            elif not rows:
                tree = EMPTY_TREE
                self.store.put(encode_rows(()), oid=EMPTY_TREE)
            else:
                data = encode_rows(row_tuple)
                tree = hash_bytes(data)
                self.store.put(data, oid=tree)
            trees[index] = tree
            if folder.listed:
                digest = self._folder_digest(folder, row_tuple, files)
            folder.entries = {}  # done with: keep only the DirCache
            made = DirCache(
                folder.names,
                folder.rules.fingerprint,
                folder.ignored,
                files,
                tree,
                row_tuple,
                folder.order,
                digest,
            )
            if encode and digest:
                quick = made.quick(start_ns)
                if quick[3]:  # nothing racy: the stat cache would save it as it is now
                    encoded[folder.key] = marshal.dumps(made.dump(start_ns))
                    quicks[folder.key] = quick
                    return
            dirs[folder.key] = made

        #: folders from this index on have their trees
        ready = len(folders)
        done: Callable[[list[_Job]], None] | None = None
        if encode:
            # a big scan hashes the last folders first and builds each folder as soon as its
            # files and subfolders are done, dropping its entries: a first snapshot's
            # per-file rows and stats never all exist at once
            jobs.reverse()
            # big files first, while little else is held: their read and compressed buffers
            # (up to 2 x 16 MiB a thread) then never add to the scan's peak
            big = [j for j in jobs if int(j.folder.entries[j.name][2]) >= BIG_FIRST]  # type: ignore[call-overload]
            if big:
                jobs = big + [j for j in jobs if int(j.folder.entries[j.name][2]) < BIG_FIRST]  # type: ignore[call-overload]
            where = {id(f): i for i, f in enumerate(folders)}
            pending = [0] * len(folders)
            for job in jobs:
                pending[where[id(job.folder)]] += 1

            def finished(batch: list[_Job]) -> None:
                nonlocal ready
                for job in batch:
                    pending[where[id(job.folder)]] -= 1
                while ready and not pending[ready - 1]:
                    ready -= 1
                    build(ready)

            done = finished
        self._hash_all(jobs, warnings, done)
        del jobs  # a first snapshot's 80,000 jobs: their memory goes to the trees and the diff
        for index in range(ready - 1, -1, -1):
            build(index)
        whole = {f.key for f in folders if f.whole}
        inherited: dict[str, bytes] = encoded
        for key in fast:
            blob = self.cache.blob(key)
            if blob is not None:
                inherited[key] = blob
        if whole:
            # a folder taken whole and its subfolders stay as the cache has them, encoded
            for key in self.cache.folders():
                if key in dirs:
                    continue
                up = key
                while True:
                    if up in whole:
                        blob = self.cache.blob(key)
                        if blob is not None:
                            inherited[key] = blob
                        break
                    if not up:
                        break
                    up = up.rpartition("/")[0]
        result = ScanResult(ObjectId(trees[0]), dirs, start_ns, warnings, hashed, seen)
        result.inherited = inherited
        result.quick = quicks
        result.errors = dict(sorted(self._errors.items()))
        result.unchanged = clean[0] and not self._rewrite
        return result

    @staticmethod
    def _folder_digest(folder: _Folder, rows: tuple[Row, ...], files: dict[str, FileStat]) -> bytes:
        """The digest of a listed folder's rows in listing order (b"": an entry has none)."""
        keys: dict[str, object] = {}
        for kind, mode, _size, _oid, name in rows:
            if kind == "d":
                keys[name] = mode
            elif kind == "f":
                keys[name] = files[name][:5]
            else:
                keys[name] = files[name]
        ignored = folder.ignored
        try:
            return _digest(
                [keys[n] for n in folder.order.split("/") if n not in ignored]
                if folder.order
                else []
            )
        except KeyError:
            return b""  # an entry vanished, was skipped, or is a special file

    def _from_cache(self, folder: _Folder) -> None:
        """Give a folder whose listing matched the cache its rows (something below changed)."""
        cached = self.cache.get(folder.key)
        if cached is None or any(
            (r[4] in folder.children) != (r[0] == "d") or (r[0] != "d" and r[4] not in cached.files)
            for r in cached.rows
        ):
            raise _StaleCache(folder.key)
        if sum(r[0] == "d" for r in cached.rows) != len(folder.children):
            raise _StaleCache(folder.key)
        assert folder.quick is not None
        folder.order, folder.digest = folder.quick[0], folder.quick[3]
        folder.cached = cached
        folder.names = cached.names
        folder.ignored = cached.ignored
        folder.quick = None
        folder.clean = True
        for kind, mode, size, oid, name in cached.rows:
            if kind == "d":
                folder.entries[name] = ["d", mode, 0, "", None]
            else:
                folder.entries[name] = [kind, mode, size, oid, cached.files[name]]

    def _racy_folders(self) -> list[str]:
        """Folders whose cached entries include racy files: they are always listed."""
        if self.cache.racy is not None:
            return list(self.cache.racy)
        racy = []
        for key in self.cache.folders():
            cached = self.cache.get(key)
            if cached is not None and any(st[2] < 0 for st in cached.files.values()):
                racy.append(key)
        return racy

    def _walk(self, warnings: list[str]) -> list[_Folder]:
        folders = [_Folder("", str(self.root), self.rules)]
        index = 0
        listed = 0
        self.folders_patched = 0
        #: folder index -> what :mod:`strata._walk` found there (see :meth:`_match_ahead`)
        ahead: dict[int, tuple[Quick, tuple[bytes, list[str], list[tuple[str, bool]]]]] = {}
        #: the folders before this index were offered to it
        offered = 0
        while index < len(folders):
            if index == offered and self._plan is None and self._fast and native_walk:
                offered = len(folders)
                self._match_ahead(folders, index, ahead)
            folder = folders[index]
            if folder.whole:
                pass  # resolved from its parent's cached rows
            elif self._plan is None or not self._reuse(folder, folders, self._plan):
                found = ahead.pop(index, None)
                if found is None or not self._matched(folder, folders, *found):
                    self._list(folder, folders, warnings)
                listed += 1
            index += 1
        if native_walk:
            native_walk.forget()  # a prefetch (store.prefetch) is for one walk only
        self.folders_listed = listed
        return folders

    def _match_ahead(
        self,
        folders: list[_Folder],
        start: int,
        ahead: dict[int, tuple[Quick, tuple[bytes, list[str], list[tuple[str, bool]]]]],
    ) -> None:
        """List and ``lstat`` the folders from ``start`` on in C, on the scan's threads.

        Only folders with a quick record and no ignore file are offered (reading
        an ignore file's rules stays with :meth:`_matches`); what comes back is
        checked by :meth:`_matched` as :meth:`_matches` checks a listing.
        """
        assert native_walk is not None
        offered: list[tuple[int, Quick]] = []
        items: list[tuple[str, str, tuple[str, ...]]] = []
        for i in range(start, len(folders)):
            folder = folders[i]
            quick = self.cache.quick(folder.key)
            if folder.whole or quick is None or not quick[3] or _holds_ignore_file(quick[0]):
                continue
            offered.append((i, quick))
            items.append((folder.abs, quick[0], quick[2]))
        if not items:
            return
        for (i, quick), found in zip(offered, native_walk.match(items, self.threads), strict=True):
            if found is not None:
                ahead[i] = (quick, found)

    def _matched(
        self,
        folder: _Folder,
        folders: list[_Folder],
        quick: Quick,
        found: tuple[bytes, list[str], list[tuple[str, bool]]],
    ) -> bool:
        """:meth:`_matches` for a folder :mod:`strata._walk` listed: True when it is as cached."""
        keys, subfolders, kinds = found
        rules = folder.rules
        if not _rules_hold(folder.prefix, rules, quick, kinds):
            return False
        if blake3.blake3(keys).digest() != quick[3]:
            return self._from_keys(folder, folders, quick, keys)
        folder.order = quick[0]
        _take_quick(folder, folders, rules, quick, subfolders)
        return True

    def _from_keys(
        self, folder: _Folder, folders: list[_Folder], quick: Quick, keys: bytes
    ) -> bool:
        """Compare a folder :mod:`strata._walk` listed with its cached rows, by the walk's keys.

        The listing held the cached names in the cached order, regular files
        and folders only, under the same rules, but some entry's stat changed
        (a file edited in place, a subfolder's permissions). The stat keys the
        walk read (the folder's ``lstat`` of every kept entry) are compared
        with the cached rows here, as :meth:`_compare` compares a listing,
        without listing the folder and ``lstat``-ing its entries a second time:
        a file whose key equals the cached one keeps its object id, any other
        is read again. False (the folder is then listed) when the cache's rows
        do not describe the same names.
        """
        cached = self.cache.get(folder.key)
        order = quick[0]
        listed = order.split("/") if order else []
        ignored = frozenset(quick[2])
        if cached is None or cached.ignored != ignored or cached.names != tuple(sorted(listed)):
            return False
        found = marshal.loads(keys)
        kept = [n for n in listed if n not in ignored] if ignored else listed
        if not isinstance(found, list) or len(found) != len(kept):
            return False
        folder.order = order
        folder.cached = cached
        folder.names = cached.names
        folder.ignored = ignored
        folder.listed = True
        files = cached.files
        dir_modes = {r[4]: r[1] for r in cached.rows if r[0] == "d"}
        clean = cached.rules == folder.rules.fingerprint
        prefix, base = folder.prefix, folder.abs + "/"
        entries = folder.entries
        for name, key in zip(kept, found, strict=True):
            if isinstance(key, int):  # a folder: its permission bits
                folder.children[name] = len(folders)
                folders.append(_Folder(prefix + name + "/", base + name, folder.rules))
                entries[name] = ["d", key, 0, "", None]
                clean = clean and dir_modes.get(name) == key
                continue
            mode, size, mtime, ctime, ino = key
            if ctime == mtime:
                ctime = mtime  # (one int object, as _stat_key keeps it)
            stat_key = (_MODES[mode], size, mtime, ctime, ino)
            hit = files.get(name)
            if hit is not None and hit[:5] == stat_key:
                entries[name] = ["f", stat_key[0], size, hit[5], hit]
            else:
                entries[name] = ["f", stat_key[0], size, None, None]
                clean = False
        folder.clean = clean
        return True

    def _reuse(self, folder: _Folder, folders: list[_Folder], plan: _Plan) -> bool:
        """Take ``folder`` from the stat cache without listing it; False when it must be listed."""
        key = folder.key
        if plan.below_root(key):
            return False
        cached = self.cache.get(key)
        if cached is None or (not cached.tree and key not in plan.parents):
            return False  # without a tree id (a status saw it change) it is only patched
        folder.cached = cached
        folder.names = cached.names
        folder.ignored = cached.ignored
        folder.order, folder.digest = cached.order, cached.digest
        if key not in plan.above:
            folder.whole = True
            folder.hint = cached.tree
            folder.clean = True
            return True
        found = [self._read_small(folder.abs + "/" + n) for n in IGNORE_FILES if n in cached.names]
        rules = folder.rules.child(folder.prefix, [c for c in found if c is not None])
        if rules.fingerprint != cached.rules:
            return False
        if any(r[0] != "d" and r[4] not in cached.files for r in cached.rows):
            return False
        folder.clean = True
        if key not in plan.parents:
            # on the way to a changed folder: nothing in it changed but subfolders' trees
            folder.rules = rules
            folder.kept = cached.rows
            for kind, _mode, _size, oid, name in cached.rows:
                if kind == "d":
                    self._subfolder(folder, folders, plan, name, oid)
            return True
        rows: dict[str, list[object]] = {
            name: [kind, mode, size, oid, None if kind == "d" else cached.files[name]]
            for kind, mode, size, oid, name in cached.rows
        }
        if not self._patch(folder, rules, plan, cached, rows):
            folder.clean = False
            return False
        folder.rules = rules
        for name, row in rows.items():
            if row[0] == "d":
                self._subfolder(folder, folders, plan, name, str(row[3]))
                folder.entries[name] = ["d", row[1], 0, "", None]
            else:
                folder.entries[name] = row
        return True

    def _subfolder(
        self, folder: _Folder, folders: list[_Folder], plan: _Plan, name: str, tree: str
    ) -> None:
        """Queue subfolder ``name`` of a folder taken from the cache (``tree``: its cached id)."""
        child = _Folder(folder.prefix + name + "/", folder.abs + "/" + name, folder.rules)
        child_key = child.key
        if (
            tree
            and child_key not in plan.above
            and not plan.must_list(child_key)
            and self.cache.blob(child_key) is not None
        ):
            # nothing at or below it changed: its tree is the one this row names
            child.whole = True
            child.hint = tree
            child.clean = True
        folder.children[name] = len(folders)
        folders.append(child)

    def _patch(
        self,
        folder: _Folder,
        rules: IgnoreRules,
        plan: _Plan,
        cached: DirCache,
        rows: dict[str, list[object]],
    ) -> bool:
        """Bring a folder's cached ``rows`` up to date by looking at its changed names alone.

        The change monitor named every entry of the folder that changed since
        the cache was written; the cache's racy files are looked at again too
        (read again only when named, when their stat moved, or when their blob
        is not stored: a status stores nothing). Each such name gets one
        ``lstat``; the other entries are as cached.
        False (the folder is then listed) for anything a listing handles better:
        a special file, an entry that cannot be read, a folder not named as
        changed itself.
        """
        racy = [n for n, st in cached.files.items() if st[2] < 0]
        named = plan.names.get(folder.key, set())
        names = set(cached.names)
        ignored = set(cached.ignored)
        clean = True
        for name in sorted(named.union(racy)):
            path = folder.abs + "/" + name
            try:
                st = lstat_path(path)
            except FileNotFoundError:
                if name in names:
                    names.discard(name)
                    ignored.discard(name)
                    if rows.pop(name, None) is not None:
                        clean = False
                continue
            except OSError:
                return False  # a listing records why it cannot be read
            mode = st.st_mode
            is_dir = stat.S_ISDIR(mode)
            if is_dir and folder.prefix + name not in plan.roots:
                return False  # only a folder named as changed is listed in full below
            names.add(name)
            if rules.ignored_names(folder.prefix, [(name, is_dir)]):
                ignored.add(name)
                if rows.pop(name, None) is not None:
                    clean = False
                continue
            ignored.discard(name)
            hit = cached.files.get(name)
            was = rows.get(name)
            if is_dir:
                clean = clean and was is not None and was[0] == "d" and was[1] == mode & 0o777
                rows[name] = ["d", mode & 0o777, 0, "", None]
            elif stat.S_ISREG(mode):
                key = _stat_key(st)
                if hit is not None and hit[:5] == key and was is not None and was[0] == "f":
                    rows[name] = ["f", key[0], key[1], hit[5], hit]
                elif (
                    name not in named
                    and hit is not None
                    and was is not None
                    and was[0] == "f"
                    and _settled(hit, key)
                    and self.store.has(ObjectId(hit[5]))
                ):
                    # racy (or read by a scan that stored nothing), and not written since:
                    # the monitor names every write made after the cache's token, and
                    # the scan that read the file began after taking that token
                    rows[name] = ["f", key[0], key[1], hit[5], (*key, hit[5])]
                    clean = False  # the folder is rebuilt with the file's real stat
                else:
                    rows[name] = ["f", key[0], key[1], None, None]
                    clean = False
            elif stat.S_ISLNK(mode):
                try:
                    target = readlink_path(path)
                except OSError:
                    return False
                oid = self.store.put(target)
                key = _stat_key(st)
                rows[name] = ["l", 0o777, len(target), oid, (*key, oid)]
                same = was is not None and was[0] == "l" and hit is not None and hit[5] == oid
                clean = clean and same
            else:
                return False  # a listing skips it with a warning
        folder.names = tuple(sorted(names))
        folder.ignored = frozenset(ignored)
        # the listing order is unknown: the next full walk compares this folder row by row
        folder.order, folder.digest = "", b""
        # a folder without a tree id names objects that may not be stored: its tree is rebuilt
        folder.clean = clean and folder.names == cached.names and bool(cached.tree)
        self.folders_patched += 1
        return True

    def _list(self, folder: _Folder, folders: list[_Folder], warnings: list[str]) -> None:
        # listed through a descriptor of the folder: each entry's lstat is then an fstatat
        # of its name alone, not a walk of its whole path from the root (16% of a no-op
        # walk), and an entry whose whole path passes PATH_MAX is read all the same (a
        # folder that deep is itself opened folder by folder: store.longpath)
        try:
            fd = open_path(folder.abs, _DIR_FLAGS)
        except OSError as exc:
            self._unlistable(folder, exc, warnings)
            return
        try:
            with os.scandir(fd) as it:
                listed = list(it)
        except OSError as exc:
            os.close(fd)
            self._unlistable(folder, exc, warnings)
            return
        try:
            self._compare(folder, folders, listed, warnings, fd)
        finally:
            os.close(fd)

    def _unlistable(self, folder: _Folder, exc: OSError, warnings: list[str]) -> None:
        self._unreadable(folder.key, exc, warnings, folder=True)
        cached = self.cache.get(folder.key)
        if cached is not None and cached.tree:
            # keep what the previous scan recorded below it, subfolders included
            folder.cached = cached
            folder.names = cached.names
            folder.ignored = cached.ignored
            folder.whole = True
            folder.hint = cached.tree

    def _compare(
        self,
        folder: _Folder,
        folders: list[_Folder],
        listed: list[os.DirEntry[str]],
        warnings: list[str],
        fd: int,
    ) -> None:
        """Compare a folder's listing (its descriptor ``fd`` still open) with the cache."""
        order = "/".join([e.name for e in listed])
        folder.order = order
        if self._fast:
            quick = self.cache.quick(folder.key)
            if (
                quick is not None
                and quick[0] == order
                and quick[3]
                and self._matches(folder, folders, listed, quick, fd)
            ):
                return
        listing = {e.name: e for e in listed}
        names = tuple(sorted(listing))
        cached = self.cache.get(folder.key)
        folder.cached = cached
        folder.names = names
        rules = folder.rules
        found = [
            self._read_small(n, fd)
            for n in IGNORE_FILES
            if n in listing and listing[n].is_file(follow_symlinks=False)
        ]
        rules = rules.child(folder.prefix, [c for c in found if c is not None])
        folder.rules = rules
        if (
            cached is not None
            and cached.names == names
            and cached.rules == rules.fingerprint
            and _same_kinds(rules, folder.prefix, listing, cached)
        ):
            ignored = cached.ignored
        else:
            ignored = rules.ignored_names(
                folder.prefix,
                [(n, listing[n].is_dir(follow_symlinks=False)) for n in names],
            )
        folder.ignored = ignored
        folder.listed = True
        cached_files = cached.files if cached is not None else {}
        clean = cached is not None and cached.names == names and cached.rules == rules.fingerprint
        dir_modes: dict[str, int] | None = None
        for name in names:
            if name in ignored:
                continue
            entry = listing[name]
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                clean = False
                continue  # vanished between listing and stat
            except OSError as exc:
                clean = False
                self._unreadable(folder.prefix + name, exc, warnings)
                self._keep(folder, folders, name)
                continue
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                child = _Folder(folder.prefix + name + "/", folder.abs + "/" + name, rules)
                folder.children[name] = len(folders)
                folders.append(child)
                folder.entries[name] = ["d", mode & 0o777, 0, "", None]
                if clean:
                    if dir_modes is None:
                        assert cached is not None
                        dir_modes = {r[4]: r[1] for r in cached.rows if r[0] == "d"}
                    clean = dir_modes.get(name) == mode & 0o777
            elif stat.S_ISREG(mode):
                key = _stat_key(st)
                hit = cached_files.get(name)
                if hit is not None and hit[:5] == key:
                    folder.entries[name] = ["f", key[0], key[1], hit[5], hit]
                else:
                    folder.entries[name] = ["f", key[0], key[1], None, None]
                    clean = False
            elif stat.S_ISLNK(mode):
                try:
                    target = os.readlink(os.fsencode(name), dir_fd=fd)
                except FileNotFoundError:
                    clean = False
                    continue
                except OSError as exc:
                    clean = False
                    self._unreadable(folder.prefix + name, exc, warnings)
                    self._keep(folder, folders, name)
                    continue
                oid = self.store.put(target)
                key = _stat_key(st)
                folder.entries[name] = ["l", 0o777, len(target), oid, (*key, oid)]
                hit = cached_files.get(name)
                clean = clean and hit is not None and hit[5] == oid
            else:
                what = (
                    "socket"
                    if stat.S_ISSOCK(mode)
                    else "FIFO"
                    if stat.S_ISFIFO(mode)
                    else "device"
                    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "special file"
                )
                warnings.append(f"skipped {what} {folder.prefix}{name} (not recorded)")
                clean = False
        folder.clean = clean

    def _matches(
        self,
        folder: _Folder,
        folders: list[_Folder],
        listed: list[os.DirEntry[str]],
        quick: Quick,
        fd: int,
    ) -> bool:
        """True (and the subfolders queued) when ``listed`` is what the cache recorded.

        Nothing is built per entry but its stat key; any surprise (an entry gone, a
        special file) returns False and the folder is compared row by row.
        """
        rules = folder.rules
        if _holds_ignore_file(quick[0]):
            found = [
                self._read_small(n, fd)
                for n in IGNORE_FILES
                for e in listed
                if e.name == n and e.is_file(follow_symlinks=False)
            ]
            rules = rules.child(folder.prefix, [c for c in found if c is not None])
        ignored = frozenset(quick[2])
        kinds = (
            [(e.name, e.is_dir(follow_symlinks=False)) for e in listed if e.name in ignored]
            if ignored
            else []
        )
        if not _rules_hold(folder.prefix, rules, quick, kinds):
            return False
        keys: list[object] = []
        subfolders: list[str] = []
        add = keys.append
        # the file type bits compared inline: a call per entry less than stat.S_ISREG & co.
        regular, directory, symlink = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
        for entry in listed:
            if ignored and entry.name in ignored:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                mode = st.st_mode
                kind = mode & _FILE_TYPE
                if kind == regular:
                    add((mode & 0o777, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
                elif kind == directory:
                    add(mode & 0o777)
                    subfolders.append(entry.name)
                elif kind == symlink:
                    target = hash_bytes(os.readlink(os.fsencode(entry.name), dir_fd=fd))
                    add(
                        (
                            mode & 0o777,
                            st.st_size,
                            st.st_mtime_ns,
                            st.st_ctime_ns,
                            st.st_ino,
                            target,
                        )
                    )
                else:
                    return False
            except OSError:
                return False
        if _digest(keys) != quick[3]:
            return False
        _take_quick(folder, folders, rules, quick, subfolders)
        return True

    def _skip_large(self, jobs: list[_Job], large: LargeFiles, warnings: list[str]) -> list[_Job]:
        """The jobs left once the files ``large`` skips are set aside.

        A skipped file is named in a warning and in the scan's errors, and keeps
        what the previous scan recorded for it, as a file that cannot be read
        does: a rollback or rewind then leaves it alone. Only the files over the
        limit cost more than one comparison (a first snapshot has 80,000 jobs).
        """
        limit = large.limit
        over = [j for j in jobs if j.folder.entries[j.name][2] > limit]  # type: ignore[operator]
        skipped: set[int] = set()
        for job in over:
            size = int(job.folder.entries[job.name][2])  # type: ignore[call-overload]
            rel = job.folder.prefix + job.name
            if not large.skips(rel, size):
                continue
            skipped.add(id(job))
            self._errors[rel] = "over [snapshot] max_file_size"
            warnings.append(large.warning(rel, size))
            self._keep(job.folder, [], job.name)
        if not skipped:
            return jobs
        return [j for j in jobs if id(j) not in skipped]

    def _unreadable(
        self, path: str, exc: OSError, warnings: list[str], *, folder: bool = False
    ) -> None:
        """Record that ``path`` could not be read (an error, and a warning saying so)."""
        why = exc.strerror or str(exc)
        self._errors[path or "."] = why
        what = "folder " if folder else ""
        warnings.append(f"could not read {what}{path or '.'}: {why} (kept as last recorded)")

    def _keep(self, folder: _Folder, folders: list[_Folder], name: str) -> None:
        """Record ``name`` as the previous scan did (nothing if it never saw it)."""
        cached = folder.cached
        if cached is None:
            return
        for kind, mode, size, oid, row_name in cached.rows:
            if row_name != name:
                continue
            if kind == "d":
                child = _Folder(folder.prefix + name + "/", folder.abs + "/" + name, folder.rules)
                child.cached = self.cache.get(child.key)
                child.whole = child.clean = True
                child.hint = oid
                folder.children[name] = len(folders)
                folders.append(child)
                folder.entries[name] = ["d", mode, 0, "", None]
            elif name in cached.files:
                # an impossible mtime: a restore never takes the disk for this, the next scan
                # lists the folder again
                st = cached.files[name]
                kept = (st[0], st[1], -1, st[3], st[4], st[5])
                folder.entries[name] = [kind, mode, size, oid, kept]
            return

    @staticmethod
    def _read_small(path: str, dir_fd: int | None = None) -> bytes | None:
        """The first MiB of a file (an ignore file): ``path`` is relative to ``dir_fd`` if given."""
        try:
            fd = (
                os.open(path, _OPEN_FLAGS, dir_fd=dir_fd)
                if dir_fd is not None
                else open_path(path, _OPEN_FLAGS)
            )
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(1024 * 1024)

    def _hash_all(
        self,
        jobs: list[_Job],
        warnings: list[str],
        done: Callable[[list[_Job]], None] | None = None,
    ) -> None:
        """Hash (and store) every job's file; each batch's results are applied as it ends.

        ``done`` is called with each batch once its results are applied, in the
        jobs' order.

        A few small files are read here: starting the pool's threads and
        handing the work over costs more than their reading (the agent's edit
        loop: ten new files of 30 KB were stored in 3.0 ms here, 3.6 ms through a pool of two).
        """
        if self.threads > 1 and (
            len(jobs) > POOL_FILES
            or (len(jobs) > 1 and sum(int(j.folder.entries[j.name][2]) for j in jobs) > POOL_BYTES)  # type: ignore[call-overload]
        ):
            from concurrent.futures import ThreadPoolExecutor  # (logging and more: only here)

            from strata.store.fsops import bound_malloc_cache

            bound_malloc_cache()  # the threads' big read buffers go back to the system
            size = max(1, min(256, len(jobs) // (self.threads * 4)))
            batches = [jobs[i : i + size] for i in range(0, len(jobs), size)]
            count = 0
            with ThreadPoolExecutor(self.threads) as pool:
                for batch, results in zip(
                    batches,
                    pool.map(lambda b: [self._hash_one(j) for j in b], batches),
                    strict=True,
                ):
                    self._apply(batch, results, warnings)
                    if done is not None:
                        done(batch)
                    count += len(batch)
                    if self.progress is not None:
                        self.progress(count, len(jobs))
        else:
            for job in jobs:
                self._apply([job], [self._hash_one(job)], warnings)
                if done is not None:
                    done([job])

    def _apply(
        self,
        jobs: list[_Job],
        results: list[tuple[ObjectId, os.stat_result] | str | OSError],
        warnings: list[str],
    ) -> None:
        for job, result in zip(jobs, results, strict=True):
            row = job.folder.entries[job.name]
            if isinstance(result, OSError):
                self._unreadable(job.folder.prefix + job.name, result, warnings)
                row[3] = None
                self._keep(job.folder, [], job.name)
                continue
            if isinstance(result, str):
                warnings.append(result)
                row[3] = None
                continue
            oid, st = result
            key = _stat_key(st)
            row[1], row[2], row[3], row[4] = key[0], key[1], oid, (*key, oid)

    def _hash_one(self, job: _Job) -> tuple[ObjectId, os.stat_result] | str | OSError:
        rel = job.folder.prefix + job.name
        for _ in range(READ_ATTEMPTS):
            try:
                fd = open_path(job.path, _OPEN_FLAGS)
            except FileNotFoundError:
                return f"skipped {rel}: it was deleted while scanning (not recorded)"
            except OSError as exc:
                return exc  # unreadable: an error for this path
            # read with plain system calls of the file's size (one more byte: a file that
            # grew is seen): a buffered file object, or a read of 1 MiB for a small file,
            # costs more than the read (the buffer is an mmap once bound_malloc_cache ran)
            try:
                before = os.fstat(fd)
                if not stat.S_ISREG(before.st_mode):
                    return f"skipped {rel}: it was replaced while scanning (not recorded)"
                if self.hash_only:
                    oid = hash_fd(fd, before.st_size)
                    after = os.fstat(fd)
                    if _same(before, after):
                        self.sources[oid] = job.path
                        return oid, after
                elif before.st_size < STREAM_THRESHOLD:
                    data = os.read(fd, before.st_size + 1)
                    after = os.fstat(fd)
                    if _same(before, after) and len(data) == after.st_size:
                        oid = self.store.put(data)
                        self.lines[oid] = count_lines(data)
                        return oid, after
                else:
                    writer = self.store.writer()
                    try:
                        while chunk := os.read(fd, _READ_CHUNK):
                            writer.write(chunk)
                    except BaseException:
                        writer.abort()
                        raise
                    after = os.fstat(fd)
                    if _same(before, after):
                        return writer.commit(), after
                    writer.abort()
            finally:
                os.close(fd)
        return f"skipped {rel}: it kept changing while being read (not recorded)"


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def count_lines(data: bytes) -> int | None:
    """Lines as ``git diff --numstat`` counts them for an added file; None when binary."""
    if data.find(b"\0", 0, 8000) >= 0:  # (a slice would copy 8 KB)
        return None
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (b.st_size, b.st_mtime_ns, b.st_ctime_ns)
