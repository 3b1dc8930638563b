"""Preflight: rebuild a proposal's base in a scratch folder, apply it, verify it, check it.

Seed 004's first milestone (§3.7). Before a proposal is accepted (the open
Draft, as ``strata publish`` would write it, or a patch applied onto HEAD's
files), :func:`preflight`:

1. records where it starts, as publish does (one ``preflight`` operation): the
   Draft's newest files as a draft revision, Published's unrecorded work as an
   auto-save. From the store alone it then computes the **base** (Published's
   tree) and the **expected** tree the proposal makes of it: the Draft merged
   exactly as publish merges it (:func:`strata.workbench.publish.proposed_tree`),
   or the patch applied by git to an index of the base's blobs
   (:func:`apply_patch`). A Draft that conflicts with Published, or a patch
   that does not apply, is an error and that operation records nothing;
2. writes the base into a fresh scratch folder outside the workspace and its
   repository (:func:`strata.store.materialize.export_tree`, every object
   verified on read), scans it storing nothing and checks that the scan's tree
   is the base's: the rebuild is **hash-verified**;
3. applies the proposal there with the restore plan a publish runs
   (:meth:`strata.core.Workspace.plan` and :meth:`~strata.core.Workspace.apply`),
   scans again and checks that the tree is the expected one. A mismatch at
   either step is a **divergence**: the report names the first differing path
   with a diff (expected, then found), or the path whose stored object is
   damaged;
4. runs the optional check command (``pytest -q``) in the scratch folder when
   nothing diverged: in the bubblewrap sandbox, seen at the workspace's own
   path, with no network (:mod:`strata.sandbox.bwrap`), or directly in the
   folder with ``sandbox="none"``; with a timeout, keeping its exit code and
   the tail of its output;
5. removes the scratch folder (also after an error, Ctrl-C or SIGTERM), then
   records one ``preflight`` annotation event anchored at the proposal (the
   Draft's revision, or HEAD for a patch) carrying ``preflight={"ok": …,
   "report_artifact": …}``. The report is a JSON object in the object store
   that the event links (``artifacts``, with the patch), so ``strata gc``
   keeps it and ``strata check`` verifies it; ``strata cat ID`` prints it.

Steps 2 to 4 hold no lock: the files are rebuilt from objects, which never
change, so other commands go on meanwhile. ``strata publish --preflight``
hands the verified tree to publish, which refuses when what it would write is
no longer that tree.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from strata._version import __version__
from strata.core import Workspace
from strata.diff.tree import Change, diff_trees
from strata.errors import (
    DiffError,
    NoDraft,
    PatchDoesNotApply,
    StrataError,
    UsageError,
)
from strata.ids import ObjectId
from strata.ledger.events import Author, Event, EventType
from strata.runs.process import kill_group, wait_session
from strata.sandbox.paths import check_relative, display_path, is_internal
from strata.store.objects import ObjectStore, verified_chunks
from strata.store.tree import TreeEntry, read_tree

if TYPE_CHECKING:
    from strata.core import Core, Scan
    from strata.workbench.draft import Draft

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "CheckResult",
    "Divergence",
    "PreflightResult",
    "apply_patch",
    "check_argv",
    "first_damaged_path",
    "preflight",
    "strip_level",
]

#: the kinds of proposal: the open Draft, or a patch onto HEAD's files
KINDS = ("draft", "patch")
SANDBOXES = ("bwrap", "none")
REPORT_FORMAT = 1
#: how long a check may run by default, in seconds
DEFAULT_TIMEOUT_S = 600.0
#: the report keeps this many bytes from the end of the check's output
OUTPUT_TAIL_BYTES = 8 * 1024
#: a divergence's diff is clipped to this many bytes
DIFF_BYTES = 16 * 1024
#: a divergence lists at most this many differing paths
PATHS_LISTED = 100
#: the scratch folders' names start with this
SCRATCH_PREFIX = "strata-preflight-"
#: after SIGTERM, a check that timed out gets this long before SIGKILL
KILL_GRACE_S = 2.0
_SHELL = "/bin/sh"


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """Where the rebuilt files differ from the tree they should hold."""

    stage: str
    """``base``: the rebuilt base is not the recorded tree; ``proposal``: after
    applying the proposal the files are not the expected tree."""
    path: str
    """The first differing path (the one whose object is damaged)."""
    reason: str
    """What differs there, in words."""
    diff: str | None = None
    """The path's diff, expected (``a/``) then found (``b/``), clipped to :data:`DIFF_BYTES`."""
    paths: list[str] = field(default_factory=list)
    """Every differing path (at most :data:`PATHS_LISTED`)."""
    diff_truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        """As the report holds it."""
        return {
            "stage": self.stage,
            "path": display_path(self.path),
            "reason": self.reason,
            "diff": self.diff,
            "diff_truncated": self.diff_truncated,
            "paths": [display_path(p) for p in self.paths],
        }


