"""The storage budget: ``[retention] max_size``, enforced after every command that writes.

The repository's stored objects (loose and packed: what gc can free) and its
ledger (``ledger.db`` with its ``-wal``, or the JSONL ``ledger/`` folder: never
pruned, but it grows with every event) must stay within ``max_size`` bytes
(``"2 GB"`` or a number of bytes; 0, the default: no budget). Measuring is
cheap (the packs' and the ledger's sizes; the loose objects counted while they
are few, else one fan-out folder sampled as git does), so every writing
command asks (``Core.writing``, the watcher's recording through it).

Past the budget, the **oldest** states go first, as ``strata gc`` removes
them (one ``gc`` operation names the pruned snapshots, so reading one says it
was pruned), even those the retention tiers or undo's recent operations
would keep (undo then cannot go back to them): the fewest oldest state
events whose removal brings the store under 90% of the budget (so the next
snapshot does not prune again). Never given up:

* a bookmark's target, a branch tip and HEAD, every checkpoint;
* the newest ``keep_last`` state events (default 20);
* what the open Draft, in-flight journals and leases name (as gc keeps them);
* objects younger than ``prune_grace_minutes`` (a command not holding the
  lock may have just written them).

When that is not enough (the budget is below what must be kept), nothing more
is removed and :func:`usage` says the store is over its budget: ``strata
status`` and ``strata du`` show it.

A prune that gives up states the retention tiers or undo's recent operations
would have kept cuts undo history: its ``gc`` operation names them
(``details.budget_cut``), and :func:`usage` counts them, so ``status`` and
``du`` say how many states the budget cut and when it last did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.store.objects import DiskObjectStore

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.storage import GcResult

#: pruning brings the repository under this share of the budget
TARGET = 0.9
_SAMPLE = "17"
#: below about this many loose objects they are counted one by one (a sample misleads)
EXACT_LOOSE = 8192


@dataclass(frozen=True)
class BudgetUsage:
    """The repository's size against its budget (``max_size``)."""

    max_size: int
    used: int
    keep_last: int
    #: states the budget pruned although the retention tiers or undo would have kept them
    history_cut: int = 0
    #: when the budget last cut history (RFC 3339), or None
    last_cut: str | None = None

    @property
    def over(self) -> bool:
        """Whether the repository is bigger than its budget."""
        return bool(self.max_size) and self.used > self.max_size

    def to_json(self) -> dict[str, Any]:
        """As ``status --json`` and ``du --json`` print it (``budget``)."""
        return {
            "max_size": self.max_size,
            "used": self.used,
            "over": self.over,
            "keep_last": self.keep_last,
            "history_cut": self.history_cut,
            "last_cut": self.last_cut,
        }


def measured(core: Core) -> int:
    """About how many bytes the stored objects and the ledger take (no walk of a large store).

    Packs and the ledger are counted exactly, and so are loose objects
    while they are few; past :data:`EXACT_LOOSE`, one of the 256 fan-out
    folders, times 256.
    """
    total = ledger_bytes(core.layout.repo)
    store = core.objects
    if isinstance(store, DiskObjectStore):
        for index in store.packs():
            for path in (index.pack, index.idx):
                try:
                    total += path.stat().st_size
                except OSError:
                    continue
        total += _loose_bytes(store)
    return total


def ledger_bytes(repo: Path) -> int:
    """The ledger's bytes in the repository folder ``repo`` (0 for a PostgreSQL ledger).

    Every entry whose name starts with ``ledger``, as ``strata du`` counts the
    ledger (``ledger.db``, the JSONL ``ledger/`` folder, a ``.old`` copy), but
    SQLite's ``-wal`` and ``-shm``: ``ledger.db`` counts as the pages it holds
    with its write-ahead log applied (what it is after the next checkpoint), not
    as the log's frames, which repeat a page once per write.
    """
    total = 0
    try:
        entries = [e for e in os.scandir(repo) if e.name.startswith("ledger")]
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                for sub in os.scandir(entry.path):
                    if sub.is_file(follow_symlinks=False):
                        total += sub.stat(follow_symlinks=False).st_size
            elif entry.name == "ledger.db":
                total += _sqlite_bytes(Path(entry.path), entry.stat(follow_symlinks=False).st_size)
            elif not entry.name.endswith(("-wal", "-shm")) and entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def _sqlite_bytes(path: Path, size: int) -> int:
    """A SQLite database's pages times their size, its log applied (``size`` if unreadable)."""
    import sqlite3

    try:
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return size
    try:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
        return max(size, int(pages) * int(page))
    except sqlite3.Error:
        return size
    finally:
        db.close()


