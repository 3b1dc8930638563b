"""Errors raised by Strata.

Every error Strata raises on purpose is a :class:`StrataError`. Each carries a
message a user can act on and, where one helps, a ``hint``, and its class says
what the ``strata`` command exits with (``exit_code``): 2 for usage errors, 125
for a run Strata could not start or record, 127 and 126 for a run's command
that is missing or cannot be executed, 1 for everything else. The CLI prints
``error: <message>`` (and ``hint: <hint>``) on one line each; with ``--json``
it prints ``{"schema": 1, "error": {"type": <class name>, "message": …,
"hint": … or null}}`` on stderr instead.

The tree::

    StrataError                                                       (exit 1)
    ├── UsageError                 bad arguments that the parser could not catch (exit 2)
    ├── RepositoryError
    │   ├── NotARepository         no workspace found searching upward
    │   │   └── WorkspaceRequired  a command or capability run where no workspace is (gateway)
    │   ├── NestedRepository       init inside an existing workspace
    │   ├── StoreOfAnotherWorkspace a copied workspace's pointer names the original's store
    │   ├── UnsupportedFormat      repository written by a newer Strata
    │   ├── RepositoryLocked       another process holds the write lock too long
    │   ├── CorruptRepository      a stored object or record fails verification
    │   │   └── ObjectMissing      an object named by a tree, snapshot or event is absent
    │   ├── JournalError           a journal of an interrupted command cannot be read or finished
    │   └── DiskFull               no space left on the device (or the quota is used up)
    ├── RefError
    │   ├── UnknownRef             a ref that names nothing
    │   ├── AmbiguousRef           a prefix that names more than one thing
    │   ├── SnapshotPruned         an event whose snapshot 'strata gc' removed (retention)
    │   ├── NameTaken              a branch or bookmark name that is already in use
    │   ├── BookmarkLocked         a locked bookmark asked to move, be renamed or deleted
    │   └── BranchInUse            deleting the branch HEAD is on
    ├── PathError
    │   ├── PathOutsideWorkspace   a path that leaves the workspace
    │   └── PathNotFound           a path absent from a snapshot
    ├── WorkspaceError
    │   ├── ExportFailed           export could not write into the folder it was given
    │   ├── FolderNotWritable      a rewind or restore would write into a folder it may not
    │   ├── UnsafeWorkspacePath    a symlink or swapped folder met while writing
    │   ├── WorkspaceChanged       a file changed under a rewind or restore
    │   ├── TargetNotEmpty         export into a folder that is not empty
    │   ├── WorkspaceBusy          a run holds the workspace lease
    │   │   └── WorkshopBusy       a Workshop turn is in progress (input is blocked)
    │   ├── DraftOpen              a Draft exists, so Published may not move
    │   ├── DraftExists            a second Draft was asked for
    │   ├── NoDraft                no Draft is open
    │   ├── DraftChanged           the Draft changed since the review publish expects
    │   ├── NothingToPublish       publish of a Draft that would change nothing in Published
    │   ├── PreflightFailed        a proposal failed its preflight (or changed since): not accepted
    │   ├── ExternalSymlink        a Draft symlink points outside the workspace
    │   ├── WatcherRunning         a watcher already runs for this workspace
    │   ├── WatcherFailed          the file-system watcher could not start
    │   ├── EntryInTheWay          a file, folder or symlink is not the kind a write expects
    │   ├── ProtectedPath          a write into .strata or .git of a workspace
    │   └── ManifestUnavailable    the Workshop cannot list a folder's files for a model call
    ├── UndoError
    │   ├── NothingToUndo          no operation is left to undo
    │   └── NothingToRedo          redo only follows an undo
    ├── MergeConflict              publish: edits of Published and the Draft collide
    ├── DiffError                  a diff that cannot be produced
    │   └── PatchDoesNotApply      a patch that does not apply to the files it is meant for
    ├── SandboxError
    │   ├── SandboxUnavailable     bubblewrap is missing or cannot create a sandbox here
    │   └── SandboxPolicyError     a path the sandbox policy refuses to mount
    ├── RunError                   a run that cannot start or record (exit 125)
    │   ├── CommandNotFound        the command does not exist (exit 127)
    │   ├── CommandNotExecutable   the command cannot be executed (exit 126)
    │   └── GitBackendError        a git command of the git backend failed
    ├── ProviderError              a model provider failed (names the provider)
    │   ├── ProviderNotConfigured  no provider of that name, or its key is missing
    │   ├── ProviderUnavailable    unreachable, or still failing after the retries
    │   ├── ProviderAuthFailed     the provider refused the credentials (401, 403)
    │   ├── ProviderProtocolError  a malformed response or stream
    │   ├── ProviderCancelled      the call was cancelled
    │   ├── ToolArgumentsInvalid   a tool call whose arguments are not a JSON object
    │   └── ProposalRefused        a compatibility-flow proposal refused whole (nothing applied)
    ├── ReplayError
    │   ├── TraceCorrupt           a trace artifact whose hash or format does not match
    │   ├── TraceLocked            a trace encrypted at rest with no key (or the wrong one)
    │   └── UnrecordedCall         a call a replay found no recording of (expected vs observed)
    ├── DigestError                a digest session file or override that cannot be read (digest)
    ├── SyncError                  a Git sync, push, fetch or import that cannot be done (sync)
    │   └── SyncMismatch           a synced commit whose tree differs from its snapshot
    ├── GatewayError               the tool gateway refused a command or capability (gateway)
    │   ├── PolicyInvalid          a [gateway] policy in config.toml that cannot be used
    │   ├── CommandForbidden       the policy forbids the command
    │   ├── ApprovalDenied         a risky command was not approved
    │   └── UnsupportedCapability  run_capability of a kind the registry does not have
    ├── KbError                    the knowledge base cannot do what was asked (strata kb)
    │   ├── KbNotIndexed           a search before 'strata kb index' (or without vectors)
    │   └── KbDenseUnavailable     dense retrieval without the 'kb-dense' extra installed
    ├── AgentLoopDetected          a model repeated one tool call until the loop guard stopped it
    ├── WorkshopError              a Workshop rewind or turn that cannot be done
    │   ├── WorkshopLoopDetected   the same, in a Workshop turn (also an AgentLoopDetected)
    │   ├── WorkshopStepLimit      a turn used all its steps before the model finished
    │   └── WorkshopPlanMissing    an RPI turn's plan phase answered without a checklist
    ├── DocumentTooLarge           an Office document that unpacks past what its reader reads
    └── ExtraNotInstalled          a framework integration whose extra is not installed (also
        │                          an ImportError: raised when its module is imported)
        └── DocumentsNotInstalled  a DOCX, PDF, XLSX or PPTX read or written without the
                                   'documents' extra

Under ``strata run``, every error but a :class:`RunError` exits 125 too, so that
Strata's own failures never pass for the command's exit code.
"""

