"""``strata watch``: record edits as they settle, and answer "what changed?" for other commands."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from signal import SIGINT, SIGTERM
from typing import TYPE_CHECKING, Any

import click

from strata._build import code_fingerprint
from strata.atomic import file_identity, held_elsewhere
from strata.cli.common import (
    author_options,
    debounce_option,
    emit_json,
    emit_json_line,
    injected,
    json_option,
    make_author,
    open_repo,
    short,
)
from strata.cli.watcher import (
    IDLE_TIMEOUT,
    counted,
    status_json,
    watch_config,
    watcher_line,
    watcher_report,
)
from strata.diff.display import printable
from strata.errors import WatcherFailed, WatcherRunning
from strata.layout import watch_problem

if TYPE_CHECKING:
    from strata.ledger.events import Event
    from strata.watch.monitor import Served


#: how often a watcher checks that it should still run
CHECK_EVERY = 0.5
#: a watcher deletes the files the restores it ran replaced (the trash) once the workspace
#: has gone this long without a request or a change (``[watch] trash_idle``, seconds), or
#: when it stops. Deleting many files slows the creation of many files for a while after:
#: ext4 without a journal avoids reusing recently freed inodes and scans past each one
#: (``recently_deleted`` in fs/ext4/ialloc.c). Here, 5,000 files of 20 KB created right
#: after 5,000 were deleted took 2.9 s, 2.0 s 20 s later, 1.6 s 35 s later, 0.33 s 45 s
#: later and 0.16 s a minute later; a 5,000-file rewind that emptied the trash after each
#: answer made the next one pay it. Deleted once the workspace is quiet, they seldom do.
TRASH_IDLE = 40.0
#: the most disk space the replaced files wait in the trash with; past it (or past a quarter
#: of the space left free, ``served.TRASH_FREE_SHARE``) a restore's are deleted once it has
#: answered, as a process without a watcher does
TRASH_CAP = 1 << 30


@click.command()
@debounce_option("Record a step once the workspace has been quiet this long.")
@click.option("-m", "--message", default="live capture", help="The rationale of each step.")
@click.option(
    "--no-capture",
    is_flag=True,
    help="Record nothing; only serve the command line (as the self-started watcher does).",
)
@click.option("--daemon", is_flag=True, help="Detach and keep watching in the background.")
@click.option("--stop", is_flag=True, help="Stop the background watcher of this workspace.")
@click.option("--status", "show_status", is_flag=True, help="Show whether a watcher runs here.")
@click.option("--auto", is_flag=True, hidden=True, help="Started by a command: exit when idle.")
@author_options
@json_option
def watch(
    debounce_ms: int,
    message: str,
    no_capture: bool,
    daemon: bool,
    stop: bool,
    show_status: bool,
    auto: bool,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
) -> None:
    """Record every change as a step until Ctrl-C (or in the background with --daemon).

    Each time the workspace has been quiet for --debounce-ms, a snapshot is
    recorded (rationale 'live capture'), whoever made the change: you, your
    editor, a shell command. Every watcher also serves the command line: the
    commands whose cost is start-up (snapshot, status, diff, history, rewind,
    ...) run in it, and those that scan ask it which files changed instead of
    reading the whole tree.

    The first command in a workspace starts a watcher that only serves
    (it exits after [watch] idle_timeout seconds, default 1800, without a
    request or a change; [watch] capture = true makes it record steps too;
    STRATA_NO_DAEMON=1 or [watch] auto = false in config.toml turn it off).
    'strata watch' takes over from it. The watcher's socket, pid file and log
    are in the repository's watch/ folder.

    \b
    Example:
      strata watch                      # until Ctrl-C
      strata watch --daemon --author alice
      strata watch --daemon --no-capture   # only serve the command line
      strata watch --status --json
      strata watch --stop
    """
    if sum((daemon, stop, show_status, auto)) > 1:
        raise click.UsageError("use one of --daemon, --stop and --status")
    who = make_author(author, author_kind)
    with open_repo(who, start_watcher=False) as repo:
        folder = repo.layout.watch
        root = repo.root
        if show_status:
            answer = status_json(folder)
            if not answer["running"]:
                from strata.watch import served
                from strata.watch.monitor import read_pidfile

                # its pid file is held, yet it did not answer: stopped (SIGSTOP) or stuck
                served.silent_watcher = read_pidfile(folder) is not None
            status = {**answer, **watcher_report(repo)}
            if as_json:
                emit_json(status)
            elif status["running"] and status.get("sequence") is not None:
                click.echo(
                    f"A watcher runs for {printable(str(root))} (pid {status.get('pid')}, "
                    f"{counted(status.get('sequence'), 'change')} seen"
                    f"{', recording steps' if status.get('capture') else ''})"
                )
            else:
                click.echo(watcher_line(status))
            return
        if stop:
            from strata.watch.monitor import stop_watcher

            pid = stop_watcher(folder)
            if as_json:
                emit_json({"stopped": pid is not None, "pid": pid})
            elif pid is None:
                click.echo(f"No watcher runs for {printable(str(root))}.")
            else:
                click.echo(f"Stopped the watcher of {printable(str(root))} (pid {pid}).")
            return
        if daemon:
            extra = ["--debounce-ms", str(debounce_ms), "-m", message]
            extra += ["--author", who.name, "--author-kind", who.kind]
            _start_daemon(repo.root, folder, [*extra, *(["--no-capture"] if no_capture else [])])
            status = status_json(folder)
            if as_json:
                emit_json(status)
            else:
                click.echo(
                    f"Watching {root} in the background (pid {status.get('pid')}); "
                    "stop: strata watch --stop"
                )
            return
        if auto:
            _auto(repo, debounce_ms, message)
            return
        pid_fd = _claim(repo, capture=not no_capture)
        _watch(repo, debounce_ms, message, as_json, record=not no_capture, pid_fd=pid_fd)


def _claim(repo: Any, *, capture: bool) -> int:
    """Take the watcher's pid file, stopping a watcher that only serves when this one captures.

    A capturing watcher does all a serving one does, so it takes over;
    otherwise a running watcher is :class:`WatcherRunning`.
    """
    from strata.watch.monitor import claim_pidfile, read_pidfile, stop_watcher

    folder = repo.layout.watch
    for _ in range(5):
        fd = claim_pidfile(folder)
        if fd is not None:
            return fd
        info = read_pidfile(folder)
        if not capture or (info is not None and info.get("capture") is not False):
            break
        stop_watcher(folder)
    raise WatcherRunning(str(repo.root))


def _auto(repo: Any, debounce_ms: int, message: str) -> None:
    """The self-started watcher: quietly nothing when another runs or none can run here."""
    from strata.watch.monitor import claim_pidfile, note_unavailable, unwatchable

    folder = repo.layout.watch
    pid_fd = claim_pidfile(folder)  # first: a second one started at once stops here
    if pid_fd is None:
        return
    try:
        reason = unwatchable(repo.root)
        if reason is not None:
            note_unavailable(folder, reason)
            click.echo(f"strata watch: {reason}; no watcher for {repo.root}", err=True)
            return
        config = watch_config(repo)
        idle = config.get("idle_timeout", IDLE_TIMEOUT)
        capture = config.get("capture") is True
        _watch(repo, debounce_ms, message, True, record=capture, pid_fd=pid_fd, idle=idle)
        pid_fd = None  # the server closed it
    except WatcherFailed as exc:
        note_unavailable(folder, exc.reason)
        click.echo(f"strata watch: {exc.message}", err=True)
    finally:
        if pid_fd is not None:
            os.close(pid_fd)


def _start_daemon(root: Path, folder: Path, options: list[str]) -> None:
    """Start ``strata watch OPTIONS`` detached; return once it answers on its socket.

    A watcher that only serves is replaced by one that captures (the new
    one stops it); any other running watcher is :class:`WatcherRunning`.
    """
    from strata.watch.monitor import read_pidfile, watcher_status

    info = read_pidfile(folder)
    if info is not None and ("--no-capture" in options or info.get("capture") is not False):
        raise WatcherRunning(str(root))
    before = info.get("pid") if info else None
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "strata", "-C", str(root), "watch", *options]
    with open(folder / "watch.log", "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=root,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        status = watcher_status(folder)
        if status is not None and status.get("pid") not in (None, before):
            return
        time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
    raise WatcherFailed(str(root), f"the watcher did not start; see {folder / 'watch.log'}")


class _Lifetime:
    """Why a watcher should stop now (:meth:`reason`), checked every :data:`CHECK_EVERY`.

    It stops when its workspace is removed or moved, when its repository is
    removed or claimed by another workspace, when its ``monitor`` stopped
    (the limit of inotify watches reached: noted as why none runs), when the
    Strata code on disk changed (a new version was installed: the next
    command starts a new watcher), and, when ``idle`` is set, after that many
    seconds without a request or a change.
    """

    def __init__(
        self,
        repo: Any,
        activity: Callable[[], object],
        idle: float | None = None,
        monitor: Any = None,
    ) -> None:
        self.monitor = monitor
        self.folder = Path(repo.layout.watch)
        self.root = Path(repo.root)
        self.config = Path(repo.layout.config)
        self.repo = Path(os.path.realpath(repo.layout.repo))
        self.workspace = repo.config.workspace
        self.idle = idle
        self.activity = activity
        self._root_id = file_identity(self.root)
        self._config_id = _stamp(self.config)
        self._code = code_fingerprint()
        self._last = activity()
        self._since = time.monotonic()
        self._checks = 0

    def quiet_for(self) -> float:
        """Seconds since the watcher was last of use (a request, a change), as last checked."""
        return time.monotonic() - self._since

    def reason(self) -> str | None:
        """Why to stop, or None."""
        if self.monitor is not None and self.monitor.error is not None:
            from strata.errors import WatcherFailed
            from strata.watch.monitor import note_unavailable

            error = self.monitor.error
            why = error.reason if isinstance(error, WatcherFailed) else repr(error)
            note_unavailable(self.folder, why)  # status says it; none restarts for a while
            return f"the change monitor stopped: {why}"
        if file_identity(self.root) != self._root_id:
            return "the workspace was moved or removed"
        config = _stamp(self.config)
        if config is None:
            return "the repository was removed"
        if config != self._config_id:
            self._config_id = config
            if _claimed_workspace(self.config) not in (None, self.workspace):
                return "the repository was claimed by another workspace"
        self._checks += 1
        if self._checks % 4 == 0 and code_fingerprint() != self._code:
            return "Strata was updated"
        if self._checks % 4 == 2 and _repository_of(self.root) not in (None, self.repo):
            return "the workspace now uses another repository"
        now = self.activity()
        if now != self._last:
            self._last, self._since = now, time.monotonic()
        elif self.idle is not None and time.monotonic() - self._since >= self.idle:
            return f"idle for {self.idle:g} s"
        return None


class _TrashKeeper:
    """Deletes the files the restores this watcher ran left in the trash, once it is quiet.

    A served restore leaves the files it replaced in the repository's trash
    (``served.trash_later``); they are deleted once the workspace has gone
    ``idle`` seconds without a request or a change, never while a command
    runs (an emptying under way stops for one and goes on once quiet again),
    and all of them when the watcher stops. What a killed process left in
    the trash before this watcher started is deleted the same way.
    """

    def __init__(self, trash: Path, idle: float, busy: Callable[[], bool]) -> None:
        from strata.watch import served

        self.idle = idle
        self.busy = busy
        #: folders to empty besides what served commands left (leftovers, interrupted emptying)
        self.pending: set[str] = set()
        with contextlib.suppress(OSError):
            if os.listdir(trash):
                self.pending.add(str(trash))
        served.keep_trash(TRASH_CAP)

    def tend(self, quiet_for: float) -> None:
        """Empty the trash when the workspace has been quiet long enough."""
        from strata.watch import served

        if quiet_for < self.idle or self.busy() or not (self.pending or served.kept_trash()):
            return
        self._empty(self.busy)

    def close(self) -> None:
        """The watcher stops (no command runs any more): empty every trash now.

        Called again (the server closed first), it finds nothing left.
        """
        from strata.watch import served

        served.keep_trash(None)
        self._empty(None)

    def _empty(self, stop: Callable[[], bool] | None) -> None:
        from strata.store.fsops import empty_trash
        from strata.watch import served

        folders, self.pending = self.pending | set(served.take_kept_trash()), set()
        for folder in sorted(folders):
            empty_trash(Path(folder), stop=stop)
            if stop is not None and stop():  # a command started: the rest waits for quiet
                self.pending.add(folder)


def _trash_idle(repo: Any) -> float:
    """How long the workspace must be quiet before the watcher empties the trash."""
    if watch_problem(repo.config.raw) is not None:
        return TRASH_IDLE  # (a self-started watcher refuses such a table before)
    return float(watch_config(repo).get("trash_idle", TRASH_IDLE))


def _repository_of(root: Path) -> Path | None:
    """The repository commands in ``root`` now use (None when that cannot be told).

    A git work tree whose runs were recorded in ``.git/strata`` and that
    ``strata init`` then gave a ``.strata`` of its own: the old watcher
    serves no command any more.
    """
    from strata.errors import StrataError
    from strata.layout import find_layout

    try:
        return Path(os.path.realpath(find_layout(root).repo))
    except (StrataError, OSError):
        return None


def _activity(monitor: Any, server: Any) -> object:
    """What changes whenever the watcher is of use: a change seen, a request, a command running.

    A run it began whose command still executes counts as a command running.
    """
    running = server.busy or _runs_executing()
    return monitor.token(), server.last_request, time.monotonic() if running else 0.0


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _claimed_workspace(config: Path) -> str | None:
    import tomllib

    try:
        raw = tomllib.loads(config.read_text(encoding="utf-8"))
        workspace = raw["repository"]["workspace"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return workspace if isinstance(workspace, str) else None


def _wait_until_stopped(
    repo: Any,
    stop: Callable[[], None],
    stopped: Callable[[float], bool],
    as_json: bool,
    lifetime: _Lifetime | None = None,
    keeper: _TrashKeeper | None = None,
) -> None:
    """Say that the watcher runs, then wait until Ctrl-C, SIGTERM, ``stop`` or ``lifetime`` ends it.

    Ctrl-C and SIGTERM call ``stop``; ``stopped(timeout)`` waits for it. SIGINT
    is handled explicitly: a process started in the background by a shell
    inherits SIGINT ignored, and Python then raises no KeyboardInterrupt.
    """
    previous = {signum: signal.signal(signum, lambda *_: stop()) for signum in (SIGINT, SIGTERM)}
    if not as_json:
        click.echo(
            f"Watching {printable(str(repo.root))} (pid {os.getpid()}); Ctrl-C to stop.", err=True
        )
    try:
        while not stopped(CHECK_EVERY):
            why = lifetime.reason() if lifetime is not None else None
            if why is not None:
                click.echo(f"strata watch (pid {os.getpid()}): stopping: {why}", err=True)
                break
            if keeper is not None and lifetime is not None:
                keeper.tend(lifetime.quiet_for())
                if lifetime.quiet_for() >= UPKEEP_QUIET and not keeper.busy():
                    _tend_store(repo)
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


#: how long the workspace is quiet before the watcher repacks the store (seconds)
UPKEEP_QUIET = 5.0


def _tend_store(repo: Any) -> None:
    """Repack the store past its thresholds, unless a command writes (never waits for one)."""
    from strata.core.upkeep import tend_when_free
    from strata.errors import StrataError

    with contextlib.suppress(StrataError, OSError):
        tend_when_free(repo)


def _preload() -> None:
    """Load what the commands run for the command line load on first use."""
    import importlib

    from strata.cli import common

    common.AUTOSTART = False  # a command run here never starts another watcher
    from strata.ledger.drivers.sqlite import keep_connections

    keep_connections()  # each command opens the repository: its ledger connection is kept
    for module in ("strata.cli", "strata.repo", "strata.store.materialize", "strata.diff.patch"):
        importlib.import_module(module)
    from strata.cli import load_all

    load_all()  # every command the watcher may run, loaded before the first asks


#: seconds after its start at which a watcher starts the workspace's MCP server ahead (the
#: command or the agent's hook that started the watcher has had the cores by then)
MCP_AHEAD_AFTER = 2.0


def _start_mcp_ahead(repo: Any) -> None:
    """Start the MCP server ahead (:mod:`strata.integrations.mcp_prestart`) when one is wanted.

    So that the ``strata mcp`` an agent starts later is served warm: the
    watcher is started by any command and by an agent's first hook.
    """
    from strata.integrations.mcp_prestart import start_later, wanted

    repo_folder, root = str(repo.layout.repo), str(repo.root)
    if not wanted(repo_folder, root):
        return
    timer = threading.Timer(MCP_AHEAD_AFTER, start_later, (repo_folder, root))
    timer.daemon = True
    timer.start()


def _serve_only(
    repo: Any, as_json: bool, pid_fd: int | None = None, idle: float | None = None
) -> None:
    from strata._version import __version__
    from strata.core import monitor_in_process, watched_folders
    from strata.watch.monitor import ChangeMonitor, MonitorServer

    _preload()
    stop = threading.Event()
    with (
        ChangeMonitor(repo.root, repo.layout.watch, others=watched_folders(repo.layout)) as monitor,
        monitor_in_process(monitor),
    ):
        server = MonitorServer(
            monitor, on_stop=stop.set, runner=_run_for_asker, pid_fd=pid_fd, version=__version__
        )
        server.start({"capture": False, "auto": idle is not None})
        _start_mcp_ahead(repo)
        lifetime = _Lifetime(repo, lambda: _activity(monitor, server), idle, monitor)
        keeper = _TrashKeeper(repo.layout.trash, _trash_idle(repo), lambda: server.busy)
        server.before_release = keeper.close  # a watcher stopped has emptied its trash
        try:
            _wait_until_stopped(repo, stop.set, stop.wait, as_json, lifetime, keeper)
        finally:
            server.close()
            keeper.close()


class _Sink(io.RawIOBase):
    """Collects what a command writes to one stream, in order with the other one's."""

    def __init__(self, fd: int, output: list[list[Any]]) -> None:
        super().__init__()
        self._fd = fd
        self._output = output

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if data:
            self._output.append([self._fd, bytes(data).decode("latin-1")])
        return len(data)


