"""The storage lifecycle: retention, garbage collection, repacking and disk usage.

The ledger never loses a record; what ``strata gc`` removes are *objects*
(blobs, trees, snapshot manifests) that nothing the retention policy keeps can
reach. What is kept:

* every state event's snapshot younger than ``keep_all_days``; then one per
  branch and hour up to ``hourly_days``; then one per branch and day up to
  ``daily_days``; nothing older (:class:`Retention`, ``[retention]`` in
  ``config.toml``);
* whatever the current view names (HEAD, every branch tip, every bookmark, so
  every checkpoint), every checkpoint's snapshot, the open Draft (its base and
  every revision on its branch);
* the views and ``tree_before``/``tree_after`` of the operations undo and redo
  may still reach: those younger than ``keep_all_days`` and the newest
  ``keep_operations``;
* every object named by an in-flight journal, a run's lease, the Draft's
  record and the stat caches (a cache may name only stored blobs);
* every object file younger than ``prune_grace_minutes`` (a command that does
  not hold the write lock may have written it a moment ago; git's
  ``gc.pruneExpire``).

Order, so that a crash at any point leaves a repository ``strata check``
passes: the write lock is taken; the snapshots about to go are recorded first,
as one ``gc`` operation (``details.pruned``); then loose objects are deleted
and packs holding dead objects rewritten without them (new pack durable before
the old one goes). An event whose snapshot was pruned stays in the ledger;
reading it raises :class:`~strata.errors.SnapshotPruned`, which names the
nearest kept event.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.atomic import fsync_dir
from strata.core.pruning import GC_COMMAND, pruned_snapshots, state_events
from strata.core.pruning import ts_ms as ts_ms  # (named here too, where callers know it)
from strata.errors import (
    CorruptRepository,
    ObjectMissing,
    RepositoryError,
    StrataError,
)
from strata.ids import ObjectId
from strata.layout import Layout, bad_config, retention_settings
from strata.ledger.events import Event
from strata.schemas import fields_json
from strata.store.objects import DiskObjectStore
from strata.store.statcache import StatCache
from strata.store.tree import EMPTY_TREE, TREE_MAGIC, read_tree

if TYPE_CHECKING:
    from strata.core.core import Core

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: a 64-hex string in a file that names objects (it is one only if the store has it)
_OBJECT_ID = re.compile(rb"[0-9a-f]{64}")


@dataclass(frozen=True)
class Retention:
    """How long snapshots are kept, read from ``[retention]`` in ``config.toml``.

    Days count back from now by the repository's clock. A tier whose end
    equals the previous tier's end is skipped (``hourly_days = keep_all_days``).
    """

    keep_all_days: int = 14
    hourly_days: int = 60
    daily_days: int = 365
    keep_operations: int = 100
    prune_grace_minutes: int = 60
    git_refs_days: int = 14
    #: the repository's size budget in bytes (0: none), enforced after writing commands
    max_size: int = 0
    #: the newest state events the budget never removes
    keep_last: int = 20
    #: the store repacks itself past its thresholds
    auto_repack: bool = True

    @classmethod
    def from_config(cls, raw: dict[str, Any], layout: Layout | None = None) -> Retention:
        """The policy of a parsed ``config.toml``; a bad ``[retention]`` is a RepositoryError."""
        try:
            return cls(**retention_settings(raw))
        except ValueError as exc:
            problem = str(exc)
            if layout is not None:
                raise bad_config(layout, problem) from None
            raise RepositoryError(f"config.toml: {problem}") from None

    def to_json(self) -> dict[str, Any]:
        """As printed by ``strata gc --json``."""
        return fields_json(self)


@dataclass
class GcPlan:
    """What gc keeps and removes, computed under the write lock."""

    retention: Retention
    now_ms: int
    #: snapshot ids the policy keeps (events' and protected ones)
    kept_snapshots: set[str] = field(default_factory=set)
    #: snapshot ids of events the policy thins and whose manifest is about to go
    pruned: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    #: loose objects to delete, with their sizes
    dead_loose: dict[str, int] = field(default_factory=dict)
    #: packs holding dead objects (index path -> dead ids in it)
    dead_packed: dict[Path, set[str]] = field(default_factory=dict)
    dead_packed_bytes: int = 0
    #: objects unreachable but younger than the grace period
    spared: int = 0
    #: leftovers of killed writers: temp files, packs without an index (path -> size)
    leftovers: dict[Path, int] = field(default_factory=dict)

    @property
    def objects(self) -> int:
        """How many objects gc removes."""
        return len(self.dead_loose) + sum(len(d) for d in self.dead_packed.values())

    @property
    def bytes(self) -> int:
        """How many bytes of objects and leftovers gc frees (packs: the dead frames)."""
        return sum(self.dead_loose.values()) + self.dead_packed_bytes + sum(self.leftovers.values())


@dataclass
class GcResult:
    """What ``strata gc`` did (or, with ``--dry-run``, would do)."""

    dry_run: bool
    retention: Retention
    objects_removed: int = 0
    bytes_freed: int = 0
    pruned_snapshots: list[str] = field(default_factory=list)
    kept_snapshots: int = 0
    spared_recent: int = 0
    leftovers_removed: int = 0
    packs_rewritten: int = 0
    operation_id: str | None = None
    #: the kept Draft folder was (would be) removed: its size
    draft_folder_bytes: int = 0
    #: git refs under refs/strata/ removed (would be)
    git_refs_removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """What ``strata gc --json`` prints."""
        return {
            "dry_run": self.dry_run,
            "objects_removed": self.objects_removed,
            "bytes_freed": self.bytes_freed,
            "pruned_snapshots": self.pruned_snapshots,
            "kept_snapshots": self.kept_snapshots,
            "spared_recent": self.spared_recent,
            "leftovers_removed": self.leftovers_removed,
            "packs_rewritten": self.packs_rewritten,
            "operation_id": self.operation_id,
            "draft_folder_bytes": self.draft_folder_bytes,
            "git_refs_removed": self.git_refs_removed,
            "retention": self.retention.to_json(),
        }


# -- what is kept ---------------------------------------------------------------------------


def thin(events: Iterable[Event], retention: Retention, now_ms: int) -> set[str]:
    """The snapshot ids the retention tiers keep among ``events`` (protection aside)."""
    keep: set[str] = set()
    newest: dict[tuple[str, str, int], tuple[int, str]] = {}
    for event in events:
        assert event.snapshot_ref is not None
        try:
            ts = ts_ms(event.ts)
        except ValueError:
            keep.add(event.snapshot_ref)  # an unreadable time: never guess it old
            continue
        age = now_ms - ts
        if age < retention.keep_all_days * DAY_MS:
            keep.add(event.snapshot_ref)
            continue
        if age < retention.hourly_days * DAY_MS:
            key = (event.branch, "h", ts // HOUR_MS)
        elif age < retention.daily_days * DAY_MS:
            key = (event.branch, "d", ts // DAY_MS)
        else:
            continue
        if key not in newest or newest[key][0] <= ts:
            newest[key] = (ts, event.snapshot_ref)
    keep.update(snapshot for _, snapshot in newest.values())
    return keep


def _protected_events(
    core: Core, retention: Retention, now_ms: int
) -> tuple[set[str], set[str], set[str]]:
    """What is protected: events (refs, the Draft), trees and events (recent operations).

    The last two are what undo needs to go back through the recent operations.
    """
    events: set[str] = set()
    trees: set[str] = set()
    undone: set[str] = set()

    def view_events(raw: dict[str, Any] | None, into: set[str] = events) -> None:
        if not raw:
            return
        head = raw.get("head") or {}
        if head.get("event"):
            into.add(str(head["event"]))
        into.update(str(t) for t in (raw.get("branches") or {}).values() if t)
        for mark in (raw.get("bookmarks") or {}).values():
            if isinstance(mark, dict) and mark.get("target"):
                into.add(str(mark["target"]))

    view = core.view()
    view_events(view.to_json())
    cutoff = now_ms - retention.keep_all_days * DAY_MS
    for n, op in enumerate(core.ledger.operations()):
        try:
            young = ts_ms(str(op.get("ts", ""))) >= cutoff
        except ValueError:
            young = True
        if n >= retention.keep_operations and not young:
            break
        view_events(op.get("view_before"), undone)
        view_events(op.get("view_after"), undone)
        details = op.get("details") or {}
        for key in ("tree_before", "tree_after"):
            if isinstance(details.get(key), str):
                trees.add(details[key])
    draft = _read_json(core.layout.draft_state)
    if draft:
        if draft.get("base_event_id"):
            events.add(str(draft["base_event_id"]))
        branch = draft.get("branch")
        if branch:
            for record in core.ledger.driver.scan(kind="event"):
                if record.body.get("branch") == branch:
                    events.add(str(record.body.get("id")))
    return events, trees, undone


def _named_in_files(core: Core, *, draft_cache: bool) -> set[str]:
    """Object ids named by journals, leases, the Draft's record and the stat caches."""
    layout = core.layout
    files: list[Path] = [layout.draft_state]
    for folder, pattern in ((layout.journal, "*.json"), (layout.runs, "*.lease")):
        if folder.is_dir():
            files += sorted(folder.glob(pattern))
    found: set[str] = set()
    # a stat cache as a scan would read it (its base and the saves logged since, not
    # the rows those saves replaced): a later scan trusts every id it names
    for path in [layout.statcache, *([layout.draft / "statcache"] if draft_cache else [])]:
        cache = StatCache(path)
        for rel in cache.folders():
            blob = cache.blob(rel)
            if blob is not None:
                found.update(m.decode() for m in _OBJECT_ID.findall(blob))
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found.update(m.decode() for m in _OBJECT_ID.findall(data))
    return found