from __future__ import annotations


class StrataError(Exception):
    """Root of every error Strata raises on purpose."""

    exit_code: int = 1
    """What the ``strata`` command exits with when this error ends it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(StrataError):
    """Arguments that are well-formed for the parser but make no sense together."""

    exit_code = 2


class RepositoryError(StrataError):
    """Something is wrong with the repository itself."""


class NotARepository(RepositoryError):
    """No Strata workspace was found from the given folder upward."""

    def __init__(self, start: str) -> None:
        super().__init__(
            f"not a strata workspace (or any parent up to /): {start}",
            hint="run 'strata init' in the folder you want to record (or 'strata init "
            "--store PATH' to reconnect a repository kept elsewhere)",
        )
        self.start = start


class NestedRepository(RepositoryError):
    """``init`` inside a folder that already belongs to a workspace."""

    def __init__(self, path: str, parent: str) -> None:
        super().__init__(
            f"{path} is inside the strata workspace {parent}; nested workspaces are not allowed",
            hint="record the folder from the outer workspace, or init somewhere else",
        )
        self.path = path
        self.parent = parent


class StoreOfAnotherWorkspace(RepositoryError):
    """A workspace whose ``.strata`` pointer names the store of another workspace.

    ``cp -a proj proj-copy`` copies the pointer file: both workspaces would then
    record into, rewind from and roll back through one store, each taking the
    other's files for its own.
    """

    def __init__(self, workspace: str, owner: str, store: str) -> None:
        super().__init__(
            f"{workspace} points at the store {store}, which belongs to the workspace {owner} "
            "(a copied workspace?); refusing to use it from here",
            hint=f"to make {workspace} its own repository, remove its .strata pointer file "
            "and run 'strata init' there (or 'strata init --store NEW_FOLDER')",
        )
        self.workspace = workspace
        self.owner = owner
        self.store = store


class UnsupportedFormat(RepositoryError):
    """The repository's format version is not one this Strata can read."""

    def __init__(self, what: str, found: object, supported: object) -> None:
        super().__init__(
            f"{what} has format version {found}; this strata reads version {supported}",
            hint="upgrade strata",
        )
        self.found = found
        self.supported = supported