def history_cut(core: Core) -> tuple[int, str | None]:
    """(states, when last): what budget prunes gave up that retention would have kept."""
    from strata.core.pruning import GC_COMMAND

    count = 0
    last: str | None = None
    for record in core.ledger.driver.scan(kind="operation"):
        body = record.body
        if body.get("command") != GC_COMMAND:
            continue
        cut = (body.get("details") or {}).get("budget_cut") or ()
        if cut:
            count += len(cut)
            last = str(body.get("ts") or "") or last
    return count, last


def _folder_bytes(folder: os.PathLike[str] | str) -> tuple[int, int]:
    """(files, bytes) of the files in one folder."""
    count = size = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                count += 1
                size += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return count, size


def _loose_bytes(store: DiskObjectStore) -> int:
    """The loose objects' bytes: counted when they are few, else sampled from one folder."""
    count, size = _folder_bytes(store.root / _SAMPLE)
    if count * 256 > EXACT_LOOSE:
        return size * 256
    total = 0
    for sub in os.listdir(store.root):
        if len(sub) == 2:
            total += _folder_bytes(store.root / sub)[1]
    return total


def usage(core: Core) -> BudgetUsage:
    """The budget and what the repository uses of it now."""
    from strata.core.storage import Retention

    retention = Retention.from_config(core.config.raw, core.layout)
    if not retention.max_size:
        # no budget, nothing it pruned is counted: the ledger's operations are not read
        # (a status of a long history would pay for it)
        return BudgetUsage(0, measured(core), retention.keep_last)
    cut, last = history_cut(core)
    return BudgetUsage(retention.max_size, measured(core), retention.keep_last, cut, last)


def candidates(core: Core, keep_last: int) -> list[str]:
    """Snapshot ids the budget may give up, oldest first (bookmarks and such are kept anyway)."""
    from strata.core.pruning import pruned_snapshots, state_events

    events = list(state_events(core.ledger))
    if keep_last:
        events = events[:-keep_last]
    already = pruned_snapshots(core.ledger)
    view = core.view()
    marked = {m.target for m in view.bookmarks.values()} | set(view.branches.values())
    seen: set[str] = set()
    found: list[str] = []
    for event in events:
        ref = str(event.snapshot_ref)
        if ref in already or ref in seen or event.id in marked:
            continue
        seen.add(ref)
        found.append(ref)
    return found


def enforce(core: Core) -> GcResult | None:
    """Prune the oldest states until the repository fits its budget. The caller holds the lock.

    None when there is no budget, or the repository fits it.
    """
    from strata.core.storage import Retention, collect, plan_gc

    if not isinstance(core.objects, DiskObjectStore):
        return None
    if not Retention.from_config(core.config.raw, core.layout).max_size:
        return None  # (no budget: nothing is measured)
    now = usage(core)
    if not now.over:
        return None
    goal = now.used - int(now.max_size * TARGET)
    pool = candidates(core, now.keep_last)
    # the smallest number of the oldest states whose removal frees enough (binary search)
    lo, hi = 0, len(pool)
    best = plan_gc(core, drop=frozenset(pool)) if pool else plan_gc(core)
    if best.bytes >= goal:
        while lo < hi:
            mid = (lo + hi) // 2
            plan = plan_gc(core, drop=frozenset(pool[:mid]))
            if plan.bytes >= goal:
                hi, best = mid, plan
            else:
                lo = mid + 1
    if not best.objects and not best.leftovers:
        return None  # what must be kept is already over the budget: status and du say so
    # the states gc would not have pruned without the budget: undo history it cuts
    tiers = set(plan_gc(core).pruned)
    cut = [s for s in best.pruned if s not in tiers]
    return collect(core, best, dry_run=False, details={"budget_cut": cut} if cut else None)
