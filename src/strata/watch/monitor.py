"""The change monitor: which workspace paths changed, without walking the tree.

A :class:`ChangeMonitor` watches the workspace with inotify
(:mod:`strata.watch.notify`) and numbers every change it sees. A *token*
``"<instance>:<sequence>"`` names a point in that numbering;
:meth:`ChangeMonitor.query` answers "which paths changed since this token"
and hands out a new token, as git's fsmonitor hook does.

A write made just before the question must never be missed. The kernel
queues a change's event before the system call that made it returns, so the
monitor reads its queue empty before it answers: every change made before
the question is counted, at the cost of one ``read`` (an asker once had to
write a *cookie* file and wait for its event; the protocol still carries the
cookie's name, which is no longer needed). A thread reads the events as they
come too, so that listeners (live capture) hear of changes without a question.

The monitor cannot vouch for an answer (the answer's ``changed`` is None, and
the asker walks the whole tree) when the token is empty, names another
instance (the monitor restarted, or the token predates it), lies before the
oldest change it still remembers (its history overflowed, or the kernel's
queue did: ``IN_Q_OVERFLOW``, after which every folder is watched anew), or
is unknown; and the asker walks when no monitor answers in time.

A monitor may watch other folders too (the Draft's, ``others``), each with a
history of its own, asked about with ``root=NAME``. One that does not exist
yet, or is deleted or replaced (another inode at its path), is not vouched
for: it is watched anew once it is there, and its history restarts then
(older tokens are refused); the other folders' histories go on.

Noise is dropped: ``.strata``, ``.git`` and a restore's temporary files never
count as changes. Ignore rules are the scanner's business: an ignored path
that changes only makes its folder be listed again.

The monitor of a repository is reachable through a Unix socket,
``REPO/watch/watch.sock``; one JSON object per line each way (protocol
version 1, see docs/format.md):

Every request carries ``"key": K``, the secret the watcher wrote to
``REPO/watch/watch.key`` (mode 0600) when it started, and comes from a
process of the watcher's own user (``SO_PEERCRED``) in the watcher's own
mount namespace (``/proc/PID/ns/mnt``: a sandboxed process has its own);
any other request is refused. The repository is masked in the sandbox, so code run in a Draft
cannot read the key even when it reaches the socket.

* ``{"v": 1, "op": "query", "token": T, "root": R}`` (``root`` optional:
  ``"draft"`` asks about the Draft's folder; a ``"cookie"`` field, sent by
  older askers, is ignored) ->
  ``{"v": 1, "ok": true, "token": T2, "changed": [paths] | null, "reason": R}``
* ``{"v": 1, "op": "status"}`` -> ``{"v": 1, "ok": true, "status": {...}}``
* ``{"v": 1, "op": "stop"}`` -> ``{"v": 1, "ok": true}``, then the watcher ends.
* ``{"v": 1, "op": "run", "argv": [...], "version": V, ...}`` (a watcher given a
  *runner*: it runs one of :data:`RUNNABLE` for the asker, see
  ``strata._resident``; any other command, or an asker of another Strata
  version, is refused) -> ``{"v": 1, "ok": true, "queued": true}`` first when
  another asker's command still runs after :data:`QUEUE_GRACE` (the asker then waits up to
  :data:`QUEUE_TIMEOUT`), then ``{"v": 1, "ok": true, "ready": true, "pid": N}``
  or ``{"v": 1, "ok": false, ...}`` (not started: refused, stopping); the asker
  then sends ``{"go": true}`` and gets
  ``{"v": 1, "ok": true, "done": true, "code": C, "output": [[fd, text], ...]}``.
  Nothing runs unless "go" arrives after "ready", so an asker that timed out
  and runs the command itself never has it run twice.
* ``{"v": 1, "op": "run_begin", "argv": ["run", ...], ...}`` (the fields of a
  "run" request) and ``{"v": 1, "op": "run_end", "run_id": R, "outcome": {...}, ...}``:
  a ``strata run`` whose command the asker executes itself (see
  ``strata.runs.thin``). The same "ready" / "go" / "done" exchange; the "done"
  of a ``run_begin`` carries ``"begun": true, "run_id": R, "env": {...}`` and
  the run's lease file descriptor (``SCM_RIGHTS``), or ``"thin": false`` (not
  the plain form: nothing was done, the asker runs the whole command line);
  a ``run_end`` must come with that descriptor attached to its request line
  and name a run this watcher began, else it is refused before "ready".

:func:`ask` is the client side: it returns None whenever no monitor answers.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import hmac
import json
import os
import secrets
import select
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata._wire import short_socket_path
from strata.atomic import TEMP_PREFIX, held_elsewhere
from strata.errors import WatcherFailed, WatcherRunning
from strata.store.ignore import ALWAYS_IGNORED, IGNORE_FILES, IgnoreRules
from strata.watch import served as served_commands
from strata.watch.notify import Notifier, WatchLimit

# RUNNABLE: the commands a watcher runs for an asker; LOCAL_SUB, LOCAL_ONLY and
# has_local_option: the sub-commands and options that never run in one (the client's own
# lists, so both agree)
from strata.watch.served import LOCAL_ONLY, LOCAL_SUB, has_local_option
from strata.watch.served import SERVED as RUNNABLE

PROTOCOL = 1
SOCKET = "watch.sock"
PIDFILE = "watch.pid"
KEYFILE = "watch.key"
#: the file, beside the socket, where a watcher that could not start says why
UNAVAILABLE = "unavailable.json"
#: how long an asker waits for a watcher busy with another asker's command
QUEUE_TIMEOUT = 60.0
#: how long a request waits for its turn before the asker is told it is queued: what the
#: previous command left for after its answer (saving a stat cache) takes a millisecond or
#: two, and an asker told "queued" then "ready" at once may read the two lines together
QUEUE_GRACE = 0.1
#: where askers of older versions wrote their cookies (removed when a watcher starts)
COOKIES = "cookies"
#: changes remembered; past this the history is dropped and older tokens are refused
MAX_HISTORY = 200_000
#: how long an asker waits for the monitor's answer
ASK_TIMEOUT = 2.0
#: how often (seconds) the reading thread looks whether the other folders appeared or went
CHECK_OTHERS = 0.2
#: how long (seconds) the reading thread lets events gather before it reads them (a
#: question never waits for it: it reads the queue itself)
GATHER = 0.005

#: the requests that run Strata's command line for an asker
RUN_OPS = ("run", "run_begin", "run_end")
#: at most this many file descriptors come with one request
MAX_FDS = 4

Listener = Callable[[list[str]], None]


@dataclass
class Served:
    """What a runner did for an asker: the "done" reply's exit code and output, and more.

    ``output`` is ``[[fd, text], ...]`` in the order written, text being the
    bytes written decoded as latin-1. ``reply`` holds more fields of the
    "done" reply; ``fds`` are passed to the asker with it (``SCM_RIGHTS``) and
    then closed here.
    """

    code: int
    output: list[list[Any]]
    reply: dict[str, Any] = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)


#: runs a command for an asker (a request of :data:`RUN_OPS`; the file descriptors
#: that came with it are in ``request["fds"]``, owned by the runner)
Runner = Callable[[dict[str, Any]], Served]


@dataclass(frozen=True)
class Answer:
    """The monitor's answer: the paths changed since the asked token, and the next token.

    ``changed`` is None when the monitor cannot vouch for its answer; ``reason``
    then says why (the asker walks the whole tree).
    """

    token: str
    changed: frozenset[str] | None
    reason: str = ""


def _noise(rel: str) -> bool:
    return any(p in ALWAYS_IGNORED or p.startswith(TEMP_PREFIX) for p in rel.split("/"))


class _Root:
    """One watched folder's numbered history (lock held by the monitor for every use)."""

    __slots__ = ("base", "forgotten", "identity", "lost", "path", "paths", "recent", "seqs")

    def __init__(self, path: Path) -> None:
        self.path = path
        #: (st_dev, st_ino) of the folder while it is watched; None: not watched
        self.identity: tuple[int, int] | None = None
        #: the folder itself was deleted or moved away since it was watched
        self.lost = False
        self.base = 0  # the history holds every change after this sequence number
        #: why tokens from before :attr:`base` are refused
        self.forgotten = "unknown token: the watcher restarted since"
        self.seqs: list[int] = []
        self.paths: list[str] = []
        #: the paths numbered since a token was last handed out: numbering one again
        #: would tell no asker more (every token out there predates the first number)
        self.recent: set[str] = set()

    def current(self) -> tuple[int, int] | None:
        """The identity of the folder on disk now (None: no folder there)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class ChangeMonitor:
    """Watches one workspace (and other folders: the Draft's) and remembers every change, numbered.

    ``folder`` is the monitor's own folder (``REPO/watch``). ``others`` names
    more folders to watch, each with its own history (asked with
    ``root=NAME``): one that does not exist yet is watched once it appears,
    and one deleted or replaced is watched again; in between (and for tokens
    from before) its answers cannot vouch. Start it with :meth:`start` (or
    ``with``); from then on no change is missed.
    """

    def __init__(
        self,
        root: Path,
        folder: Path,
        *,
        instance: str | None = None,
        max_history: int = MAX_HISTORY,
        others: Mapping[str, Path] | None = None,
    ) -> None:
        self.root = Path(os.path.realpath(root))
        self.folder = Path(os.path.realpath(folder))
        self.instance = instance or os.urandom(6).hex()
        self.max_history = max_history
        self._cond = threading.Condition()
        self._seq = 0
        #: "" is the workspace; the others by the names they were given
        self._roots: dict[str, _Root] = {"": _Root(self.root)}
        for name, path in (others or {}).items():
            self._roots[name] = _Root(Path(os.path.realpath(path)))
        self._notifier: Notifier | None = None
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._wake: tuple[int, int] | None = None  # a pipe that wakes the reading thread
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.overflows = 0
        #: how many times a watched folder was watched again from scratch (it appeared,
        #: went or was replaced; or the kernel's queue overflowed and every folder was)
        self.restarts = 0

    # -- life cycle ------------------------------------------------------------

    def start(self) -> ChangeMonitor:
        """Start watching; returns once the watches are in place."""
        with self._cond:
            self._notifier = self._open()
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="strata-watch", daemon=True)
        self._thread.start()
        return self

    def _open(self) -> Notifier:
        """A notifier over the workspace and every other folder that exists now (lock held).

        :class:`WatcherFailed` when the workspace cannot be watched (no
        inotify, the limit of watches or instances reached).
        """
        try:
            notifier = Notifier(_skipped)
        except OSError as exc:
            raise WatcherFailed(str(self.root), _why(exc)) from None
        try:
            notifier.add_root("", self.root)
            for name in self._roots:
                if name:
                    self._watch_other(notifier, name)
        except OSError as exc:
            notifier.close()
            raise WatcherFailed(str(self.root), _why(exc)) from None
        return notifier

    def _watch_other(self, notifier: Notifier, name: str) -> None:
        """Watch another folder anew when it exists (lock held); its history starts now.

        Its identity is read before it is watched: a folder replaced in
        between differs from it, and is watched again.
        """
        other = self._roots[name]
        notifier.remove_root(name)
        other.identity = other.current()
        other.lost = False
        if other.identity is not None:
            try:
                notifier.add_root(name, other.path)
            except WatchLimit:
                raise
            except OSError:
                other.identity = None  # gone again: tried once more later
        self._forget(other, "the folder was replaced or created since")

    def stop(self) -> None:
        """Stop watching (tokens of this instance become unknown)."""
        self._stop.set()
        self._wake_up()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._cond:  # whoever wakes the thread holds the lock
            wake, self._wake = self._wake, None
        for fd in wake or ():
            os.close(fd)

    def _failure(self, exc: BaseException) -> BaseException:
        """What made the monitor stop, as :class:`WatcherFailed` when it is the system's."""
        if isinstance(exc, OSError) and not isinstance(exc, WatcherFailed):
            return WatcherFailed(str(self.root), _why(exc))
        return exc

    def _wake_up(self) -> None:
        """Make the reading thread look again now (stopping, or a new notifier to poll)."""
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")

    def __enter__(self) -> ChangeMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        """True while the watching thread runs."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    @property
    def error(self) -> BaseException | None:
        """Why the monitor stopped on its own (None: it did not)."""
        return self._error

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(paths)`` with each batch of changed workspace paths.

        It is called with the monitor's lock held, before any answer that
        counts those changes: whoever asks afterwards finds them told.
        """
        self._listeners.append(listener)

    def _run(self) -> None:
        """Read the events as they come, so listeners hear of them without a question."""
        assert self._wake is not None
        wake = self._wake[0]
        try:
            while not self._stop.is_set():
                with self._cond:
                    notifier = self._notifier
                if notifier is None:
                    break
                poller = select.poll()
                poller.register(wake, select.POLLIN)
                poller.register(notifier.fd, select.POLLIN)
                if poller.poll(int(CHECK_OTHERS * 1000)):
                    # let a burst gather: it is then read in a few large reads, each a turn
                    # at the interpreter's lock taken from a command running here
                    self._stop.wait(GATHER)
                with contextlib.suppress(OSError):
                    os.read(wake, 64)
                with self._cond:
                    if self._stop.is_set():
                        break
                    self._catch_up()
        except BaseException as exc:  # reported to every asker from now on
            self._error = self._failure(exc)
        finally:
            with self._cond:
                self._stop.set()
                if self._notifier is not None:
                    self._notifier.close()
                    self._notifier = None
                self._cond.notify_all()

    def _catch_up(self) -> None:
        """Read every queued event and watch the other folders again where needed (lock held).

        Raises what makes the monitor stop (the limit of watches reached).
        """
        notifier = self._notifier
        assert notifier is not None
        batch = notifier.read()
        if batch.overflowed:  # events were dropped: every history restarts, watched anew
            notifier.close()
            self._notifier = None
            self._notifier = self._open()
            for watched in self._roots.values():
                self._forget(watched, "the kernel's queue of changes overflowed")
            self.overflows += 1
            self.restarts += 1
            self._wake_up()  # the reading thread polls the closed instance
            told = [rel for name, rel in batch.changes if not name and not _noise(rel)]
            if told:
                for listener in self._listeners:
                    listener(told)
            return
        for name in batch.lost:
            if name:
                self._roots[name].lost = True
        if batch.changes:
            self._record(batch.changes)
        for name, other in self._roots.items():
            if name and (other.lost or other.current() != other.identity):
                self._watch_other(notifier, name)
                self.restarts += 1

    def _record(self, changes: list[tuple[str, str]]) -> None:
        """Number the changes (lock held) and tell the listeners of the workspace's."""
        told: list[str] = []
        roots = self._roots
        for name, rel in changes:
            if _noise(rel):
                continue
            if not name:
                told.append(rel)  # every one: a listener waits for quiet
            watched = roots[name]
            if rel in watched.recent:
                continue
            watched.recent.add(rel)
            self._seq += 1
            watched.seqs.append(self._seq)
            watched.paths.append(rel)
        for watched in roots.values():
            if len(watched.seqs) > self.max_history:
                self._trim(watched)
        if told:
            for listener in self._listeners:
                listener(told)
        self._cond.notify_all()

    def _forget(self, watched: _Root, why: str) -> None:
        """Forget one folder's history (lock held): tokens from before now are refused.

        The sequence moves on first, so a token handed out just before is
        refused too (changes in between may have gone unseen).
        """
        self._seq += 1
        watched.base = self._seq
        watched.forgotten = why
        watched.seqs.clear()
        watched.paths.clear()
        watched.recent.clear()

    def _trim(self, watched: _Root) -> None:
        """Drop the older half of a history grown past :attr:`max_history` (lock held).

        Tokens from before the newest dropped change are refused from now on.
        """
        drop = len(watched.seqs) - self.max_history // 2
        watched.base = watched.seqs[drop - 1]
        watched.forgotten = "the watcher's history overflowed"
        del watched.seqs[:drop]
        del watched.paths[:drop]
        watched.recent.clear()
        self.overflows += 1

    # -- questions ---------------------------------------------------------------

    def token(self) -> str:
        """A token naming now (without a question: only for a caller that saw no write since)."""
        with self._cond:
            return self._hand_out()

    def _hand_out(self) -> str:
        """The token naming now (lock held): later changes are numbered after it."""
        for watched in self._roots.values():
            if watched.recent:
                watched.recent.clear()
        return f"{self.instance}:{self._seq}"

    def query(self, token: str, *, root: str = "") -> Answer | None:
        """What changed in ``root`` since ``token``; the same as :meth:`answer`."""
        return self.answer(token, root=root)

    def answer(self, token: str, *, root: str = "") -> Answer | None:
        """What changed in ``root`` since ``token``, every change made so far counted.

        The kernel's queue is read empty first (see :mod:`strata.watch.notify`):
        any change whose system call returned before this call is in the
        answer. None when the monitor has stopped.
        """
        with self._cond:
            if self._stop.is_set() or self._notifier is None:
                return None
            try:
                self._catch_up()
            except Exception as exc:  # the limit of watches: the monitor cannot vouch again
                self._error = self._failure(exc)
                self._stop.set()
                self._wake_up()
                return None
            now = self._hand_out()
            watched = self._roots.get(root)
            if watched is None:
                return Answer(now, None, f"this watcher does not watch {root!r}")
            if root and (watched.identity is None or watched.lost):
                return Answer(now, None, "the folder is not watched yet")
            instance, _, number = token.partition(":")
            if not token:
                return Answer(now, None, "no token: the last scan did not ask this watcher")
            if instance != self.instance or not number.isdigit():
                return Answer(now, None, "unknown token: the watcher restarted since")
            seq = int(number)
            if seq > self._seq:
                return Answer(now, None, "unknown token")
            if seq < watched.base:
                return Answer(now, None, watched.forgotten)
            start = bisect.bisect_right(watched.seqs, seq)
            return Answer(now, frozenset(watched.paths[start:]))

    def status(self) -> dict[str, Any]:
        """What the monitor is doing, as JSON."""
        with self._cond:
            return {
                "instance": self.instance,
                "pid": os.getpid(),
                "workspace": str(self.root),
                "alive": self.alive,
                "sequence": self._seq,
                "history": len(self._roots[""].seqs),
                "overflows": self.overflows,
                "watches": self._notifier.watches if self._notifier is not None else 0,
                "watched": {
                    name: watched.identity is not None and not watched.lost
                    for name, watched in self._roots.items()
                    if name
                },
                "error": repr(self._error) if self._error else None,
            }


def _skipped(name: str) -> bool:
    """True for a folder name never watched: its paths are noise (see :func:`_noise`)."""
    return name in ALWAYS_IGNORED or name.startswith(TEMP_PREFIX)


def _why(exc: OSError) -> str:
    """Why a folder could not be watched, for the user."""
    if isinstance(exc, WatchLimit):
        return "the limit of inotify watches is reached (fs.inotify.max_user_watches)"
    if exc.errno == errno.EMFILE:
        return "the limit of inotify instances is reached (fs.inotify.max_user_instances)"
    return str(exc.strerror or exc)


class IgnoreFilter:
    """The repository's ignore rules applied to single changed paths (cached per folder)."""

    def __init__(self, root: Path, rules: IgnoreRules) -> None:
        self.root = root
        self.base = rules
        self._at: dict[str, IgnoreRules] = {}

    def _rules_in(self, prefix: str, parent: IgnoreRules) -> IgnoreRules:
        rules = self._at.get(prefix)
        if rules is None:
            found: list[bytes] = []
            for name in IGNORE_FILES:
                with contextlib.suppress(OSError):
                    found.append((self.root / prefix / name).read_bytes())
            rules = self._at[prefix] = parent.child(prefix, found)
        return rules

    def ignored(self, rel: str) -> bool:
        """True when the workspace path ``rel`` (or a folder above it) is ignored."""
        if _noise(rel):
            return True
        if rel.rpartition("/")[2] in IGNORE_FILES:
            self._at.clear()  # the rules themselves changed
        rules = self._rules_in("", self.base)
        parts = rel.split("/")
        prefix = ""
        for part in parts[:-1]:
            if rules.is_ignored(prefix + part, is_dir=True):
                return True
            prefix += part + "/"
            rules = self._rules_in(prefix, rules)
        return rules.is_ignored(rel, is_dir=(self.root / rel).is_dir())


# -- the socket ----------------------------------------------------------------


class MonitorServer:
    """Serves a :class:`ChangeMonitor` on ``FOLDER/watch.sock``; one server per repository.

    The pid file ``FOLDER/watch.pid`` is locked (``flock``) while the server
    lives, so a second watcher is refused and a dead one is detected.
    """

    def __init__(
        self,
        monitor: ChangeMonitor,
        *,
        on_stop: Callable[[], None] | None = None,
        runner: Runner | None = None,
        pid_fd: int | None = None,
        version: str = "",
    ):
        self.monitor = monitor
        #: the Strata version of this watcher: an asker of another version is refused
        self.version = version
        self.runner = runner
        self._running = threading.Lock()  # one "run" request at a time
        self.commands_run = 0
        #: ``strata run`` commands begun for askers that execute the command themselves
        self.runs_begun = 0
        self._begun: set[str] = set()
        #: when the last request was served (``time.monotonic``): a self-started
        #: watcher exits after an idle time
        self.last_request = time.monotonic()
        self.folder = monitor.folder
        self.on_stop = on_stop
        self._pid_fd: int | None = pid_fd
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._key = ""
        #: run by :meth:`close` once no command runs any more, before the pid file is released
        #: (so that ``stop_watcher`` returns once it is done)
        self.before_release: Callable[[], object] | None = None

    def start(self, info: dict[str, Any] | None = None) -> MonitorServer:
        """Take the pid file, bind the socket and serve in a background thread.

        The pid file may have been taken beforehand with :func:`claim_pidfile`
        (``pid_fd``); :class:`~strata.errors.WatcherRunning` when another holds it.
        """
        fd = self._pid_fd if self._pid_fd is not None else claim_pidfile(self.folder)
        if fd is None:
            raise WatcherRunning(str(self.monitor.root))
        body = json.dumps({"pid": os.getpid(), "instance": self.monitor.instance, **(info or {})})
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        self._pid_fd = fd
        _remove_cookies(self.folder / COOKIES)
        self._key = secrets.token_hex(32)
        _write_key(self.folder / KEYFILE, self._key)  # before the socket: askers need it
        sock_path = self.folder / SOCKET
        sock_path.unlink(missing_ok=True)  # left by a watcher that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with short_socket_path(sock_path) as short:
            sock.bind(short)
            with contextlib.suppress(OSError):  # the owner only, whatever the umask
                os.chmod(short, 0o600)
        sock.listen(16)
        self._sock = sock
        (self.folder / UNAVAILABLE).unlink(missing_ok=True)  # this one runs
        self._thread = threading.Thread(target=self._serve, name="strata-watch-server", daemon=True)
        self._thread.start()
        return self

    @property
    def busy(self) -> bool:
        """True while a command runs for an asker."""
        return self._running.locked()

    def close(self, *, finish_timeout: float = 60.0) -> None:
        """Stop serving, let a command being run finish, remove the socket, release the pid file.

        :attr:`before_release` runs before the pid file is released.
        """
        self._closing = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
            (self.folder / SOCKET).unlink(missing_ok=True)
        if self._running.acquire(timeout=finish_timeout):  # its asker gets its result
            self._running.release()
        if self.before_release is not None:
            self.before_release()
        if self._pid_fd is not None:
            (self.folder / KEYFILE).unlink(missing_ok=True)
            (self.folder / PIDFILE).unlink(missing_ok=True)
            os.close(self._pid_fd)
            self._pid_fd = None

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._closing:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        with conn:
            conn.settimeout(ASK_TIMEOUT * 2)
            try:
                line, fds = _read_line_fds(conn)
                request = json.loads(line)
                self.last_request = time.monotonic()
                refused = self._refusal(conn, request)
                if refused is not None:
                    reply = {"v": PROTOCOL, "ok": False, "reason": refused}
                elif request.get("op") in RUN_OPS:
                    request["pid"] = _peer_cred(conn)[0]
                    request["fds"], fds = fds, []  # the runner owns them from here
                    self._run(conn, request)
                    return
                else:
                    reply = self._reply(request)
            except (OSError, ValueError) as exc:
                reply = {"v": PROTOCOL, "ok": False, "reason": f"bad request: {exc}"}
            finally:
                for fd in fds:
                    os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")
        if reply.get("stopping") and self.on_stop is not None:
            self.on_stop()

    def _refusal(self, conn: socket.socket, request: Any) -> str | None:
        """Why ``request`` is refused (another user, no key), or None to serve it."""
        if not isinstance(request, dict):
            return "bad request"
        pid, uid = _peer_cred(conn)
        if uid != os.getuid():
            return "the asker is another user"
        if not _same_mount_namespace(pid):
            return "the asker runs in another mount namespace (a sandbox)"
        key = request.get("key")
        if not isinstance(key, str) or not hmac.compare_digest(key, self._key):
            return "the asker did not give the watcher's key"
        return None

    def _run(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """Run a command for the asker: "ready", wait for "go", run, send the result."""

        def send(reply: dict[str, Any], fds: list[int] | None = None) -> None:
            data = json.dumps({"v": PROTOCOL, **reply}).encode() + b"\n"
            if fds:
                socket.send_fds(conn, [data[:1]], fds)
                data = data[1:]
            conn.sendall(data)

        fds: list[int] = request["fds"]
        try:
            problem = self._unrunnable(request)
            if problem is not None:
                send({"ok": False, "reason": problem})
                return
            if request["op"] == "run_end":
                self._begun.discard(str(request["run_id"]))  # ended once, whatever happens next
            self._take_turn_and_run(conn, request, send)
        finally:
            for fd in fds:  # what the runner did not take
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _unrunnable(self, request: dict[str, Any]) -> str | None:
        """Why a request of :data:`RUN_OPS` is refused before "ready" (None: it is served)."""
        op = request["op"]
        if request.get("v") != PROTOCOL or self.runner is None:
            return "this watcher runs no commands"
        argv = request.get("argv")
        if not isinstance(argv, list):
            return "this watcher does not run that command"
        argv = [str(a) for a in argv]
        if (op == "run" and not servable(argv)) or (op != "run" and argv[:1] != ["run"]):
            return "this watcher does not run that command"
        if op == "run_end":
            if request.get("run_id") not in self._begun:
                return "this watcher did not begin that run"
            if len(request["fds"]) != 1:
                return "bad request: the run's lease must come with its end"
        elif request["fds"]:
            return "bad request: unexpected file descriptors"
        here = [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()]
        if request.get("fsencoding") != here:
            return "the asker decodes file names otherwise"
        problem = _unservable(request, self.monitor.root)
        if problem is not None:
            return problem
        if self.version and request.get("version", self.version) != self.version:
            return f"this watcher runs Strata {self.version}"
        return None

    def _take_turn_and_run(
        self,
        conn: socket.socket,
        request: dict[str, Any],
        send: Callable[[dict[str, Any], list[int] | None], None],
    ) -> None:
        """Wait for the turn, say "ready", wait for "go", run it, send the result."""
        assert self.runner is not None
        if not self._running.acquire(timeout=QUEUE_GRACE):
            send({"ok": True, "queued": True}, None)  # the asker waits instead of starting Strata
            if not self._running.acquire(timeout=QUEUE_TIMEOUT):
                send({"ok": False, "reason": "busy"}, None)
                return
        try:  # held until the result is sent: close() waits for it
            if self._closing:
                send({"ok": False, "reason": "the watcher is stopping"}, None)
                return
            send({"ok": True, "ready": True, "pid": os.getpid()}, None)
            go = json.loads(_read_line(conn) or b"null")
            if not isinstance(go, dict) or go.get("go") is not True:
                return  # the asker gave up: it runs the command itself
            served_commands.serving()
            try:
                served = self.runner(request)
            except Exception as exc:  # a bad request must get an answer, not silence
                send({"ok": False, "done": True, "reason": f"cannot run it: {exc}"}, None)
                return
            if request["op"] == "run":
                self.commands_run += 1
            run_id = served.reply.get("run_id")
            if request["op"] == "run_begin" and isinstance(run_id, str):
                self.runs_begun += 1
                self._begun.add(run_id)
            conn.settimeout(None)
            try:
                reply = {**served.reply, "ok": True, "done": True, "code": served.code}
                send({**reply, "output": served.output}, served.fds)
            finally:
                for fd in served.fds:
                    os.close(fd)
        finally:
            try:
                served_commands.replied()  # what the command deferred (saving the stat cache)
            finally:
                self._running.release()

    def _reply(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict) or request.get("v") != PROTOCOL:
            return {"v": PROTOCOL, "ok": False, "reason": "unknown protocol version"}
        op = request.get("op")
        if op == "query":
            answer = self.monitor.answer(
                str(request.get("token") or ""), root=str(request.get("root") or "")
            )
            if answer is None:
                return {"v": PROTOCOL, "ok": False, "reason": "the monitor has stopped"}
            changed = sorted(answer.changed) if answer.changed is not None else None
            return {
                "v": PROTOCOL,
                "ok": True,
                "token": answer.token,
                "changed": changed,
                "reason": answer.reason,
            }
        if op == "status":
            status = {
                **self.monitor.status(),
                "commands_run": self.commands_run,
                "runs_begun": self.runs_begun,
            }
            return {"v": PROTOCOL, "ok": True, "status": status}
        if op == "stop":
            return {"v": PROTOCOL, "ok": True, "stopping": True}
        return {"v": PROTOCOL, "ok": False, "reason": f"unknown op {op!r}"}


def servable(argv: list[str]) -> bool:
    """True when a watcher may run ``strata ARGV`` for an asker (see :data:`RUNNABLE`)."""
    if not argv or any(a in LOCAL_ONLY for a in argv):
        return False
    if argv[0] not in RUNNABLE and not served_commands.is_served_hook(argv):
        return False
    if has_local_option(argv):
        return False
    return not (len(argv) > 1 and argv[1] in LOCAL_SUB.get(argv[0], ()))


def claim_pidfile(folder: Path) -> int | None:
    """Lock ``FOLDER/watch.pid`` for this process: its descriptor, or None when another holds it.

    The lock lasts as long as the descriptor (it dies with the process).
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / PIDFILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _write_key(path: Path, key: str) -> None:
    """Write the watcher's key readable by its owner only (a stale file is replaced)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, key.encode() + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _remove_cookies(folder: Path) -> None:
    """Remove the cookie files of older watchers' askers (and their folder)."""
    with contextlib.suppress(OSError):
        for stale in folder.iterdir():
            with contextlib.suppress(OSError):
                stale.unlink()
        folder.rmdir()


def read_key(folder: Path) -> str:
    """The key of the watcher of ``folder`` (``""`` when there is none to read)."""
    try:
        return (folder / KEYFILE).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return ""


def _peer_cred(conn: socket.socket) -> tuple[int, int]:
    """The process id (in this PID namespace; 0 if it has none here) and user id of the peer."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)


def _same_mount_namespace(pid: int) -> bool:
    """True when process ``pid`` sees the same mounts as this one.

    A command in a sandbox runs in mount (and user, PID) namespaces of its
    own: even holding the key it is refused. A process gone, or one whose
    namespace cannot be read, is refused too.
    """
    if pid <= 0:
        return False
    try:
        theirs = os.stat(f"/proc/{pid}/ns/mnt")
        ours = os.stat("/proc/self/ns/mnt")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _read_line_fds(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One line and the file descriptors sent with it (``SCM_RIGHTS``; the caller owns them)."""
    data = b""
    fds: list[int] = []
    try:
        while not data.endswith(b"\n"):
            chunk, more, _flags, _addr = socket.recv_fds(
                conn, 65536, MAX_FDS, socket.MSG_CMSG_CLOEXEC
            )
            fds += more
            if not chunk:
                break
            data += chunk
            if len(data) > 1 << 20:
                raise ValueError("request too long")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return data, fds


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > 1 << 20:
            raise ValueError("request too long")
    return data


def request(folder: Path, body: dict[str, Any], *, timeout: float = ASK_TIMEOUT) -> dict[str, Any]:
    """Send one request to the watcher of ``folder``; raises OSError when none answers."""
    sock_path = folder / SOCKET
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        with short_socket_path(sock_path) as short:
            sock.connect(short)
        sock.sendall(json.dumps({"v": PROTOCOL, **body, "key": read_key(folder)}).encode() + b"\n")
        reply = json.loads(_read_line(sock) or b"null")
    if not isinstance(reply, dict):
        raise ConnectionError("the watcher closed the connection")
    return reply


def ask(folder: Path, token: str, *, root: str = "", timeout: float = ASK_TIMEOUT) -> Answer | None:
    """Ask the watcher of ``folder`` (``REPO/watch``) what changed since ``token``.

    ``root`` names another folder the watcher watches (``"draft"``); ``""`` is the workspace.

    Returns None when no watcher runs or it does not answer in time.
    """
    if not (folder / SOCKET).exists():
        return None
    try:
        body = {"op": "query", "token": token, **({"root": root} if root else {})}
        reply = request(folder, body, timeout=timeout)
    except (OSError, ValueError):
        return None
    if not reply.get("ok") or not isinstance(reply.get("token"), str):
        return None
    changed = reply.get("changed")
    if changed is not None and not (
        isinstance(changed, list) and all(isinstance(p, str) for p in changed)
    ):
        return None
    return Answer(
        reply["token"],
        frozenset(changed) if changed is not None else None,
        str(reply.get("reason") or ""),
    )


def watcher_status(folder: Path) -> dict[str, Any] | None:
    """The status of the watcher of ``folder``, or None when none answers."""
    if not (folder / SOCKET).exists():
        return None
    try:
        reply = request(folder, {"op": "status"})
    except (OSError, ValueError):
        return None
    status = reply.get("status")
    return status if isinstance(status, dict) else None


def stop_watcher(folder: Path, *, timeout: float = 10.0) -> int | None:
    """Ask the watcher of ``folder`` to stop and wait until it has; its pid, or None if none ran."""
    status = watcher_status(folder)
    if status is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        request(folder, {"op": "stop"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (folder / SOCKET).exists() and not _pid_locked(folder):
            break
        time.sleep(0.02)
    pid = status.get("pid")
    return pid if isinstance(pid, int) else None


def watcher_alive(folder: Path) -> bool:
    """True while a watcher (or one starting) holds the pid file of ``folder``."""
    return _pid_locked(folder)


def _pid_locked(folder: Path) -> bool:
    return held_elsewhere(folder / PIDFILE)


def _unservable(request: dict[str, Any], root: Path) -> str | None:
    """Why a "run" request cannot be served here (None: it can).

    The command runs in the asker's folder, which must lie in this watcher's
    own workspace; the text encodings of its streams must be ones Python knows.
    """
    import codecs

    cwd = request.get("cwd")
    if not isinstance(cwd, str):
        return "bad request: no folder"
    here = Path(os.path.realpath(cwd))
    if here != root and not here.is_relative_to(root):
        return "the asker's folder is outside this watcher's workspace"
    encodings = request.get("encoding")
    if not isinstance(encodings, list) or len(encodings) != 2:
        return "bad request: encodings"
    for pair in encodings:
        if not isinstance(pair, list) or len(pair) != 2:
            return "bad request: encodings"
        try:
            codecs.lookup(str(pair[0]))
            codecs.lookup_error(str(pair[1]))
        except LookupError as exc:
            return f"bad request: {exc}"
    return None


def read_pidfile(folder: Path) -> dict[str, Any] | None:
    """What the live watcher of ``folder`` wrote to its pid file; None when none holds it."""
    if not _pid_locked(folder):
        return None
    try:
        info = json.loads((folder / PIDFILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # taken, not written yet: a watcher is starting
    return info if isinstance(info, dict) else {}


#: file systems whose changes inotify does not see (made on another machine) or that
#: it cannot watch: their workspaces get no watcher
NETWORK_FILE_SYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.s3fs",
        "fuse.rclone",
    }
)


def _unescape_mount(field: str) -> str:
    r"""A /proc/mounts field with its octal escapes (``\040`` for a space) decoded."""
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def file_system_type(path: Path, mounts: Path = Path("/proc/mounts")) -> str | None:
    """The type of the file system ``path`` lies on (from ``/proc/mounts``), or None."""
    target = os.path.realpath(path)
    best, kind = "", None
    try:
        lines = mounts.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _unescape_mount(fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def unwatchable(root: Path, *, mounts: Path = Path("/proc/mounts")) -> str | None:
    """Why no watcher can watch the workspace ``root`` (None: one can try).

    Checked before watching: no inotify in this kernel, or a network file
    system (changes made on another machine raise no event here). The limit
    of watches is met only when watching starts (:class:`WatcherFailed`).
    """
    if not sys.platform.startswith("linux"):
        return "no inotify on this system (the watcher needs Linux)"
    if not os.path.exists("/proc/sys/fs/inotify/max_user_watches"):
        return "this kernel has no inotify"
    kind = file_system_type(root, mounts)
    if kind in NETWORK_FILE_SYSTEMS:
        return f"the workspace is on a network file system ({kind})"
    return None


def note_unavailable(folder: Path, reason: str) -> None:
    """Remember why no watcher can run here (``status`` says it; none is started for a while)."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"reason": reason, "time": time.time(), "pid": os.getpid()})
        tmp = folder / f"{UNAVAILABLE}.{os.getpid()}.tmp"
        tmp.write_text(body + "\n", encoding="utf-8")
        os.replace(tmp, folder / UNAVAILABLE)


def unavailable(folder: Path, *, within: float | None = None) -> str | None:
    """Why the last watcher could not run here (None: none failed, or before ``within`` s ago)."""
    try:
        note = json.loads((folder / UNAVAILABLE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or not isinstance(note.get("reason"), str):
        return None
    when = note.get("time")
    if within is not None and (not isinstance(when, (int, float)) or time.time() - when > within):
        return None
    return str(note["reason"])