def plan_gc(
    core: Core,
    *,
    now_ms: int | None = None,
    grace_s: float | None = None,
    draft_cache: bool = True,
    drop: frozenset[str] = frozenset(),
) -> GcPlan:
    """What gc would keep and remove now. The caller holds the write lock.

    ``grace_s`` overrides ``prune_grace_minutes``; ``draft_cache=False`` leaves
    out the kept Draft folder's stat cache (gc removes that folder first).
    ``drop``: snapshot ids the storage budget gives up although the retention
    tiers or undo's recent operations would keep them (what refs, checkpoints
    and the Draft protect stays).
    """
    retention = Retention.from_config(core.config.raw, core.layout)
    now_ms = core.clock() if now_ms is None else now_ms
    plan = GcPlan(retention, now_ms)
    store = core.objects
    if not isinstance(store, DiskObjectStore):
        return plan
    grace = retention.prune_grace_minutes * 60 if grace_s is None else grace_s
    events = list(state_events(core.ledger))
    by_id: dict[str, Event] = {e.id: e for e in events}
    kept = thin(events, retention, now_ms) - drop
    protected, trees, undone = _protected_events(core, retention, now_ms)
    for eid in protected | undone:
        event = by_id.get(eid)
        if event is None or not event.snapshot_ref:
            continue
        if eid in protected or event.snapshot_ref not in drop:
            kept.add(event.snapshot_ref)
    artifacts: set[str] = set()
    for record in core.ledger.driver.scan(kind="event"):
        data = record.body.get("data") or {}
        if record.body.get("action_type") == "checkpoint" and data.get("snapshot_id"):
            kept.add(str(data["snapshot_id"]))
        # traces and reports are small and what a replay needs: kept as long as the ledger
        artifacts.update(str(a) for a in record.body.get("artifacts") or ())
    plan.kept_snapshots = kept

    live = plan.live
    for snapshot in kept:
        _mark(store, ObjectId(snapshot), live, kind="snapshot")
    for tree in trees:
        _mark(store, ObjectId(tree), live, kind="tree")
    for oid in artifacts:
        _mark(store, ObjectId(oid), live, kind="blob")
    for oid in _named_in_files(core, draft_cache=draft_cache):
        if oid not in live and store.has(ObjectId(oid)):
            _mark(store, ObjectId(oid), live, kind=None)

    wall = time.time()
    for oid in store.loose_ids():
        if oid in live:
            continue
        try:
            st = store.loose_path(oid).stat()
        except FileNotFoundError:
            continue
        if wall - st.st_mtime < grace:
            plan.spared += 1
            continue
        plan.dead_loose[oid] = st.st_size
    for index in store.packs():
        try:
            young = wall - index.pack.stat().st_mtime < grace
        except FileNotFoundError:
            continue
        dead: set[str] = {oid for oid in index.ids() if oid not in live}
        if not dead:
            continue
        if young:
            plan.spared += len(dead)
            continue
        plan.dead_packed[index.idx] = dead
        for oid in dead:
            where = index.find(oid)
            plan.dead_packed_bytes += where[1] if where else 0
    gone: set[str] = set(plan.dead_loose)
    for dead in plan.dead_packed.values():
        gone |= dead
    already = pruned_snapshots(core.ledger)
    plan.pruned = sorted(
        {e.snapshot_ref for e in events if e.snapshot_ref in gone and e.snapshot_ref not in already}
        - kept
    )
    plan.leftovers = _leftovers(store, wall, grace)
    return plan