class _Captured(io.TextIOWrapper):
    """A text stream like the asker's (encoding, errors, terminal or not) that collects."""

    def __init__(self, sink: _Sink, encoding: str, errors: str, tty: bool) -> None:
        super().__init__(sink, encoding=encoding, errors=errors, write_through=True)  # type: ignore[arg-type]
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


#: the runs begun for askers that execute their command themselves, by run id:
#: the repository they were begun with (its clock and ids go on at the end) and the run
_BEGUN: dict[str, tuple[Any, Any]] = {}
_BEGUN_LOCK = threading.Lock()


def _runs_executing() -> bool:
    """True while the command of a run begun here may still execute.

    A run whose lease nobody holds any more (its asker was killed, or
    finished it without this watcher) is forgotten.
    """
    with _BEGUN_LOCK:
        for run_id, (repo, begun) in list(_BEGUN.items()):
            try:
                held = held_elsewhere(begun.lease.path)
            except OSError:
                held = False
            if not held:
                del _BEGUN[run_id]
                repo.close()
        return bool(_BEGUN)


def _run_for_asker(request: dict[str, Any]) -> Served:
    """Run ``strata ARGV`` here as the asker would have (see ``strata._resident``).

    A ``run_begin`` or ``run_end`` request begins or ends a ``strata run``
    whose command the asker executes (:mod:`strata.runs.thin`).
    """
    from strata.watch.monitor import Served

    op = request.get("op")
    if op == "run_begin":
        return _begin_for_asker(request)
    if op == "run_end":
        return _end_for_asker(request)
    from strata.cli import main

    argv = [str(a) for a in request["argv"]]

    def body() -> int:
        main(argv)
        return 0

    return Served(*_as_asker(request, body))