@dataclass(frozen=True)
class CheckResult:
    """How the check command ran in the rebuilt files."""

    command: list[str]
    sandbox: str
    timeout_s: float
    ran: bool
    """False when it was not run (the files diverged first)."""
    exit_code: int | None
    """Its exit status (128 + N when signal N ended it); None when it did not end by itself."""
    signal: int | None
    timed_out: bool
    duration_ms: int
    output_tail: str
    """The end of its output (stdout and stderr together), at most :data:`OUTPUT_TAIL_BYTES`."""
    truncated: bool
    """True when the output was longer than the tail kept."""

    @property
    def ok(self) -> bool:
        """It ran, ended by itself and exited 0."""
        return self.ran and not self.timed_out and self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        """As the report holds it."""
        return {
            "command": self.command,
            "sandbox": self.sandbox,
            "network": False,
            "timeout_s": self.timeout_s,
            "ran": self.ran,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "duration_ms": self.duration_ms,
            "output_tail": self.output_tail,
            "truncated": self.truncated,
        }


@dataclass
class PreflightResult:
    """What a preflight found, and the ``preflight`` event that records it."""

    event: Event
    report_artifact: ObjectId
    """The id of the stored report (``strata cat ID`` prints it)."""
    report: dict[str, Any]
    """The report as stored: see :func:`preflight`."""

    @property
    def ok(self) -> bool:
        """The rebuild and the proposal were hash-verified and the check (if any) passed."""
        return bool(self.report["ok"])

    @property
    def expected_tree(self) -> ObjectId:
        """The tree the proposal makes (what a publish that follows must write)."""
        return ObjectId(self.report["expected_tree"])

    @property
    def divergence(self) -> dict[str, Any] | None:
        """The report's divergence, or None."""
        found: dict[str, Any] | None = self.report["divergence"]
        return found

    @property
    def check(self) -> dict[str, Any] | None:
        """The report's check, or None when no check was asked for."""
        found: dict[str, Any] | None = self.report["check"]
        return found

    @property
    def stamp(self) -> dict[str, Any]:
        """The ``preflight`` field of the events it vouches for."""
        return {"ok": self.ok, "report_artifact": self.report_artifact}

    def failure(self) -> str:
        """What failed, in one line ("" when it passed)."""
        if self.ok:
            return ""
        found = self.divergence
        if found is not None:
            what = "rebuilt base" if found["stage"] == "base" else "proposal"
            return f"the {what} diverges at {found['path']}: {found['reason']}"
        check = self.check or {}
        shown = _shown(check.get("command") or [])
        if check.get("timed_out"):
            return f"the check {shown} timed out after {check.get('timeout_s'):g} s"
        return f"the check {shown} exited {check.get('exit_code')}"

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata preflight --json`` prints: the event, the report's id, the report."""
        return {"event_id": self.event.id, "report_artifact": self.report_artifact, **self.report}


def _shown(argv: Sequence[str]) -> str:
    if len(argv) == 3 and argv[0] == _SHELL and argv[1] == "-c":
        return repr(argv[2])
    return repr(" ".join(argv))


# -- the proposal --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proposal:
    kind: str
    base_event: Event
    base_tree: ObjectId
    expected_tree: ObjectId
    anchor: Event
    branch: str | None
    details: dict[str, Any]
    paths: list[str]
    artifacts: tuple[str, ...] = ()


def check_argv(check: str | Sequence[str] | None) -> list[str] | None:
    """The argv that runs ``check``: a string runs in ``/bin/sh -c``, a sequence as it is.

    Raises :class:`UsageError` for an empty command.
    """
    if check is None:
        return None
    if isinstance(check, str):
        if not check.strip():
            raise UsageError(
                "the check command is empty",
                hint="give the command to run, e.g. --check 'pytest -q', or leave the option out",
            )
        if "\0" in check:
            raise UsageError("the check command contains a NUL byte")
        return [_SHELL, "-c", check]
    argv = [str(a) for a in check]
    if not argv or not argv[0]:
        raise UsageError("the check command is empty", hint="give the command to run")
    if any("\0" in a for a in argv):
        raise UsageError("the check command contains a NUL byte")
    return argv


