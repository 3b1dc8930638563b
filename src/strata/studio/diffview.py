"""The diff viewer: unified or side by side, highlighted, each hunk with who made it.

Hunks come from libgit2's xdiff (pygit2), the diff ``strata diff`` prints.
Each hunk is credited line by line (:func:`strata.diff.blame.blame`): the
state events between the two points on ``b``'s line (its first parents) that
changed the file are replayed oldest first, each line is credited to the
event that last wrote it (a removed line to the event that removed it), and
the hunk names every event that wrote some of its lines, the most lines
first. A
change is shown a page at a time (:data:`PAGE_LINES` lines), so a 10,000-line
file never reaches the browser whole. Binary files show their sizes and
hashes; images (see :data:`strata.studio.previews.IMAGES`) are shown before
and after, side by side.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import json
from dataclasses import dataclass, field
from typing import Any

import pygit2
from markupsafe import Markup
from starlette.responses import Response

from strata.diff.blame import Step, blame, carried
from strata.diff.patch import BIG_FILE_BYTES, is_binary
from strata.diff.tree import Change
from strata.errors import ObjectMissing, StrataError, UsageError
from strata.ids import ObjectId
from strata.kb.extract import Unreadable
from strata.ledger.driver import EventFilter
from strata.ledger.events import Event, EventType
from strata.repo import Repository
from strata.sandbox.paths import check_relative
from strata.store.objects import ObjectStore
from strata.store.tree import EMPTY_TREE, lookup
from strata.studio.context import Ctx
from strata.studio.guard import Refused
from strata.studio.previews import (
    DOCUMENTS,
    TABLES,
    Table,
    document_text,
    image_type,
    rows,
    suffix_of,
    table_diff,
)
from strata.studio.render import highlight_lines

#: diff lines on one page of the viewer
PAGE_LINES = 1500
#: events that changed a file replayed to credit its lines (older ones: credited to the oldest)
PROVENANCE_MAX = 50
#: state events walked back from ``b`` to find its line between the two points
LINE_MAX = 2000


@dataclass
class Line:
    """One line of a hunk: ``kind`` is ``ctx``, ``add`` or ``del``."""

    kind: str
    old: int | None
    new: int | None
    html: Markup
    #: the event that last wrote an added line or removed a deleted one
    by: Event | None = None


@dataclass
class Hunk:
    """A hunk and the event that made it."""

    header: str
    lines: list[Line]
    by: Event | None = None

    @property
    def credits(self) -> list[tuple[Event, int]]:
        """Each event that wrote or removed some of the hunk's lines, with how many; most first."""
        counts: dict[str, int] = {}
        events: dict[str, Event] = {}
        for line in self.lines:
            if line.kind != "ctx" and line.by is not None:
                counts[line.by.id] = counts.get(line.by.id, 0) + 1
                events[line.by.id] = line.by
        if not counts and self.by is not None:
            return [(self.by, 0)]
        order = sorted(counts, key=lambda e: (-counts[e], -(events[e].seq or 0)))
        return [(events[e], counts[e]) for e in order]

    def pairs(self) -> list[tuple[Line | None, Line | None]]:
        """The lines side by side: removed lines beside the added lines that replace them."""
        out: list[tuple[Line | None, Line | None]] = []
        dels: list[Line] = []
        adds: list[Line] = []

        def flush() -> None:
            for i in range(max(len(dels), len(adds))):
                out.append((dels[i] if i < len(dels) else None, adds[i] if i < len(adds) else None))
            dels.clear()
            adds.clear()

        for line in self.lines:
            if line.kind == "del":
                dels.append(line)
            elif line.kind == "add":
                adds.append(line)
            else:
                flush()
                out.append((line, line))
        flush()
        return out


@dataclass
class FileView:
    """One changed path on the page."""

    index: int
    change: Change
    kind: str  # text, binary, image, big, link
    hunks: list[Hunk] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    image: str | None = None
    truncated: bool = False
    table: Table | None = None
    note: str = ""
    #: a text file's two sides (what its lines are credited from)
    before: bytes | None = None
    after: bytes | None = None


@functools.lru_cache(maxsize=64)
def _highlighted(store_key: int, path: str, oid: ObjectId, data: bytes) -> list[Markup]:
    return highlight_lines(path, data.decode("utf-8", "replace"))


def _point(repo: Repository, ref: str) -> tuple[ObjectId, Event | None]:
    if not ref:
        return EMPTY_TREE, None
    point = repo.resolve(ref)
    return point.tree, point.event


def _position(raw: str) -> tuple[int, int, int]:
    if not raw:
        return 0, 0, 0
    try:
        f, h, line = (int(x) for x in raw.split("."))
    except ValueError:
        raise UsageError(f"bad page position {raw!r} (FILE.HUNK.LINE)") from None
    if min(f, h, line) < 0:
        raise UsageError(f"bad page position {raw!r} (FILE.HUNK.LINE)")
    return f, h, line