def _begin_for_asker(request: dict[str, Any]) -> Served:
    from strata.cli.run import NotPlain, begin_for_asker
    from strata.runs.thin import RUN_ENV
    from strata.watch.monitor import Served

    argv = [str(a) for a in request["argv"]]
    got: dict[str, Any] = {}

    def body() -> int:
        try:
            begun = begin_for_asker(argv, pid=int(request["pid"]))
        except NotPlain:
            got["plain"] = False
            return 0
        if isinstance(begun, int):
            return begun
        got["begun"] = begun
        return 0

    code, output = _as_asker(request, body)
    if "plain" in got:
        return Served(0, [], {"thin": False})
    if "begun" not in got:
        return Served(code, output, {"begun": False})
    repo, begun, fd = got["begun"]
    with _BEGUN_LOCK:
        _BEGUN[begun.run_id] = (repo, begun)
    reply = {
        "begun": True,
        "run_id": begun.run_id,
        "argv": begun.what,
        "cwd": str(begun.cwd),
        "env": RUN_ENV,
    }
    return Served(code, output, reply, [fd])


def _end_for_asker(request: dict[str, Any]) -> Served:
    from strata.cli.run import end_for_asker
    from strata.watch.monitor import Served

    with _BEGUN_LOCK:
        entry = _BEGUN.pop(str(request.get("run_id")), None)
    if entry is None:
        raise ValueError("this watcher did not begin that run")
    repo, begun = entry
    report = {"outcome": request.get("outcome"), "start_error": request.get("start_error")}

    def body() -> int:
        fd = request["fds"].pop()  # ours now: the lease, held while the end is recorded
        return end_for_asker(repo, begun, fd, report)

    try:
        return Served(*_as_asker(request, body))
    finally:
        if request["fds"]:  # never recorded: the run is recorded as interrupted later
            repo.close()


