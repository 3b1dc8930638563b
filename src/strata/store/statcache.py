"""The stat cache: what the last scan saw, so an unchanged file costs one ``lstat``.

Per folder (workspace path, ``""`` for the root) the cache keeps

* ``names``: every name the folder listed (ignored ones too), sorted;
* ``rules``: the fingerprint of the ignore rules that applied;
* ``ignored``: which of ``names`` those rules ignored (reused while names and
  rules are unchanged, so ignore patterns are not re-matched on every scan);
* ``files``: name -> (mode, size, mtime_ns, ctime_ns, inode, object id) for
  regular files and symlinks;
* ``tree``: the folder's tree id and the entry rows it was made from.

Racy entries follow git's rule: a file whose mtime is within the file
system's timestamp granularity of the scan's start may still change without
its stat changing, so it is stored with an impossible mtime and hashed again
by the next scan, unless a change monitor vouches that it was not written
since (see :mod:`strata.store.scan`) (:func:`is_racy`: :data:`RACY_NS`, 2 s, for a whole-second
mtime, which is all a coarse file system such as FAT or ext3 records;
:data:`FINE_RACY_NS`, 100 ms, for an mtime with a fraction of a second, which
only a file system with fine timestamps writes: the kernel stamps it from a
clock that ticks every 1-10 ms).

With a change monitor running (:mod:`strata.watch.monitor`), the cache also
keeps the monitor's ``token`` obtained just before the scan that wrote it
(and the list of folders holding racy entries, which are always re-read):
the monitor can then name every path changed since, and the next scan
re-reads only those folders. The token and the rows are written in one file,
so they always describe the same scan.

Each folder also has a small "quick" record, kept outside its blob: the
names in the order the directory listed them, and a BLAKE3 digest of the
stat of every kept entry in that order (the permission bits of a subfolder;
the permission bits, size, times and inode of a file; a symlink's target id
too). A scan that lists a folder and finds the same names and the same
digest knows the folder is as recorded without decoding its blob or
building a row. A folder holding a racy entry, an unreadable path or a
special file has no digest, so it is always compared row by row.

The cache is a hint, never the truth: a missing, unreadable or foreign-version
file is ignored and rebuilt. It is written with ``marshal``, the fastest
loader for plain tuples and dicts; each folder is a marshal blob of its own,
decoded only when a scan uses it, so a scan that lists 10 folders of 1,000
decodes and re-encodes only those.

On disk it is two files. The *base* (``statcache``) holds every folder, a
random *generation* and the token; it is replaced atomically (temp +
rename). The *log* (``statcache.log``) holds the saves made since, each one
record ``length, crc32, marshal(generation, token, base_rules, racy,
{folder: blob}, [folders gone])``: a save appends only the folders that
changed, and once the log outgrows half the base (or :data:`LOG_MIN`) the
base is rewritten and the log emptied. A reader applies the records of the
base's generation in order and stops at the first torn or foreign one, so
what it gets is always one whole save (rows and token of the same scan): a
crash, a torn append or a log left from an older base costs re-reading what
changed since, never an edit hidden.

Two processes may save at once (a status beside a snapshot): a save holds an
``flock`` on the log and appends only when the files are still what it
loaded; otherwise it is dropped (the files hold another whole save). Within
one process the loaded cache is kept in memory (:data:`_MEMORY`),
revalidated by the files' ``stat``, so a long-lived process (the watcher
running commands) reads the files only when another process wrote them.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import mmap
import os
import stat
import struct
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (light: a command loads it before anything else; see its doc)
from strata.store.prefetch import quick_ok, take_base

VERSION = 3  # 2: each folder is its own marshal blob; 3: a base and a log of saves
#: the log is folded into the base once it is larger than this and half the base
LOG_MIN = 256 * 1024
_RECORD = struct.Struct("<II")  # length, crc32 of the marshal payload that follows
RACY_NS = 2_000_000_000  # coarse file systems (FAT, some network ones) have 2 s mtimes
#: the racy window of an mtime with a fraction of a second (a fine file system: ext4, xfs,
#: btrfs, tmpfs stamp files from the kernel's coarse clock, which ticks every 1-10 ms)
FINE_RACY_NS = 100_000_000


def is_racy(mtime_ns: int, started_ns: int) -> bool:
    """Whether a file of this mtime, seen by a scan started at ``started_ns``, is racy.

    It is when its mtime lies within its file system's timestamp granularity
    of the scan's start: an edit made after the scan read it could then keep
    the same mtime. A whole-second mtime may come from a coarse file system
    (2 s on FAT), any other from a fine one.
    """
    window = RACY_NS if mtime_ns % 1_000_000_000 == 0 else FINE_RACY_NS
    return mtime_ns >= started_ns - window


# (mode, size, mtime_ns, ctime_ns, inode, object id)
FileStat = tuple[int, int, int, int, int, str]


def unchanged(st: os.stat_result | None, expected: Sequence[Any] | None) -> bool:
    """The one "unchanged on disk" rule: ``st`` is what a scan recorded as ``expected``.

    ``expected`` is a :data:`FileStat` (or its first five fields), None for
    "absent". A symlink is compared by size and inode (its mode and times do
    not say whether its target changed); anything else by permission bits,
    size, mtime, ctime and inode, so a same-size edit (new mtime or ctime) or
    a replaced file (new inode) is seen.
    """
    if expected is None:
        return st is None
    if st is None:
        return False
    mode, size, mtime, ctime, ino = expected[:5]
    if stat.S_ISLNK(st.st_mode):
        return (st.st_size, st.st_ino) == (size, ino)
    return (st.st_mode & 0o777, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) == (
        mode,
        size,
        mtime,
        ctime,
        ino,
    )


#: (listing order, rules, ignored names, stat digest, tree id, files): see the module doc
Quick = tuple[str, str, tuple[str, ...], bytes, str, int]


# (kind char, mode, size, object id, name): one row of a tree
Row = tuple[str, int, int, str, str]


@dataclass
class DirCache:
    """What the last scan saw in one folder."""

    names: tuple[str, ...] = ()
    rules: str = ""
    ignored: frozenset[str] = frozenset()
    files: dict[str, FileStat] = field(default_factory=dict)
    tree: str = ""
    rows: tuple[Row, ...] = ()
    #: the names as the directory listed them, joined with "/" (see the module doc)
    order: str = ""
    #: the digest of the kept entries' stats in that order (b"": compare row by row)
    digest: bytes = b""

    def quick(self, started_ns: int) -> Quick:
        """The quick record of this folder; racy files (:func:`is_racy`) void it."""
        digest = self.digest
        if digest and any(st[2] < 0 or is_racy(st[2], started_ns) for st in self.files.values()):
            digest = b""
        return (self.order, self.rules, tuple(self.ignored), digest, self.tree, len(self.files))

    def dump(self, started_ns: int) -> tuple[Any, ...]:
        """A marshal-friendly tuple; racy files (:func:`is_racy`) lose their mtime."""
        files = {
            name: st if not is_racy(st[2], started_ns) else (st[0], st[1], -1, st[3], st[4], st[5])
            for name, st in self.files.items()
        }
        return (self.names, self.rules, tuple(self.ignored), files, self.tree, self.rows)

    @classmethod
    def load(cls, raw: tuple[Any, ...]) -> DirCache:
        """The inverse of :meth:`dump`."""
        names, rules, ignored, files, tree, rows = raw
        # checked with as few Python steps per file as can be: this runs for every folder a
        # scan reads from the cache file
        if not (
            type(names) is tuple
            and (not names or set(map(type, names)) == {str})
            and type(rules) is str
            and type(tree) is str
            and type(rows) is tuple
            and type(files) is dict
            and all(
                type(st) is tuple
                and len(st) == 6
                and type(st[0]) is int
                and type(st[1]) is int
                and type(st[2]) is int
                and type(st[3]) is int
                and type(st[4]) is int
                and type(st[5]) is str
                for st in files.values()
            )
        ):
            raise ValueError("a stat cache folder of the wrong shape")
        return cls(names, rules, frozenset(ignored), files, tree, rows)


class _Loaded:
    """One whole save as read from (or written to) the files, shared within a process."""

    __slots__ = ("base_rules", "decoded", "generation", "key", "quick", "racy", "raw", "token")

    def __init__(self) -> None:
        self.raw: dict[str, bytes] = {}
        #: folder -> its quick record (kept only beside the blob it was made with)
        self.quick: dict[str, Quick] = {}
        self.token = ""
        self.base_rules = ""
        self.racy: frozenset[str] | None = None
        self.generation = ""
        #: :func:`_file_key` of the files this save was read from or written to
        self.key: tuple[int, ...] = ()
        #: folder -> (the blob, its DirCache): each blob is decoded once per process
        self.decoded: dict[str, tuple[bytes, DirCache]] = {}


#: cache path -> the save last read or written by this process
_MEMORY: dict[Path, _Loaded] = {}
_MEMORY_LOCK = threading.Lock()


def _log_path(path: Path) -> Path:
    return path.with_name(path.name + ".log")


def _file_key(path: Path) -> tuple[int, ...]:
    """What says the files are unchanged: the base's stat and the log's size.

    A save either replaces the base (a new inode) or makes the log longer.
    """
    try:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = (0, 0, -1, 0)
    try:
        log_size = os.stat(_log_path(path)).st_size
    except OSError:
        log_size = 0
    return (*key, log_size)


def _read(path: Path) -> _Loaded:
    """The newest whole save in the files (an empty one when there is none)."""
    loaded = _Loaded()
    loaded.key = _file_key(path)
    raw = take_base(str(path), loaded.key[:4])
    if raw is None:
        try:
            raw = _load_file(path)
        except (OSError, EOFError, ValueError, TypeError):
            return loaded
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        return loaded
    dirs = raw.get("dirs")
    generation = raw.get("generation")
    if not isinstance(dirs, dict) or not isinstance(generation, str):
        return loaded
    loaded.raw = dirs
    loaded.generation = generation
    quick = raw.get("quick")
    loaded.quick = quick if isinstance(quick, dict) else {}
    _set_state(loaded, raw.get("token"), raw.get("base_rules"), raw.get("racy"))
    try:
        log = _log_path(path).read_bytes()
    except OSError:
        log = b""
    at = 0
    while at + _RECORD.size <= len(log):
        length, crc = _RECORD.unpack_from(log, at)
        body = log[at + _RECORD.size : at + _RECORD.size + length]
        if len(body) != length or zlib.crc32(body) != crc:
            break  # torn: everything before it is one whole save
        try:
            record = marshal.loads(body)
            gen, token, base_rules, racy, changed, gone, quick = record
        except (EOFError, ValueError, TypeError):
            break
        if (
            gen != generation
            or not isinstance(changed, dict)
            or not isinstance(gone, tuple)
            or not isinstance(quick, dict)
        ):
            break  # left from an older base
        loaded.raw.update(changed)
        for folder in (*changed, *gone):  # a new blob comes with its own quick record, or none
            loaded.quick.pop(folder, None)
        loaded.quick.update(quick)
        for folder in gone:
            loaded.raw.pop(folder, None)
        _set_state(loaded, token, base_rules, racy)
        at += _RECORD.size + length
    return loaded


def _load_file(path: Path) -> Any:
    """``marshal.loads`` of the file, read through a mapping of it.

    Every folder's blob is copied out of the mapping once; reading the file into
    a buffer first would copy all of it once more (4 MB for 20,000 files: 1.6 ms
    of a no-op snapshot). The base is only ever replaced (temp + rename), never
    cut short in place, so the mapped file does not shrink while it is read.
    An empty file cannot be mapped: ValueError, as marshal gives for it.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return marshal.loads(mapped)


