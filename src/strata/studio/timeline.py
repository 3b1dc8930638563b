"""The timeline: events grouped by operation, lanes per branch, a play head, actions.

Every action (rewind, restore, bookmark, undo, redo) calls the Repository
method the CLI calls and reports what the CLI prints, the auto-save first.
"""

from __future__ import annotations

import csv
import heapq
import mimetypes
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.responses import RedirectResponse, Response

from strata.errors import PathNotFound, StrataError, UsageError
from strata.kb.extract import Unreadable
from strata.ledger.driver import EventFilter
from strata.ledger.events import ACTION_FAMILIES, AUTHOR_KINDS, Event, EventType
from strata.repo import Repository
from strata.sandbox.paths import check_relative
from strata.store.tree import TreeEntry, lookup, read_tree
from strata.studio.context import Ctx
from strata.studio.guard import Refused
from strata.studio.previews import (
    DOCUMENTS,
    TABLES,
    document_text,
    image_type,
    rows,
    suffix_of,
    table_diff,
)
from strata.studio.render import highlight_lines, short

#: events on one page of the timeline
PAGE = 100
#: records looked at for one page when the text filter leaves most out
SCAN_MAX = 20_000
#: entries of one folder shown by the tree panel
TREE_MAX = 5_000
#: bytes of a file shown as text (more: its size and hash only)
SHOW_MAX = 4 << 20
#: overlay badges: event types that stand out on the timeline, by the class they get
OVERLAYS: dict[str, str] = {
    EventType.APPROVAL_REQUESTED: "approval",
    EventType.APPROVAL_DECIDED: "approval",
    EventType.PUBLISH: "publish",
    EventType.PREFLIGHT: "preflight",
    EventType.REPLAY: "replay",
    EventType.RUN: "run",
    EventType.CHECKPOINT: "checkpoint",
    EventType.MERGE: "merge",
    EventType.TASK_FINISHED: "run",
}


@dataclass
class Filters:
    """The timeline's filters, as the query string gives them."""

    kind: str = ""
    author: str = ""
    operation: str = ""
    branch: str = ""
    file: str = ""
    action: str = ""
    text: str = ""

    @classmethod
    def of(cls, ctx: Ctx) -> Filters:
        """Read and check the filters of a request."""
        f = cls(
            kind=ctx.arg("kind"),
            author=ctx.arg("author"),
            operation=ctx.arg("op"),
            branch=ctx.arg("branch"),
            file=ctx.arg("file").strip("/"),
            action=ctx.arg("action"),
            text=ctx.arg("q"),
        )
        if f.kind and f.kind not in AUTHOR_KINDS:
            raise UsageError(
                f"unknown author kind {f.kind!r}; use one of {', '.join(AUTHOR_KINDS)}"
            )
        if f.action and f.action not in ACTION_FAMILIES:
            EventType.parse(f.action)
        if f.file:
            check_relative(f.file)
        return f

    def indexed(self) -> EventFilter | None:
        """The filters the ledger's index answers (None: no filter at all)."""
        where = EventFilter(
            branch=self.branch or None,
            operation_id=self.operation or None,
            author=self.author or None,
            author_kind=self.kind or None,
            action_type=(
                EventType.parse(self.action)
                if self.action and self.action not in ACTION_FAMILIES
                else None
            ),
            path=self.file or None,
        )
        return None if where == EventFilter() and not self.action else where

    def query(self) -> dict[str, str]:
        """The filters as query parameters (empty ones left out)."""
        pairs = {
            "kind": self.kind,
            "author": self.author,
            "op": self.operation,
            "branch": self.branch,
            "file": self.file,
            "action": self.action,
            "q": self.text,
        }
        return {k: v for k, v in pairs.items() if v}

    def matches_text(self, event: Event) -> bool:
        """The free-text filter: rationale, type, author, operation, branch, files."""
        if not self.text:
            return True
        needle = self.text.lower()
        hay = " ".join(
            (
                event.rationale,
                event.action_type,
                event.author.name,
                event.operation_id,
                event.branch,
                *event.files[:50],
            )
        )
        return needle in hay.lower()


