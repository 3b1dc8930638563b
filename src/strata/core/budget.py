"""The storage budget: ``[retention] max_size``, enforced after every command that writes.

The repository's stored objects (loose and packed: what gc can free; the
ledger, which is never pruned, is shown by ``strata du``) must stay within
``max_size`` bytes (``"2 GB"`` or a number of bytes; 0, the default: no
budget). Measuring is cheap (the packs' sizes; the loose objects counted
while they are few, else one fan-out folder sampled as git does), so every
writing command asks (``Core.writing``, the watcher's recording through it).

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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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
        }


def measured(core: Core) -> int:
    """About how many bytes the stored objects take (no walk of a large store).

    Packs are counted exactly, and so are loose objects
    while they are few; past :data:`EXACT_LOOSE`, one of the 256 fan-out
    folders, times 256.
    """
    total = 0
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
    return BudgetUsage(retention.max_size, measured(core), retention.keep_last)


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
    return collect(core, best, dry_run=False)