def _set_environ(env: dict[str, str]) -> None:
    """Make the process's environment ``env``, changing only the variables that differ.

    (Clearing and refilling it costs a ``putenv`` per variable; an asker's
    environment is most often the watcher's own.) The time zone is read
    again when ``TZ`` changed.
    """
    tz = os.environ.get("TZ")
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    if os.environ.get("TZ") != tz:
        time.tzset()


def _as_asker(request: dict[str, Any], body: Callable[[], int]) -> tuple[int, list[list[Any]]]:
    """Call ``body`` (it returns or exits with a code) as the asker would have; code and output.

    The folder, environment, umask and standard streams are the process's
    own, so they are swapped for the asker's while the command runs; the
    server runs one such command at a time, and a capturing watcher records
    no step meanwhile (``LiveCapture`` takes turns with it).
    """
    encodings = request["encoding"]
    output: list[list[Any]] = []
    streams = [
        _Captured(_Sink(fd, output), str(enc), str(err), bool(tty))
        for fd, (enc, err), tty in zip((1, 2), encodings, request["tty"], strict=True)
    ]
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdout, sys.stderr
    code: int = 1
    try:
        _set_environ({str(k): str(v) for k, v in request["env"].items()})
        saved_umask = os.umask(int(request["umask"]))
        try:
            os.chdir(str(request["cwd"]))
            sys.stdout, sys.stderr = streams
            try:
                code = body()
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    sys.stderr.write(f"{exc.code}\n")
            except BaseException as exc:  # a bug: reported to the asker, not to the watcher
                sys.stderr.write(f"error: internal error ({type(exc).__name__}: {exc})\n")
            for stream in streams:
                with contextlib.suppress(ValueError):  # closed by the command
                    stream.flush()
        finally:
            sys.stdout, sys.stderr = saved_streams
            os.umask(saved_umask)
    finally:
        _set_environ(saved_env)
        os.chdir(saved_cwd)
    return code, output