def page_of_events(
    repo: Repository, filters: Filters, before: int | None
) -> tuple[list[Event], int | None]:
    """A page of events, newest first, older than ``before``; and the ``before`` of the next."""
    driver = repo.ledger.driver
    where = filters.indexed()
    records: Iterator[Any]
    if where is None:
        records = driver.scan(stop=before, kind="event", reverse=True)
    else:
        family = ACTION_FAMILIES.get(filters.action, ())
        if family:  # e.g. 'approval': approval_requested and approval_decided, newest first
            found_by = [driver.find_events(replace(where, action_type=t)) for t in family]
            merged: Iterator[Any] = heapq.merge(*found_by, key=lambda r: -r.seq)
        else:
            merged = driver.find_events(where)
        records = (r for r in merged if before is None or r.seq < before)
    found: list[Event] = []
    last_seq: int | None = None
    for looked, record in enumerate(records, 1):
        last_seq = record.seq
        event = Event.from_json(record.body, seq=record.seq)
        if filters.matches_text(event):
            found.append(event)
        if len(found) >= PAGE or looked >= SCAN_MAX:
            break
    else:
        return found, None
    return found, last_seq


@dataclass
class Row:
    """One event as the timeline draws it."""

    event: Event
    lane: int
    state: bool
    overlay: str
    flags: list[str] = field(default_factory=list)
    #: the lane of the parent's branch, when it is another branch's (a fork)
    fork_from: int | None = None
    #: a merge: the lane of its right side's branch, which joins this one
    merge_from: int | None = None


@dataclass
class Group:
    """Consecutive events of one operation."""

    operation: str
    rows: list[Row]

    @property
    def title(self) -> str:
        """What the operation did, from its newest event with a rationale."""
        for row in self.rows:
            if row.event.rationale:
                return row.event.rationale.splitlines()[0]
        return self.rows[0].event.action_type

    @property
    def authors(self) -> list[str]:
        """Who made the operation's events."""
        return sorted({f"{r.event.author.name} ({r.event.author.kind})" for r in self.rows})


def build_rows(repo: Repository, events: list[Event]) -> tuple[list[Group], list[str]]:
    """Group ``events`` by operation and place each on its branch's lane.

    A state event whose parent is on another branch draws a fork from that
    branch's lane, and a merge draws the lane of its right side joining it,
    whether or not that parent is on this page (its branch is looked up).
    """
    view = repo.view()
    branch_of: dict[str, str] = {e.id: e.branch for e in events}

    def branch(event_id: str) -> str | None:
        if event_id not in branch_of:
            try:
                branch_of[event_id] = repo.event(event_id).branch
            except StrataError:  # pruned or unknown: nothing to draw
                return None
        return branch_of[event_id]

    forks: dict[str, str] = {}
    joins: dict[str, str] = {}
    for event in events:
        if not event.is_state:
            continue
        parent = branch(event.parent_event_id) if event.parent_event_id else None
        if parent is not None and parent != event.branch:
            forks[event.id] = parent
        right = event.data.get("right") if event.action_type == EventType.MERGE else None
        joined = branch(str(right)) if right else None
        if joined is not None:
            joins[event.id] = joined
    lanes = sorted(
        {*view.branches, *(e.branch for e in events), *forks.values(), *joins.values()},
        key=lambda b: (b != view.head_branch, b),
    )
    lane_of = {b: i for i, b in enumerate(lanes)}
    flags: dict[str, list[str]] = {}
    for name, mark in view.bookmarks.items():
        flags.setdefault(mark.target, []).append(name)
    groups: list[Group] = []
    for event in events:
        row = Row(
            event,
            lane_of[event.branch],
            event.is_state,
            OVERLAYS.get(event.action_type, ""),
            flags.get(event.id, []),
        )
        if event.id in forks:
            row.fork_from = lane_of[forks[event.id]]
        if event.id in joins:
            row.merge_from = lane_of[joins[event.id]]
        if event.action_type == EventType.CHECKPOINT:
            row.flags.append("checkpoint")
        op = event.operation_id or event.id
        if groups and groups[-1].operation == op:
            groups[-1].rows.append(row)
        else:
            groups.append(Group(op, [row]))
    return groups, lanes