def preflight(
    core: Core,
    *,
    patch: bytes | None = None,
    patch_name: str = "",
    check: str | Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    sandbox: str = "bwrap",
    environ: Mapping[str, str] | None = None,
    author: Author | None = None,
    scratch: Path | None = None,
) -> PreflightResult:
    """Rebuild, apply, hash-verify and check a proposal; record the outcome (see the module docs).

    The proposal is ``patch`` (a unified diff, as ``git diff`` or an agent
    writes it, applied onto HEAD's files; ``patch_name`` says where it came
    from) or, without one, the open Draft. ``check`` is a shell command
    string or an argv; ``environ`` the caller's environment (the sandbox
    passes on only its allowlisted variables; the library reads none).
    ``scratch`` is the folder the scratch folder is made in (default: the
    system's temporary folder); it must lie outside the workspace and the
    repository.

    The report (:attr:`PreflightResult.report`) holds ``format``, ``ok``,
    ``kind``, ``base`` (event id and tree), ``proposal`` (what was proposed),
    ``expected_tree``, ``rebuilt_tree`` and ``observed_tree`` (what the
    scans found), ``divergence`` (or null), ``check`` (or null: command,
    sandbox, exit code, duration, output tail and its ``truncated`` flag),
    ``duration_ms``, ``warnings`` and the ``strata`` version.
    """
    argv = check_argv(check)
    if sandbox not in SANDBOXES:
        raise UsageError(f"unknown sandbox {sandbox!r}; use one of {', '.join(SANDBOXES)}")
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"the timeout must be a positive number of seconds, not {timeout_s!r}")
    if patch is not None and not patch.strip():
        raise UsageError("the patch is empty", hint="give a unified diff (e.g. from 'git diff')")
    if argv is not None and sandbox == "bwrap":
        from strata.workbench.draft import check_sandbox

        check_sandbox()  # before anything is recorded
    draft = None
    if patch is None:
        from strata.workbench.draft import open_draft

        draft = open_draft(core)
        if draft is None:
            missing = NoDraft()
            missing.hint = "give a patch to preflight with --patch FILE, or start a Draft"
            raise missing
    parent = _scratch_parent(core, scratch)
    started = time.monotonic()
    if draft is not None:
        proposal = _propose_draft(core, draft, author=author)
    else:
        assert patch is not None
        proposal = _propose_patch(core, patch, patch_name, author=author, scratch=parent)

    warnings: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    try:
        with _signals_interrupt():
            rebuilt, observed, divergence = _rebuild_and_apply(core, proposal, folder, warnings)
            outcome: CheckResult | None = None
            if argv is not None:
                if divergence is None:
                    outcome = run_in_copy(
                        core,
                        argv,
                        files=folder / "files",
                        sandbox=sandbox,
                        environ=environ or {},
                        timeout_s=float(timeout_s),
                    )
                else:
                    outcome = CheckResult(
                        argv, sandbox, float(timeout_s), False, None, None, False, 0, "", False
                    )
    finally:
        if not _remove_scratch(folder):
            warnings.append(f"could not remove the scratch folder {folder}")

    ok = divergence is None and (outcome is None or outcome.ok)
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "ok": ok,
        "kind": proposal.kind,
        "base": {"event_id": proposal.base_event.id, "tree": proposal.base_tree},
        "proposal": proposal.details,
        "expected_tree": proposal.expected_tree,
        "rebuilt_tree": rebuilt,
        "observed_tree": observed,
        "divergence": divergence.to_json() if divergence is not None else None,
        "check": outcome.to_json() if outcome is not None else None,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "warnings": warnings,
        "strata": __version__,
    }
    return _record(core, proposal, report, author=author)


def _scratch_parent(core: Core, scratch: Path | None) -> Path:
    """The folder scratch folders are made in: outside the workspace and the repository."""
    parent = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
    try:
        parent = parent.resolve(strict=True)
    except OSError:
        raise UsageError(
            f"the folder for preflight's scratch folder does not exist: {parent}",
            hint="set TMPDIR to an existing folder",
        ) from None
    for owner, what in ((core.root, "the workspace"), (core.layout.repo, "the repository")):
        inside = owner.resolve()
        if parent == inside or inside in parent.parents:
            raise UsageError(
                f"preflight's scratch folder would be in {what} ({parent})",
                hint="set TMPDIR to a folder outside the workspace",
            )
    return parent


def _propose_draft(core: Core, draft: Draft, *, author: Author | None) -> _Proposal:
    """Record the Draft and Published (one operation), then compute the merged tree."""
    from strata.workbench.publish import proposed_tree

    with core.transaction("preflight", author) as tx:
        tip = draft.record("before preflight", author=author, tx=tx) or draft.tip()
        assert tip.snapshot_ref is not None
        _, scan = tx.auto_save("preflight")
        base = tx.head()
        assert base is not None  # a Draft starts from a recorded Published
        expected, merged = proposed_tree(draft, tip, scan.tree)
        paths = [c.path for c in diff_trees(core.objects, scan.tree, expected)]
        return _Proposal(
            kind="draft",
            base_event=base,
            base_tree=scan.tree,
            expected_tree=expected,
            anchor=tip,
            branch=draft.branch,
            details={
                "draft_id": draft.id,
                "draft_event_id": tip.id,
                "draft_snapshot_id": tip.snapshot_ref,
                "draft_base_event_id": draft.base.id,
                "merged_paths": [display_path(p) for p in merged],
                "paths": [display_path(p) for p in paths],
            },
            paths=paths,
        )