def _mark(store: DiskObjectStore, oid: ObjectId, live: set[str], *, kind: str | None) -> None:
    """Add ``oid`` and everything it names to ``live`` (a missing object is skipped)."""
    stack: list[tuple[ObjectId, str | None]] = [(oid, kind)]
    while stack:
        oid, kind = stack.pop()
        if oid in live:
            continue
        live.add(oid)
        if oid == EMPTY_TREE:
            continue
        try:
            if kind is None:  # named in a file: tell a tree or manifest from a blob by its start
                start = store.peek(oid, len(TREE_MAGIC))
                kind = "tree" if start == TREE_MAGIC else "snapshot" if start == b'{"' else "blob"
            if kind == "snapshot":
                manifest = json.loads(store.get(oid))
                tree = manifest.get("tree") if isinstance(manifest, dict) else None
                if isinstance(tree, str):
                    stack.append((ObjectId(tree), "tree"))
            elif kind == "tree":
                for entry in read_tree(store, oid):
                    if entry.oid not in live:
                        stack.append((entry.oid, "tree" if entry.kind == "dir" else "blob"))
        except ObjectMissing:
            continue  # already gone: nothing below it can be reached through it
        except (StrataError, OSError, ValueError, AttributeError) as exc:
            # what it names is unknown, so nothing may be called unreachable
            raise CorruptRepository(
                f"gc cannot read object {oid} ({exc}); nothing was removed",
                hint="run 'strata check' to list every problem",
            ) from None