def _before(ctx: Ctx) -> int | None:
    raw = ctx.arg("before")
    if not raw:
        return None
    if not raw.isdigit():
        raise UsageError(f"'before' must be a number, not {raw!r}")
    return int(raw)


def timeline_page(ctx: Ctx) -> Response:
    """The timeline (``fragment=1``: only its list, for the live refresh)."""
    repo = ctx.ws.repo
    filters = Filters.of(ctx)
    before = _before(ctx)
    # the newest page follows the ledger (studio.js): it holds everything up to the ledger's
    # newest record, shown or not, read first so that a record made meanwhile reloads it
    newest = repo.ledger.driver.last() if before is None else None
    events, next_before = page_of_events(repo, filters, before)
    groups, lanes = build_rows(repo, events)
    at = ctx.arg("at")
    view = repo.view()
    values: dict[str, Any] = {
        "groups": groups,
        "lanes": lanes,
        "filters": filters,
        "query": filters.query(),
        "before": before,
        "next_before": next_before,
        "head": view.head_event,
        "head_branch": view.head_branch,
        "kinds": AUTHOR_KINDS,
        "actions": sorted([*ACTION_FAMILIES, *(t.value for t in EventType)]),
        "branches": sorted(view.branches),
        "states": [r.event for g in reversed(groups) for r in reversed(g.rows) if r.state],
        "last_seq": newest.seq if newest is not None else (events[0].seq if events else 0),
    }
    if ctx.arg("fragment") == "1":
        return ctx.render("timeline_rows.html", **values)
    values["tree"] = tree_values(ctx, at or "HEAD", "") if view.head_event else None
    return ctx.render("timeline.html", **values)


def tree_values(ctx: Ctx, at: str, folder: str) -> dict[str, Any]:
    """The tree panel's values: ``folder`` of the point ``at``."""
    repo = ctx.ws.repo
    point = repo.resolve(at)
    tree = point.tree
    if folder:
        check_relative(folder)
        entry = lookup(repo.objects, point.tree, folder)
        if entry is None or entry.kind != "dir":
            raise PathNotFound(folder, at)
        tree = entry.oid
    entries: list[TreeEntry] = read_tree(repo.objects, tree)
    at_id = point.event.id if point.event else at
    return {
        "at": at_id,
        "at_event": point.event,
        "folder": folder,
        "parent": folder.rsplit("/", 1)[0] if "/" in folder else "",
        "entries": entries[:TREE_MAX],
        "more": max(0, len(entries) - TREE_MAX),
    }


def tree_page(ctx: Ctx) -> Response:
    """The tree panel at a point (a fragment the play head loads, or a page)."""
    values = tree_values(ctx, ctx.arg("at") or "HEAD", ctx.arg("dir").strip("/"))
    template = "tree_panel.html" if ctx.arg("fragment") == "1" else "tree.html"
    return ctx.render(template, tree=values)


def _file_bytes(ctx: Ctx) -> tuple[str, str, TreeEntry, bytes | None]:
    repo = ctx.ws.repo
    at = ctx.arg("at") or "HEAD"
    path = check_relative(ctx.arg("path"))
    point = repo.resolve(at)
    entry = lookup(repo.objects, point.tree, path)
    if entry is None:
        raise PathNotFound(path, at)
    if entry.kind == "dir":
        raise Refused(400, f"{path} is a folder: open it in the tree")
    data = (
        repo.objects.get(entry.oid) if entry.size <= SHOW_MAX or entry.kind == "symlink" else None
    )
    return at, path, entry, data