class RepositoryLocked(RepositoryError):
    """Another process held the write lock for longer than we waited."""


class CorruptRepository(RepositoryError):
    """A stored object or record failed verification."""


class ObjectMissing(CorruptRepository):
    """An object that a tree, snapshot or event names is not in the store."""

    def __init__(self, object_id: str) -> None:
        super().__init__(
            f"object {object_id} is missing from the store",
            hint="run 'strata check' to list every problem",
        )
        self.object_id = object_id


class JournalError(RepositoryError):
    """The journal an interrupted command left is unreadable, of an unknown version, or stuck."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"the journal {path} {problem}",
            hint="reading commands still work; 'strata recover' finishes it, or "
            "'strata recover --abandon' leaves the files as they are",
        )
        self.path = path
        self.problem = problem


class DiskFull(RepositoryError):
    """A write failed because the device is full (``ENOSPC``) or the quota is used up."""

    def __init__(self, path: str | None = None) -> None:
        where = f" (writing {path})" if path else ""
        super().__init__(
            f"no space left on device{where}; nothing recorded was lost",
            hint="free some space, then run the command again "
            "(an interrupted rewind finishes by itself)",
        )
        self.path = path


class RefError(StrataError):
    """A ref could not be resolved."""


class UnknownRef(RefError):
    """A ref that names no event, snapshot or object."""

    def __init__(self, ref: str, *, hint: str | None = None, what: str = "ref") -> None:
        super().__init__(
            f"unknown {what} {ref!r}",
            hint=hint
            or "refs are event ids, snapshot ids, run ids (4 characters or more), branches, "
            "bookmarks, HEAD and HEAD~N; see 'strata history'",
        )
        self.ref = ref


class SnapshotPruned(RefError):
    """The snapshot of an event was removed by ``strata gc`` (the retention policy thinned it)."""

    def __init__(
        self,
        snapshot_id: str,
        *,
        removed: str,
        event_id: str | None = None,
        nearest: str | None = None,
    ) -> None:
        what = f"event {event_id[:12]}'s snapshot" if event_id else "snapshot"
        super().__init__(
            f"{what} {snapshot_id[:12]} was removed by gc on {removed}; "
            f"nearest kept: {nearest or 'none'}",
            hint="the event stays in the history; bookmark events before gc to keep their "
            "files, or widen [retention] in config.toml",
        )
        self.snapshot_id = snapshot_id
        self.removed = removed
        self.event_id = event_id
        self.nearest = nearest


class AmbiguousRef(RefError):
    """A prefix that matches more than one id."""

    def __init__(self, ref: str, candidates: list[str]) -> None:
        shown = ", ".join(c[:16] for c in candidates[:5])
        super().__init__(
            f"ref {ref!r} is ambiguous: it matches {shown}",
            hint="type more characters of the id",
        )
        self.ref = ref
        self.candidates = candidates


class NameTaken(RefError):
    """A new branch or bookmark name that is already in use."""

    def __init__(self, what: str, name: str, *, hint: str | None = None) -> None:
        super().__init__(f"{what} {name!r} exists", hint=hint or "pick another name")
        self.what = what
        self.name = name


class BookmarkLocked(RefError):
    """A locked bookmark cannot move, be renamed or be deleted."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"bookmark {name!r} is locked", hint=f"run 'strata bookmark unlock {name}' first"
        )
        self.name = name


