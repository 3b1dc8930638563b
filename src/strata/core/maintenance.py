"""Looking after the repository itself: converting and importing ledgers, raw objects."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core.results_ops import CatResult, ConvertResult, ImportResult
from strata.errors import AmbiguousRef, CorruptRepository, UnknownRef, UsageError
from strata.ids import HEX_PREFIX, ObjectId, SnapshotId, is_object_id
from strata.layout import ledger_choice, load_config, set_ledger_driver
from strata.ledger.events import Author, EventType
from strata.ledger.ledger import Bookmark, View
from strata.store.tree import decode_tree

if TYPE_CHECKING:
    from strata.core.core import Core


def convert_ledger(core: Core, to: str) -> ConvertResult:
    """Copy every record to the ``to`` driver (same ids, same chain head) and switch to it.

    From a shared ledger, the copy ends with one more operation record when
    its last one does not hold this workspace's view
    (:meth:`~strata.ledger.ledger.Ledger.leave_shared`).

    The old store is kept beside the new one (``ledger.db.old`` or
    ``ledger.old/``) until the next conversion; a PostgreSQL ledger converted
    away stays in its database. ``to`` may be a ``postgresql://`` URL: the
    database must hold no ledger yet.
    """
    to, url = ledger_choice(to)
    with core.writing():
        source = core.ledger.driver
        if source.name == to:
            raise UsageError(f"the ledger already uses the {to} driver")
        head = core.ledger.chain_head()
        layout = core.layout
        if url is None:
            target_path = layout.ledger if to == "sqlite" else layout.repo / "ledger"
            old_target = target_path.with_name(target_path.name + ".old")
            if target_path.exists():
                _remove(old_target)
                os.replace(target_path, old_target)
        target = core.open_driver(writer=True, kind=to, url=url)
        if url is not None and target.count():
            target.close()
            raise UsageError(
                "that database already holds a Strata ledger; convert into an empty one"
            )
        batch: list[Any] = []
        for record in source.scan():
            batch.append(record)
            if len(batch) >= 1000:
                target.append(batch)
                batch = []
        target.append(batch)
        last = target.last()
        if (last.hash if last else "") != head or target.count() != source.count():
            target.close()
            raise CorruptRepository(
                "the converted ledger differs from the original; kept the original"
            )
        # a shared ledger's view (every branch, bookmark, this workspace's HEAD) is in
        # its refs, not in its last operation: the copy closes with it
        closing = core.ledger.leave_shared(target)
        head = closing.hash if closing is not None else head
        set_ledger_driver(layout, to, url)
        source.close()
        if source.name == "postgresql":
            from strata.ledger.drivers.postgresql import shown

            backup_name = shown(core.config.ledger_url or "")
        else:
            old_source = layout.ledger if source.name == "sqlite" else layout.repo / "ledger"
            backup = old_source.with_name(old_source.name + ".old")
            _remove(backup)
            os.replace(old_source, backup)
            for suffix in ("-wal", "-shm"):
                extra = old_source.with_name(old_source.name + suffix)
                if extra.exists():
                    os.replace(extra, backup.with_name(backup.name + suffix))
            backup_name = str(backup)
        core.config = load_config(layout)  # before the switch: other threads reopen from it
        core.ledger.switch(target)
        return ConvertResult(to, target.count(), head, backup_name)


IMPORTED_PREFIX = "git-runs/"


def import_events(core: Core, source: Core, *, author: Author) -> ImportResult:
    """Append the events of ``source`` that ``core`` lacks, in their order, as one operation.

    Events keep their ids, times, authors, parents and operation ids, so run
    ids and event ids name the same things in both repositories; every object
    of ``source`` is copied first. Into a repository with no events yet, the
    source's HEAD, branches and bookmarks come along as they are; otherwise
    HEAD stays, and a branch or bookmark whose name is taken here is imported
    as ``git-runs/<name>``. Importing again brings only events added since.
    The caller holds ``source``'s write lock.
    """
    with core.writing():
        bodies = [
            dict(record.body)
            for record in source.ledger.driver.scan(kind="event")
            if core.ledger.driver.seek_event(str(record.body["id"])) is None
        ]
        if not bodies:
            return ImportResult()
        for oid in source.objects.ids():
            if not core.objects.has(oid):
                core.objects.put(source.objects.get(oid))
        core.objects.flush()  # durable before the ledger names them
        theirs = source.view()
        with core.transaction("import", author, source=str(source.layout.repo)) as tx:
            ours = tx.view
            fresh = ours.head_event is None and not ours.branches
            names = {
                name: name if fresh or name not in ours.branches else IMPORTED_PREFIX + name
                for name in {*theirs.branches, *(str(b.get("branch", "")) for b in bodies)}
                if name
            }
            for body in bodies:
                if body.get("branch"):
                    body["branch"] = names[str(body["branch"])]
                tx.op.add_event(body)
            if fresh:
                tx.set_view(theirs)
            else:
                branches = {**ours.branches}
                for name, target in theirs.branches.items():
                    branches[names[name]] = target
                bookmarks: dict[str, Bookmark] = {**ours.bookmarks}
                for name, mark in theirs.bookmarks.items():
                    if bookmarks.get(name, mark) == mark:
                        bookmarks[name] = mark
                    else:
                        bookmarks[IMPORTED_PREFIX + name] = mark
                tx.set_view(
                    View(ours.head_branch, ours.head_event, branches=branches, bookmarks=bookmarks)
                )
        runs = sum(1 for body in bodies if body.get("action_type") == EventType.RUN)
        return ImportResult(len(bodies), runs, {k: v for k, v in sorted(names.items())})


def cat(core: Core, oid: str) -> CatResult:
    """An object by id or unique prefix: a tree's entries, a snapshot's manifest, or a blob."""
    full = object_id(core, oid)
    data = core.objects.get(full)
    try:
        return CatResult(full, "tree", decode_tree(data, full))
    except CorruptRepository:
        pass
    if data.startswith(b'{"') and b'"format":' in data:
        try:
            return CatResult(full, "snapshot", core.manifest(SnapshotId(full)))
        except CorruptRepository:
            pass
    return CatResult(full, "blob", data)


def object_id(core: Core, text: str) -> ObjectId:
    """The object a full id, a unique hex prefix, or a ref (its snapshot) names."""
    if is_object_id(text):
        return ObjectId(text)
    if not HEX_PREFIX.fullmatch(text):
        point = core.resolve(text)
        return ObjectId(point.snapshot_id or point.tree)
    folder = core.layout.objects / text[:2]
    matches = [text[:2] + n for n in os.listdir(folder)] if folder.is_dir() else []
    matches = [m for m in matches if m.startswith(text) and is_object_id(m)]
    if len(matches) > 1:
        raise AmbiguousRef(text, matches)
    if not matches:
        raise UnknownRef(text, hint="give an object id (see 'strata cat' of a snapshot or tree)")
    return ObjectId(matches[0])


def _remove(path: Path) -> None:
    """Delete a file or folder if it exists."""
    if path.is_dir() and not path.is_symlink():
        import shutil  # (maintenance is rare: not loaded by every command)

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
