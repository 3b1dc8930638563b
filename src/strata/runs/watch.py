"""Live capture: a state event each time the workspace settles.

While a long command runs (an agent session, a build, a person editing in an
IDE), :class:`LiveCapture` watches the workspace with a
:class:`~strata.watch.monitor.ChangeMonitor` and records a snapshot (action type
``snapshot``, rationale ``live capture``, ``data.live_capture`` = its step
number) each time no change has been seen for ``debounce_ms``. Changes made by
any process count, shell-made ones included; ignored paths (``.strata``,
``.git``, ``.gitignore``/``.strataignore`` patterns, the config defaults) do
not wake it.

While it runs, the capture also serves its monitor on the repository's
watcher socket (unless another watcher already does), so ``snapshot``,
``status`` and ``rewind`` from other processes ask it which paths changed
instead of walking the tree; given a ``runner``, it also runs commands for
the command line (``strata._resident``). A runner swaps the process's folder,
environment, umask and standard streams for the asker's, so a command run and
a recorded step never overlap: they take turns on one lock.

Snapshots are recorded by a second :class:`~strata.core.Core` on the
same repository, owned by the capture's thread (SQLite connections belong to
one thread); the write lock orders them with everything else.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strata.errors import WatcherRunning
from strata.ledger.events import EventType
from strata.watch.monitor import ChangeMonitor, IgnoreFilter, MonitorServer, Runner, Served

if TYPE_CHECKING:
    from strata.core import Core
    from strata.ledger.events import Author, Event

RATIONALE = "live capture"


class LiveCapture:
    """Record a state event each time the workspace settles, while the ``with`` block runs.

    ``debounce_ms``: how long the workspace must stay quiet before a step is
    recorded. ``author``, ``message`` and ``operation`` go into each event;
    ``clock`` and ``rng`` make the events reproducible (as for
    :class:`~strata.core.Core`). ``serve`` offers the monitor to other
    processes on the watcher socket (skipped when another watcher serves).
    ``on_event`` is called (from the capture's thread) with each recorded event.
    """

    def __init__(
        self,
        repo: Core,
        *,
        debounce_ms: int = 1000,
        author: Author | None = None,
        message: str = RATIONALE,
        operation: str | None = None,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        serve: bool = True,
        on_event: Callable[[Event], None] | None = None,
        server_info: dict[str, Any] | None = None,
        runner: Runner | None = None,
        pid_fd: int | None = None,
        version: str = "",
    ) -> None:
        self.repo = repo
        self.debounce = debounce_ms / 1000
        self.author = author or repo.author
        self.message = message
        self.operation = operation
        self._clock = clock
        self._rng = rng
        self.serve = serve
        self.on_event = on_event
        self.server_info = server_info or {}
        self.runner = runner
        self._pid_fd = pid_fd
        self._version = version
        #: held while a step is recorded or a command runs for an asker
        self._turn = threading.Lock()
        #: the state events recorded so far
        self.events: list[Event] = []
        #: errors met while recording (the capture goes on; the command is never stopped)
        self.errors: list[str] = []
        self.monitor: ChangeMonitor | None = None
        self.server: MonitorServer | None = None
        self._cond = threading.Condition()
        self._pending = False
        self._last_change = 0.0
        self._closing = False
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        #: a run's extra ignore patterns apply to its live steps too
        self.extra_ignore = repo.extra_ignore
        self._filter = IgnoreFilter(
            repo.root,
            repo.rules(),
        )

    # -- life cycle ------------------------------------------------------------

    def __enter__(self) -> LiveCapture:
        from strata.core import watched_folders

        self.monitor = ChangeMonitor(
            self.repo.root, self.repo.layout.watch, others=watched_folders(self.repo.layout)
        ).start()
        try:
            if self.serve:
                runner = self._take_turns(self.runner) if self.runner is not None else None
                try:
                    self.server = MonitorServer(
                        self.monitor,
                        on_stop=self._stop_requested.set,
                        runner=runner,
                        pid_fd=self._pid_fd,
                        version=self._version,
                    ).start(self.server_info)
                except WatcherRunning:
                    self.server = None  # another watcher serves the socket
            self.monitor.add_listener(self._changed)
            self._thread = threading.Thread(target=self._loop, name="strata-capture", daemon=True)
            self._thread.start()
        except BaseException:
            self.monitor.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take_turns(self, runner: Runner) -> Runner:
        from strata.core import monitor_in_process

        def run(request: dict[str, Any]) -> Served:
            monitor = self.monitor
            assert monitor is not None
            with self._turn, monitor_in_process(monitor):  # its scans ask the monitor directly
                return runner(request)

        return run

    def close(self) -> None:
        """Record what is still unsettled, then stop watching."""
        monitor = self.monitor
        if monitor is None:
            return
        if monitor.alive:
            monitor.query(monitor.token())  # every change made so far has been told
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.server is not None:
            self.server.close()
            self.server = None
        monitor.stop()
        self.monitor = None

    def request_stop(self) -> None:
        """Make :meth:`wait` return (as a ``stop`` request on the socket does)."""
        self._stop_requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a ``stop`` request arrives on the socket (True) or ``timeout`` passes."""
        return self._stop_requested.wait(timeout)

    # -- capturing ---------------------------------------------------------------

    def _changed(self, paths: list[str]) -> None:
        if all(self._filter.ignored(p) for p in paths):
            return
        with self._cond:
            self._pending = True
            self._last_change = time.monotonic()
            self._cond.notify_all()

    def _loop(self) -> None:
        kwargs: dict[str, Any] = {}
        if self._clock is not None:
            kwargs["clock"] = self._clock
        if self._rng is not None:
            kwargs["rng"] = self._rng
        from strata.core import Core
        from strata.runs.recovery import recover_runs

        writer = Core(
            self.repo.layout,
            author=self.author,
            monitor=self.monitor,
            recoverers=(recover_runs,),
            **kwargs,
        )
        writer.extra_ignore = self.extra_ignore
        try:
            while True:
                with self._cond:
                    while not self._closing:
                        if self._pending:
                            quiet = time.monotonic() - self._last_change
                            if quiet >= self.debounce:
                                break
                            self._cond.wait(self.debounce - quiet)
                        else:
                            self._cond.wait()
                    if not self._pending:
                        return  # closing, nothing left to record
                    self._pending = False
                with self._turn:  # never while a command runs with the asker's process state
                    self._capture(writer)
        finally:
            writer.close()

    def _capture(self, writer: Core) -> None:
        try:
            with writer.transaction(EventType.SNAPSHOT, self.author) as tx:
                result, _ = tx.snapshot(
                    self.message,
                    author=self.author,
                    data={"live_capture": len(self.events) + 1},
                    operation_id=self.operation,
                )
        except Exception as exc:  # a failed step must not end the capture
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        if result.event is not None:
            event = writer.event(result.event.id)  # as committed, with its sequence number
            self.events.append(event)
            if self.on_event is not None:
                self.on_event(event)
