"""The Draft: an isolated copy of Published where agent edits land.

One Draft at a time. Its files live in ``REPO/draft/files``; its record
``REPO/draft/draft.json`` exists exactly while it is open: it is written
(atomically) last when a Draft starts and removed when it ends, so a crash in
between leaves either no Draft or a whole one.

The folder outlives its Draft: ending a Draft removes only ``draft.json``,
and the next ``start`` brings the kept folder to Published's tree by writing
only the paths that differ (a scan of the folder with its own stat cache,
then the restore machinery of :mod:`strata.store.materialize`), so starting
and publishing cost what changed, not the workspace's size. ``kept.json``
(written once the folder holds a whole tree) names the workspace the folder
belongs to; without it, or when anything is odd (unreadable, a special file,
a path the update could not write), the folder is deleted and Published's
files are copied afresh (copy-on-write clones where the file system has
reflinks, else copies). A crash while the kept folder is updated leaves a
state the next scan sees as it is, so the next ``start`` simply carries on.

The Draft has its own branch ``draft/<id>`` that starts at Published's event
(HEAD does not move). Each run in the Draft, each review, publish and discard
records a **draft revision**: a state event on that branch whose snapshot is
the Draft's files, tied to the command or message that made it.

Ignored folders (``.venv``, ``node_modules``) are not copied; the sandbox shows
Published's read-only. When the workspace is a git work tree the Draft gets a
private ``.git`` (``git clone --local --no-hardlinks``: copies, so no file of
it shares an inode with the real ``.git`` and nothing written through it
reaches the user's history) so agents that commit work normally; ``.git`` is
always ignored, so it is never recorded nor published. Whatever runs in the
Draft can write that ``.git``, so before Strata shows the Draft's path (start,
status, review) and after each run, :func:`neutralise_git` rewrites its
config keeping only settings that run nothing: a user who inspects the Draft
with git never runs a program the agent planted (``core.fsmonitor``, hooks,
aliases, filter and diff drivers, ``core.sshCommand``, includes…).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strata.atomic import atomic_write, fsync_dir
from strata.core import Scan, Workspace
from strata.core.core import DRAFT_FILES
from strata.core.lease import Lease
from strata.errors import (
    CommandNotExecutable,
    CommandNotFound,
    DraftExists,
    NoDraft,
    SandboxUnavailable,
    StrataError,
    UsageError,
)
from strata.ids import EventId, ObjectId, new_event_id
from strata.ledger.driver import EventFilter
from strata.ledger.events import Author, Event, EventType, format_ts
from strata.store.longpath import open_path, parent_of
from strata.store.objects import verified_chunks
from strata.store.statcache import DirCache, StatCache, unchanged
from strata.store.tree import Nested, read_tree, unnest
from strata.watch import served
from strata.workbench.state import DraftState

if TYPE_CHECKING:
    from strata.core import Core
    from strata.core.transaction import Transaction
    from strata.runs.process import ProcessOutcome
    from strata.sandbox.agents import AgentPreset
    from strata.sandbox.bwrap import SandboxSpec
    from strata.sandbox.net import NetPolicy
    from strata.workbench.publish import PublishResult, ReviewResult
    from strata.workbench.timetravel import DraftRewindResult

FILES = DRAFT_FILES
KEPT = "kept.json"
KEPT_FORMAT = 1
STATCACHE = "statcache"
#: the stat cache's files (its base and its log of saves)
STATCACHE_FILES = (STATCACHE, STATCACHE + ".log")
GIT_CLONE = "git-clone"
GIT_TRASH = "git-trash"
DAY_MS = 24 * 3600 * 1000
FICLONE = 0x40049409  # <linux/fs.h>: _IOW(0x94, 9, int)
SANDBOXES = ("bwrap", "none")


class ModelCalls(Protocol):
    """A recording model proxy serving one command (``strata run --draft --record-model``).

    :class:`strata.integrations.model_proxy.ModelProxy` is one; the library does
    not start it (a front end does and passes it in).
    """

    socket_folder: Path | None

    def environment(self) -> dict[str, str]:
        """The base-URL variables for a command on the host's network."""
        ...

    def sandbox_environment(self) -> dict[str, str]:
        """The base-URL variables for a sandboxed command reaching the socket."""
        ...

    @property
    def trace_ids(self) -> list[str]:
        """The traces of the calls recorded so far."""
        ...


@dataclass
class _NetRun:
    """The network side of one run: the policy, the agent presets, who hears of refusals."""

    policy: NetPolicy
    presets: Sequence[AgentPreset]
    on_refused: Callable[[str], None] | None


def _with_network(spec: SandboxSpec, net: _NetRun, stack: contextlib.ExitStack) -> SandboxSpec:
    """``spec`` with the allow-list proxy running (on ``stack``) when the policy lists hosts."""
    if net.policy.mode != "list":
        return spec
    from dataclasses import replace

    from strata.sandbox.net import LOOPBACK_NAMES, NetProxy

    proxy = stack.enter_context(NetProxy(net.policy, on_refused=net.on_refused))
    no_proxy = () if net.policy.names_loopback else LOOPBACK_NAMES
    return replace(spec, proxy=proxy.folder, no_proxy=no_proxy)


def _with_agent_config(
    spec: SandboxSpec, net: _NetRun, environ: Mapping[str, str], stack: contextlib.ExitStack
) -> SandboxSpec:
    """``spec`` with a throwaway home holding copies of the agents' configuration."""
    home = environ.get("HOME", "")
    if not net.presets or not home or not os.path.isabs(home):
        return spec
    from dataclasses import replace

    from strata.sandbox.agents import copy_agent_config, private_home

    folder = private_home()
    stack.callback(shutil.rmtree, folder, ignore_errors=True)
    copy_agent_config(net.presets, home=Path(home), into=folder)
    return replace(spec, home_source=folder)


