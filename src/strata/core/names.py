"""Branches and bookmarks: operations that move only refs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.core.results_ops import BookmarkResult
from strata.errors import BookmarkLocked, BranchInUse, NameTaken, UnknownRef, UsageError
from strata.ids import EventId
from strata.ledger.events import Author
from strata.ledger.ledger import Bookmark, check_ref_name, moved

if TYPE_CHECKING:
    from strata.core.core import Core

BOOKMARK_ACTIONS = ("add", "move", "rename", "lock", "unlock", "delete")


def branch_create(core: Core, name: str, ref: str, *, author: Author | None) -> str:
    """Create branch ``name`` at ``ref``; return the event id it points at."""
    check_ref_name(name, what="branch")
    with core.transaction("branch create", author, name=name) as tx:
        if name in tx.view.branches:
            raise NameTaken("branch", name)
        point = core.resolve(ref)
        assert point.event is not None
        tx.move(branches={**tx.view.branches, name: point.event.id})
        return point.event.id


def branch_delete(core: Core, name: str, *, author: Author | None) -> str:
    """Remove the name ``name`` (its events stay); return where it pointed."""
    with core.transaction("branch delete", author, name=name) as tx:
        view = tx.view
        if name not in view.branches:
            raise UnknownRef(name, hint="see 'strata branch list'", what="branch")
        if name == view.head_branch:
            raise BranchInUse(name)
        branches = dict(view.branches)
        tip = branches.pop(name)
        tx.move(branches=branches)
        return tip


def bookmark(
    core: Core,
    action: str,
    name: str,
    *,
    ref: str | None,
    new_name: str | None,
    author: Author | None,
) -> BookmarkResult:
    """Change a bookmark: ``add``, ``move``, ``rename``, ``lock``, ``unlock`` or ``delete``."""
    if action not in BOOKMARK_ACTIONS:
        raise UsageError(f"unknown bookmark action {action!r}; use one of {BOOKMARK_ACTIONS}")
    with core.transaction(f"bookmark {action}", author, name=name) as tx:
        marks = dict(tx.view.bookmarks)
        current = marks.get(name)
        if action == "add":
            check_ref_name(name, what="bookmark")
            if current is not None:
                raise NameTaken("bookmark", name, hint="use 'strata bookmark move'")
            point = core.resolve(ref or "HEAD")
            assert point.event is not None
            marks[name] = Bookmark(point.event.id)
        else:
            if current is None:
                raise UnknownRef(name, hint="see 'strata bookmark list'", what="bookmark")
            if current.locked and action in ("move", "rename", "delete"):
                raise BookmarkLocked(name)
            if action == "move":
                point = core.resolve(ref or "HEAD")
                assert point.event is not None
                marks[name] = Bookmark(point.event.id, current.locked)
            elif action == "rename":
                if new_name is None:
                    raise UsageError("renaming a bookmark needs the new name")
                check_ref_name(new_name, what="bookmark")
                if new_name in marks:
                    raise NameTaken("bookmark", new_name)
                marks[new_name] = marks.pop(name)
            elif action in ("lock", "unlock"):
                marks[name] = Bookmark(current.target, action == "lock")
            else:
                del marks[name]
        tx.set_view(moved(tx.view, bookmarks=marks))
    shown = new_name if action == "rename" and new_name else name
    mark = marks.get(shown)
    if mark is None:
        return BookmarkResult(shown, action, None, False, deleted=True)
    return BookmarkResult(shown, action, EventId(mark.target), mark.locked)