class BranchInUse(RefError):
    """The branch HEAD is on cannot be deleted."""

    def __init__(self, name: str) -> None:
        super().__init__(f"branch {name!r} is HEAD's branch", hint="switch to another branch first")
        self.name = name


class PathError(StrataError):
    """A path argument that cannot be used."""


class PathOutsideWorkspace(PathError):
    """A path that resolves outside the workspace."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path!r} is outside the workspace")
        self.path = path


class PathNotFound(PathError):
    """A path absent from a snapshot."""

    def __init__(self, path: str, ref: str) -> None:
        super().__init__(f"path {path!r} does not exist in {ref}")
        self.path = path
        self.ref = ref


class WorkspaceError(StrataError):
    """Writing into the workspace could not be done safely."""


class ExportFailed(WorkspaceError):
    """``strata export`` could not write into the folder it was given."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(
            f"cannot export into {target}: {reason}",
            hint="give a new or empty folder you may write into",
        )


class FolderNotWritable(WorkspaceError):
    """A rewind or restore would write into folders this user may not change."""

    def __init__(self, paths: list[str]) -> None:
        shown = ", ".join(paths[:5]) + (" …" if len(paths) > 5 else "")
        super().__init__(
            f"cannot write into these folders, nothing was changed: {shown}",
            hint="make them writable (chmod u+w), then run the command again",
        )
        self.paths = paths


class UnsafeWorkspacePath(WorkspaceError):
    """A symlink or a swapped folder was met where a real folder was expected."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"refusing to write through {path!r}: a folder on the way is a symlink or "
            "was replaced while writing"
        )
        self.path = path


class WorkspaceChanged(WorkspaceError):
    """A file changed between the auto-save and the write that would replace it."""

    def __init__(self, paths: list[str]) -> None:
        shown = ", ".join(paths[:5]) + (" …" if len(paths) > 5 else "")
        super().__init__(
            f"files changed while Strata worked on them, left as they are: {shown}",
            hint="run the command again; nothing was lost",
        )
        self.paths = paths


class TargetNotEmpty(WorkspaceError):
    """Export into a folder that already has content."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} exists and is not empty", hint="export into a new folder")
        self.path = path


class WorkspaceBusy(WorkspaceError):
    """A run in progress holds the workspace lease."""

    def __init__(
        self,
        command: str,
        runs: list[str],
        *,
        pids: list[int] | None = None,
        hint: str | None = None,
    ) -> None:
        # the pids say which processes still run: after strata itself was killed, its
        # command may go on writing, and it is the command the user has to wait for
        held = f"; processes still running it: {', '.join(map(str, pids))}" if pids else ""
        super().__init__(
            f"refusing to {command}: a run is in progress in this workspace "
            f"({', '.join(runs)}{held})",
            hint=hint or "wait for the run to finish, or pass --force",
        )
        self.command = command
        self.runs = runs
        self.pids = pids or []


class DraftOpen(WorkspaceError):
    """A Draft exists, and the command would move Published."""

    def __init__(self, command: str) -> None:
        super().__init__(
            f"refusing to {command} while a Draft is open: publish or discard the Draft first",
            hint="see 'strata draft status', then 'strata publish' or 'strata discard'",
        )
        self.command = command


class DraftExists(WorkspaceError):
    """A Draft is already open: there is one at a time."""

    def __init__(self, draft_id: str) -> None:
        super().__init__(
            f"a Draft is already open ({draft_id})",
            hint="publish or discard it first ('strata draft status' shows it)",
        )
        self.draft_id = draft_id


class NoDraft(WorkspaceError):
    """The command needs an open Draft and there is none."""

    def __init__(self) -> None:
        super().__init__("no Draft is open", hint="start one with 'strata draft start'")


class DraftChanged(WorkspaceError):
    """``publish --expect`` named a snapshot that is no longer the Draft's."""

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(
            f"the Draft changed since the review (expected snapshot {expected}, "
            f"it is now {actual[:12]})",
            hint="run 'strata review' again, then publish with the new snapshot id",
        )
        self.expected = expected
        self.actual = actual


