"""Operation groups: one user action (an agent's prompt) whose steps are operations of their own.

A group is not a record of its own: each operation that is a step of it
carries it (``group`` in the operation record, see ``docs/format.md``), and
its events take the group's id as their ``operation_id``. Kept apart from
:mod:`strata.core.core` so that a snapshot, which never makes one, does not pay
for the dataclass.

A group held open across model calls (a Workshop turn, a host run) is
recorded step by step, the write lock taken and given back for each: the
process that holds it may be killed between two steps. :func:`open_group`
holds a lease for it (``REPO/groups/<id>.lease``, :mod:`strata.core.lease`:
an ``flock`` the kernel drops when the process dies, so a reused pid never
makes a dead group look alive). The next command that writes finds a lease
nobody holds (:func:`recover_groups`, called by :meth:`Core.writing
<strata.core.Core.writing>` with the write lock held): the finisher its
feature registered for the lease's ``kind`` records what the dead process
left unrecorded (a Workshop turn's interrupted answer), inside the group;
then the group is closed by a ``group close`` operation marked
``interrupted``, so ``strata op log`` shows it ended. A lease whose group has
no step recorded yet goes without a trace.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strata.core.lease import SUFFIX, Lease, stale_leases
from strata.errors import StrataError
from strata.layout import WORKSHOP_LEASE
from strata.ledger.events import Author

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from strata.layout import Layout
    from strata.ledger.ledger import Ledger

#: the command of the operation that closes a group its process left open
CLOSE = "group close"
#: who closes it
_CLOSER = Author("strata", "system")
#: what a feature registers to finish its kind of group: ``finisher(core, lease info)``,
#: called inside the group with the write lock held
Finisher = Callable[[Any, dict[str, Any]], object]


class Grouping(Protocol):
    """What groups use of an open repository (a :class:`~strata.core.Core`)."""

    layout: Layout
    ledger: Ledger
    group_finishers: dict[str, Finisher]
    #: the groups closed as interrupted since the repository was opened (strata recover says)
    closed_groups: list[dict[str, Any]]

    def grouped(self, group: Group | None) -> AbstractContextManager[None]:
        """Make every operation recorded inside the block a step of ``group``."""
        ...

    def transaction(self, command: str, author: Author | None = None, **details: Any) -> Any:
        """A :class:`~strata.core.Transaction` (the write lock held)."""
        ...


@dataclass(frozen=True)
class Group:
    """One user action whose steps are operations of their own: an agent's prompt.

    Each of its operations carries it (``group`` in the operation record) and its
    events take its id as their ``operation_id``; ``strata undo`` reverses the
    whole group, ``strata op log`` shows it as one line. ``data`` holds what
    links it to the agent's conversation (``session_id``, ``transcript_path``).
    """

    id: str
    kind: str
    title: str
    author: Author
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The group as its operations record it."""
        return {
            **self.data,
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "author": self.author.to_json(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Group:
        """The inverse of :meth:`to_json`."""
        data = {k: v for k, v in raw.items() if k not in ("id", "kind", "title", "author")}
        return cls(
            str(raw["id"]),
            str(raw["kind"]),
            str(raw["title"]),
            Author.from_json(raw["author"]),
            data,
        )


@contextmanager
def open_group(
    core: Grouping, group: Group | None, kind: str, lease_id: str, **info: Any
) -> Iterator[Lease]:
    """Hold a group open: a lease says it is in progress, and every operation joins ``group``.

    ``kind`` names the finisher the next writer calls should this process die
    (:attr:`Core.group_finishers <strata.core.Core.group_finishers>`); ``info``
    is kept in the lease for it (:meth:`Lease.update` adds more as the work
    goes on, a ``group`` key names the group once it is known). ``group`` may
    be None for an action that is one operation (a Workshop rewind): the lease
    then only lets the next writer finish it. The lease goes when the block
    ends, however it ends: a failure inside it is the feature's to record.
    """
    held = {
        "kind": kind,
        "pid": os.getpid(),
        **({"group": group.to_json()} if group is not None else {}),
        **info,
    }
    with Lease.acquire(core.layout.groups, lease_id, held) as lease:
        if group is None:
            yield lease
            return
        with core.grouped(group):
            yield lease


def recover_groups(core: Grouping) -> list[str]:
    """Finish, then close, every group whose process died; return their lease ids.

    Runs with the write lock held, after the journals and the features'
    recoverers (a killed run's interrupted record joins the group first). A
    finisher that fails is not retried: the group is closed all the same
    (the failure kept in the closing operation), so a write never stays
    blocked by a dead process's leftovers.
    """
    stale = stale_leases(core.layout.groups)
    # (read for a repository a Workshop turn was killed in before groups had their folder)
    stale += [i for i in stale_leases(core.layout.workshop) if i.get("kind") == WORKSHOP_LEASE]
    if not stale:
        return []
    done: list[str] = []
    for info in stale:
        group = _lease_group(info)
        finisher = core.group_finishers.get(str(info.get("kind")))
        failed: str | None = None
        with core.grouped(group):
            if finisher is not None:
                try:
                    finisher(core, info)
                except (StrataError, KeyError, TypeError, ValueError) as exc:
                    # (a lease an older or damaged strata wrote): closed all the same
                    failed = f"{type(exc).__name__}: {exc}"
            if group is not None and has_steps(core, group.id):
                close_group(core, group, pid=info.get("pid"), error=failed)
        Path(str(info["path"])).unlink(missing_ok=True)
        done.append(str(info.get("run_id") or Path(str(info["path"])).name[: -len(SUFFIX)]))
    return done


def _lease_group(info: dict[str, Any]) -> Group | None:
    """The group a lease names (None: none, or not one this version can read)."""
    raw = info.get("group")
    try:
        return Group.from_json(raw) if isinstance(raw, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def close_group(
    core: Grouping, group: Group, *, pid: object = None, error: str | None = None
) -> str:
    """Record that ``group``'s process died before it ended: a ``group close`` operation.

    The operation moves no ref and holds no event, so ``strata undo`` steps
    over it to the group's own steps; its details say the group was
    ``interrupted`` (and by which process, and what could not be finished).
    Returns the operation's id.
    """
    with core.grouped(group), core.transaction(CLOSE, _CLOSER) as tx:
        tx.details.update(
            interrupted=True,
            **({"pid": pid} if isinstance(pid, int) else {}),
            **({"error": error} if error else {}),
        )
        closed = str(tx.id)
    core.closed_groups.append(
        {
            "kind": group.kind,
            "id": group.id,
            "title": group.title,
            "closed_by": closed,
            "error": error,
        }
    )
    return closed


def has_steps(core: Grouping, group_id: str) -> bool:
    """True when an operation of group ``group_id`` is in the ledger (its events name it)."""
    from strata.ledger.driver import EventFilter

    return any(core.ledger.driver.find_events(EventFilter(operation_id=group_id), limit=1))