def _leftovers(store: DiskObjectStore, wall: float, grace: float) -> dict[Path, int]:
    """Temp files and index-less packs older than the grace period (killed writers' garbage)."""
    found: dict[Path, int] = {}
    candidates: list[Path] = []
    tmp = store.root / "tmp"
    if tmp.is_dir():
        candidates += tmp.iterdir()
    packs = store.root / "packs"
    if packs.is_dir():
        for path in packs.iterdir():
            if path.suffix == ".pack" and not path.with_suffix(".idx").exists():
                candidates.append(path)
            elif path.name.startswith("."):
                candidates.append(path)  # an index's temp file
    if store.root.is_dir():
        for sub in os.listdir(store.root):
            if len(sub) == 2:
                folder = store.root / sub
                candidates += (p for p in folder.iterdir() if p.name.startswith(".tmp-"))
    for path in candidates:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if path.is_dir():
            continue
        if wall - st.st_mtime >= grace or _writer_gone(path.name):
            found[path] = st.st_size
    return found


#: the writer's process id in a temp file's or a pack's name: ``pack-<pid>-…``,
#: ``.pack-<pid>-….idx.<pid>.<thread>.tmp``, ``.tmp-<id>.<pid>.<thread>``, ``stream.<pid>.…``
_WRITER_PID = re.compile(r"(?:^\.?pack-|\.)(\d+)[.-]")


def _writer_gone(name: str) -> bool:
    """Whether the process that wrote this temp file or pack has ended (it was killed).

    Such a file is garbage at once: no grace period is needed for a writer that
    no longer runs. A process of another user still counts as running.
    """
    found = _WRITER_PID.search(name)
    if found is None:
        return False
    pid = int(found.group(1))
    if pid in (0, os.getpid()):
        return pid == 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


# -- collecting ---------------------------------------------------------------------------