def _propose_patch(
    core: Core, patch: bytes, name: str, *, author: Author | None, scratch: Path
) -> _Proposal:
    """Record Published (an auto-save), then apply the patch to its tree in the store."""
    with core.transaction("preflight", author) as tx:
        _, scan = tx.auto_save("preflight")
        base = tx.head()
        if base is None:
            raise UsageError(
                "nothing is recorded in this workspace yet: there is no base to apply a patch to",
                hint="add files and run 'strata snapshot' first",
            )
        expected, paths = apply_patch(core.objects, scan.tree, patch, scratch=scratch)
        patch_oid = core.objects.put(patch)
        return _Proposal(
            kind="patch",
            base_event=base,
            base_tree=scan.tree,
            expected_tree=expected,
            anchor=base,
            branch=None,
            details={
                "patch_artifact": patch_oid,
                "name": name,
                "bytes": len(patch),
                "paths": [display_path(p) for p in paths],
            },
            paths=paths,
            artifacts=(patch_oid,),
        )


def _record(
    core: Core, proposal: _Proposal, report: dict[str, Any], *, author: Author | None
) -> PreflightResult:
    """Store the report and record the ``preflight`` event that links it."""
    data = json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False).encode()
    ok = bool(report["ok"])
    what = (
        f"Draft {proposal.details['draft_id']}"
        if proposal.kind == "draft"
        else f"patch {proposal.details['name'] or proposal.details['patch_artifact'][:12]}"
    )
    with core.transaction("preflight", author) as tx:
        report_oid = core.objects.put(data)
        event = tx.annotate(
            EventType.PREFLIGHT,
            anchor=proposal.anchor.id,
            rationale=f"preflight {'ok' if ok else 'failed'}: {what}",
            files=[display_path(p) for p in proposal.paths],
            author=author,
            branch=proposal.branch,
            data={
                "kind": proposal.kind,
                "base_event_id": proposal.base_event.id,
                "expected_tree": proposal.expected_tree,
                "divergence_path": (report["divergence"] or {}).get("path"),
                "exit_code": (report["check"] or {}).get("exit_code"),
            },
            artifacts=(report_oid, *proposal.artifacts),
            preflight={"ok": ok, "report_artifact": report_oid},
        )
    return PreflightResult(core.event(event.id), report_oid, report)


# -- rebuilding and verifying ------------------------------------------------------------


def _rebuild_and_apply(
    core: Core, proposal: _Proposal, folder: Path, warnings: list[str]
) -> tuple[ObjectId | None, ObjectId | None, Divergence | None]:
    """Write the base into ``folder/files``, verify it, apply the proposal, verify again.

    Returns the rebuilt tree, the tree found after applying, and the first
    divergence; adds to ``warnings`` the paths an ignore rule hides.
    """
    from strata.core.restore import unwritable_folders
    from strata.store.materialize import export_tree, plan_restore

    files = folder / "files"
    workspace = Workspace(
        files, objects=core.objects, cache_path=folder / "statcache", rules=core.rules
    )
    store = core.objects
    try:
        export_tree(store, proposal.base_tree, files)
    except StrataError as exc:  # a damaged or missing object: say whose it is
        return None, None, _damaged("base", store, proposal.base_tree, exc)
    scan = workspace.scan(hash_only=True)
    rebuilt = scan.tree
    divergence = _compare("base", proposal.base_tree, scan, files, warnings)
    if divergence is not None:
        return rebuilt, None, divergence
    if proposal.expected_tree == proposal.base_tree:
        return rebuilt, rebuilt, None
    # planned from what the scan found (its trees are in its own store: nothing was stored)
    actions = plan_restore(scan.store, scan.tree, proposal.expected_tree, stat_of=scan.stat_of)
    blocked = unwritable_folders(files, actions)
    if blocked:  # a publish run by this user would leave these unwritten too
        path = min(blocked)
        reason = f"cannot be written: this user may not write into the folder {blocked[path]}"
        return (
            rebuilt,
            None,
            Divergence("proposal", path, reason, None, sorted(blocked)[:PATHS_LISTED]),
        )
    try:
        workspace.apply(actions)
    except StrataError as exc:
        named = getattr(exc, "paths", None) or [getattr(exc, "path", None)]
        where = named[0] if named and isinstance(named[0], str) else None
        if where is None:
            return rebuilt, None, _damaged("proposal", store, proposal.expected_tree, exc)
        return rebuilt, None, Divergence("proposal", where, exc.message, None, [where])
    after = workspace.scan(hash_only=True)
    return rebuilt, after.tree, _compare("proposal", proposal.expected_tree, after, files, warnings)


