"""LangGraph's checkpoints kept in the ledger beside the workspace's files: :class:`StrataSaver`.

::

    from strata.integrations.langgraph import StrataSaver

    graph = builder.compile(checkpointer=StrataSaver("project"))
    config = {"configurable": {"thread_id": "1"}}
    graph.invoke(inputs, config, durability="sync")
    earlier = list(graph.get_state_history(config))[2]
    graph.invoke(None, earlier.config, durability="sync")  # that checkpoint's files are back

A checkpointer for graphs whose nodes edit files. Each checkpoint is recorded
beside a snapshot of the workspace, so LangGraph's time travel (resuming from
a checkpoint of ``get_state_history``, forking with ``update_state``) brings
the files back with the state.

What is recorded, all with the operation id ``langgraph:THREAD_ID`` (``strata
history --operation langgraph:THREAD_ID`` lists a thread):

- after each step of the graph (a checkpoint of source ``loop``), a snapshot
  by the graph (``author``, of kind ``agent``; the rationale names the step and
  its nodes), when the step changed files;
- each checkpoint: a ``workspace_snapshot_taken`` annotation (label
  ``langgraph``) anchored at the state event that holds its files, carrying the
  checkpoint, its metadata and its channel values serialized by LangGraph's own
  serializer (``serde``, :class:`JsonPlusSerializer` by default);
- each task's writes (``put_writes``): a ``task_finished`` annotation.

A value whose serialized form is at most :data:`INLINE_LIMIT` bytes is kept in
the event (base64); a larger one is an object of the store (zstd, stored once
however many checkpoints hold it) named in the event's ``artifacts``, which
``strata gc`` keeps as long as the ledger.

When the files move:

- A run that starts from a checkpoint that is not its thread's newest
  (``invoke(None, config)`` with a ``checkpoint_id`` taken from the history)
  rewinds the workspace to that checkpoint's files before its first node runs;
  ``update_state`` on such a checkpoint does the same before recording the
  fork. As with every rewind, unrecorded work is auto-saved first, and the
  next snapshot starts a new branch: the abandoned future stays reachable.
- Any other run (new input, a resume of the newest checkpoint) leaves the
  files as they are, and first records what changed since the last snapshot
  as the person's (``changes made outside the agent``), so the graph's events
  hold only what its nodes changed; ``update_state`` on the newest checkpoint
  does the same.

Run graphs with ``durability="sync"`` (or ``"exit"``). With LangGraph's
default, ``"async"``, a checkpoint is saved while the next step already runs,
and its snapshot could hold part of that step's edits: the saver refuses it
(:class:`~strata.errors.UsageError`). Subgraphs' checkpoints (a non-empty
``checkpoint_ns``) are recorded, but only the root graph moves the files.
``delete_thread`` is not offered: the ledger is append-only.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import threading
from collections.abc import AsyncIterator, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.core.core import OUTSIDE_AGENT
from strata.errors import ExtraNotInstalled, UsageError
from strata.ids import ObjectId
from strata.ledger.events import Author, Event, EventType
from strata.repo import Repository, SnapshotResult

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # the extra is not installed
    raise ExtraNotInstalled(
        "strata.integrations.langgraph", "langgraph", (exc.name or "langgraph").split(".")[0]
    ) from None

__all__ = ["INLINE_LIMIT", "LABEL", "StrataSaver"]

#: the ``label`` of the ``workspace_snapshot_taken`` events that hold checkpoints
LABEL = "langgraph"
#: serialized values up to this size live in the event (base64); larger ones are objects
INLINE_LIMIT = 2048
#: the key LangGraph's loop puts in the config of the lookups it makes when a run starts
#: (``langgraph._internal._constants.CONFIG_KEY_RUNTIME``): how a run is told from a read
RUN_KEY = "__pregel_runtime"
#: the key that carries a run's durability mode in the config ``put`` is given (absent: the
#: default, ``async``)
DURABILITY_KEY = "__pregel_durability"


def operation_of(thread_id: str) -> str:
    """The ``operation_id`` of every event of LangGraph thread ``thread_id``."""
    return f"langgraph:{thread_id}"


@dataclass(frozen=True)
class _Stored:
    """One checkpoint as its event holds it."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    anchor: str
    """The state event holding the checkpoint's files."""
    body: dict[str, Any]
    """The checkpoint without its values, its metadata, its values (serialized)."""

    @classmethod
    def of(cls, event: Event) -> _Stored | None:
        part = event.data.get(LABEL)
        if event.action_type != EventType.WORKSPACE_SNAPSHOT_TAKEN or not isinstance(part, dict):
            return None
        if event.anchor_event_id is None:
            return None
        return cls(
            str(part["thread_id"]),
            str(part["checkpoint_ns"]),
            str(part["checkpoint_id"]),
            part.get("parent_checkpoint_id"),
            str(event.anchor_event_id),
            part,
        )