class NothingToPublish(WorkspaceError):
    """Publishing the Draft would change nothing in Published: no publish is recorded."""

    def __init__(self, draft_id: str) -> None:
        super().__init__(
            f"nothing to publish: Draft {draft_id} changes nothing in Published",
            hint="'strata discard' ends the Draft",
        )
        self.draft_id = draft_id


class PreflightFailed(WorkspaceError):
    """A proposal failed its preflight, so it was not accepted (nothing was published).

    ``report`` is the object id of the preflight's report (``strata cat ID``
    prints it), when one was recorded.
    """

    def __init__(self, reason: str, *, report: str | None = None, hint: str | None = None) -> None:
        where = f" (report {report[:12]})" if report else ""
        super().__init__(
            f"preflight failed: {reason}{where}",
            hint=hint or (f"read the report with 'strata cat {report}'" if report else None),
        )
        self.reason = reason
        self.report = report


class ExternalSymlink(WorkspaceError):
    """The Draft holds symlinks whose targets leave the workspace.

    Targets are resolved through the tree's own symlinks (``y -> x/..`` with
    ``x -> ..`` leaves). ``command`` is ``publish``, or the command that would
    bring a Draft revision's files into Published (``rewind``, ``restore``…).
    """

    def __init__(self, paths: list[str], *, command: str = "publish") -> None:
        super().__init__(
            f"refusing to {command} symlinks that point outside the workspace: " + ", ".join(paths),
            hint=(
                "remove them from the Draft, or publish with --allow-external-symlinks"
                if command == "publish"
                else "they were made in a Draft: publish that Draft with "
                "--allow-external-symlinks if you mean to keep them"
            ),
        )
        self.paths = paths
        self.command = command


class MergeConflict(StrataError):
    """Published and the Draft changed the same lines (or a file one side deleted)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(
            "publish would conflict with changes made to Published meanwhile; "
            "nothing was written. Conflicting files: " + ", ".join(paths),
            hint="resolve them in the Draft (or in Published), then publish again",
        )
        self.paths = paths


class WatcherRunning(WorkspaceError):
    """A watcher (``strata watch``, a live capture) already runs for this workspace."""

    def __init__(self, workspace: str) -> None:
        super().__init__(
            f"a watcher already runs for {workspace}",
            hint="see 'strata watch --status'; stop it with 'strata watch --stop'",
        )
        self.workspace = workspace


class WatcherFailed(WorkspaceError):
    """The file-system watcher could not watch the workspace."""

    def __init__(self, workspace: str, reason: str) -> None:
        super().__init__(
            f"cannot watch {workspace}: {reason}",
            hint="on Linux, raise fs.inotify.max_user_watches / max_user_instances (sysctl)",
        )
        self.workspace = workspace
        self.reason = reason


class EntryInTheWay(WorkspaceError):
    """A file, folder or symlink of the workspace is not the kind a read or write expects."""

    def __init__(self, path: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path


class ProtectedPath(WorkspaceError):
    """A write into ``.strata`` or ``.git``: they are never written into a workspace."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"refusing to change {path}: .strata and .git are never written into a workspace"
        )
        self.path = path


class UndoError(StrataError):
    """``undo`` or ``redo`` has nothing to act on."""


class NothingToUndo(UndoError):
    """Every operation is undone already (or none was recorded)."""

    def __init__(self) -> None:
        super().__init__("nothing to undo", hint="see 'strata op log'")


class NothingToRedo(UndoError):
    """``redo`` follows only an undo."""

    def __init__(self) -> None:
        super().__init__("nothing to redo: redo only follows an undo", hint="see 'strata op log'")


class DiffError(StrataError):
    """A diff that cannot be produced."""


class PatchDoesNotApply(DiffError):
    """A patch that does not apply to the files it is meant for (``preflight --patch``).

    ``path`` is the first file it does not apply to, when git named one.
    """

    def __init__(self, reason: str, *, path: str | None = None) -> None:
        super().__init__(
            f"the patch does not apply: {reason}",
            hint="make the patch against the workspace's recorded files ('strata diff' "
            "makes one git accepts), or see 'git apply --check'",
        )
        self.reason = reason
        self.path = path


