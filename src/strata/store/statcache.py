"""The stat cache: what the last scan saw, so an unchanged file costs one ``lstat``.

Per folder (workspace path, ``""`` for the root) the cache keeps

* ``names``: every name the folder listed (ignored ones too), sorted;
* ``rules``: the fingerprint of the ignore rules that applied;
* ``ignored``: which of ``names`` those rules ignored (reused while names and
  rules are unchanged, so ignore patterns are not re-matched on every scan);
* ``files``: name -> (mode, size, mtime_ns, ctime_ns, inode, object id) for
  regular files and symlinks;
* ``tree``: the folder's tree id and the entry rows it was made from.

Racy entries follow git's rule: a file whose mtime is within
:data:`RACY_NS` of the scan's start may still change inside the file
system's timestamp granularity without its stat changing, so it is stored
with an impossible mtime and hashed again by the next scan.

With a change monitor running (:mod:`strata.store.watch`), the cache also
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
file is ignored and rebuilt. It is written atomically (temp + rename) with
``marshal``, the fastest loader for plain tuples and dicts; each folder is a
marshal blob of its own inside the file, decoded only when a scan uses it, so
a scan that lists 10 folders of 1,000 decodes and re-encodes only those.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.atomic import atomic_write

VERSION = 2  # 2: each folder is its own marshal blob, decoded only when used
RACY_NS = 2_000_000_000  # coarse file systems (FAT, some network ones) have 2 s mtimes

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


def _quick_ok(raw: object) -> bool:
    return (
        isinstance(raw, tuple)
        and len(raw) == 6
        and isinstance(raw[0], str)
        and isinstance(raw[1], str)
        and isinstance(raw[2], tuple)
        and all(isinstance(n, str) for n in raw[2])
        and isinstance(raw[3], bytes)
        and isinstance(raw[4], str)
        and type(raw[5]) is int
    )


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

    def quick(self, racy_after_ns: int) -> Quick:
        """The quick record of this folder; racy files (mtime after ``racy_after_ns``) void it."""
        digest = self.digest
        if digest and any(st[2] >= racy_after_ns or st[2] < 0 for st in self.files.values()):
            digest = b""
        return (self.order, self.rules, tuple(self.ignored), digest, self.tree, len(self.files))

    def dump(self, racy_after_ns: int) -> tuple[Any, ...]:
        """A marshal-friendly tuple; racy files (mtime after ``racy_after_ns``) lose their mtime."""
        files = {
            name: st if st[2] < racy_after_ns else (st[0], st[1], -1, st[3], st[4], st[5])
            for name, st in self.files.items()
        }
        return (self.names, self.rules, tuple(self.ignored), files, self.tree, self.rows)

    @classmethod
    def load(cls, raw: tuple[Any, ...]) -> DirCache:
        """The inverse of :meth:`dump`."""
        names, rules, ignored, files, tree, rows = raw
        if not (
            isinstance(names, tuple)
            and all(isinstance(n, str) for n in names)
            and isinstance(rules, str)
            and isinstance(tree, str)
            and isinstance(rows, tuple)
            and isinstance(files, dict)
            and all(
                isinstance(st, tuple)
                and len(st) == 6
                and all(type(v) is int for v in st[:5])
                and isinstance(st[5], str)
                for st in files.values()
            )
        ):
            raise ValueError("a stat cache folder of the wrong shape")
        return cls(names, rules, frozenset(ignored), files, tree, rows)


class StatCache:
    """The stat cache of one workspace, loaded from and saved to one file."""

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
        if path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        try:
            data = self.path.read_bytes()
            raw = marshal.loads(data)
        except (OSError, EOFError, ValueError, TypeError):
            return
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            return
        dirs = raw.get("dirs", {})
        self._raw = dirs if isinstance(dirs, dict) else {}
        token = raw.get("token", "")
        self.token = token if isinstance(token, str) else ""
        base_rules = raw.get("base_rules", "")
        self.base_rules = base_rules if isinstance(base_rules, str) else ""
        racy = raw.get("racy")
        if isinstance(racy, (list, tuple)) and all(isinstance(k, str) for k in racy):
            self.racy = frozenset(racy)
        quick = raw.get("quick", {})
        if isinstance(quick, dict):
            self._quick = quick

    def quick(self, folder: str) -> Quick | None:
        """The quick record of ``folder`` as the cache file has it, or None."""
        raw = self._quick.get(folder)
        if raw is None or folder not in self._raw or not _quick_ok(raw):
            return None
        return raw

    def get(self, folder: str) -> DirCache | None:
        """The cached view of ``folder`` (loaded lazily)."""
        cached = self.dirs.get(folder)
        if cached is None:
            raw = self._raw.get(folder)
            if raw is None:
                return None
            try:
                cached = DirCache.load(marshal.loads(raw))
            except (TypeError, ValueError, EOFError):
                return None
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
    ) -> None:
        """Make ``dirs`` (and the still-encoded ``inherited`` folders) the whole content.

        ``started_ns`` is when the scan that found them started.
        """
        self.dirs = dirs
        self._raw = dict(inherited or {})
        self._started_ns = started_ns

    def forget(self, folder: str) -> None:
        """Drop one folder so the next scan looks at it afresh."""
        self.dirs.pop(folder, None)
        self._raw.pop(folder, None)

    def save(self) -> None:
        """Write the cache atomically; failures are harmless and ignored."""
        if self.path is None:
            return
        racy_after = self._started_ns - RACY_NS
        dirs: dict[str, bytes] = {}
        quick: dict[str, Quick] = {}
        racy: list[str] = []
        for key, value in self.dirs.items():
            quick[key] = value.quick(racy_after)
            origin = self._origin.get(key)
            if origin is not None and origin[0] is value:
                dirs[key] = origin[1]  # unchanged and never racy (racy folders are re-read)
                continue
            dumped = value.dump(racy_after)
            dirs[key] = marshal.dumps(dumped)
            if any(st[2] == -1 for st in dumped[3].values()):
                racy.append(key)
        for k, v in self._raw.items():
            if k not in dirs:
                dirs[k] = v
                if k in self._quick:
                    quick[k] = self._quick[k]
        racy += [k for k in self._raw if k not in self.dirs and k in (self.racy or ())]
        body = {
            "version": VERSION,
            "dirs": dirs,
            "token": self.token,
            "base_rules": self.base_rules,
            "racy": sorted(racy),
            "quick": quick,
        }
        data = marshal.dumps(body)
        with contextlib.suppress(OSError):  # a cache: losing it costs a full walk, nothing more
            atomic_write(self.path, data, durable=False)
