"""The store looks after itself: incremental repacking past thresholds (git's auto gc).

Every large batch of new objects leaves a pack, every small one loose files
(:mod:`strata.store.objects`). Left alone, an object-existence check visits
every pack (30 events of 5,000 files: 353 µs instead of 44) and ten thousand
small events leave hundreds of megabytes of loose files. :func:`tend` keeps
both in check, after every command that writes (``Core.writing``) and in the
watcher's idle time (:func:`tend_when_free`):

* past :data:`LOOSE_LIMIT` loose objects (estimated, as git does, from one of
  the 256 fan-out folders), they are packed;
* the packs are kept in a **geometric progression** by object count (git's
  ``repack --geometric=2``): sorted by size, each pack must hold at least
  :data:`FACTOR` times the objects of the next smaller one; the smallest packs
  that break it (and the loose objects) are merged into one new pack, which
  then absorbs the next larger packs while it would break it in turn. A new
  pack of N objects is thus copied O(log N) times in all, and a store of N
  objects has O(log N) packs, so a lookup stays near constant.

Nothing is done below :data:`PACK_LIMIT` packs and :data:`LOOSE_LIMIT` loose
objects, so a small repository never pays for it. Crash safety is
:meth:`~strata.store.objects.DiskObjectStore.repack`'s: the new pack is durable
and visible before an old pack or a packed loose file is deleted, so a kill at
any point leaves every object readable (twice, at worst, until the next
repack) and a repository ``strata check`` passes. ``[retention] auto_repack =
false`` turns it off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.errors import RepositoryLocked
from strata.ids import ObjectId
from strata.layout import WriteLock
from strata.schemas import fields_json
from strata.store.objects import DiskObjectStore

if TYPE_CHECKING:
    from strata.core.core import Core

#: past this many packs, the smallest are merged (while they break the progression)
PACK_LIMIT = 4
#: past this many loose objects (estimated), they are packed
LOOSE_LIMIT = 2048
#: each pack holds at least this many times the objects of the next smaller one
FACTOR = 2
#: loose objects stored bigger than this stay loose (as ``strata repack`` leaves them)
MAX_OBJECT = 16 * 1024 * 1024
#: the fan-out folder counted to estimate the loose objects (git counts ``objects/17``)
_SAMPLE = "17"


@dataclass(frozen=True)
class UpkeepResult:
    """What one round of upkeep did."""

    pack: str | None
    packs_merged: int
    loose_packed: int
    objects: int

    def to_json(self) -> dict[str, Any]:
        """As kept in the watcher's log and benchmark output."""
        return fields_json(self)


def enabled(core: Core) -> bool:
    """Whether ``[retention] auto_repack`` is on (the default)."""
    table = core.config.raw.get("retention")
    return not (isinstance(table, dict) and table.get("auto_repack") is False)


def loose_estimate(store: DiskObjectStore) -> int:
    """About how many loose objects the store holds: one fan-out folder's count x 256."""
    try:
        return len(os.listdir(store.root / _SAMPLE)) * 256
    except OSError:
        return 0


def geometric_split(counts: list[int], extra: int = 0, factor: int = FACTOR) -> int:
    """How many of the smallest packs (``counts`` sorted ascending) to merge.

    ``extra`` objects (the loose ones) join the merged pack. The packs left
    must form a progression (each at least ``factor`` times the previous one),
    the merged pack included (git's ``find_split``).
    """
    n = len(counts)
    i = n - 1
    while i > 0 and counts[i] >= factor * counts[i - 1]:
        i -= 1
    split = i + 1 if i > 0 else 0
    total = sum(counts[:split]) + extra
    while split < n and total and counts[split] < factor * total:
        total += counts[split]
        split += 1
    return split


def due(store: DiskObjectStore) -> bool:
    """Whether the thresholds are passed (cheap: a folder listing and the known packs)."""
    return len(store.packs()) > PACK_LIMIT or loose_estimate(store) > LOOSE_LIMIT


def tend(core: Core) -> UpkeepResult | None:
    """Repack incrementally when the thresholds are passed. The caller holds the write lock.

    Returns what was done, or None when nothing was due.
    """
    store = core.objects
    if not isinstance(store, DiskObjectStore) or not enabled(core) or not due(store):
        return None
    loose: list[ObjectId] = []
    if loose_estimate(store) > LOOSE_LIMIT:
        for oid in store.loose_ids():
            try:
                if store.loose_path(oid).stat().st_size <= MAX_OBJECT:
                    loose.append(oid)
            except FileNotFoundError:
                continue
    packs = sorted(store.packs(), key=lambda p: (p.count, p.idx.name))
    split = geometric_split([p.count for p in packs], len(loose))
    chosen = packs[:split]
    if not loose and len(chosen) < 2:
        return None  # one pack alone, or nothing: already as good as it gets
    outcome = store.repack(packs=chosen, loose=loose)
    return UpkeepResult(outcome.pack, outcome.packs_removed, outcome.loose_packed, outcome.objects)


def tend_when_free(core: Core) -> UpkeepResult | None:
    """:func:`tend`, when no other writer holds the repository (never waits for one).

    For the watcher's idle time: a command that is writing is never delayed.
    """
    store = core.objects
    if not isinstance(store, DiskObjectStore) or not enabled(core) or not due(store):
        return None
    if core.lock.held:
        return tend(core)
    # a lock of its own on the same file: flock excludes every other holder, this
    # process's ``core.lock`` included, and gives up at once when one writes
    lock = WriteLock(core.layout.lock, timeout=0.0)
    try:
        lock.__enter__()
    except RepositoryLocked:  # a command is writing: next time
        return None
    try:
        return tend(core)
    finally:
        lock.__exit__(None, None, None)