class SandboxError(StrataError):
    """A command could not be run in the OS sandbox."""


class SandboxUnavailable(SandboxError):
    """bubblewrap is missing, or cannot create a sandbox on this machine."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"cannot run in a sandbox: {reason}",
            hint="install bubblewrap (apt-get install bubblewrap), "
            "or pass --sandbox none to run without isolation",
        )
        self.reason = reason


class SandboxPolicyError(SandboxError):
    """A path the sandbox policy refuses: malformed, missing, or one that would expose too much."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class RunError(StrataError):
    """A run that cannot start or cannot record; ``exit_code`` is what ``strata run`` exits with."""

    exit_code = 125


class CommandNotFound(RunError):
    """The command of a run does not exist."""

    exit_code = 127

    def __init__(self, command: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"command not found: {command}", hint=hint or "check the spelling and your PATH"
        )
        self.command = command


class CommandNotExecutable(RunError):
    """The command of a run exists but cannot be executed."""

    exit_code = 126

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"cannot execute {command}: {reason}")
        self.command = command


class GitBackendError(RunError):
    """A git command of the git backend failed."""


class ProviderError(StrataError):
    """A model provider failed; the message names the provider and what to do."""

    def __init__(self, provider: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{provider}: {message}", hint=hint)
        self.provider = provider


class ProviderNotConfigured(ProviderError):
    """No provider of that name is configured, or its API key is missing."""


class ProviderUnavailable(ProviderError):
    """The provider cannot be reached, or still fails after every retry."""

    def __init__(
        self, provider: str, message: str, *, attempts: int = 1, hint: str | None = None
    ) -> None:
        super().__init__(provider, message, hint=hint)
        self.attempts = attempts
        self.alternatives: tuple[str, ...] = ()
        """Configured models to switch to (``NAME:MODEL``), when a command offers them."""


class ProviderAuthFailed(ProviderError):
    """The provider refused the credentials (HTTP 401 or 403)."""


class ProviderProtocolError(ProviderError):
    """The provider answered with something that is not its wire format (a malformed stream)."""


class ProviderCancelled(ProviderError):
    """The call was cancelled before it finished."""


class ToolArgumentsInvalid(ProviderError):
    """A tool call whose arguments are not a JSON object."""

    def __init__(self, provider: str, tool: str, arguments: str) -> None:
        shown = arguments if len(arguments) <= 80 else arguments[:77] + "..."
        super().__init__(
            provider,
            f"the model called {tool!r} with arguments that are not a JSON object: {shown!r}",
            hint="the step is not recorded; retry it, or use a model that supports tool calls",
        )
        self.tool = tool
        self.arguments = arguments


class ProposalRefused(ProviderError):
    """A proposal of the compatibility flow that is refused whole: nothing of it is applied.

    ``problem`` is the first thing wrong with it (a schema violation, a path
    outside the workspace or into ``.strata``...).
    """

    def __init__(self, problem: str, *, provider: str = "model") -> None:
        super().__init__(
            provider,
            f"its proposal was refused, nothing was applied: {problem}",
            hint="ask again ('strata chat regenerate'), or use a model that supports tool calls",
        )
        self.problem = problem


class ReplayError(StrataError):
    """A replay that cannot go on."""


class TraceCorrupt(ReplayError):
    """A trace artifact whose hash or format does not match what the ledger names."""

    def __init__(self, trace: str, reason: str) -> None:
        super().__init__(
            f"trace {trace} is corrupt: {reason}",
            hint="run 'strata check'; a trace cannot be replayed once its bytes changed",
        )
        self.trace = trace


class TraceLocked(ReplayError):
    """A trace encrypted at rest that cannot be opened: no key, or not the right one."""

    def __init__(self, trace: str, reason: str) -> None:
        super().__init__(
            f"trace {trace} is encrypted at rest and cannot be read: {reason}",
            hint="set [traces] identity in config.toml to the age key file that opens it "
            "(kept outside the repository)",
        )
        self.trace = trace


class UnrecordedCall(ReplayError):
    """A call that a replay found no recording of; the message shows expected and observed."""

    def __init__(self, key: str, *, expected: str, observed: str) -> None:
        super().__init__(
            f"unrecorded call {key}: expected {expected}, observed {observed}",
            hint="the step asked for something it did not ask for when it was recorded",
        )
        self.key = key
        self.expected = expected
        self.observed = observed


# -- the Git sync and the audit bundle (strata.sync) -------------------------------------


class SyncError(StrataError):
    """A Git sync, push, fetch, import or bundle that cannot be done; the message says why."""


class SyncMismatch(SyncError):
    """A synced commit (or a bundle's files) that differs from the snapshot it names."""

    def __init__(self, where: str, path: str, reason: str) -> None:
        super().__init__(
            f"{where}: {path or '(root)'} differs from the recorded snapshot: {reason}",
            hint="the copy was changed after it was written; sync again from the ledger",
        )
        self.where = where
        self.path = path
        self.reason = reason


# -- the workspace digest (strata.digest) --------------------------------------------------


class DigestError(StrataError):
    """A digest file (a session's slice, an override) that cannot be read or written."""


# -- the Workshop's file context (issue 13, ws-context) -------------------------------------


class ManifestUnavailable(WorkspaceError):
    """The Workshop could not list a folder's files, so no model call is made without them."""

    def __init__(self, folder: str, reason: str) -> None:
        super().__init__(
            f"cannot list the files of {folder} for the model: {reason}",
            hint="check that the folder exists and can be read; the message was not sent",
        )
        self.folder = folder
        self.reason = reason


# -- the tool gateway (gateway/: terminal_exec, risk policy, approvals) ----------------------


class WorkspaceRequired(NotARepository):
    """A command or capability was asked for where no Strata workspace is (``workspace_required``).

    Executable operations are bound to a workspace: they run in its folder
    and are recorded in its ledger.
    """

    code = "workspace_required"

    def __init__(self, start: str) -> None:
        super().__init__(start)
        self.message = f"workspace required: {start} is not a strata workspace"


class GatewayError(StrataError):
    """The tool gateway refused a command or a capability; ``code`` names why, for machines."""

    code = "gateway_error"


class PolicyInvalid(GatewayError):
    """A ``[gateway]`` policy that cannot be used (a bad rule, or an example its rule fails)."""

    code = "policy_invalid"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(
            message, hint=hint or "fix the [gateway] table of config.toml (see docs/gateway.md)"
        )


class CommandForbidden(GatewayError):
    """The policy forbids the command (``command_forbidden``): nothing ran."""

    code = "command_forbidden"

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(
            f"command forbidden by the policy: {reason}",
            hint="choose another command, or change the [gateway] profile or rules",
        )
        self.command = command
        self.reason = reason


class ApprovalDenied(GatewayError):
    """A command that needed approval was not approved (``approval_denied``): nothing ran."""

    code = "approval_denied"

    def __init__(self, command: str, reason: str, *, by: str = "") -> None:
        who = f" by {by}" if by else ""
        super().__init__(
            f"approval denied{who}: {reason}",
            hint="approve it when asked, or pass --yes to approve it in advance",
        )
        self.command = command
        self.reason = reason
        self.by = by


class UnsupportedCapability(GatewayError):
    """``run_capability`` of a kind the registry does not have."""

    code = "unsupported_capability"

    def __init__(self, kind: str, known: tuple[str, ...] = ()) -> None:
        super().__init__(
            f"unsupported capability kind: {kind}",
            hint=f"use one of {', '.join(known)}" if known else None,
        )
        self.kind = kind


# -- the local knowledge base (strata kb) -------------------------------------------------


class KbError(StrataError):
    """The knowledge base cannot do what was asked (a query with no words, a damaged index)."""


class KbNotIndexed(KbError):
    """A search of a knowledge base that was never indexed (or not with what the search needs)."""

    def __init__(self, what: str, *, hint: str = "run 'strata kb index' first") -> None:
        super().__init__(f"{what} is not indexed", hint=hint)
        self.what = what


class KbDenseUnavailable(KbError):
    """Dense retrieval was asked for, but its extra (the embedding model) is not installed."""

    def __init__(self, missing: str) -> None:
        super().__init__(
            f"dense retrieval needs the 'kb-dense' extra ({missing} is not installed)",
            hint="pip install 'strata-workspace[kb-dense]'; or search with --mode bm25 "
            "and index with --no-dense",
        )
        self.missing = missing


# -- the Workshop (issue 13) -------------------------------------------------------------


class WorkshopError(StrataError):
    """A Workshop operation that cannot be done (a rewind whose checkpoint is gone...)."""


class WorkshopBusy(WorkspaceBusy):
    """A Workshop turn (or a Draft step) is in progress: input is blocked until it ends."""

    def __init__(self, command: str, runs: list[str]) -> None:
        super().__init__(
            command,
            runs,
            hint="wait for the current turn to finish (or stop it), then try again",
        )
        self.message = f"refusing to {command}: a Workshop turn is in progress ({', '.join(runs)})"


# -- the Workshop's RPI loop (issue 13, ws-rpi) --------------------------------------------


class AgentLoopDetected(StrataError):
    """A model repeated the same tool call until the loop guard of its step loop stopped it."""

    stopped = "the run"
    advice = "rephrase the request or use another model; the steps before it are kept"

    def __init__(self, tool: str, count: int) -> None:
        super().__init__(
            f"the agent called {tool} with the same arguments {count} times in a row of its "
            f"last tool calls, so {self.stopped} was stopped",
            hint=self.advice,
        )
        self.tool = tool
        self.count = count


class WorkshopLoopDetected(WorkshopError, AgentLoopDetected):
    """The agent repeated the same tool call until the loop guard stopped the turn."""

    stopped = "the turn"
    advice = "rephrase the request or switch model (/model); what the turn did is kept"


class WorkshopStepLimit(WorkshopError):
    """A turn used all its steps with the model still calling tools: it was stopped."""

    def __init__(self, max_steps: int) -> None:
        super().__init__(
            f"the turn stopped at its step limit ({max_steps} steps) before the model "
            "finished; what its steps wrote is in the Draft",
            hint="ask it to continue ('strata ask \"continue\"'), or allow more steps "
            "('strata ask --max-steps N')",
        )
        self.max_steps = max_steps


class WorkshopPlanMissing(WorkshopError):
    """The plan phase of an RPI turn answered without a checklist."""

    def __init__(self, provider: str) -> None:
        super().__init__(
            f"{provider}: the plan phase answered without a checklist ('- [ ] ...' lines)",
            hint="'strata chat regenerate' tries the plan again (the research is kept), or "
            "switch to a stronger model ('strata chat model NAME')",
        )
        self.provider = provider


# -- framework integrations (strata.integrations.langgraph, .openai_agents) ---------------


class ExtraNotInstalled(StrataError, ImportError):
    """A framework integration was imported, but the package it plugs into is not installed.

    Also an :class:`ImportError`, so ``except ImportError`` around an optional
    import still catches it; its message names the extra to install.
    """

    def __init__(self, integration: str, extra: str, missing: str) -> None:
        install = f"pip install 'strata-workspace[{extra}]'"
        super().__init__(
            f"{integration} needs the '{extra}' extra ({missing} is not installed): {install}",
            hint=install,
        )
        self.integration = integration
        self.extra = extra
        self.missing = missing


# -- documents (strata.documents) ----------------------------------------------------------


class DocumentTooLarge(StrataError):
    """An Office document whose parts unpack to more than its reader reads (a zip bomb, say).

    Refused before it is parsed: the libraries hold a document's whole XML in memory.
    """

    def __init__(self, kind: str, unpacked: int, limit: int) -> None:
        super().__init__(
            f"the {kind} document's XML unpacks to {unpacked // (1 << 20)} MiB, past the "
            f"{limit // (1 << 20)} MiB that is read of one",
            hint="split it, or read it with the application that made it",
        )
        self.kind = kind
        self.unpacked = unpacked
        self.limit = limit


class DocumentsNotInstalled(ExtraNotInstalled):
    """A DOCX, PDF, XLSX or PPTX file read or written without the ``documents`` extra."""

    def __init__(self, kind: str, missing: str) -> None:
        super().__init__(f"reading and writing {kind} files", "documents", missing)
        self.kind = kind
