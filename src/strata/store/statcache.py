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
keeps the monitor's ``token`` obtained just before the scan that wrote it:
the monitor can then name every path changed since, and the next scan
re-reads only those folders. The token and the rows are written in one file,
so they always describe the same scan.

The cache is a hint, never the truth: a missing, unreadable or foreign-version
file is ignored and rebuilt. It is written atomically (temp + rename) with
``marshal``, the fastest loader for plain tuples and dicts.
"""

from __future__ import annotations

import marshal
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = 1
RACY_NS = 2_000_000_000  # coarse file systems (FAT, some network ones) have 2 s mtimes

# (mode, size, mtime_ns, ctime_ns, inode, object id)
FileStat = tuple[int, int, int, int, int, str]
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
        return cls(names, rules, frozenset(ignored), files, tree, rows)


class StatCache:
    """The stat cache of one workspace, loaded from and saved to one file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.dirs: dict[str, DirCache] = {}
        #: the change monitor's token taken before the scan that wrote this cache ("" for none)
        self.token = ""
        self._raw: dict[str, Any] = {}
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
        self._raw = raw.get("dirs", {})
        token = raw.get("token", "")
        self.token = token if isinstance(token, str) else ""

    def get(self, folder: str) -> DirCache | None:
        """The cached view of ``folder`` (loaded lazily)."""
        cached = self.dirs.get(folder)
        if cached is None:
            raw = self._raw.get(folder)
            if raw is None:
                return None
            try:
                cached = DirCache.load(raw)
            except (TypeError, ValueError):
                return None
            self.dirs[folder] = cached
        return cached

    def folders(self) -> set[str]:
        """Every folder the cache describes."""
        return set(self._raw) | set(self.dirs)

    def replace(self, dirs: dict[str, DirCache], *, started_ns: int) -> None:
        """Make ``dirs`` the whole content (after a full scan that started at ``started_ns``)."""
        self.dirs = dirs
        self._raw = {}
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
        dirs = {k: v.dump(racy_after) for k, v in self.dirs.items()}
        dirs.update({k: v for k, v in self._raw.items() if k not in dirs})
        data = marshal.dumps({"version": VERSION, "dirs": dirs, "token": self.token})
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