def _set_state(loaded: _Loaded, token: object, base_rules: object, racy: object) -> None:
    loaded.token = token if isinstance(token, str) else ""
    loaded.base_rules = base_rules if isinstance(base_rules, str) else ""
    if isinstance(racy, (list, tuple)) and all(isinstance(k, str) for k in racy):
        loaded.racy = frozenset(racy)
    else:
        loaded.racy = None


def _marshal_pieces(value: Any) -> Iterator[bytes]:
    """``marshal.dumps(value)`` in pieces: a dict one item at a time, anything else whole.

    Version 2 writes no back-references, so pieces dumped apart read back as
    one value: the base is written without a second copy of every folder's blob.
    """
    if type(value) is dict:
        yield b"{"
        for key, item in value.items():
            yield marshal.dumps(key, 2)
            yield from _marshal_pieces(item)
        yield b"0"
    else:
        yield marshal.dumps(value, 2)


def _write_base(path: Path, body: dict[str, Any]) -> None:
    """Replace the base file with ``body`` (temp + rename), writing it piece by piece."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb", buffering=1 << 16) as f:
            for piece in _marshal_pieces(body):
                f.write(piece)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _unverified(found: DirCache | None, before: bytes | None, started_ns: int) -> bytes | None:
    """What the cache keeps of a folder a scan saw change but stored nothing of (a status).

    The rows as that scan found them, without a tree id (the folder's tree and
    the ids its rows name may not be stored), and every file whose object id
    the cache did not hold before marked racy (an impossible mtime), so the
    next scan that stores reads it again. A file whose id the cache held with
    a real mtime is stored (only a scan that stores leaves one; a racy mark
    may come from an earlier status): its fresh stat is kept. So the next
    scan brings the folder up to date from its racy names and the names the
    watcher reports, without listing it.
    """
    if found is None:
        return None
    old: dict[str, FileStat] = {}
    if before is not None:
        with contextlib.suppress(TypeError, ValueError, EOFError):
            old = DirCache.load(marshal.loads(before)).files
    names, rules, ignored, files, _tree, rows = found.dump(started_ns)

    def racy(st: FileStat) -> FileStat:
        return (st[0], st[1], -1, st[3], st[4], st[5])

    kept = {
        name: st if (o := old.get(name)) is not None and o[2] >= 0 and o[5] == st[5] else racy(st)
        for name, st in files.items()
    }
    return marshal.dumps((names, rules, ignored, kept, "", rows))


def forget_memory() -> None:
    """Drop every stat cache this process keeps in memory (they are read again when used)."""
    with _MEMORY_LOCK:
        _MEMORY.clear()


class StatCache:
    """The stat cache of one workspace: what the last saved scan saw, folder by folder."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.dirs: dict[str, DirCache] = {}
        #: the change monitor's token taken before the scan that wrote this cache ("" for none)
        self.token = ""
        #: the fingerprint of the root ignore rules (config defaults, run extras) of that scan
        self.base_rules = ""
        #: folders holding racy entries (None: unknown, a cache written before this was kept)
        self.racy: frozenset[str] | None = None
        self._raw: dict[str, bytes] = {}
        self._quick: dict[str, Quick] = {}
        # folder -> (the DirCache decoded from it, its marshal blob): an unchanged folder is
        # saved as the blob it was loaded from, without encoding it again
        self._origin: dict[str, tuple[DirCache, bytes]] = {}
        self._started_ns = 0
        #: folders whose new rows must not be kept (see :meth:`replace`)
        self._unverified: frozenset[str] = frozenset()
        self._loaded = _Loaded()
        if path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        key = _file_key(self.path)
        with _MEMORY_LOCK:
            loaded = _MEMORY.get(self.path)
        if loaded is None or loaded.key != key:
            loaded = _read(self.path)
            with _MEMORY_LOCK:
                _MEMORY[self.path] = loaded
        self._loaded = loaded
        self._raw = dict(loaded.raw)
        self._quick = dict(loaded.quick)
        self.token = loaded.token
        self.base_rules = loaded.base_rules
        self.racy = loaded.racy

    def quick(self, folder: str) -> Quick | None:
        """The quick record of ``folder`` as the cache file has it, or None."""
        raw = self._quick.get(folder)
        if raw is None or folder not in self._raw or not quick_ok(raw):
            return None
        return raw

    def get(self, folder: str) -> DirCache | None:
        """The cached view of ``folder`` (loaded lazily)."""
        cached = self.dirs.get(folder)
        if cached is None:
            raw = self._raw.get(folder)
            if raw is None:
                return None
            known = self._loaded.decoded.get(folder)
            if known is not None and known[0] is raw:
                cached = known[1]
            else:
                try:
                    cached = DirCache.load(marshal.loads(raw))
                except (TypeError, ValueError, EOFError):
                    return None
                self._loaded.decoded[folder] = (raw, cached)
            quick = self.quick(folder)
            if quick is not None and quick[4] == cached.tree:
                cached.order, cached.digest = quick[0], quick[3]
            self.dirs[folder] = cached
            self._origin[folder] = (cached, raw)
        return cached

    def folders(self) -> set[str]:
        """Every folder the cache describes."""
        return set(self._raw) | set(self.dirs)

    def blob(self, folder: str) -> bytes | None:
        """The stored (still encoded) view of ``folder``, for a scan that keeps it unchanged."""
        return self._raw.get(folder)

    def replace(
        self,
        dirs: dict[str, DirCache],
        *,
        started_ns: int,
        inherited: dict[str, bytes] | None = None,
        unverified: frozenset[str] = frozenset(),
    ) -> None:
        """Make ``dirs`` (and the still-encoded ``inherited`` folders) the whole content.

        ``started_ns`` is when the scan that found them started. The folders
        named in ``unverified`` name objects that were never stored (a scan
        that only hashed): they are kept without a tree id, their files not
        known to be stored marked racy (see :func:`_unverified`), and the
        folders are marked racy, so every later scan looks at them again
        until one that stores saves them.
        """
        before = {k: self._raw.get(k) for k in unverified}
        self.dirs = {k: v for k, v in dirs.items() if k not in unverified}
        self._raw = {k: v for k, v in (inherited or {}).items() if k not in unverified}
        for key, blob in before.items():
            # its quick record described the old rows (a listing that matched it would take
            # the rows of this blob, whose ids may not be stored): dropped
            self._quick.pop(key, None)
            kept = _unverified(dirs.get(key), blob, started_ns)
            if kept is not None:
                self._raw[key] = kept
        self._unverified = unverified
        self._started_ns = started_ns

    def note_read(self, known: Mapping[str, tuple[os.stat_result, str]]) -> None:
        """Take the files ``known`` names (path -> their stat, object id) as read by a scan.

        For what a restore put in place with its bytes checked (see
        ``WorkspaceWriter.known``): the next scan finds their stat here and
        does not read them. Their folders' trees are built again from rows.
        """
        for path, (st, oid) in known.items():
            folder, _, name = path.rpartition("/")
            cached = self.get(folder)
            if cached is None:
                continue
            cached.files[name] = (
                st.st_mode & 0o777,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
                oid,
            )
            cached.tree = ""  # its rows name the old object: not to be taken whole
            cached.digest = b""

    def forget(self, folder: str) -> None:
        """Drop one folder so the next scan looks at it afresh."""
        self.dirs.pop(folder, None)
        self._raw.pop(folder, None)

    def add_quick(self, quick: dict[str, Quick]) -> None:
        """Quick records of folders a scan built and gave to :meth:`replace` encoded.

        Such a folder has no racy entry (a scan keeps those decoded), so it
        is no longer one of the folders :attr:`racy` names.
        """
        self._quick.update(quick)
        if self.racy is not None and not self.racy.isdisjoint(quick):
            self.racy = self.racy - quick.keys()

    def save(self) -> None:
        """Keep the cache on disk (and in this process); failures are harmless and ignored.

        Only the folders that differ from what was loaded are appended to the
        log; the save is dropped when another process saved since.
        """
        if self.path is None:
            return
        started = self._started_ns
        dirs: dict[str, bytes] = {}
        quick: dict[str, Quick] = {}
        racy: list[str] = []
        for key, value in self.dirs.items():
            quick[key] = value.quick(started)
            origin = self._origin.get(key)
            if origin is not None and origin[0] is value:
                dirs[key] = origin[1]  # unchanged and never racy (racy folders are re-read)
                continue
            dumped = value.dump(started)
            dirs[key] = marshal.dumps(dumped)
            if any(st[2] == -1 for st in dumped[3].values()):
                racy.append(key)
        for k, v in self._raw.items():
            if k not in dirs:
                dirs[k] = v
                if k in self._quick:
                    quick[k] = self._quick[k]
        racy += [
            k
            for k in self._raw
            if k not in self.dirs and (k in (self.racy or ()) or k in self._unverified)
        ]
        with contextlib.suppress(OSError):  # a cache: losing it costs a full walk, nothing more
            self._write(dirs, quick, sorted(set(racy)))

    def _write(self, dirs: dict[str, bytes], quick: dict[str, Quick], racy: list[str]) -> None:
        assert self.path is not None
        loaded = self._loaded
        log_path = _log_path(self.path)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            key = _file_key(self.path)
            if loaded.key and key != loaded.key:
                return  # another process saved since this cache was loaded: its save stands
            saved = _Loaded()
            saved.raw = dirs
            saved.quick = quick
            saved.token = self.token
            saved.base_rules = self.base_rules
            saved.racy = frozenset(racy)
            # decoded folders stay decoded for the next scan of this process (not the racy
            # ones: their blob, not the DirCache, has the impossible mtimes)
            saved.decoded = {
                k: (dirs[k], v)
                for k, v in self.dirs.items()
                if k not in self._unverified and k not in saved.racy and k in dirs
            }
            changed = {k: v for k, v in dirs.items() if loaded.raw.get(k) is not v}
            gone = tuple(k for k in loaded.raw if k not in dirs)
            # a changed blob's record, or a record that changed alone (a racy folder settled)
            quick_changed = {
                k: q for k, q in quick.items() if k in changed or loaded.quick.get(k) != q
            }
            log_size = key[4]
            if loaded.generation:
                record = marshal.dumps(
                    (
                        loaded.generation,
                        self.token,
                        self.base_rules,
                        racy,
                        changed,
                        gone,
                        quick_changed,
                    )
                )
                base_size = max(key[2], 0)
                if log_size + len(record) <= max(LOG_MIN, base_size // 2):
                    os.write(fd, _RECORD.pack(len(record), zlib.crc32(record)) + record)
                    saved.generation = loaded.generation
                    self._remember(saved)
                    return
            saved.generation = os.urandom(8).hex()
            body = {
                "version": VERSION,
                "generation": saved.generation,
                "dirs": dirs,
                "token": self.token,
                "base_rules": self.base_rules,
                "racy": racy,
                "quick": quick,
            }
            _write_base(self.path, body)
            os.ftruncate(fd, 0)  # a crash before this leaves records of another generation
            self._remember(saved)
        finally:
            os.close(fd)

    def _remember(self, saved: _Loaded) -> None:
        """Keep what was just written as this process's copy (lock on the log held)."""
        assert self.path is not None
        saved.key = _file_key(self.path)
        self._loaded = saved
        self._raw = dict(saved.raw)
        self._quick = dict(saved.quick)
        self._origin = {k: (v, b) for k, (b, v) in saved.decoded.items()}
        self.dirs = {k: v for k, (_, v) in saved.decoded.items()}
        self.racy = saved.racy
        with _MEMORY_LOCK:
            _MEMORY[self.path] = saved