def _compare(
    stage: str, expected: ObjectId, scan: Scan, files: Path, warnings: list[str]
) -> Divergence | None:
    """The divergence of what ``scan`` found from ``expected``, or None.

    A path the tree holds that is on disk but that the scan did not record is
    hidden by an ignore rule (the proposal's ``.gitignore``, or rules changed
    since the base was recorded): Strata would not record it either, so it is
    a warning, not a divergence. Anything else that differs is one.
    """
    if scan.tree == expected:
        return None
    store = scan.store  # reads what the scan hashed from the scratch folder itself
    changes = diff_trees(store, expected, scan.tree)
    differing: list[Change] = []
    for change in changes:
        path = change.path
        if change.status == "deleted" and path not in scan.errors and os.path.lexists(files / path):
            note = f"{display_path(path)}: an ignore rule hides it, so Strata does not record it"
            if note not in warnings:
                warnings.append(note)
            continue
        differing.append(change)
    if not differing:
        return None
    return _diverged(stage, store, differing, scan.warnings)


def _damaged(stage: str, store: ObjectStore, tree: ObjectId, exc: StrataError) -> Divergence:
    """The divergence of a tree one of whose objects cannot be read back intact."""
    path = first_damaged_path(store, tree)
    shown = path if path is not None else ""
    return Divergence(stage, shown, exc.message, None, [shown] if path is not None else [])


def first_damaged_path(store: ObjectStore, tree: ObjectId) -> str | None:
    """The first path below ``tree`` whose stored object is missing or damaged, or None.

    ``""`` when the root tree itself cannot be read. Reads every object (in
    path order): meant for after a read failed.
    """

    def walk(oid: ObjectId, prefix: str) -> str | None:
        try:
            entries = read_tree(store, oid, cached=False)
        except StrataError:
            return prefix.rstrip("/")
        for entry in entries:
            path = prefix + entry.name
            if entry.kind == "dir":
                found = walk(entry.oid, path + "/")
                if found is not None:
                    return found
                continue
            try:
                for _ in verified_chunks(store, entry.oid):
                    pass
            except StrataError:
                return path
        return None

    return walk(tree, "")


def _diverged(
    stage: str, store: ObjectStore, changes: list[Change], notes: list[str]
) -> Divergence:
    """Name the first of ``changes`` (expected to found), with its diff."""
    from strata.core.results import DiffResult

    first = changes[0]
    reason = _reason(first)
    if notes:
        reason = f"{reason} (the scan: {'; '.join(notes[:3])})"
    diff: str | None = None
    truncated = False
    with contextlib.suppress(StrataError):
        data = b"".join(DiffResult(store, [first], []).iter_patch(readable=True))
        if data:
            truncated = len(data) > DIFF_BYTES
            diff = data[:DIFF_BYTES].decode("utf-8", "replace")
    return Divergence(
        stage,
        first.path,
        reason,
        diff,
        [c.path for c in changes[:PATHS_LISTED]],
        truncated,
    )


def _reason(change: Change) -> str:
    old, new = change.old, change.new
    if change.status == "added":
        return "found in the rebuilt files but not in the expected tree"
    if change.status == "deleted":
        return "missing from the rebuilt files"
    if change.status == "renamed":
        return f"expected at {change.old_path}, found at {change.path}"
    if change.status == "mode_changed" and old is not None and new is not None:
        return f"mode differs (expected {old.mode:o}, found {new.mode:o})"
    if change.status == "type_changed" and old is not None and new is not None:
        return f"expected a {old.kind}, found a {new.kind}"
    return "content differs"


# -- the check -------------------------------------------------------------------------------


class _Tail:
    """The last :data:`OUTPUT_TAIL_BYTES` of a stream, read by a thread."""

    def __init__(self, stream: Any) -> None:
        self.data = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := stream.read1(65536):
                self.total += len(chunk)
                self.data += chunk
                if len(self.data) > 2 * OUTPUT_TAIL_BYTES:
                    del self.data[:-OUTPUT_TAIL_BYTES]

    def text(self) -> tuple[str, bool]:
        """The tail (decoded, bad bytes replaced) and whether output was cut."""
        return (
            bytes(self.data[-OUTPUT_TAIL_BYTES:]).decode("utf-8", "replace"),
            self.total > OUTPUT_TAIL_BYTES,
        )


