"""A folder of files Strata records and writes: Published, or the Draft's folder.

:class:`Workspace` bundles what scanning and writing one folder needs (its
root, its stat cache, its ignore rules, the change monitor to ask) so that
Published and the Draft go through the same code: :meth:`Workspace.scan`
reads the folder into trees, :meth:`Workspace.plan` says what moving it to
another tree takes, and :meth:`Workspace.apply` carries that out (each step
re-checks the path with :func:`strata.store.statcache.unchanged` first, so an
edit made after the scan is never overwritten). Applying through a journal
is the transaction's job (:meth:`strata.core.transaction.Transaction.apply`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from strata.ids import ObjectId
from strata.store.fsops import empty_trash
from strata.store.ignore import IgnoreRules
from strata.store.large import LargeFiles
from strata.store.objects import ObjectStore, OverlayStore
from strata.store.scan import Scanner, ScanResult
from strata.store.statcache import FileStat, StatCache
from strata.store.tree import remember_tree, rows_to_entries
from strata.watch import served

if TYPE_CHECKING:
    from strata.store.materialize import Action, RestoreReport
    from strata.watch.monitor import Answer


@dataclass
class Scan:
    """One scan of a workspace: its tree, what it saw of each path, and its stat cache.

    The stat cache is not saved until :meth:`save_cache`: a caller saves it
    only once the scan's blobs are durable (a transaction commits them). A
    scan that stores nothing (``hash_only``) saves it itself, keeping only
    what names stored objects (see :meth:`save_cache`).
    """

    result: ScanResult
    scanner: Scanner
    cache: StatCache
    store: ObjectStore
    #: the watcher's token the stat cache held before this scan
    token_before: str = ""

    @property
    def worth_saving(self) -> bool:
        """Whether saving the stat cache changes it: new rows, or a new watcher token.

        A scan that walked everything because the watcher did not know the
        cache's token is worth saving even when nothing changed: the next
        scan then asks with a token the watcher knows, and lists only what
        changed.
        """
        return not self.result.unchanged or self.cache.token != self.token_before

    @property
    def tree(self) -> ObjectId:
        """The root tree of the workspace as scanned."""
        return self.result.tree

    @property
    def warnings(self) -> list[str]:
        """What the scan could not record, one line each."""
        return self.result.warnings

    @property
    def errors(self) -> dict[str, str]:
        """The paths the scan could not read, and why (they hold what was last recorded)."""
        return self.result.errors

    @property
    def lines(self) -> dict[ObjectId, int | None]:
        """Line counts (None: binary) of the blobs this scan hashed."""
        return self.scanner.lines

    def stat_of(self, path: str) -> FileStat | None:
        """What the scan saw at ``path`` (None: nothing)."""
        return self.result.stat_of(path)

    @functools.cached_property
    def _changed_folders(self) -> tuple[list[str], frozenset[str]]:
        """The folders whose cached view this scan replaces, and those of them it cannot vouch for.

        After a scan that stored nothing, a folder whose tree is not the cached
        one names objects that may not be in the store (*unverified*); one whose
        tree is the cached one names only stored objects (new stats only).
        """
        changed = [key for key, d in self.result.dirs.items() if self.cache.dirs.get(key) is not d]
        if not isinstance(self.store, OverlayStore):
            return changed, frozenset()
        unverified = frozenset(
            key
            for key in changed
            if (cached := self.cache.dirs.get(key)) is None
            or cached.tree != self.result.dirs[key].tree
            or not cached.tree
        )
        return changed, unverified

    @property
    def worth_saving_unstored(self) -> bool:
        """Whether a scan that stored nothing should save the stat cache.

        Not when it was incremental and every folder it would replace is
        unverified: those keep only racy marks (their files are read again by
        the next scan whatever), and the next scan asks the watcher from the
        old token, which names the same paths again. Saving would only cost
        the time of writing it (a status after edits).
        """
        if not self.worth_saving:
            return False
        changed, unverified = self._changed_folders
        return not (self.scanner.incremental and changed and set(changed) <= unverified)

    def save_cache(self) -> None:
        """Keep the stat cache, so the next scan re-reads only what changed.

        After a scan that stored nothing, the folders it found changed would
        name objects that are not in the store: they are kept without a tree
        id and with their new files marked racy (``StatCache.replace``), so
        the next scan that stores reads those files again.
        """
        _, unverified = self._changed_folders  # read before replace() changes the cache
        self.cache.replace(
            self.result.dirs,
            started_ns=self.result.started_ns,
            inherited=self.result.inherited,
            unverified=unverified,
        )
        self.cache.add_quick(self.result.quick)
        self.cache.save()


#: a scan that wrote trees of more entries than this leaves them to be read from the store
REMEMBERED_ENTRIES = 20_000


class Workspace:
    """A folder of files: scan it into trees, move it to another tree."""

    def __init__(
        self,
        root: Path,
        *,
        objects: ObjectStore,
        cache_path: Path,
        rules: Callable[[], IgnoreRules],
        changes: Callable[[str], Answer | None] | None = None,
        progress: Callable[[int, int], None] | None = None,
        trash: Path | None = None,
        large: Callable[[], LargeFiles] | None = None,
    ) -> None:
        self.root = root
        #: the large-file guard's settings (None: every file is recorded)
        self.large = large
        #: where :meth:`apply` moves the files it replaces (None: they are unlinked at once)
        self.trash = trash
        self.objects = objects
        self.cache_path = cache_path
        self.rules = rules
        self.changes = changes
        self.progress = progress
        #: the newest scan (``folders_listed``, ``watcher``: how the watcher was used)
        self.last_scan: ScanResult | None = None

    def scan(
        self,
        *,
        hash_only: bool = False,
        known: Mapping[str, tuple[os.stat_result, str]] | None = None,
    ) -> Scan:
        """Read the folder into trees; with ``hash_only``, store nothing (blobs stay on disk).

        ``known``: files whose stat and object id a restore vouches for
        (``RestoreReport.known``): taken as read when their stat still matches.
        """
        cache = StatCache(self.cache_path)
        if known:
            cache.note_read(known)
        store: ObjectStore = OverlayStore(self.objects) if hash_only else self.objects
        answer = self.changes(cache.token) if self.changes is not None else None
        scanner = Scanner(
            self.root,
            store,
            rules=self.rules(),
            cache=cache,
            hash_only=hash_only,
            progress=self.progress,
            changed=answer.changed if answer is not None else None,
            large=self.large() if self.large is not None else None,
        )
        result = scanner.scan()
        token_before = cache.token
        cache.token = answer.token if answer is not None else ""
        result.folders_listed = scanner.folders_listed
        if answer is None:
            result.watcher = "no watcher"
        elif scanner.incremental:
            result.watcher = "incremental"
        else:
            result.watcher = answer.reason or "the ignore rules changed"
        self.last_scan = result
        scan = Scan(result, scanner, cache, store, token_before)
        # the trees just written (or only looked at, by a status): the diff that follows
        # reads them from memory (not when they are many, a first snapshot: its diff reads
        # each once, streaming)
        new = [
            found
            for key, found in result.dirs.items()
            if cache.dirs.get(key) is not found and found.tree
        ]
        if sum(len(found.rows) for found in new) <= REMEMBERED_ENTRIES:
            for found in new:
                remember_tree(store, ObjectId(found.tree), rows_to_entries(found.rows))
        if isinstance(store, OverlayStore):
            store.sources.update(scanner.sources)
            if scan.worth_saving_unstored:  # nothing to wait for: it keeps only stored objects
                scan.save_cache()
        return scan

    def plan(self, scan: Scan, target: ObjectId, *, paths: list[str] | None = None) -> list[Action]:
        """The steps that bring the folder, as ``scan`` saw it, to ``target`` (or its ``paths``)."""
        from strata.store.materialize import plan_restore  # (writing: not loaded by a scan)

        return plan_restore(self.objects, scan.tree, target, stat_of=scan.stat_of, paths=paths)

    def apply(
        self,
        actions: list[Action],
        *,
        recovering: bool = False,
        verified: Mapping[str, bytes] | None = None,
    ) -> RestoreReport:
        """Carry out ``actions`` (not journaled: see :meth:`Transaction.apply`).

        ``verified``: objects already read and checked (see :func:`apply_actions`).

        The files it replaces are deleted afterwards: at once by a process
        without a watcher; in a watcher running the command, left in the trash
        for the watcher to delete once the workspace is idle
        (``served.trash_later``), or, past the bound on what it may hold,
        once the asker has its answer (``served.in_background``).
        """
        from strata.store.materialize import apply_actions

        report = apply_actions(
            self.objects,
            self.root,
            actions,
            recovering=recovering,
            trash=self.trash,
            verified=verified,
            trash_index=None if self.trash is None else served.trash_index(str(self.trash)),
        )
        trash = self.trash
        if (
            trash is not None
            and report.trashed
            and not served.trash_later(str(trash), report.trashed_bytes, free=_free_bytes(trash))
        ):
            served.in_background(lambda: empty_trash(trash))
        return report


def _free_bytes(folder: Path) -> int:
    """The bytes an unprivileged user may still write on ``folder``'s file system (0 if unknown)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize
