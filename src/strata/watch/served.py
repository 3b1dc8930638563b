"""Which commands a watcher runs for the command line (shared by the client and the server).

The client (``strata._resident``) imports only the standard library before
it hands a command over, so this module imports nothing. It also holds what
a watcher defers until the asker has its answer (:func:`when_replied`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (not typing's: importing typing costs 2 ms in the client)
if TYPE_CHECKING:
    from collections.abc import Callable

#: the commands a watcher runs for the command line (it refuses any other): those whose
#: cost is start-up; anything else (``run``, ``init``, ``watch``; ``show`` and ``cat``, whose
#: output may be a whole large file) runs in the calling process
SERVED = (
    "snapshot",
    "status",
    "diff",
    "history",
    "check",
    "rewind",
    "restore",
    "undo",
    "redo",
    "bookmark",
    "branch",
    "checkpoint",
    "op",
    "review",
    "publish",
    "discard",
    "draft",
    "export",
)
#: sub-commands of a served command that run in the calling process (they start a child)
LOCAL_SUB = {"draft": ("run",)}
#: options whose output depends on the terminal or the process: always run locally
LOCAL_ONLY = ("-h", "--help", "--debug")
#: options of a served command that make it start a child (``publish --preflight`` runs a
#: check): the command then runs in the calling process (``--opt`` or ``--opt=VALUE``)
LOCAL_OPTIONS = {"publish": ("--preflight",)}


#: agents whose hook a watcher runs, when the hook's message is in the argument list
#: (``strata hook claude-code --payload=JSON``: a watcher has no standard input of the asker's)
SERVED_HOOKS = ("claude-code", "codex")


def is_served_hook(argv: list[str]) -> bool:
    """True for ``strata hook AGENT ... --payload=JSON`` with an agent of :data:`SERVED_HOOKS`."""
    return (
        len(argv) > 2
        and argv[0] == "hook"
        and argv[1] in SERVED_HOOKS
        and any(a.startswith("--payload=") for a in argv[2:])
    )


def has_local_option(argv: list[str]) -> bool:
    """True when ``strata ARGV`` gives one of its command's :data:`LOCAL_OPTIONS`."""
    names = LOCAL_OPTIONS.get(argv[0], ()) if argv else ()
    own = argv[: argv.index("--")] if "--" in argv else argv
    return any(a.split("=", 1)[0] in names for a in own[1:])


#: set by the client when the watcher did not answer in time and this process runs the
#: command itself: its scans then read the whole tree instead of waiting for that watcher
#: again, and ``status`` says the watcher does not answer (this process only)
silent_watcher = False


#: what to run once the asker has its answer (None: no command is being served)
_after_reply: list[Callable[[], object]] | None = None


def when_replied(work: Callable[[], object]) -> None:
    """Run ``work`` now, or, in a watcher running a command, once the asker has its answer.

    For what the command's output does not depend on and a crash may lose
    (saving the stat cache): the asker does not wait for it. The watcher
    runs it before it takes the next command (:func:`replied`); work another
    thread of the watcher defers meanwhile (a live capture's snapshot) waits
    for that command's answer too.
    """
    if _after_reply is None:
        work()
    else:
        _after_reply.append(work)


def in_background(work: Callable[[], object], *, only_served: bool = False) -> None:
    """Run ``work`` now, or, in a watcher running a command, on a thread after the answer.

    For what nothing waits for (deleting the files a restore replaced): the
    asker has its answer first, and the watcher's next command does not wait
    for it either (it may wait for the write lock such work takes). The work
    kept during one command runs in order, on one thread. A watcher that
    stops meanwhile leaves the rest to whoever does it next. With
    ``only_served``, ``work`` is a head start for the next command that only
    a watcher has time for: elsewhere it is not run at all.
    """
    if _after_reply is None:
        if not only_served:
            work()
        return
    _background.append(work)  # started by replied(), after what when_replied() kept


#: in a watcher that keeps its trash (:func:`keep_trash`): the most disk space (bytes) the files
#: restores replaced may hold in a trash folder before it is emptied after the command anyway
#: (None: not such a watcher; a trash is emptied after each command)
_trash_cap: int | None = None
#: and never more than this share of the space left free on its file system (space held
#: for a speed-up must not be what makes the next write fail)
TRASH_FREE_SHARE = 0.25
#: trash folder -> the disk space (bytes) of the replaced files left there for the watcher
_kept_trash: dict[str, int] = {}
#: trash folder -> (workspace path, object id) -> (name in the trash, (size, mtime_ns,
#: ctime_ns, inode)): the files restores left there, and what they held (:func:`trash_index`)
_trash_index: dict[str, dict[tuple[str, str], tuple[str, tuple[int, int, int, int]]]] = {}


def trash_index(trash: str) -> dict[tuple[str, str], tuple[str, tuple[int, int, int, int]]] | None:
    """In a watcher that keeps its trash: what the files left in ``trash`` held (else None).

    A restore records each file it moves there (the path it was at, the
    object the scan saw in it, its name and stat in the trash) and looks
    there first when it writes that object to that path again: going back
    and forth between two states swaps the same files back into place
    instead of making new ones (see ``WorkspaceWriter``). Forgotten when the
    trash is emptied.
    """
    if _trash_cap is None:
        return None
    return _trash_index.setdefault(trash, {})


def keep_trash(cap: int | None) -> None:
    """In a watcher: leave up to ``cap`` bytes of replaced files in a trash for later (None: none).

    The watcher deletes them once the workspace has been idle a while
    (:func:`take_kept_trash`): deleting many files just before a command
    creates many can slow the creation (see ``strata.cli.watch.TRASH_IDLE``).
    """
    global _trash_cap
    _trash_cap = cap
    if cap is None:
        _trash_index.clear()


def trash_later(trash: str, size: int, *, free: int) -> bool:
    """Leave ``size`` more bytes of replaced files in the folder ``trash`` for the watcher.

    ``size`` is less than nothing when the restore took more files back out
    of the trash than it left there.

    True when they are left: in a watcher that keeps its trash, running a
    command, while the folder then holds no more than the cap, nor more than
    :data:`TRASH_FREE_SHARE` of the ``free`` bytes left on its file system.
    False otherwise (no watcher, or past either bound): the caller empties
    the trash.
    """
    if _after_reply is None or _trash_cap is None:
        return False
    held = max(0, _kept_trash.get(trash, 0) + size)
    if held > _trash_cap or held > free * TRASH_FREE_SHARE:
        _kept_trash.pop(trash, None)  # emptied now: held no longer
        _trash_index.pop(trash, None)
        return False
    _kept_trash[trash] = held
    return True


def kept_trash() -> dict[str, int]:
    """The trash folders with files left for the watcher: folder -> bytes."""
    return dict(_kept_trash)


def take_kept_trash() -> list[str]:
    """The trash folders with files left for the watcher, no longer counted (it empties them)."""
    taken = []
    for trash in list(_kept_trash):
        if _kept_trash.pop(trash, None) is not None:
            taken.append(trash)
        _trash_index.pop(trash, None)
    return taken


#: the work :func:`in_background` keeps during the command being served
_background: list[Callable[[], object]] = []


def _start_background() -> None:
    import threading

    work = list(_background)
    _background.clear()

    def run() -> None:
        for item in work:
            item()

    threading.Thread(target=run, name="strata-background", daemon=True).start()


def serving() -> None:
    """Mark that the watcher now runs a command for an asker (:func:`when_replied` then waits)."""
    global _after_reply
    _after_reply = []
    _background.clear()


def replied() -> None:
    """The asker has its answer: run what :func:`when_replied` kept, in order.

    Then the thread of what :func:`in_background` kept starts: after the
    deferred saves, never beside them (a stat cache the auto-save saves late
    would otherwise overwrite the one a restore's refresh saved).
    """
    global _after_reply
    work, _after_reply = _after_reply or [], None
    try:
        for item in work:
            item()
    finally:
        if _background:
            _start_background()
