"""Resolving the refs a user types into points of history.

A ref is an event id, a snapshot id (or a unique prefix of either, four
characters at least), a run id (the id ``strata run`` prints), a branch or
bookmark name, ``HEAD`` (or ``@``), ``REF~N``, or ``SCHEME:VALUE`` for a
scheme a feature package registered (``git:<commit>``). A prefix that names
more than one thing is refused with :class:`AmbiguousRef`, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from strata.core.results import Point
from strata.errors import AmbiguousRef, UnknownRef
from strata.ids import EVENT_PREFIX, HEX_PREFIX, ObjectId
from strata.ledger.driver import EventFilter
from strata.ledger.events import Event
from strata.ledger.ledger import Ledger, View


class History(Protocol):
    """What resolving a ref reads of an open repository (a :class:`~strata.core.core.Core`)."""

    ledger: Ledger

    @property
    def ref_schemes(self) -> Mapping[str, Callable[[Any, str], ObjectId]]:
        """``SCHEME:VALUE`` refs a feature package resolves (each is given the repository)."""

    def event(self, event_id: str) -> Event:
        """The event with this full id."""

    def head(self) -> Event | None:
        """The event HEAD points at."""

    def view(self) -> View:
        """Where HEAD, every branch and every bookmark point."""

    def point(self, event: Event, label: str = "") -> Point:
        """The point of a state event."""


_ANCESTOR_RE = re.compile(r"(?P<base>.+?)~(?P<n>\d*)")


def resolve_ref(core: History, ref: str) -> Point:
    """Resolve ``ref`` (see the module docs) to a point of history."""
    ref = ref.strip()
    if not ref:
        raise UnknownRef(ref)
    m = _ANCESTOR_RE.fullmatch(ref)
    if m:
        point = resolve_ref(core, m.group("base"))
        steps = int(m.group("n") or "1")
        event = point.event
        for _ in range(steps):
            if event is None or event.parent_event_id is None:
                raise UnknownRef(ref, hint=f"{m.group('base')} has fewer than {steps} ancestors")
            event = core.event(event.parent_event_id)
        assert event is not None
        return core.point(event, ref)
    if ref in ("HEAD", "@"):
        head = core.head()
        if head is None:
            raise UnknownRef(ref, hint="nothing is recorded yet: run 'strata snapshot'")
        return core.point(head, ref)
    scheme, sep, value = ref.partition(":")
    if sep and scheme in core.ref_schemes:
        return Point(core.ref_schemes[scheme](core, value), None, None, ref)
    driver = core.ledger.driver
    if EVENT_PREFIX.fullmatch(ref):
        found = _event_or_run(core, ref)
        if found is not None:
            return core.point(found, ref)
    if HEX_PREFIX.fullmatch(ref):
        snaps = driver.snapshot_ids_with_prefix(ref)
        if len(snaps) > 1:
            raise AmbiguousRef(ref, snaps)
        if snaps:
            newest = driver.newest_with_snapshot(snaps[0])
            assert newest is not None
            return core.point(Event.from_json(newest.body, seq=newest.seq), ref)
    view = core.view()
    if ref in view.branches:
        return core.point(core.event(view.branches[ref]), ref)
    if ref in view.bookmarks:
        return core.point(core.event(view.bookmarks[ref].target), ref)
    raise UnknownRef(ref)


def _event_or_run(core: History, ref: str) -> Event | None:
    """The state event an event id, or a run id, (or unique prefix) names; None if none."""
    driver = core.ledger.driver
    ids = list(driver.event_ids_with_prefix(ref))
    runs = sorted(
        {
            str(r.body.get("operation_id"))
            for r in driver.find_events(EventFilter(action_type="run"), limit=None)
            if str(r.body.get("operation_id", "")).startswith(ref)
        }
    )
    names = ids + [r for r in runs if r not in ids]
    if len(names) > 1:
        raise AmbiguousRef(ref, names)
    if not names:
        return None
    if ids:
        event = core.event(ids[0])
        if event.snapshot_ref is None:
            anchor = event.anchor_event_id or event.data.get("target_event_id")
            if not anchor:
                raise UnknownRef(ref, hint=f"event {ids[0]} ({event.action_type}) records no files")
            event = core.event(anchor)
        return event
    return run_after_event(core, runs[0])


def run_span(core: History, ref: str) -> tuple[Point, Point] | None:
    """The points before and after the run that ``ref`` (a run id or a unique prefix) names.

    None when ``ref`` names no run (or names an event: event ids come first).
    """
    ref = ref.strip()
    if not EVENT_PREFIX.fullmatch(ref) or _event_or_run(core, ref) is None:
        return None
    if list(core.ledger.driver.event_ids_with_prefix(ref)):
        return None
    found = next(
        (
            r
            for r in core.ledger.driver.find_events(EventFilter(action_type="run"), limit=None)
            if str(r.body.get("operation_id", "")).startswith(ref)
        ),
        None,
    )
    if found is None:
        return None
    after = run_after_event(core, str(found.body["operation_id"]))
    before_ref = (found.body.get("data") or {}).get("workspace", {}).get("before_snapshot")
    if before_ref:
        before = resolve_ref(core, str(before_ref))
    elif after.parent_event_id:
        before = core.point(core.event(after.parent_event_id))
    else:
        return None
    return before, core.point(after, ref)


def run_after_event(core: History, run_id: str) -> Event:
    """The state event holding the files a run left (its ``after`` snapshot)."""
    found = next(
        iter(
            core.ledger.driver.find_events(
                EventFilter(operation_id=run_id, action_type="run"), limit=1
            )
        ),
        None,
    )
    if found is None:
        raise UnknownRef(run_id, hint="see 'strata history --action run'")
    anchor = found.body.get("anchor_event_id")
    if not anchor:
        raise UnknownRef(run_id, hint=f"run {run_id} recorded no snapshot")
    return core.event(str(anchor))