@dataclass
class DraftRun:
    """What one command run in the Draft did."""

    argv: list[str]
    outcome: ProcessOutcome
    isolated: bool
    revision: Event | None
    #: the revision the Draft was rewound to after a failed run (its writes undone)
    rolled_back_to: str | None = None
    rolled_back_paths: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata draft run --json`` prints."""
        return {
            "rolled_back_to": self.rolled_back_to,
            "rolled_back_paths": list(self.rolled_back_paths),
            "argv": self.argv,
            "exit_code": self.outcome.exit_code,
            "signal": self.outcome.signal,
            "duration_ms": self.outcome.duration_ms,
            "isolated": self.isolated,
            "revision_event_id": self.revision.id if self.revision else None,
            "revision_snapshot_id": self.revision.snapshot_ref if self.revision else None,
        }


class Draft:
    """The open Draft of a repository. Get one with :meth:`strata.Repository.draft`."""

    def __init__(self, core: Core, state: DraftState) -> None:
        self.core = core
        self.state = state

    # -- where and what ------------------------------------------------------------

    @property
    def id(self) -> str:
        """The Draft's id (its branch is ``draft/<id>``)."""
        return self.state.id

    @property
    def branch(self) -> str:
        """The Draft's branch."""
        return self.state.branch

    @property
    def path(self) -> Path:
        """The folder holding the Draft's files."""
        return self.core.layout.draft / FILES

    @property
    def base(self) -> Event:
        """Published's event the Draft started from."""
        return self.core.event(self.state.base_event_id)

    def tip(self) -> Event:
        """The newest draft revision (the base until the first one)."""
        tip = self.core.view().branches.get(self.branch, self.state.base_event_id)
        return self.core.event(tip)

    def age_ms(self, now_ms: int) -> int:
        """How old the Draft is at ``now_ms``."""
        return max(0, now_ms - self.state.created_ms)

    def status(self, *, now_ms: int) -> dict[str, Any]:
        """The shape ``strata draft status --json`` prints.

        The Draft's ``.git`` (its private clone, or one a command made) is
        neutralised first (see :func:`neutralise_git`): the path shown is safe
        to inspect with git.
        """
        neutralise_git(self.path)
        tip = self.tip()
        return {
            "open": True,
            "id": self.id,
            "branch": self.branch,
            "path": str(self.path),
            "created_ts": format_ts(self.state.created_ms),
            "age_ms": self.age_ms(now_ms),
            "base_event_id": self.state.base_event_id,
            "tip_event_id": tip.id,
            "tip_snapshot_id": tip.snapshot_ref,
            "revisions": sum(
                1
                for _ in self.core.ledger.driver.find_events(
                    EventFilter(branch=self.branch, action_type=EventType.DRAFT_REVISION),
                    limit=None,
                )
            ),
            "git": self.state.git,
            "source": self.state.source,
            "source_text": self.state.source_text(),
        }

    # -- revisions -------------------------------------------------------------------

    @property
    def workspace(self) -> Workspace:
        """The Draft's folder as a :class:`~strata.core.Workspace` (its own stat cache)."""
        return draft_workspace(self.core)

    def record(
        self,
        message: str = "",
        *,
        author: Author | None = None,
        data: dict[str, Any] | None = None,
        always: bool = False,
        scanned: Scan | None = None,
        tx: Transaction | None = None,
        artifacts: tuple[str, ...] = (),
    ) -> Event | None:
        """Record the Draft's files as a draft revision.

        None when nothing changed since the last revision, unless ``always``
        (every run records one, so each command has its revision). Given
        ``tx``, the revision is part of that operation (publish records the
        Draft's last revision in its own operation, so one undo reverses both).
        """
        core = self.core
        if tx is None:
            with core.transaction("draft revision", author, draft=self.id) as own:
                event = self.record(
                    message,
                    author=author,
                    data=data,
                    always=always,
                    scanned=scanned,
                    tx=own,
                    artifacts=artifacts,
                )
            return core.event(event.id) if event is not None else None
        if DraftState.load(core.layout.draft_state) != self.state:
            raise NoDraft()  # published or discarded meanwhile
        scan = scanned or self.workspace.scan()
        if scanned is None and scan.warnings:
            # a folder the command left unreadable would be recorded empty (and
            # published so): our own folders get u+rx back, then the Draft is scanned again
            make_removable(self.path, bits=0o500)
            scan = self.workspace.scan()
        tip = self.tip()
        tip_tree = core.tree_of(tip)
        tx.on_commit(scan.save_cache)
        if scan.tree == tip_tree and not always:
            return None
        diff = core.diff_trees(tip_tree, scan.tree, lines=scan.lines)
        summaries = self._office_summaries([f.path for f in diff.files], scan)
        return tx.state_event(
            EventType.DRAFT_REVISION,
            scan.tree,
            message=message,
            author=author,
            files=[f.path for f in diff.files],
            data={
                "draft_id": self.id,
                "files_changed": diff.files_changed,
                "insertions": diff.insertions,
                "deletions": diff.deletions,
                **({"file_summaries": summaries} if summaries else {}),
                **(data or {}),
            },
            parent=tip,
            branch=self.branch,
            move_head=False,
            artifacts=artifacts,
        )

    def _office_summaries(self, changed: list[str], scan: Scan) -> list[dict[str, Any]]:
        """Summaries of the changed office files against the Draft's base (no model call).

        See :mod:`strata.workbench.summaries`: what review shows for a docx,
        xlsx, pptx or pdf file instead of "binary, N bytes changed".
        """
        from strata.workbench.summaries import file_summaries, is_office

        office = [p for p in changed if is_office(p)]
        if not office:
            return []
        core = self.core
        return file_summaries(core.diff_trees(core.tree_of(self.base), scan.tree, paths=office))

    # -- time travel (issue 13) -------------------------------------------------------

    def revisions(self) -> list[Event]:
        """The Draft's revisions, newest first (see :mod:`strata.workbench.timetravel`)."""
        from strata.workbench.timetravel import revisions

        return revisions(self)

    def rewind(self, rev: str, *, author: Author | None = None) -> DraftRewindResult:
        """Bring the Draft back to its revision ``rev`` (an event id, a prefix, or ``base``).

        Recorded as a new revision (nothing is erased); ``strata undo`` reverses it.
        """
        from strata.workbench.timetravel import rewind

        return rewind(self, rev, author=author)

    def put_back(self, tree: ObjectId | None = None) -> list[str]:
        """Bring the Draft's files to ``tree`` (default: its last revision's); the paths written.

        Nothing is recorded: this is how a failed step leaves the Draft as it was.
        """
        from strata.workbench.timetravel import put_back

        return put_back(self, tree)

    def step(self, what: str, **info: Any) -> AbstractContextManager[Lease]:
        """A context manager for a step that changes the Draft's files (an agent step).

        A lease is held meanwhile (a second step is refused with
        :class:`~strata.errors.WorkshopBusy`); if the block fails the files go
        back to the last revision, and a killed step is put back on the next write.
        """
        from strata.workbench.timetravel import step

        return step(self, what, **info)

    # -- runs --------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        environ: Mapping[str, str],
        sandbox: str = "bwrap",
        net: bool | NetPolicy = False,
        bind_ro: Sequence[Path] = (),
        env_names: Sequence[str] = (),
        cwd: str = "",
        author: Author | None = None,
        message: str = "",
        agents: Sequence[str] = (),
        on_net_refused: Callable[[str], None] | None = None,
        model_calls: Callable[[], AbstractContextManager[ModelCalls]] | None = None,
        keep_failed: bool = False,
    ) -> DraftRun:
        """Run ``argv`` in the Draft, then record a draft revision.

        A command that fails (a non-zero exit, a signal) has its writes rolled
        back unless ``keep_failed``: its revision is recorded (what it wrote
        stays in the ledger), then the Draft is rewound to the revision before
        it (a ``draft rewind``: ``strata undo`` brings the writes back).

        ``sandbox`` is ``bwrap`` (the Draft mounted read-write at the
        workspace's own path, nothing else of the host writable, see
        :mod:`strata.sandbox.bwrap`) or ``none`` (the command runs in the Draft
        folder with ``GIT_CEILING_DIRECTORIES`` set: no isolation).
        ``environ`` is the caller's environment (the library reads none);
        ``cwd`` is the workspace path the command starts in. The revision's
        rationale is ``message`` (default: the command line).

        ``net`` is what the sandboxed command may reach: False (nothing), True
        (the host's network) or a :class:`~strata.sandbox.net.NetPolicy`; an
        allow-list runs :class:`~strata.sandbox.net.NetProxy` for the command's
        duration and calls ``on_net_refused`` with each ``host:port`` it refuses.
        ``agents`` names presets of :mod:`strata.sandbox.agents` (``claude``,
        ``codex``, ``aider``): a throwaway copy of each one's configuration in
        the sandbox's home, its key variables, and, unless ``net`` is True, its
        API hosts added to the allow-list.

        ``model_calls`` starts a recording model proxy (:class:`ModelCalls`) for
        the command's duration; the base-URL variables point the command at
        it and the revision links the traces of its calls. With the network
        denied, the sandbox reaches it through its Unix socket, bound into the
        sandbox: the model APIs are then the command's only way out.
        """
        if not argv:
            raise UsageError("give a command to run in the Draft (after '--')")
        from strata.sandbox.agents import agent_presets
        from strata.sandbox.net import NetPolicy

        presets = agent_presets(agents)
        policy = net if isinstance(net, NetPolicy) else NetPolicy("allow" if net else "deny")
        for preset in presets:
            policy = policy.with_hosts(preset.allowed)
        env_names = [*env_names, *(n for p in presets for n in p.env_names)]
        if model_calls is not None and policy.mode == "list":
            raise UsageError(
                "recording model calls in the Draft needs --net deny (the proxy is then the "
                "only way out) or --net allow; an allow-list has a proxy of its own",
            )
        if sandbox == "none" and (policy.mode == "list" or presets):
            raise UsageError(
                "--net allow=HOSTS and --agent need the sandbox: without it nothing holds the "
                "command to the allow-list or keeps the agent's configuration a copy",
                hint="drop --sandbox none",
            )

        before = self.tip()
        # held while the command runs, so the Draft is not published or discarded under it
        info = {"pid": os.getpid(), "argv": list(argv), "draft": self.id}
        traces: tuple[str, ...] = ()
        with Lease.acquire(self.core.layout.runs, self.core.ledger.new_id(), info):
            with model_calls() if model_calls else contextlib.nullcontext() as proxy:
                outcome = self._execute(
                    argv,
                    environ,
                    sandbox,
                    _NetRun(policy, presets, on_net_refused),
                    bind_ro,
                    env_names,
                    cwd,
                    proxy,
                )
            traces = tuple(proxy.trace_ids) if proxy is not None else ()
        # what the command planted in a .git (the private clone's or one it made)
        # runs nothing for the user
        neutralise_git(self.path)
        shown = " ".join(argv)
        revision = self.record(
            message or f"draft run: {shown}"[:500],
            author=author,
            data={
                "command": list(argv),
                "exit_code": outcome.exit_code,
                "sandbox": sandbox,
                **({"net": str(policy)} if sandbox != "none" else {}),
                **({"agents": [p.name for p in presets]} if presets else {}),
                **({"model_calls": len(traces)} if model_calls is not None else {}),
            },
            always=True,
            artifacts=traces,
        )
        failed = outcome.exit_code != 0 or outcome.signal is not None
        wrote = revision is not None and self.core.tree_of(revision) != self.core.tree_of(before)
        if failed and wrote and not keep_failed:
            back = self.rewind(before.id, author=author)
            return DraftRun(list(argv), outcome, sandbox != "none", revision, before.id, back.paths)
        return DraftRun(list(argv), outcome, sandbox != "none", revision)

    def _execute(
        self,
        argv: Sequence[str],
        environ: Mapping[str, str],
        sandbox: str,
        net: _NetRun,
        bind_ro: Sequence[Path],
        env_names: Sequence[str],
        cwd: str,
        proxy: ModelCalls | None = None,
    ) -> ProcessOutcome:
        """Run ``argv`` in the Draft, sandboxed or not; return how it ended."""
        from strata.runs.process import run_command

        if sandbox not in SANDBOXES:
            raise UsageError(f"unknown sandbox {sandbox!r}; use one of {', '.join(SANDBOXES)}")
        cwd = cwd.strip("/")
        from strata.sandbox import bwrap

        if proxy is not None:  # the base URLs: the proxy's port, or its socket's relay
            inside = sandbox != "none" and net.policy.mode == "deny"
            urls = proxy.sandbox_environment() if inside else proxy.environment()
            environ = {**environ, **urls}
            env_names = [*env_names, *urls]
        if sandbox == "none":
            env = bwrap.unsandboxed_environment(self.path, environ=environ)
            start = self.path / cwd if cwd else self.path
            if not start.is_dir():
                raise UsageError(f"the Draft has no folder {cwd!r} to run in")
            if argv and "/" not in argv[0] and shutil.which(argv[0], path=env.get("PATH")) is None:
                raise CommandNotFound(argv[0])
            try:
                outcome = run_command(list(argv), cwd=start, env=env)
            except FileNotFoundError:
                raise CommandNotFound(argv[0]) from None
            except PermissionError as exc:
                raise CommandNotExecutable(argv[0], exc.strerror or "permission denied") from None
        else:
            spec = self._spec(net.policy.mode == "allow", bind_ro, env_names, cwd)
            if argv:
                # an agent installed in the home folder is on the host's PATH, not the sandbox's
                hidden = bwrap.unreachable_command(spec, argv[0], environ=environ)
                if hidden is not None:
                    raise CommandNotFound(argv[0], hint=hidden)
                if "/" not in argv[0] and shutil.which(argv[0], path=environ.get("PATH")) is None:
                    raise CommandNotFound(argv[0])
            with contextlib.ExitStack() as stack:
                spec = _with_network(spec, net, stack)
                if proxy is not None and proxy.socket_folder is not None and not spec.net:
                    from dataclasses import replace

                    from strata.sandbox.net import LOOPBACK_NAMES

                    spec = replace(spec, proxy=proxy.socket_folder, no_proxy=LOOPBACK_NAMES)
                spec = _with_agent_config(spec, net, environ, stack)
                made = bwrap.missing_mount_points(spec)
                full, env = bwrap.sandbox_command(spec, argv, environ=environ)
                try:
                    outcome = run_command(full, env=env, new_session=True)
                finally:
                    bwrap.remove_mount_points(spec, made)
        return outcome

    def _spec(
        self, net: bool, bind_ro: Sequence[Path], env_names: Sequence[str], cwd: str
    ) -> SandboxSpec:
        from strata.sandbox.bwrap import SandboxSpec

        check_sandbox()
        workspace = self.core.root
        return SandboxSpec(
            workspace=workspace,
            source=self.path,
            cwd=workspace / cwd if cwd else workspace,
            net=net,
            bind_ro=tuple(Path(p).absolute() for p in bind_ro),
            readonly=tuple((p, p) for p in self.ignored_folders()),
            env_names=tuple(env_names),
            repository=self.core.layout.repo,
        )

    def ignored_folders(self) -> list[Path]:
        """Published's ignored folders (``.venv``, ``web/node_modules``…), shown read-only.

        See :func:`ignored_folders`.
        """
        return ignored_folders(self.core)

    # -- review, publish, discard -----------------------------------------------------

    def review(self, *, author: Author | None = None) -> ReviewResult:
        """Snapshot the Draft and show its change set against its base."""
        from strata.workbench.publish import review

        neutralise_git(self.path)
        return review(self, author=author)

    def publish(
        self,
        message: str = "",
        *,
        expect: str | None = None,
        allow_external_symlinks: bool = False,
        author: Author | None = None,
        preflight: Mapping[str, Any] | None = None,
        verified_tree: ObjectId | None = None,
    ) -> PublishResult:
        """Publish the Draft into Published (see :func:`strata.workbench.publish.publish`)."""
        from strata.workbench.publish import publish

        return publish(
            self,
            message,
            expect=expect,
            allow_external_symlinks=allow_external_symlinks,
            author=author,
            preflight=preflight,
            verified_tree=verified_tree,
        )

    def discard(self, *, author: Author | None = None) -> Event:
        """Snapshot the Draft, then end it without touching Published; return the discard event."""
        from strata.workbench.publish import discard

        return discard(self, author=author)