def collect(
    core: Core, plan: GcPlan, *, dry_run: bool, details: dict[str, Any] | None = None
) -> GcResult:
    """Carry out ``plan``: record the pruned snapshots, then delete. The caller holds the lock.

    ``details``: more for the ``gc`` operation's details (the budget's ``budget_cut``).
    """
    result = GcResult(
        dry_run=dry_run,
        retention=plan.retention,
        objects_removed=plan.objects,
        bytes_freed=plan.bytes,
        pruned_snapshots=list(plan.pruned),
        kept_snapshots=len(plan.kept_snapshots),
        spared_recent=plan.spared,
        leftovers_removed=len(plan.leftovers),
        packs_rewritten=len(plan.dead_packed),
    )
    store = core.objects
    if dry_run or not isinstance(store, DiskObjectStore):
        return result
    if plan.pruned:
        # recorded before anything is deleted: check then knows these are gone on purpose
        with core.transaction(
            GC_COMMAND,
            pruned=plan.pruned,
            objects_removed=plan.objects,
            bytes_freed=plan.bytes,
            **(details or {}),
        ) as tx:
            result.operation_id = tx.id
    # The manifests of pruned snapshots go first, durably: a snapshot whose manifest is
    # gone is plainly pruned, while one whose manifest outlives its blobs reads as
    # damaged. Then the packs (the new one durable before an old one goes), then the
    # rest. A kill at any point leaves objects the next gc deletes; nothing kept goes.
    pruned = set(plan.pruned) | set(pruned_snapshots(core.ledger))
    manifests = sorted(oid for oid in plan.dead_loose if oid in pruned)
    _delete_loose(store, manifests)
    if plan.dead_packed:
        packs = [p for p in store.packs() if p.idx in plan.dead_packed]
        drop: set[str] = set()
        for dead in plan.dead_packed.values():
            drop |= dead
        store.repack(packs=packs, drop=drop)
    _delete_loose(store, sorted(set(plan.dead_loose) - set(manifests)))
    for path in plan.leftovers:
        path.unlink(missing_ok=True)
    return result


def _delete_loose(store: DiskObjectStore, oids: list[str]) -> None:
    """Delete loose objects, then make their folders' entries durable."""
    folders: set[Path] = set()
    for oid in oids:
        if store.delete_loose(ObjectId(oid)):
            folders.add(store.loose_path(ObjectId(oid)).parent)
    for folder in sorted(folders):
        fsync_dir(folder)


# -- repack and du ------------------------------------------------------------------------


@dataclass
class RepackResult:
    """What ``strata repack`` did."""

    pack: str | None
    objects: int
    packs_before: int
    packs_removed: int
    loose_packed: int
    loose_kept: int
    #: the store's space on disk (allocated blocks) before and after
    bytes_before: int
    bytes_after: int
    corrupt: list[str]

    def to_json(self) -> dict[str, Any]:
        """What ``strata repack --json`` prints."""
        return fields_json(self)


#: objects stored bigger than this stay loose (a pack copy would hold them in memory)
REPACK_MAX_OBJECT = 16 * 1024 * 1024


def repack(core: Core) -> RepackResult:
    """Merge every pack and the loose objects into one pack. The caller holds the lock."""
    store = core.objects
    assert isinstance(store, DiskObjectStore)
    before = _tree_bytes(store.root, allocated=True)
    packs = store.packs()
    loose: list[ObjectId] = []
    big = 0
    for oid in store.loose_ids():
        try:
            size = store.loose_path(oid).stat().st_size
        except FileNotFoundError:
            continue
        if size > REPACK_MAX_OBJECT:
            big += 1
        else:
            loose.append(oid)
    # what killed writers left (a killed repack: a whole pack without its index)
    grace = Retention.from_config(core.config.raw, core.layout).prune_grace_minutes * 60
    leftovers = _leftovers(store, time.time(), grace)
    for path in leftovers:
        path.unlink(missing_ok=True)
    if len(packs) <= 1 and not loose:
        after = _tree_bytes(store.root, allocated=True) if leftovers else before
        return RepackResult(None, 0, len(packs), 0, 0, big, before, after, [])
    outcome = store.repack(packs=packs, loose=loose)
    return RepackResult(
        outcome.pack,
        outcome.objects,
        len(packs),
        outcome.packs_removed,
        outcome.loose_packed,
        big + len(loose) - outcome.loose_packed,
        before,
        _tree_bytes(store.root, allocated=True),
        outcome.corrupt,
    )


def _tree_bytes(folder: Path, *, allocated: bool = False) -> int:
    """The bytes of every regular file under ``folder`` (symlinks not followed).

    ``allocated``: the space the files take on disk (whole blocks), which is
    what merging many small loose files into one pack saves.
    """
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(dirpath, name)):
                total += st.st_blocks * 512 if allocated else st.st_size
    return total