def file_page(ctx: Ctx) -> Response:
    """A file as it was at a point: text, an image, a table, a document's text, or its size."""
    at, path, entry, data = _file_bytes(ctx)
    image = image_type(path)
    lines = table = None
    note = ""
    suffix = suffix_of(path)
    if data is not None and image is None and entry.kind == "file":
        try:
            if suffix in TABLES:
                found = rows(suffix, data)
                table = table_diff(found, found)
            elif suffix in DOCUMENTS:
                data, note = document_text(suffix, data), f"the {suffix} file's text"
        except (ValueError, csv.Error, Unreadable) as exc:
            note = f"not read as a {'table' if suffix in TABLES else 'document'}: {exc}"
    if data is not None and image is None and table is None and b"\0" not in data[:8192]:
        shown_as = path + ".txt" if suffix in DOCUMENTS else path
        lines = highlight_lines(shown_as, data.decode("utf-8", "replace"))
    return ctx.render(
        "file.html",
        at=at,
        path=path,
        entry=entry,
        lines=lines,
        image=image,
        table=table,
        note=note,
        link=entry.kind == "symlink",
    )


def raw_file(ctx: Ctx) -> Response:
    """An image's bytes (the types of ``previews.IMAGES``; nothing else is served raw)."""
    _, path, entry, data = _file_bytes(ctx)
    kind = image_type(path)
    if kind is None or entry.kind != "file" or data is None:
        raise Refused(415, "only images are served as they are")
    guessed = mimetypes.guess_type(path)[0]
    return Response(
        data,
        media_type=guessed if guessed == kind else kind,
        headers={"Content-Disposition": "inline"},
    )


def compare(ctx: Ctx) -> Response:
    """The two points picked on the timeline, opened in the diff viewer (older first)."""
    picked = ctx.request.query_params.getlist("pick")
    if len(picked) != 2:
        raise UsageError(f"pick two points to compare ({len(picked)} picked)")
    repo = ctx.ws.repo
    points = sorted((repo.resolve(p) for p in picked), key=lambda p: p.event.seq if p.event else 0)
    a, b = (p.event.id if p.event else "" for p in points)
    return RedirectResponse(ctx.url(f"diff?a={a}&b={b}"), status_code=303)


def act(ctx: Ctx) -> Response:
    """Rewind, restore a file, bookmark, undo or redo: the CLI's call, the CLI's report."""
    repo = ctx.ws.repo
    what = ctx.request.path_params["what"]
    back = ctx.url("timeline")
    if what == "rewind":
        ref = ctx.arg("ref")
        result = repo.rewind(ref, branch=ctx.arg("branch") or None)
        return ctx.done("Rewind", rewind_lines(result, "Rewound to"), back)
    if what == "restore":
        ref, path = ctx.arg("ref"), check_relative(ctx.arg("path"))
        result = repo.restore(ref, [path])
        return ctx.done("Restore", rewind_lines(result, f"Restored {path} from"), back)
    if what == "bookmark":
        name, ref = ctx.arg("name"), ctx.arg("ref") or "HEAD"
        if not name:
            raise UsageError("name the bookmark")
        done = repo.bookmark("add", name, ref=ref)
        return ctx.done("Bookmark", [f"Bookmark {done.name} -> {short(done.target)}"], back)
    if what == "undo":
        undone = repo.undo()
        return ctx.done(
            "Undo",
            [f"Undid {undone.command} {short(undone.undid)} ('strata redo' re-applies it)"],
            back,
        )
    if what == "redo":
        redone = repo.redo()
        return ctx.done("Redo", [f"Redid {redone.command} {short(redone.redid)}"], back)
    raise Refused(404, f"no action {what!r}")


def rewind_lines(result: Any, verb: str) -> list[str]:
    """What ``strata rewind``/``restore`` print for ``result``, line by line."""
    lines = []
    if result.auto_save is not None:
        sid = short(result.auto_save.id)
        lines.append(f"Auto-saved unrecorded work as {sid} ('strata rewind {sid}' brings it back)")
    target = result.target.event.id if result.target.event else result.target.snapshot_id
    if result.event is None and result.auto_save is None and verb == "Rewound to":
        return [f"Already at {short(target)} with nothing unrecorded: nothing to do"]
    n = len(result.restored_paths)
    lines.append(f"{verb} {short(target)}: {n} path{'s' if n != 1 else ''} written or removed")
    if result.next_branch is not None:
        lines.append(
            f"HEAD is not a branch tip: the next snapshot will start branch {result.next_branch}"
        )
    lines += [
        f"warning: left {p} untouched: it holds content that was not recorded"
        for p in result.skipped_paths
    ]
    return lines