def ignored_folders(core: Core) -> list[Path]:
    """Published's ignored folders (``.venv``, ``web/node_modules``…), outermost only.

    What a sandboxed command in a copy of the workspace is shown read-only.
    Read from Published's stat cache (the ignored names of every folder the
    last scan walked; a Draft start scans first).
    """
    from strata.atomic import TEMP_PREFIX
    from strata.store.ignore import ALWAYS_IGNORED

    root = core.root
    cache = StatCache(core.layout.statcache)
    found: list[Path] = []
    for folder in sorted(cache.folders()):
        cached = cache.get(folder)
        for name in sorted(cached.ignored if cached else ()):
            if name in ALWAYS_IGNORED or name.startswith(TEMP_PREFIX):
                continue
            path = root / folder / name if folder else root / name
            if path.is_dir() and not path.is_symlink():
                found.append(path)
    return found


def check_sandbox() -> None:
    """Raise :class:`SandboxUnavailable` when bubblewrap cannot run here."""
    from strata.sandbox.bwrap import sandbox_problem

    problem = sandbox_problem()
    if problem is not None:
        raise SandboxUnavailable(problem)


# -- opening and starting ------------------------------------------------------------


def open_draft(core: Core) -> Draft | None:
    """The open Draft, or None."""
    state = DraftState.load(core.layout.draft_state)
    return Draft(core, state) if state else None


