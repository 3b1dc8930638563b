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

from strata.cli.common import (
    _injected,
    author_options,
    emit_json,
    emit_json_line,
    json_option,
    make_author,
    open_repo,
    short,
)
from strata.diff.display import printable
from strata.errors import WatcherFailed, WatcherRunning

if TYPE_CHECKING:
    from strata.ledger.events import Event


def _status_json(folder: Path) -> dict[str, Any]:
    from strata.store.watch import watcher_status

    status = watcher_status(folder)
    return {"running": status is not None, **(status or {})}


@click.command()
@click.option(
    "--debounce-ms",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Record a step once the workspace has been quiet this long.",
)
@click.option("-m", "--message", default="live capture", help="The rationale of each step.")
@click.option(
    "--no-capture",
    is_flag=True,
    help=(
        "Record nothing; only answer 'snapshot', 'status' and 'rewind' (faster scans) "
        "and run 'snapshot' and 'status' for the command line (no start-up cost)."
    ),
)
@click.option("--daemon", is_flag=True, help="Detach and keep watching in the background.")
@click.option("--stop", is_flag=True, help="Stop the background watcher of this workspace.")
@click.option("--status", "show_status", is_flag=True, help="Show whether a watcher runs here.")
@author_options
@json_option
def watch(
    debounce_ms: int,
    message: str,
    no_capture: bool,
    daemon: bool,
    stop: bool,
    show_status: bool,
    author: str | None,
    author_kind: str | None,
    as_json: bool,
) -> None:
    """Record every change as a step until Ctrl-C (or in the background with --daemon).

    Each time the workspace has been quiet for --debounce-ms, a snapshot is
    recorded (rationale 'live capture'), whoever made the change: you, your
    editor, a shell command. While a watcher runs, 'snapshot', 'status' and
    'rewind' ask it which files changed instead of reading the whole tree;
    they fall back to reading it whenever the watcher cannot vouch for its
    answer. The watcher's socket and pid file are in the repository's
    watch/ folder.

    \b
    Example:
      strata watch                      # until Ctrl-C
      strata watch --daemon --author alice
      strata watch --daemon --no-capture   # only make snapshot and status fast
      strata watch --status --json
      strata watch --stop
    """
    if sum((daemon, stop, show_status)) > 1:
        raise click.UsageError("use one of --daemon, --stop and --status")
    who = make_author(author, author_kind)
    with open_repo(who) as repo:
        folder = repo.layout.watch
        root = repo.root
        if show_status:
            status = _status_json(folder)
            if as_json:
                emit_json(status)
            elif status["running"]:
                click.echo(
                    f"A watcher runs for {root} (pid {status.get('pid')}, "
                    f"{status.get('sequence')} changes seen)"
                )
            else:
                click.echo(f"No watcher runs for {printable(str(root))}.")
            return
        if stop:
            from strata.store.watch import stop_watcher

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
            status = _status_json(folder)
            if as_json:
                emit_json(status)
            else:
                click.echo(
                    f"Watching {root} in the background (pid {status.get('pid')}); "
                    "stop: strata watch --stop"
                )
            return
        _watch(repo, debounce_ms, message, as_json, record=not no_capture)


def _start_daemon(root: Path, folder: Path, options: list[str]) -> None:
    """Start ``strata watch OPTIONS`` detached; return once it answers on its socket."""
    from strata.store.watch import watcher_status

    if watcher_status(folder) is not None:
        raise WatcherRunning(str(root))
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
        if watcher_status(folder) is not None:
            return
        time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
    raise WatcherFailed(str(root), f"the watcher did not start; see {folder / 'watch.log'}")


def _wait_until_stopped(
    repo: Any, stop: Callable[[], None], stopped: Callable[[float], bool], as_json: bool
) -> None:
    """Say that the watcher runs, then wait until Ctrl-C, SIGTERM or ``stop`` ends it.

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
        while not stopped(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _serve_only(repo: Any, as_json: bool) -> None:
    import importlib

    from strata.core import watched_folders
    from strata.store.watch import ChangeMonitor, MonitorServer

    # what the commands it runs for the command line load on first use
    for module in ("strata.cli", "strata.repo", "strata.store.materialize", "strata.diff.patch"):
        importlib.import_module(module)
    stop = threading.Event()
    with ChangeMonitor(
        repo.root, repo.layout.watch, others=watched_folders(repo.layout)
    ) as monitor:
        server = MonitorServer(monitor, on_stop=stop.set, runner=_run_for_asker)
        server.start({"capture": False})
        try:
            _wait_until_stopped(repo, stop.set, stop.wait, as_json)
        finally:
            server.close()


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


def _run_for_asker(request: dict[str, Any]) -> tuple[int, list[list[Any]]]:
    """Run ``strata ARGV`` here as the asker would have (see ``strata._resident``).

    The folder, environment, umask and standard streams are the process's
    own, so they are swapped for the asker's while the command runs; the
    server runs one such command at a time, and a watcher that records
    nothing (--no-capture) has no other thread that uses them.
    """
    from strata.cli import main

    argv = [str(a) for a in request["argv"]]
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
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        time.tzset()
        saved_umask = os.umask(int(request["umask"]))
        try:
            os.chdir(str(request["cwd"]))
            sys.stdout, sys.stderr = streams
            try:
                main(argv)
                code = 0
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
        os.environ.clear()
        os.environ.update(saved_env)
        time.tzset()
        os.chdir(saved_cwd)
    return code, output


def _watch(repo: Any, debounce_ms: int, message: str, as_json: bool, *, record: bool) -> None:
    from strata.runs.watch import LiveCapture

    if not record:
        _serve_only(repo, as_json)
        return

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
        server_info={"workspace": str(repo.root)},
        **_injected(),
    )
    with capture:
        if capture.server is None:
            raise WatcherRunning(str(repo.root))
        _wait_until_stopped(repo, capture.request_stop, capture.wait, as_json)
    if not as_json:
        n = len(capture.events)
        click.echo(f"Stopped: {n} step{'s' if n != 1 else ''} recorded.", err=True)


COMMANDS = [watch]