def tree_bytes(path: Path) -> int:
    """The bytes of a file, or of every regular file under a folder (0 if absent)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    if path.is_dir() and not path.is_symlink():
        return _tree_bytes(path)
    return st.st_size if not path.is_symlink() else 0


@dataclass
class DiskUsage:
    """The repository's bytes on disk, by kind (``strata du``)."""

    #: kind -> bytes; the kinds add up to ``total``
    kinds: dict[str, int]
    #: objects by what names them: manifests, trees, blobs, unreferenced (stored frames)
    objects: dict[str, int]
    counts: dict[str, int]
    total: int
    gc_would_free: int
    gc_would_remove: int
    repo: str
    #: other places Strata writes outside the repository folder (git backend)
    outside: dict[str, int] = field(default_factory=dict)
    #: the storage budget and its use (:class:`strata.core.budget.BudgetUsage`)
    budget: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """What ``strata du --json`` prints."""
        return {
            "repository": self.repo,
            "total": self.total,
            "kinds": self.kinds,
            "objects": self.objects,
            "counts": self.counts,
            "gc_would_free": self.gc_would_free,
            "gc_would_remove": self.gc_would_remove,
            "outside": self.outside,
            "budget": self.budget,
        }


def disk_usage(core: Core, plan: GcPlan) -> DiskUsage:
    """Every byte under the repository folder, by kind; ``plan``: what gc would free."""
    layout = core.layout
    store = core.objects
    assert isinstance(store, DiskObjectStore)
    root = layout.repo
    kinds: dict[str, int] = {
        "loose_objects": 0,
        "packs": 0,
        "pack_indexes": 0,
        "ledger": 0,
        "draft": 0,
        "stat_caches": 0,
        "git_map": 0,
        "trash": 0,
        "other": 0,
    }
    objects_dir = layout.objects
    for dirpath, _dirs, files in os.walk(root):
        folder = Path(dirpath)
        for name in files:
            path = folder / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_symlink():
                continue
            kinds[_kind_of(layout.repo, objects_dir, path)] += st.st_size
    # objects by kind: walk what the kept and thinned snapshots name
    by_kind = {"manifests": 0, "trees": 0, "blobs": 0, "unreferenced": 0}
    counts = dict.fromkeys(by_kind, 0)
    kind_of: dict[str, str] = {}
    for event in state_events(core.ledger):
        _classify(store, ObjectId(str(event.snapshot_ref)), kind_of)
    for oid in store.ids():
        kind = kind_of.get(oid, "unreferenced")
        try:
            size = store.stored_size(oid)
        except StrataError:
            continue
        by_kind[kind] += size
        counts[kind] += 1
    counts["packs"] = len(store.packs())
    counts["loose"] = sum(1 for _ in store.loose_ids())
    total = sum(kinds.values())
    return DiskUsage(
        kinds,
        by_kind,
        counts,
        total,
        plan.bytes + _draft_bytes(core),
        plan.objects,
        str(root),
    )


def _draft_bytes(core: Core) -> int:
    """The kept Draft folder's bytes gc would remove (0 while a Draft is open)."""
    if core.layout.draft_state.exists():
        return 0
    return tree_bytes(core.layout.draft)


def _kind_of(repo: Path, objects: Path, path: Path) -> str:
    rel = path.relative_to(repo)
    top = rel.parts[0]
    if path.is_relative_to(objects):
        if len(rel.parts) >= 2 and rel.parts[1] == "packs":
            return "pack_indexes" if path.suffix == ".idx" else "packs"
        return "loose_objects"
    if top.startswith("ledger"):
        return "ledger"  # ledger.db (+ -wal, -shm, .old) or the JSONL ledger/ folder
    if top == "draft":
        return "draft"  # its stat cache too: gc removes the folder whole, du counts it so
    if top == "statcache":
        return "stat_caches"
    if top == "gitmap.db":
        return "git_map"
    if top == "trash":
        return "trash"  # files restores replaced, not yet deleted (a watcher waits for quiet)
    return "other"


def _classify(store: DiskObjectStore, snapshot: ObjectId, kind_of: dict[str, str]) -> None:
    if snapshot in kind_of:
        return
    kind_of[snapshot] = "manifests"
    try:
        tree = json.loads(store.get(snapshot)).get("tree")
    except (StrataError, ValueError, AttributeError):
        return
    stack = [ObjectId(str(tree))]
    while stack:
        oid = stack.pop()
        if oid in kind_of:
            continue
        kind_of[oid] = "trees"
        try:
            entries = read_tree(store, oid)
        except StrataError:
            continue
        for e in entries:
            if e.kind == "dir":
                stack.append(e.oid)
            else:
                kind_of.setdefault(e.oid, "blobs")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None