def current_draft(core: Core) -> Draft:
    """The open Draft; :class:`NoDraft` when there is none."""
    draft = open_draft(core)
    if draft is None:
        raise NoDraft()
    return draft


def draft_workspace(core: Core) -> Workspace:
    """The Draft's folder, scanned with its own stat cache; the watcher watches it too."""
    workspace = core.workspaces.get("draft")
    if workspace is None:
        workspace = core.workspaces["draft"] = Workspace(
            core.layout.draft / FILES,
            objects=core.objects,
            cache_path=core.layout.draft / STATCACHE,
            rules=core.rules,
            changes=lambda token: core.changes_since(token, root="draft"),
            large=core.large_files,
            trash=core.layout.trash,
        )
    return workspace


def start_draft(
    core: Core,
    *,
    author: Author | None = None,
    tree: ObjectId | None = None,
    data: dict[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
) -> Draft:
    """Create the one Draft from Published's files (recording Published first).

    ``source`` is what ``draft.json`` records as what opened the Draft (see
    :attr:`~strata.workbench.state.DraftState.source`; default ``{"kind": "cli"}``).

    A folder kept from an ended Draft is brought to Published's tree by
    writing only the paths that differ; else Published's files are copied.

    With ``tree`` (a Workshop rewind reopening an ended Draft), the Draft
    starts from Published's event but its first revision holds ``tree``: a
    kept folder is brought straight to it; a fresh copy is made of
    Published, then brought to it. ``data`` goes into that first revision.
    """
    layout = core.layout
    with core.writing():
        if layout.draft_state.exists():
            state = DraftState.load(layout.draft_state)
            raise DraftExists(state.id if state else "?")
        with core.transaction("draft start", author) as tx:
            _, scan = tx.auto_save("draft start")
            head = tx.head()
            if head is None:  # nothing recorded yet (an empty folder): the Draft starts from it
                head = tx.state_event(EventType.SNAPSHOT, scan.tree, message="before the Draft")
            head_tree = core.tree_of(head)
            draft_id = new_event_id(core.rng)[:10]
            while f"draft/{draft_id}" in tx.view.branches:
                draft_id = new_event_id(core.rng)[:10]
            tx.details.update(draft=draft_id)
            files = layout.draft / FILES
            kept = _kept_usable(core)
            if kept:
                _clear_leftovers(layout.draft)
            else:
                if layout.draft.exists() or layout.draft.is_symlink():
                    _remove(layout.draft)  # what a crashed start left
                layout.draft.mkdir(parents=True)
            # the private clone is made beside the folder while the folder is prepared
            clone = (
                _PrivateClone(core.root, layout.draft) if (core.root / ".git").is_dir() else None
            )
            try:
                scanned = _update_kept(core, tree or head_tree) if kept else None
                if scanned is not None and scanned.tree == head_tree:
                    # no first revision will save it (a watcher saves it once it has replied)
                    tx.on_commit(lambda: served.when_replied(scanned.save_cache))
                if scanned is None:  # no usable kept folder: copy Published's files afresh
                    for name in (FILES, *STATCACHE_FILES, KEPT, GIT_TRASH):
                        _remove(layout.draft / name)
                    os.mkdir(files, 0o700)
                    _clone_tree(core, scan, head_tree=head_tree, target=files)
                os.chmod(files, os.lstat(core.root).st_mode & 0o777)
                git = clone is not None and clone.finish(files)
            finally:
                if clone is not None:
                    clone.close()
            _write_kept(core)
            branch = f"draft/{draft_id}"
            tx.move(branches={**tx.view.branches, branch: head.id})
        state = DraftState(
            draft_id,
            branch,
            EventId(head.id),
            core.now_ms(),
            git,
            dict(source) if source is not None else {"kind": "cli"},
        )
        atomic_write(layout.draft_state, json.dumps(state.to_json(), indent=2).encode())
        draft = Draft(core, state)
        if scanned is not None and scanned.tree == head_tree:
            # an updated kept folder was scanned already to check it holds exactly
            # Published's tree: the first revision would be the base itself
            return draft
        # the first scan of a fresh copy fills its stat cache
        if tree is not None and scanned is None:  # a fresh copy of Published: bring it to tree
            draft.put_back(tree)
        draft.record("draft start", author=author, scanned=scanned, data=data)
        return draft


def remove_kept_folder(core: Core, *, dry_run: bool = False) -> int:
    """Delete the Draft folder kept between Drafts (``strata gc``); its bytes (0: none, or open).

    ``kept.json`` goes first (fsync'd), so a crash midway leaves a folder the
    next ``draft start`` deletes and copies afresh. The caller holds the write lock.
    """
    draft = core.layout.draft
    if core.layout.draft_state.exists() or not draft.is_dir():
        return 0
    from strata.core.storage import tree_bytes

    size = tree_bytes(draft)
    if dry_run:
        return size
    kept = draft / KEPT
    if kept.exists():
        kept.unlink()
        fsync_dir(draft)
    _remove(draft)
    return size


def _write_kept(core: Core) -> None:
    """Mark the Draft's folder as whole and belonging to this workspace."""
    data = json.dumps(
        {"format": KEPT_FORMAT, "workspace": str(core.root), "files": FILES}, indent=2
    ).encode()
    path = core.layout.draft / KEPT
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    atomic_write(path, data)


def _clear_leftovers(draft: Path) -> None:
    """Remove what a killed start left beside the kept folder (a clone, temporary files)."""
    for name in os.listdir(draft):
        if name not in (FILES, *STATCACHE_FILES, KEPT):
            _remove(draft / name)


def _kept_usable(core: Core) -> bool:
    draft = core.layout.draft
    try:
        raw = json.loads((draft / KEPT).read_bytes())
        st = os.lstat(draft / FILES)
    except (OSError, ValueError):
        return False
    return (
        isinstance(raw, dict)
        and raw.get("format") == KEPT_FORMAT
        and raw.get("workspace") == str(core.root)
        and raw.get("files") == FILES
        and stat.S_ISDIR(st.st_mode)
    )


def _update_kept(core: Core, head_tree: ObjectId) -> Scan | None:
    """Bring a kept Draft folder to ``head_tree``, writing only the paths that differ.

    Returns the scan that shows the folder holds exactly ``head_tree`` (to be
    the new Draft's first scan), or None when it could not be brought there
    (the caller copies afresh).
    """
    draft = core.layout.draft
    files = draft / FILES
    trash = draft / GIT_TRASH
    workspace = draft_workspace(core)
    remover: threading.Thread | None = None
    try:
        if os.path.lexists(files / ".git"):  # the last Draft's clone: deleted meanwhile
            os.rename(files / ".git", trash)
            remover = threading.Thread(target=_remove_quietly, args=(trash,), daemon=True)
            remover.start()
        scan = workspace.scan()
        if scan.warnings:  # an unreadable folder, a socket…: start afresh
            return None
        # what the scan did not record (ignored files, the private .git, temporary
        # files, mount points a sandbox made) is not Published's: a new Draft has none
        _remove_ignored(files, scan)
        if scan.tree == head_tree:  # the usual case after a publish: nothing to write
            scanned = scan
        else:
            core.objects.flush()
            workspace.apply(workspace.plan(scan, head_tree))
            scanned = workspace.scan()
    except (OSError, StrataError):
        return None
    finally:
        if remover is not None:
            remover.join()
    if scanned.tree != head_tree or scanned.warnings:
        return None
    return scanned


def _remove_ignored(files: Path, scan: Scan) -> None:
    """Delete every entry the scan of ``files`` ignored, never following a symlink."""
    import marshal

    folders: dict[str, frozenset[str]] = {k: d.ignored for k, d in scan.result.dirs.items()}
    for key, blob in scan.result.inherited.items():
        if key in folders:
            continue
        # a folder's quick record names its ignored entries: its blob need not be decoded
        quick = scan.cache.quick(key) if scan.cache.blob(key) is blob else None
        if quick is not None:
            folders[key] = frozenset(quick[2])
        else:
            folders[key] = DirCache.load(marshal.loads(blob)).ignored
    root_fd = os.open(files, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for key, names in sorted(folders.items()):
            if not names:
                continue
            fd = _open_folder(root_fd, key)
            if fd is None:
                continue
            try:
                for name in sorted(names):
                    _remove_at(fd, name)
            finally:
                if fd != root_fd:
                    os.close(fd)
    finally:
        os.close(root_fd)


def _open_folder(root_fd: int, key: str) -> int | None:
    """A handle on the folder ``key`` below ``root_fd``, reached without a symlink."""
    fd = root_fd
    for part in key.split("/") if key else ():
        try:
            child = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
        except (FileNotFoundError, NotADirectoryError):
            child = -1
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            child = -1
        if fd != root_fd:
            os.close(fd)
        if child < 0:
            return None
        fd = child
    return fd


def _remove_at(dir_fd: int, name: str) -> None:
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # descends through handles, never follows symlinks
    else:
        os.unlink(name, dir_fd=dir_fd)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # what is left goes with the next start's leftovers
        _remove(path)


def _remove(path: Path) -> None:
    """Delete ``path`` (never following a symlink), even where a command left it unreadable."""
    try:
        _remove_now(path)
    except PermissionError:  # a folder left 'chmod 000' by a command run in the Draft
        make_removable(path, bits=0o700)
        _remove_now(path)


def _remove_now(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def make_removable(path: Path, *, bits: int) -> None:
    """Give ``u+rwx`` to every folder at or below ``path`` this user owns that lacks ``bits``.

    A command run in the Draft may leave a folder unreadable (``chmod 000``),
    which would block scanning it (``bits=0o500``: a folder left read-only on
    purpose keeps its mode) or deleting it (``0o700``). Folders are reached through ``O_PATH``
    handles opened with ``O_NOFOLLOW``, one level at a time, so a symlink the
    command left is never followed, and each mode is changed through the
    handle (``/proc/self/fd``), never through a path that could be swapped.
    """
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(path, flags)
    except OSError:
        return
    names = _unlock_folder(top, bits)
    if names is None:
        os.close(top)
        return
    # one open handle per level of the walk, never one per entry
    stack: list[tuple[int, Iterator[str]]] = [(top, iter(names))]
    while stack:
        fd, pending = stack[-1]
        name = next(pending, None)
        if name is None:
            os.close(fd)
            stack.pop()
            continue
        try:
            if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                continue
            child = os.open(name, flags, dir_fd=fd)
        except OSError:
            continue
        names = _unlock_folder(child, bits)
        if names is None:
            os.close(child)
        else:
            stack.append((child, iter(names)))


def _unlock_folder(fd: int, bits: int) -> list[str] | None:
    """Give the folder behind the ``O_PATH`` handle ``fd`` u+rwx if it lacks ``bits``; its names.

    None when ``fd`` is not a folder or cannot be listed.
    """
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            return None
        if st.st_uid == os.geteuid() and st.st_mode & bits != bits:
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | 0o700)
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            return os.listdir(listing)
        finally:
            os.close(listing)
    except OSError:
        return None


def draft_reminder(core: Core, *, now_ms: int) -> str | None:
    """The reminder for a Draft open longer than a day (None: none is due).

    ``strata status``, ``strata ask`` and ``strata chat`` show it; its
    actions are Review, Discard and Dismiss (:func:`dismiss_reminder`): a
    dismissed reminder comes back a day after its dismissal.
    """
    state = DraftState.load(core.layout.draft_state)
    if state is None or now_ms - state.created_ms < DAY_MS:
        return None
    dismissed = state.reminder_dismissed_ms
    if dismissed is not None and now_ms - dismissed < DAY_MS:
        return None
    date = format_ts(state.created_ms)[:16].replace("T", " ")
    return f"You have an open Draft from {date} UTC. Review and publish or discard?"


#: the reminder's actions, as a command line offers them
REMINDER_ACTIONS = (
    "Review: 'strata review' · Discard: 'strata discard' · Dismiss for a day: "
    "'strata draft dismiss'"
)


def dismiss_reminder(core: Core, *, now_ms: int) -> DraftState:
    """Dismiss the open Draft's reminder until a day from ``now_ms`` (recorded in ``draft.json``).

    :class:`NoDraft` when no Draft is open.
    """
    with core.writing():
        state = DraftState.load(core.layout.draft_state)
        if state is None:
            raise NoDraft()
        state = dataclasses.replace(state, reminder_dismissed_ms=now_ms)
        atomic_write(core.layout.draft_state, json.dumps(state.to_json(), indent=2).encode())
    return state


def draft_banner(core: Core, *, now_ms: int) -> str | None:
    """One line on the open Draft (its date, age and source), or None when none is open.

    What ``strata ask`` and ``strata chat`` show on start and after each turn.
    """
    state = DraftState.load(core.layout.draft_state)
    if state is None:
        return None
    date = format_ts(state.created_ms)[:16].replace("T", " ")
    age = _age_text(max(0, now_ms - state.created_ms))
    return (
        f"Draft {state.id} in progress: from {date} UTC ({age} old), source "
        f"{state.source_text()}; review it ('strata review'), then publish or discard"
    )


def _age_text(ms: int) -> str:
    minutes = ms // 60_000
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    return f"{hours} h" if hours < 48 else f"{hours // 24} days"


# -- helpers ----------------------------------------------------------------------------


def _clone_tree(core: Core, scan: Scan, *, head_tree: ObjectId, target: Path) -> None:
    """Write the recorded tree into ``target``.

    Files are reflinks of Published's where they still hold the recorded bytes
    and the file system can clone (tried until it says it cannot), else the
    stored bytes.
    """
    dirs: list[tuple[Path, int]] = []
    jobs: list[tuple[str, ObjectId, int, Path]] = []

    # a walk of any depth (store.tree.unnest), each path reached through folder
    # descriptors where it passes PATH_MAX (store.longpath)
    def walk(oid: ObjectId, prefix: str, folder: Path) -> Nested[None]:
        for entry in read_tree(core.objects, oid):
            path = f"{prefix}{entry.name}"
            dest = folder / entry.name
            if entry.kind == "dir":
                with parent_of(str(dest)) as (dir_fd, name):
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
                dirs.append((dest, entry.mode))
                yield walk(entry.oid, path + "/", dest)
            elif entry.kind == "symlink":
                with parent_of(str(dest)) as (dir_fd, name):
                    os.symlink(os.fsdecode(core.objects.get(entry.oid)), name, dir_fd=dir_fd)
            else:
                jobs.append((path, entry.oid, entry.mode, dest))

    unnest(walk(head_tree, "", target))
    reflinks = _Reflinks()
    for job in jobs:  # threads measured no faster: creating files is the cost
        _copy_file(core, scan, *job, reflinks=reflinks)
    for path, mode in reversed(dirs):
        with parent_of(str(path)) as (dir_fd, name):
            os.chmod(name, mode, dir_fd=dir_fd)  # (a folder made above: no symlink)


class _Reflinks:
    """Whether reflinks are still worth trying (the file system said it cannot clone)."""

    def __init__(self) -> None:
        self.supported = True


def _copy_file(
    core: Core,
    scan: Scan,
    path: str,
    oid: ObjectId,
    mode: int,
    dest: Path,
    *,
    reflinks: _Reflinks,
) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = open_path(str(dest), flags, 0o600)
    try:
        if not (reflinks.supported and _clone_from_published(core, scan, path, fd, reflinks)):
            os.ftruncate(fd, 0)
            for chunk in verified_chunks(core.objects, oid):
                os.write(fd, chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _clone_from_published(
    core: Core, scan: Scan, path: str, dest_fd: int, reflinks: _Reflinks
) -> bool:
    """Reflink Published's file when it still has the stat the scan recorded."""
    expected = scan.stat_of(path)
    if expected is None:
        return False
    try:
        src = open_path(f"{core.root}/{path}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not unchanged(os.fstat(src), expected):
            return False
        try:
            fcntl.ioctl(dest_fd, FICLONE, src)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY):
                if exc.errno != errno.EINVAL:  # EINVAL can be one file's; the others are the FS's
                    reflinks.supported = False
                return False
            raise
        return unchanged(os.fstat(src), expected)  # not changed while cloning
    finally:
        os.close(src)


class _PrivateClone:
    """The Draft's own ``.git``: a local clone of the workspace's repository.

    Cloned beside the Draft's folder (``draft/git-clone``) while the folder is
    prepared, then moved into it by :meth:`finish`.
    """

    def __init__(self, workspace: Path, draft: Path) -> None:
        self.tmp = draft / GIT_CLONE
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(draft),
        }
        # --no-hardlinks: a hard-linked object or pack written in place from the Draft
        # would change (or destroy) the real repository's history
        argv = [
            "git",
            "clone",
            "--quiet",
            "--local",
            "--no-hardlinks",
            "--no-checkout",
            str(workspace),
        ]
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [*argv, str(self.tmp)],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self.proc = None

    def finish(self, files: Path) -> bool:
        """Move the clone into ``files``; False when there is none."""
        if self.proc is None or self.proc.wait() != 0:
            return False
        try:
            os.replace(self.tmp / ".git", files / ".git")
            # the index from HEAD, the files untouched: 'git status' shows Published's
            # uncommitted work as the Draft's
            neutralise_git(files)
            subprocess.run(
                ["git", *SAFE_GIT_OPTIONS, "reset", "-q"],
                cwd=files,
                env=self.env,
                capture_output=True,
                check=False,
            )
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Wait for git and remove what is left of the temporary clone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            _remove(self.tmp)


# -- the Draft's .git runs nothing the agent planted -------------------------------------

#: options for every git command Strata runs in a Draft: no hook, no fsmonitor
SAFE_GIT_OPTIONS = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")

#: the settings a Draft's ``.git/config`` keeps: none of them names a program
#: (section and key lower-cased, as ``git config --list`` prints them)
_KEPT_GIT_KEYS = re.compile(
    r"core\.(repositoryformatversion|filemode|logallrefupdates|ignorecase|precomposeunicode"
    r"|symlinks|autocrlf|eol|safecrlf|quotepath|checkstat|trustctime)"
    r"|extensions\.(objectformat|refstorage)"
    r"|remote\..+\.(url|fetch)"
    r"|branch\..+\.(remote|merge|rebase)"
    r"|user\.(name|email)",
    re.DOTALL,
)

#: appended to every neutralised config
_GIT_HARDENING: tuple[tuple[str, str | None, str, str | None], ...] = (
    ("core", None, "fsmonitor", "false"),
    ("core", None, "hooksPath", "/dev/null"),
    ("core", None, "bare", "false"),
)

#: files in ``.git`` that make git read configuration or a repository from elsewhere
_GIT_REDIRECTS = ("commondir", "config.worktree", "gitdir")


def neutralise_git(files: Path) -> None:
    """Make the Draft's ``.git`` safe to use (see :func:`_neutralise_git`).

    A ``.git`` (or Draft folder) the command left unreadable is made readable
    first; one that still cannot be rewritten is removed.
    """
    try:
        _neutralise_git(files)
    except OSError:  # unreadable, or a .git/config of a kind that resists replacing
        make_removable(files, bits=0o500)
        try:
            _neutralise_git(files)
        except OSError:
            _remove(files / ".git")


def _neutralise_git(files: Path) -> None:
    """Make the Draft's ``.git`` safe to use: its config can run no program.

    Code run in the Draft can write its private ``.git``. This rewrites
    ``.git/config`` keeping only the settings that name no program (format,
    remotes, branches, identity), then turns off hooks and fsmonitor, so
    ``core.fsmonitor``, ``core.hooksPath``, ``core.sshCommand``, aliases,
    pagers, editors, filter, diff and merge drivers, credential helpers and
    includes the command planted are gone before anyone runs git there. Files
    that send git to a configuration or repository elsewhere (``commondir``,
    ``config.worktree``) are removed, and a ``.git`` that is not a folder (a
    symlink, a ``gitdir:`` file) is removed: it is private and never
    published. Everything is reached through a handle on ``.git`` opened with
    ``O_NOFOLLOW``; nothing outside the Draft is written.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    files_fd = os.open(files, flags)
    try:
        git_fd = os.open(".git", flags, dir_fd=files_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        # a symlink or a 'gitdir:' file: git would go elsewhere
        _remove_at(files_fd, ".git")
        return
    finally:
        os.close(files_fd)
    tmp = f"{_GIT_CONFIG_TMP}{os.getpid()}"
    try:
        for name in _GIT_REDIRECTS:
            _remove_at(git_fd, name)
        for name in os.listdir(git_fd):  # left by an earlier run that was killed
            if name.startswith(_GIT_CONFIG_TMP):
                _remove_at(git_fd, name)
        entries = _git_config_entries(_read_regular(git_fd, "config"))
        kept = [entry for entry in entries if _KEPT_GIT_KEYS.fullmatch(entry[0])]
        data = _git_config_text(kept).encode("utf-8", "surrogateescape")
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=git_fd,
            )
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISREG(os.lstat("config", dir_fd=git_fd).st_mode):
                    # a folder, symlink, FIFO or socket the command left: never git's config
                    _remove_at(git_fd, "config")
            os.replace(tmp, "config", src_dir_fd=git_fd, dst_dir_fd=git_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                _remove_at(git_fd, tmp)
            raise
    finally:
        os.close(git_fd)


_GIT_CONFIG_TMP = "config.strata-"


def _read_regular(dir_fd: int, name: str, limit: int = 1 << 20) -> bytes:
    """The bytes of ``name`` when it is a regular file (not a FIFO, a symlink…), else b""."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _git_config_entries(data: bytes) -> list[tuple[str, str | None]]:
    """``(key, value)`` pairs of a git config file, read by git without its includes.

    A file git cannot parse gives no entries (the config is rewritten from scratch).
    """
    if not data:
        return []
    try:
        done = subprocess.run(
            ["git", "config", "--file", "-", "--list", "--null", "--no-includes"],
            input=data,
            capture_output=True,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"},
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    entries: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0"):
        if not item:
            continue
        key, newline, value = item.partition(b"\n")
        entries.append(
            (
                key.decode("utf-8", "surrogateescape"),
                value.decode("utf-8", "surrogateescape") if newline else None,
            )
        )
    return entries


def _git_config_text(entries: list[tuple[str, str | None]]) -> str:
    """A git config file holding ``entries``, then :data:`_GIT_HARDENING`."""
    lines = ["# rewritten by Strata: settings that run programs are removed"]
    split: list[tuple[str, str | None, str, str | None]] = []
    for key, value in entries:
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        split.append((section, subsection or None, name, value))
    last = ""
    for section, sub, name, value in [*split, *_GIT_HARDENING]:
        header = f"[{section}]" if sub is None else f'[{section} "{_git_quote(sub)}"]'
        if header != last:
            lines.append(header)
            last = header
        lines.append(f"\t{name}" if value is None else f'\t{name} = "{_git_quote(value)}"')
    return "\n".join(lines) + "\n"


def _git_quote(text: str) -> str:
    return (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\b", "\\b")
    )