def run_in_copy(
    core: Core,
    argv: list[str],
    *,
    files: Path,
    sandbox: str,
    environ: Mapping[str, str],
    timeout_s: float,
    cwd: str = "",
    extra_env: Mapping[str, str] | None = None,
    bind_ro: Sequence[Path] = (),
    env_names: Sequence[str] = (),
    proxy: Path | None = None,
) -> CheckResult:
    """Run ``argv`` in ``files``, a copy of the workspace (sandboxed, no network); how it ended.

    In the sandbox the copy is seen at the workspace's own path, Published's
    ignored folders read-only beside it; ``cwd`` is the workspace path the
    command starts in; ``extra_env`` is set for it on top of what the sandbox
    (or, with ``sandbox="none"``, the unsandboxed environment) passes. The
    command's whole session is killed when it ends, times out or is
    interrupted; only the tail of its output is kept. Used by preflight's
    check and by replay's recorded commands. In the sandbox, ``bind_ro`` are
    host paths shown read-only, ``env_names`` variables of ``environ`` passed
    in, and ``proxy`` the folder of a proxy's Unix socket, the command's only
    way out (:attr:`strata.sandbox.bwrap.SandboxSpec.proxy`).
    """
    from strata.sandbox import bwrap

    extra = dict(extra_env or {})
    made: list[Path] = []
    spec: bwrap.SandboxSpec | None = None
    if sandbox == "none":
        full, where = argv, files / cwd if cwd else files
        env = {**bwrap.unsandboxed_environment(files, environ=environ), **extra}
    else:
        from strata.workbench.draft import ignored_folders

        spec = bwrap.SandboxSpec(
            workspace=core.root,
            source=files,
            cwd=core.root / cwd if cwd else core.root,
            net=False,
            bind_ro=tuple(Path(p).absolute() for p in bind_ro),
            readonly=tuple((p, p) for p in ignored_folders(core)),
            env_names=(*extra, *env_names),
            repository=core.layout.repo,
            proxy=proxy,
        )
        made = bwrap.missing_mount_points(spec)
        full, env = bwrap.sandbox_command(spec, argv, environ={**environ, **extra})
        where = files
    try:
        return _run_copy(argv, full, where, env, sandbox=sandbox, timeout_s=timeout_s)
    finally:
        if spec is not None:  # the empty mount points bubblewrap made are not the command's
            bwrap.remove_mount_points(spec, made)


