"""``strata check``: verify every object hash, every reference and the hash chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from strata.errors import StrataError
from strata.ids import ObjectId, SnapshotId, short
from strata.ledger.events import Event
from strata.store.objects import DiskObjectStore
from strata.store.tree import Nested, read_tree, unnest

if TYPE_CHECKING:
    from strata.core.core import Core


def check(core: Core, *, progress: Callable[[str], None] | None = None) -> list[str]:
    """Verify every object hash and every reference; return the problems found."""
    problems: list[str] = []
    broken = core.ledger.verify()
    if broken:
        problems.append(f"ledger: {broken}")
    problems += core.ledger.driver.verify_index()
    if isinstance(core.objects, DiskObjectStore):
        problems += core.objects.pack_problems()
    seen: set[str] = set()
    stored: set[str] = set()
    for oid in core.objects.ids():
        stored.add(oid)
        try:
            core.objects.get(oid)
        except StrataError as exc:
            problems.append(str(exc))
    if progress:
        progress(f"{len(stored)} objects verified")

    def need(oid: str, what: str) -> bool:
        if oid not in stored:
            problems.append(f"{what}: object {oid} is missing")
            return False
        return True

    def walk(tree: str, where: str) -> Nested[None]:
        if tree in seen:
            return
        seen.add(tree)
        if not need(tree, f"tree of {where}"):
            return
        try:
            entries = read_tree(core.objects, ObjectId(tree), cached=False)
        except StrataError as exc:
            problems.append(f"{where}: {exc}")
            return
        for e in entries:
            if e.name in ("", ".", "..") or "/" in e.name or "\0" in e.name:
                problems.append(f"tree {tree}: invalid name {e.name!r}")
            if e.kind == "dir":
                yield walk(e.oid, f"{where}/{e.name}")  # (store.tree.unnest: any depth)
            elif e.oid not in seen:
                seen.add(e.oid)
                need(e.oid, f"{where}/{e.name}")

    def whole(snapshot: str) -> bool:
        """Whether every object of a snapshot is stored (its manifest, trees and blobs)."""
        if snapshot not in stored:
            return False
        try:
            stack = [str(core.manifest(SnapshotId(snapshot))["tree"])]
            while stack:
                tree = stack.pop()
                if tree not in stored:
                    return False
                for e in read_tree(core.objects, ObjectId(tree)):
                    if e.kind == "dir":
                        stack.append(e.oid)
                    elif e.oid not in stored:
                        return False
        except (StrataError, KeyError, TypeError):
            return False
        return True

    from strata.core.pruning import pruned_snapshots
    from strata.ledger.schemas import problems as schema_problems

    # snapshots 'strata gc' removed on purpose (retention): recorded before they went
    pruned = pruned_snapshots(core.ledger)
    gone: dict[str, str] = {}  # event id -> its pruned snapshot
    ids: set[str] = set()
    for record in core.ledger.driver.scan(kind="event"):
        found = schema_problems("ChangeEvent", record.body)
        for problem in found:
            problems.append(f"record {record.seq} (event): {problem}")
        ids.add(str(record.body.get("id", "")))
        try:
            event = Event.from_json(record.body, seq=record.seq)
        except (StrataError, KeyError, TypeError, ValueError) as exc:
            if not found:  # the schema problems already say what is wrong
                problems.append(f"record {record.seq} (event): unreadable ({exc})")
            continue
        if event.anchor_event_id and event.anchor_event_id not in ids:
            problems.append(f"event {event.id}: anchor {event.anchor_event_id} is unknown")
        if event.parent_event_id and event.parent_event_id not in ids:
            problems.append(f"event {event.id}: parent {event.parent_event_id} is unknown")
        for artifact in event.artifacts:
            need(artifact, f"artifact of event {event.id}")
        if event.snapshot_ref:
            if event.snapshot_ref in pruned and not whole(event.snapshot_ref):
                # gone, or partly deleted by a gc that was killed (the next gc finishes it)
                gone[event.id] = event.snapshot_ref
                continue
            if not need(event.snapshot_ref, f"snapshot of event {event.id}"):
                continue
            try:
                manifest = core.manifest(event.snapshot_ref)
                tree = manifest["tree"]
                for problem in schema_problems("Snapshot", manifest):
                    problems.append(f"snapshot {event.snapshot_ref}: {problem}")
            except StrataError as exc:
                problems.append(f"event {event.id}: {exc}")
                continue
            unnest(walk(tree, f"event {short(event.id)}"))
    view = core.view()
    named = (
        [("HEAD", view.head_event)]
        + [(f"branch {n}", t) for n, t in view.branches.items()]
        + [(f"bookmark {n}", b.target) for n, b in view.bookmarks.items()]
    )
    for name, target in named:
        if target is not None and target not in ids:
            problems.append(f"{name} points at unknown event {target}")
        elif target is not None and target in gone:
            problems.append(f"{name} points at event {target}, whose snapshot gc removed")
    from strata.store.materialize import Journal

    for path, _ in Journal.pending(core.layout.journal):
        problems.append(f"an interrupted change is pending: {path.name}")
    return problems