def line_of(repo: Repository, event_a: Event | None, event_b: Event) -> set[str] | None:
    """The ids of ``event_b`` and its first parents newer than ``event_a`` (None: too many)."""
    low = event_a.seq if event_a else 0
    found: set[str] = set()
    event: Event | None = event_b
    while event is not None and (event.seq or 0) > low:
        if event_a is not None and event.id == event_a.id:
            break
        found.add(event.id)
        if len(found) > LINE_MAX:
            return None
        event = repo.event(event.parent_event_id) if event.parent_event_id else None
    return found


def provenance(
    repo: Repository, path: str, low: int, high: int, line: set[str] | None = None
) -> list[Event]:
    """The state events after seq ``low`` up to ``high`` that changed ``path``, newest first.

    ``line``: only these events (``b``'s line, see :func:`line_of`).
    """
    found: list[Event] = []
    for record in repo.ledger.driver.find_events(EventFilter(path=path)):
        if record.seq > high:
            continue
        if record.seq <= low or len(found) >= PROVENANCE_MAX:
            break
        event = Event.from_json(record.body, seq=record.seq)
        if event.is_state and (line is None or event.id in line):
            found.append(event)
    return found


def _version(repo: Repository, event: Event, path: str) -> bytes:
    entry = lookup(repo.objects, repo.tree_of(event), path)
    if entry is None or entry.kind != "file" or entry.size > BIG_FILE_BYTES:
        return b""
    data: bytes = repo.objects.get(entry.oid)
    return data


def _right_side(
    repo: Repository, merge: Event, path: str, merged: bytes, by_id: dict[str, Event]
) -> list[str | None] | None:
    """Who wrote each line of a merge's ``merged`` version that it took from its right side."""
    right_id, base_id = merge.data.get("right"), merge.data.get("base")
    try:
        right = repo.event(str(right_id)) if right_id else None
        base = repo.event(str(base_id)) if base_id else None
    except StrataError:  # pruned: the merge keeps the credit
        return None
    if right is None:
        return None
    line = line_of(repo, base, right)
    events = provenance(repo, path, base.seq if base else 0, right.seq, line)
    by_id.update((e.id, e) for e in events)
    first = _version(repo, base, path) if base is not None else b""
    found = blame(first, [(e.id, _version(repo, e, path)) for e in reversed(events)])
    return carried(_version(repo, right, path), merged, found.written)


def credit_lines(
    repo: Repository, view: FileView, events: list[Event], event_b: Event | None, after: bytes
) -> None:
    """Set each added or removed line's ``by``: the event that last wrote or removed it.

    A merge on the way credits the lines it took from its right side to the
    events of that side that wrote them (one level: a merge there keeps them).
    """
    path = view.change.path
    before = view.before or b""
    by_id: dict[str, Event] = {e.id: e for e in events}
    steps: list[Step] = []
    for event in reversed(events):
        content = _version(repo, event, path)
        per_line = None
        if event.action_type == EventType.MERGE:
            per_line = _right_side(repo, event, path, content, by_id)
        steps.append((event.id, content) if per_line is None else (event.id, content, per_line))
    if event_b is not None:
        steps.append((event_b.id, after))
        by_id.setdefault(event_b.id, event_b)
    found = blame(before, steps)
    for hunk in view.hunks:
        for line in hunk.lines:
            if line.kind == "add" and line.new and line.new <= len(found.written):
                who = found.written[line.new - 1]
                line.by = by_id.get(who) if who else None
            elif line.kind == "del" and line.old:
                who = found.removed.get(line.old - 1)
                line.by = by_id.get(who) if who else None


def diff_page(ctx: Ctx) -> Response:
    """The difference from point ``a`` to point ``b`` (``a`` empty: from nothing)."""
    repo = ctx.ws.repo
    a, b = ctx.arg("a"), ctx.arg("b")
    if not b:
        raise UsageError("name the point to show: ?a=REF&b=REF")
    mode = ctx.arg("mode") or "unified"
    if mode not in ("unified", "split"):
        raise UsageError(f"unknown mode {mode!r}: unified or split")
    only = ctx.arg("path")
    if only:
        check_relative(only)
    tree_a, event_a = _point(repo, a)
    tree_b, event_b = _point(repo, b)
    diff = repo.diff_trees(tree_a, tree_b, paths=[only] if only else None)
    start = _position(ctx.arg("pos"))
    files, next_pos = render_files(repo, diff.changes, start, event_a, event_b)
    return ctx.render(
        "diff.html",
        a=a,
        b=b,
        event_a=event_a,
        event_b=event_b,
        mode=mode,
        path=only,
        diff=diff,
        files=files,
        next_pos=next_pos,
        pos=ctx.arg("pos"),
    )