def _run_copy(
    argv: list[str],
    full: list[str],
    cwd: Path,
    env: Mapping[str, str],
    *,
    sandbox: str,
    timeout_s: float,
) -> CheckResult:
    start = time.monotonic()
    # Ctrl-C while the command starts is held until its wait begins: an interrupt that landed
    # between the fork and the wait would leave the command's session running on its own
    with _interrupts_held() as held:
        try:
            proc = subprocess.Popen(
                full,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:  # the program of an argv that does not exist (--sandbox none)
            message = f"strata: cannot run {argv[0]}: {exc.strerror or exc}\n"
            failed = 127 if isinstance(exc, FileNotFoundError) else 126
            return CheckResult(
                argv, sandbox, timeout_s, True, failed, None, False, 0, message, False
            )
        assert proc.stdout is not None
        tail = _Tail(proc.stdout)
    if held:
        kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        raise KeyboardInterrupt
    try:
        status, timed_out = wait_session(proc, timeout_s=timeout_s, grace_s=KILL_GRACE_S)
    finally:
        tail.thread.join(timeout=KILL_GRACE_S)
        proc.stdout.close()
    duration = int((time.monotonic() - start) * 1000)
    output, truncated = tail.text()
    sig = -status if status < 0 else None
    code: int | None = 128 + sig if sig is not None else status
    if timed_out:
        code = None
    return CheckResult(
        argv, sandbox, timeout_s, True, code, sig, timed_out, duration, output, truncated
    )


@contextlib.contextmanager
def _interrupts_held() -> Iterator[list[int]]:
    """Within the block, SIGINT, SIGTERM and SIGHUP are only noted in the list yielded."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in signals}
    try:
        yield held
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the work as Ctrl-C does (the scratch folder is removed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _remove_scratch(folder: Path) -> bool:
    """Delete the scratch folder, whatever the check left in it; False if some of it stays."""
    from strata.workbench.draft import make_removable

    make_removable(folder, bits=0o700)  # a folder the check left 'chmod 000'
    shutil.rmtree(folder, ignore_errors=True)
    return not os.path.lexists(folder)


# -- applying a patch, in the store ------------------------------------------------------------

_GIT_ERROR = re.compile(r"^error: (?P<path>.+?): (?P<what>.+)$")
_MAX_ROUNDS = 64
_NO_PATCH = "no patch found in it (a unified diff has '--- a/PATH', '+++ b/PATH' and '@@' lines)"


def apply_patch(
    store: ObjectStore, tree: ObjectId, patch: bytes, *, scratch: Path | None = None
) -> tuple[ObjectId, list[str]]:
    """The tree ``patch`` makes of ``tree``, and the paths it changes; nothing is read from disk.

    ``git apply --cached`` applies the patch to a throwaway index (in a
    temporary bare repository made in ``scratch``) that holds the base's blobs
    of the paths the patch names, so git's own parser and checks decide: git
    and plain unified diffs (with ``a/`` and ``b/`` prefixes or without, see
    :func:`strip_level`), renames,
    mode changes, binary patches; a hunk whose context is not there, a file
    created that exists, or a file changed that does not, refuse the patch.
    A changed file keeps its permission bits unless the patch changes the
    executable bit; new files get ``644`` or ``755``; folders left empty by
    deletions go, as git leaves them. Raises :class:`PatchDoesNotApply`
    (and :class:`DiffError` when git is not installed).
    """
    import pygit2
    from pygit2.enums import FileMode

    from strata.merge.trees import build_tree, flatten_tree

    git = shutil.which("git")
    if git is None:
        raise DiffError("applying a patch needs git, which is not installed")
    leaves, dirs = flatten_tree(store, tree)
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX + "git-", dir=scratch) as tmp:
        gitdir = Path(tmp) / "git"
        repo = pygit2.init_repository(str(gitdir), bare=True)
        index_path = gitdir / "index"
        env = {
            "PATH": os.defpath,
            "GIT_DIR": str(gitdir),
            "GIT_INDEX_FILE": str(index_path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "HOME": tmp,
            "LC_ALL": "C",
        }

        strip = f"-p{strip_level(patch)}"

        def git_apply(*args: str) -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(
                [git, "apply", strip, *args, "-"],
                input=patch,
                env=env,
                cwd=tmp,
                capture_output=True,
                check=False,
            )

        listed = git_apply("--numstat", "-z")
        if listed.returncode != 0:
            raise _refusal(listed.stderr)
        index = pygit2.Index(str(index_path))
        before: dict[str, tuple[str, int]] = {}

        def add(path: str) -> bool:
            entry = leaves.get(path)
            if entry is None or path in before:
                return False
            data = store.get(entry.oid)
            mode = _git_mode(entry)
            blob = repo.create_blob(data)
            index.add(pygit2.IndexEntry(path, blob, FileMode(mode)))
            before[path] = (str(blob), mode)
            return True

        for path in _numstat_paths(listed.stdout):
            add(path)
        for _ in range(_MAX_ROUNDS):
            index.write()
            done = git_apply("--cached", "--whitespace=nowarn")
            if done.returncode == 0:
                break
            # a rename's or copy's source is not in the numbers git lists: add it, try again
            missing = [
                m["path"]
                for line in done.stderr.decode("utf-8", "replace").splitlines()
                if (m := _GIT_ERROR.match(line)) and m["what"] == "does not exist in index"
            ]
            if not any([add(_unquote(p)) for p in missing]):
                raise _refusal(done.stderr)
        else:
            raise PatchDoesNotApply("git kept asking for more files than the patch names")
        after: dict[str, tuple[str, int]] = {}
        for item in pygit2.Index(str(index_path)):
            after[item.path] = (str(item.id), int(item.mode))
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        for path in changed:
            try:
                check_relative(path)
            except StrataError:
                raise PatchDoesNotApply(
                    f"{path}: not a path inside the workspace", path=path
                ) from None
            if is_internal(path):
                raise PatchDoesNotApply(
                    f"{path}: inside .strata or .git, which Strata never records", path=path
                )
        emptied: set[str] = set()
        for path in changed:
            if path not in after:
                leaves.pop(path, None)
                emptied.update(_parents(path))
        for path in changed:
            if path in after:
                oid, mode = after[path]
                data = repo[oid].read_raw()
                leaves[path] = _entry(path, store.put(data), len(data), mode, leaves.get(path))
        for path in changed:
            if path in after:
                _make_room(path, leaves, dirs)
        _prune(emptied, leaves, dirs)
        return build_tree(store, leaves, dirs), changed


def strip_level(patch: bytes) -> int:
    """How many leading folders to strip from the patch's paths: ``1`` or ``0``.

    ``1`` (git's ``a/`` and ``b/``) when every ``---`` name starts with ``a/``
    and every ``+++`` name with ``b/`` (or there are none: a git patch of
    renames and modes only), else ``0``: a diff written without prefixes
    (``--- src/x.py.orig``, ``+++ src/x.py``, as many agents write them).
    """
    for line in patch.splitlines():
        for marker, prefix in ((b"--- ", b"a/"), (b"+++ ", b"b/")):
            if not line.startswith(marker):
                continue
            name = line[len(marker) :].split(b"\t", 1)[0].strip().strip(b'"')
            if name != b"/dev/null" and not name.startswith(prefix):
                return 0
    return 1


def _refusal(stderr: bytes) -> PatchDoesNotApply:
    """The error for what ``git apply`` said, in one line."""
    lines = [
        line.removeprefix("error: ").strip()
        for line in stderr.decode("utf-8", "replace").splitlines()
        if line.strip() and not line.startswith(("warning:", "hint:"))
    ]
    path = None
    for line in stderr.decode("utf-8", "replace").splitlines():
        m = _GIT_ERROR.match(line)
        if m and not m["path"].startswith(("patch failed", "corrupt patch")):
            path = _unquote(m["path"])
            break
    reason = "; ".join(dict.fromkeys(lines)) or "git refused it"
    reason = reason.replace("in index", "in HEAD's files")
    reason = reason.replace('No valid patches in input (allow with "--allow-empty")', _NO_PATCH)
    return PatchDoesNotApply(reason[:500], path=path)


def _numstat_paths(out: bytes) -> list[str]:
    """The paths ``git apply --numstat -z`` lists (both names of a rename, when it gives both)."""
    paths: list[str] = []
    items = out.split(b"\0")
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if not item:
            continue
        parts = item.split(b"\t", 2)
        if len(parts) == 3 and parts[2]:
            paths.append(os.fsdecode(parts[2]))
        elif len(parts) == 3:  # "added\tdeleted\t\0old\0new"
            paths += [os.fsdecode(p) for p in items[i : i + 2] if p]
            i += 2
    return paths


def _unquote(name: str) -> str:
    """A path as git prints it in messages (C-quoted when it has special bytes)."""
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    raw = name[1:-1].encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    named = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12}
    named.update({ord("r"): 13, ord('"'): 34, ord("\\"): 92})
    while i < len(raw):
        c = raw[i]
        if c == 92 and i + 1 < len(raw):
            nxt = raw[i + 1]
            octal = raw[i + 1 : i + 4]
            if len(octal) == 3 and all(48 <= d <= 55 for d in octal):
                out.append(int(octal, 8) & 0xFF)
                i += 4
                continue
            out.append(named.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out).decode("utf-8", "surrogateescape")


def _git_mode(entry: TreeEntry) -> int:
    if entry.kind == "symlink":
        return 0o120000
    return 0o100755 if entry.mode & 0o100 else 0o100644


def _entry(path: str, oid: ObjectId, size: int, git_mode: int, old: TreeEntry | None) -> TreeEntry:
    """The tree entry of a path the patch wrote (git's mode turned into permission bits)."""
    name = path.rpartition("/")[2]
    if git_mode == 0o120000:
        return TreeEntry(
            name, "symlink", old.mode if old and old.kind == "symlink" else 0o777, size, oid
        )
    executable = git_mode & 0o100 != 0
    if old is None or old.kind != "file":
        return TreeEntry(name, "file", 0o755 if executable else 0o644, size, oid)
    mode = old.mode
    if executable and not mode & 0o100:
        mode |= (mode & 0o444) >> 2
    elif not executable and mode & 0o100:
        mode &= ~0o111
    return TreeEntry(name, "file", mode, size, oid)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _make_room(path: str, leaves: dict[str, TreeEntry], dirs: dict[str, int]) -> None:
    """Give the file the patch wrote at ``path`` its folders; refuse a file or folder in the way."""
    if path in dirs:
        raise PatchDoesNotApply(f"{path}: a folder is in the way", path=path)
    for folder in _parents(path):
        if folder in leaves:
            raise PatchDoesNotApply(f"{path}: {folder} is a file, not a folder", path=path)
        dirs.setdefault(folder, 0o755)


def _prune(emptied: set[str], leaves: dict[str, TreeEntry], dirs: dict[str, int]) -> None:
    """Drop the folders in ``emptied`` that hold nothing any more, deepest first."""
    held: dict[str, int] = {}
    for path in (*leaves, *dirs):
        parent = path.rpartition("/")[0]
        held[parent] = held.get(parent, 0) + 1
    for folder in sorted(emptied, key=lambda d: -d.count("/")):
        if folder in dirs and not held.get(folder):
            del dirs[folder]
            parent = folder.rpartition("/")[0]
            held[parent] -= 1