def _watch(
    repo: Any,
    debounce_ms: int,
    message: str,
    as_json: bool,
    *,
    record: bool,
    pid_fd: int | None = None,
    idle: float | None = None,
) -> None:
    from strata._version import __version__
    from strata.runs.watch import LiveCapture

    if not record:
        _serve_only(repo, as_json, pid_fd, idle)
        return
    _preload()

    def report(event: Event) -> None:
        if as_json:  # one object per line, as each step is recorded
            emit_json_line(
                {
                    "event_id": event.id,
                    "snapshot_id": event.snapshot_ref,
                    "changed_paths": list(event.files),
                }
            )
        else:
            n = len(event.files)
            click.echo(f"Recorded {short(event.id)}: {n} file{'s' if n != 1 else ''} changed")
        sys.stdout.flush()

    capture = LiveCapture(
        repo,
        debounce_ms=debounce_ms,
        author=repo.author,
        message=message,
        on_event=report,
        server_info={"workspace": str(repo.root), "capture": True, "auto": idle is not None},
        runner=_run_for_asker,
        pid_fd=pid_fd,
        version=__version__,
        # the clock and ids of the steps it records (the repository has the rest)
        **{k: v for k, v in injected().items() if k in ("clock", "rng")},
    )
    keeper: _TrashKeeper | None = None
    try:
        with capture:
            server = capture.server
            if server is None:
                raise WatcherRunning(str(repo.root))
            monitor = capture.monitor
            assert monitor is not None
            lifetime = _Lifetime(repo, lambda: _activity(monitor, server), idle, monitor)
            keeper = _TrashKeeper(repo.layout.trash, _trash_idle(repo), lambda: server.busy)
            server.before_release = keeper.close  # a watcher stopped has emptied its trash
            _wait_until_stopped(repo, capture.request_stop, capture.wait, as_json, lifetime, keeper)
    finally:
        if keeper is not None:  # (the server is closed: no command runs any more)
            keeper.close()
    if not as_json:
        n = len(capture.events)
        click.echo(f"Stopped: {n} step{'s' if n != 1 else ''} recorded.", err=True)


COMMANDS = [watch]