@dataclass
class _Thread:
    """Everything the ledger holds of one thread, oldest first."""

    checkpoints: dict[tuple[str, str], _Stored]
    writes: dict[tuple[str, str], list[dict[str, Any]]]

    def newest(self, ns: str) -> _Stored | None:
        ids = [cid for n, cid in self.checkpoints if n == ns]
        return self.checkpoints[(ns, max(ids))] if ids else None


def _refuse_async(conf: dict[str, Any]) -> None:
    """Refuse a run with LangGraph's default durability, ``async`` (see the module's notes)."""
    if RUN_KEY in conf and conf.get(DURABILITY_KEY, "async") == "async":
        raise UsageError(
            "the Strata checkpointer needs durability='sync' (or 'exit'): with 'async' a "
            "checkpoint is saved while the next step runs, so its files could hold part "
            "of that step's edits",
            hint="pass durability='sync' to invoke() or stream()",
        )


def _node(task_path: str, task_id: str) -> str:
    """The node a task ran, as far as its path tells (``~__pregel_pull, NODE``)."""
    parts = task_path.split(", ")
    if len(parts) >= 2 and parts[0] == "~__pregel_pull":
        return parts[1]
    return task_path or task_id[:8]


class StrataSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps each checkpoint beside the workspace's files.

    ``workspace`` is an open :class:`~strata.Repository` or the path of a
    workspace (opened here, and closed by :meth:`close`). ``author`` names the
    graph in the ledger (its snapshots are of kind ``agent``). ``serde``
    replaces LangGraph's :class:`JsonPlusSerializer`. See the module's
    documentation for what is recorded and when the files move.
    """

    def __init__(
        self,
        workspace: Repository | str | os.PathLike[str],
        *,
        author: str = "langgraph",
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.owns_repo = not isinstance(workspace, Repository)
        self.repo = (
            workspace if isinstance(workspace, Repository) else Repository.open(Path(workspace))
        )
        self.agent = Author(author, "agent")
        self.guard = threading.RLock()
        #: checkpoints already read or written (an event never changes)
        self.known: dict[tuple[str, str, str], _Stored] = {}
        #: the state event each root run started from, kept for its ``input`` or ``fork`` put
        self.started: dict[str, str] = {}
        #: the nodes whose writes were recorded against each checkpoint (for the rationale)
        self.nodes: dict[tuple[str, str, str], list[str]] = {}

    def close(self) -> None:
        """Close the repository when this saver opened it."""
        if self.owns_repo:
            self.repo.close()

    def __enter__(self) -> StrataSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> _Thread:
        found = _Thread({}, {})
        for event in reversed(self.repo.history(operation=operation_of(thread_id))):
            part = event.data.get(LABEL)
            if not isinstance(part, dict) or part.get("thread_id") != thread_id:
                continue
            stored = _Stored.of(event)
            if stored is not None:
                found.checkpoints[(stored.ns, stored.checkpoint_id)] = stored
                self.known[(thread_id, stored.ns, stored.checkpoint_id)] = stored
            elif event.action_type == EventType.TASK_FINISHED:
                key = (str(part["checkpoint_ns"]), str(part["checkpoint_id"]))
                found.writes.setdefault(key, []).append(part)
        return found

    def _load(self, ref: dict[str, str]) -> Any:
        if "base64" in ref:
            raw = base64.b64decode(ref["base64"])
        else:
            raw = self.repo.objects.get(ObjectId(ref["object"]))
        return self.serde.loads_typed((ref["type"], raw))

    def _pending(self, records: list[dict[str, Any]]) -> list[PendingWrite]:
        """A checkpoint's writes: a task's regular write once (the first), a special one last."""
        chosen: dict[tuple[str, int], tuple[str, str, dict[str, str]]] = {}
        for record in records:
            task_id = str(record["task_id"])
            for idx, channel, ref in record["writes"]:
                key = (task_id, int(idx))
                if key[1] >= 0 and key in chosen:
                    continue
                chosen[key] = (str(record.get("task_path", "")), str(channel), ref)
        order = sorted(chosen, key=lambda k: writes_sort_key(chosen[k][0], *k))
        return [(k[0], chosen[k][1], self._load(chosen[k][2])) for k in order]

    def _tuple(self, thread: _Thread, stored: _Stored) -> CheckpointTuple:
        body = stored.body
        checkpoint = self._load(body["checkpoint"])
        checkpoint["channel_values"] = {ch: self._load(r) for ch, r in body["values"].items()}
        where = {"thread_id": stored.thread_id, "checkpoint_ns": stored.ns}
        parent = (
            RunnableConfig(configurable={**where, "checkpoint_id": stored.parent_id})
            if stored.parent_id
            else None
        )
        return CheckpointTuple(
            config=RunnableConfig(configurable={**where, "checkpoint_id": stored.checkpoint_id}),
            checkpoint=checkpoint,
            metadata=self._load(body["metadata"]),
            parent_config=parent,
            pending_writes=self._pending(thread.writes.get((stored.ns, stored.checkpoint_id), [])),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its thread's newest without a ``checkpoint_id``).

        When LangGraph asks as a run of the root graph starts, the workspace is
        made ready first: rewound to the checkpoint when it is not the thread's
        newest, else the person's unrecorded work is recorded as theirs.
        """
        conf = config.get("configurable") or {}
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = conf.get("checkpoint_id")
        _refuse_async(conf)
        with self.guard:
            thread = self._thread(thread_id)
            if RUN_KEY in conf and not ns:
                self.started[thread_id] = self._settle(thread, ns, checkpoint_id)
        if checkpoint_id:
            stored = thread.checkpoints.get((ns, str(checkpoint_id)))
        else:
            stored = thread.newest(ns)
        return self._tuple(thread, stored) if stored is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first: of ``config``'s thread (every thread without one)."""
        conf = (config or {}).get("configurable") or {}
        if "thread_id" in conf:
            threads = [str(conf["thread_id"])]
        else:
            threads = []
            for event in self.repo.history(action=EventType.WORKSPACE_SNAPSHOT_TAKEN):
                stored = _Stored.of(event)
                if stored is not None and stored.thread_id not in threads:
                    threads.append(stored.thread_id)
        ns = conf.get("checkpoint_ns")
        only = conf.get("checkpoint_id")
        below = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        for thread_id in threads:
            thread = self._thread(thread_id)
            for key in sorted(thread.checkpoints, key=lambda k: k[1], reverse=True):
                stored = thread.checkpoints[key]
                if ns is not None and stored.ns != ns:
                    continue
                if (only and stored.checkpoint_id != only) or (
                    below and stored.checkpoint_id >= below
                ):
                    continue
                if filter:
                    metadata = self._load(stored.body["metadata"])
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if limit is not None and limit <= 0:
                    return
                if limit is not None:
                    limit -= 1
                yield self._tuple(thread, stored)

    # -- the files -----------------------------------------------------------------------

    def _anchor(self, result: SnapshotResult) -> str:
        """The state event holding what ``result`` recorded (HEAD when it recorded nothing)."""
        if result.event is not None:
            return str(result.event.id)
        head = self.repo.head()
        if head is not None and head.snapshot_ref == result.snapshot_id:
            return str(head.id)
        for event in self.repo.history():  # HEAD moved meanwhile: the newest with those files
            if event.snapshot_ref is not None and event.snapshot_ref == result.snapshot_id:
                return str(event.id)
        raise UsageError("the workspace has no recorded state to anchor a checkpoint at")

    def _settle(self, thread: _Thread, ns: str, checkpoint_id: str | None) -> str:
        """Ready the workspace for going on from ``checkpoint_id``; the state event it is at.

        A checkpoint that is not the thread's newest has its files put back
        (a rewind: unrecorded work is auto-saved first). Otherwise the files
        stay, and what changed since the last snapshot is recorded as the
        person's.
        """
        newest = thread.newest(ns)
        target = thread.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else None
        if target is not None and newest is not None and target is not newest:
            self.repo.rewind(target.anchor)
            return target.anchor
        return self._anchor(self.repo.snapshot(OUTSIDE_AGENT, author=self.repo.person))

    def _continued(
        self, thread: _Thread, ns: str, parent_id: str | None, checkpoint: Checkpoint
    ) -> str | None:
        """The checkpoint whose state ``checkpoint``, made by ``update_state``, goes on from.

        An update goes on from its parent. A copy (``as_node="__copy__"``) is a
        sibling of the checkpoint it copies, and holds the same channel versions.
        """
        versions = checkpoint["channel_versions"]
        copied = [
            stored.checkpoint_id
            for stored in thread.checkpoints.values()
            if stored.ns == ns
            and stored.parent_id == parent_id
            and self._load(stored.body["checkpoint"]).get("channel_versions") == versions
        ]
        return max(copied) if copied else parent_id

    def _files(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        metadata: CheckpointMetadata,
        checkpoint: Checkpoint,
        *,
        run: bool,
    ) -> str:
        """The state event holding the files of the checkpoint being put.

        ``run``: the put comes from a graph run (else from a call of the program:
        ``update_state``, which no node runs beside).
        """
        source = metadata.get("source")
        if not ns and not run:
            thread = self._thread(thread_id)
            return self._settle(thread, ns, self._continued(thread, ns, parent_id, checkpoint))
        if not ns and source in ("input", "fork") and thread_id in self.started:
            # saved as the run starts, maybe while its first node runs: the files it started on
            return self.started.pop(thread_id)
        nodes = self.nodes.pop((thread_id, ns, parent_id or ""), [])
        step = metadata.get("step")
        what = f"step {step}" + (f": {', '.join(dict.fromkeys(nodes))}" if nodes else "")
        where = f"thread {thread_id}" + (f", {ns}" if ns else "")
        result = self.repo.snapshot(
            f"LangGraph {what} ({where})", author=self.agent, operation=operation_of(thread_id)
        )
        return self._anchor(result)

    # -- writing -------------------------------------------------------------------------

    def _blob(self, typed: tuple[str, bytes], objects: MutableSequence[str]) -> dict[str, str]:
        kind, raw = typed
        if len(raw) <= INLINE_LIMIT:
            return {"type": kind, "base64": base64.b64encode(raw).decode("ascii")}
        oid = self.repo.objects.put(raw)
        objects.append(oid)
        return {"type": kind, "object": oid}

    def _parent(self, thread_id: str, ns: str, parent_id: str | None) -> _Stored | None:
        if not parent_id:
            return None
        stored = self.known.get((thread_id, ns, parent_id))
        if stored is None:
            stored = self._thread(thread_id).checkpoints.get((ns, parent_id))
        return stored

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record ``checkpoint`` beside the files it belongs with; its config."""
        conf = config.get("configurable") or {}
        _refuse_async(conf)
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        parent_id = conf.get("checkpoint_id") or None
        metadata = get_checkpoint_metadata(config, metadata)
        with self.guard:
            anchor = self._files(
                thread_id, ns, parent_id, metadata, checkpoint, run=RUN_KEY in conf
            )
            parent = self._parent(thread_id, ns, parent_id)
            where = f"thread {thread_id}" + (f", {ns}" if ns else "")
            with self.repo.transaction(EventType.WORKSPACE_SNAPSHOT_TAKEN, self.agent) as tx:
                objects: list[str] = []
                values: dict[str, dict[str, str]] = {}
                held = checkpoint["channel_values"]
                for channel in checkpoint["channel_versions"]:
                    if channel not in new_versions and parent and channel in parent.body["values"]:
                        ref = parent.body["values"][channel]  # unchanged since the parent
                        values[channel] = ref
                        if "object" in ref:
                            objects.append(ref["object"])
                    elif channel in held:
                        values[channel] = self._blob(self.serde.dumps_typed(held[channel]), objects)
                rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
                part = {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint["id"],
                    "parent_checkpoint_id": parent_id,
                    "source": metadata.get("source"),
                    "step": metadata.get("step"),
                    "checkpoint": self._blob(self.serde.dumps_typed(rest), objects),
                    "metadata": self._blob(self.serde.dumps_typed(metadata), objects),
                    "values": values,
                }
                tx.annotate(
                    EventType.WORKSPACE_SNAPSHOT_TAKEN,
                    anchor=anchor,
                    data={
                        "label": LABEL,
                        "backend": "strata",
                        "ref": str(self.repo.event(anchor).snapshot_ref),
                        LABEL: part,
                    },
                    rationale=(
                        f"LangGraph checkpoint {checkpoint['id']} "
                        f"({where}, step {metadata.get('step')}, {metadata.get('source')})"
                    ),
                    operation_id=operation_of(thread_id),
                    artifacts=tuple(dict.fromkeys(objects)),
                )
            self.known[(thread_id, ns, checkpoint["id"])] = _Stored(
                thread_id, ns, checkpoint["id"], parent_id, anchor, part
            )
        return RunnableConfig(
            configurable={
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record what task ``task_id`` wrote, against the checkpoint ``config`` names."""
        conf = config.get("configurable") or {}
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns") or "")
        checkpoint_id = str(conf["checkpoint_id"])
        node = _node(task_path, task_id)
        with self.guard:
            with self.repo.transaction(EventType.TASK_FINISHED, self.agent) as tx:
                objects: list[str] = []
                stored = [
                    [
                        WRITES_IDX_MAP.get(channel, i),
                        channel,
                        self._blob(self.serde.dumps_typed(value), objects),
                    ]
                    for i, (channel, value) in enumerate(writes)
                ]
                head = tx.head()
                tx.annotate(
                    EventType.TASK_FINISHED,
                    anchor=head.id if head is not None else None,
                    data={
                        LABEL: {
                            "thread_id": thread_id,
                            "checkpoint_ns": ns,
                            "checkpoint_id": checkpoint_id,
                            "task_id": task_id,
                            "task_path": task_path,
                            "writes": stored,
                        }
                    },
                    rationale=f"LangGraph task {node} wrote {', '.join(c for c, _ in writes)}",
                    operation_id=operation_of(thread_id),
                    artifacts=tuple(dict.fromkeys(objects)),
                )
            if not node.startswith("__"):
                self.nodes.setdefault((thread_id, ns, checkpoint_id), []).append(node)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A channel's next version: a counter and a random part (forks never collide)."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- asyncio: the same calls in a worker thread --------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` in a worker thread."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)