def render_files(
    repo: Repository,
    changes: list[Change],
    start: tuple[int, int, int],
    event_a: Event | None,
    event_b: Event | None,
    *,
    store: ObjectStore | None = None,
) -> tuple[list[FileView], str | None]:
    """The files of one page from position ``start``; and the next page's position.

    ``store`` holds the blobs (default: the repository's; an overlay of the
    working tree's scan to show unrecorded files).
    """
    low = event_a.seq if event_a else 0
    high = event_b.seq if event_b else 1 << 62
    budget = PAGE_LINES
    out: list[FileView] = []
    f0, h0, l0 = start
    line = line_of(repo, event_a, event_b) if event_b else None
    for index in range(f0, len(changes)):
        change = changes[index]
        view = _file_view(store or repo.objects, index, change)
        view.events = provenance(repo, change.path, low, high, line) if event_b else []
        if view.kind == "text" and not view.note and view.after is not None and event_b:
            credit_lines(repo, view, view.events, event_b, view.after)
        out.append(view)
        hunks = view.hunks
        kept: list[Hunk] = []
        first_hunk = h0 if index == f0 else 0
        for h in range(first_hunk, len(hunks)):
            hunk = hunks[h]
            skip = l0 if (index == f0 and h == h0) else 0
            lines = hunk.lines[skip:]
            hunk.by = view.events[0] if view.events else event_b
            if len(lines) > budget:
                kept.append(Hunk(hunk.header, lines[:budget], hunk.by))
                view.hunks = kept
                view.truncated = True
                return out, f"{index}.{h}.{skip + budget}"
            budget -= len(lines)
            kept.append(Hunk(hunk.header, lines, hunk.by))
        view.hunks = kept
        budget -= 3  # the file's header
        if budget <= 0 and index + 1 < len(changes):
            return out, f"{index + 1}.0.0"
    return out, None


def _blob(store: ObjectStore, entry: Any) -> bytes | None:
    if entry is None or entry.kind == "dir":
        return b"" if entry is None else None
    if entry.size > BIG_FILE_BYTES:
        return None
    data: bytes = store.get(entry.oid)
    return data


def _file_view(store: ObjectStore, index: int, change: Change) -> FileView:
    old, new = change.old, change.new
    if (old and old.kind == "dir") or (new and new.kind == "dir"):
        return FileView(index, change, "folder")
    image = image_type(change.path)
    if image:
        return FileView(index, change, "image", image=image)
    before, after = _blob(store, old), _blob(store, new)
    if before is None or after is None:
        return FileView(index, change, "big")
    suffix = suffix_of(change.path)
    if suffix in TABLES:
        try:
            table = table_diff(rows(suffix, before), rows(suffix, after))
        except (ValueError, csv.Error) as exc:
            return FileView(index, change, "binary", note=f"not read as a table: {exc}")
        return FileView(index, change, "table", table=table)
    note = ""
    if suffix in DOCUMENTS:
        try:
            before, after = document_text(suffix, before), document_text(suffix, after)
        except Unreadable as exc:
            return FileView(index, change, "binary", note=f"not read as text: {exc.reason}")
        note = f"the {suffix} file's text"
    if is_binary(before) or is_binary(after):
        return FileView(index, change, "binary")
    patch = pygit2.Patch.create_from(before, after, context_lines=3)
    key = id(store)
    shown_as = change.path + ".txt" if note else change.path
    old_lines = _highlighted(key, shown_as, old.oid, before) if old else []
    new_lines = _highlighted(key, shown_as, new.oid, after) if new else []
    hunks = []
    for hunk in patch.hunks:
        lines = []
        for line in hunk.lines:
            if line.origin == "+":
                lines.append(Line("add", None, line.new_lineno, _at(new_lines, line.new_lineno)))
            elif line.origin == "-":
                lines.append(Line("del", line.old_lineno, None, _at(old_lines, line.old_lineno)))
            elif line.origin == " ":
                html = _at(new_lines, line.new_lineno)
                lines.append(Line("ctx", line.old_lineno, line.new_lineno, html))
        hunks.append(Hunk(hunk.header.strip(), lines))
    return FileView(index, change, "text", hunks, note=note, before=before, after=after)


def _at(lines: list[Markup], number: int) -> Markup:
    return lines[number - 1] if 0 < number <= len(lines) else Markup("")


def object_page(ctx: Ctx) -> Response:
    """A stored trace or artifact by id, as escaped text (JSON pretty-printed)."""
    repo = ctx.ws.repo
    oid = ctx.request.path_params["oid"]
    if not oid.isalnum() or len(oid) > 128:
        raise Refused(400, "an object id is letters and digits")
    try:
        data = repo.objects.get(ObjectId(oid))
    except (KeyError, ObjectMissing):
        raise Refused(404, f"no object {oid} in this store") from None
    text = data[: 4 << 20].decode("utf-8", "replace")
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return ctx.render("object.html", oid=oid, lines=highlight_lines("trace.json", text))
