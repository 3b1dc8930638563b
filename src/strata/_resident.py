"""Hand a command to the workspace's watcher, which has all of Strata loaded.

The workspace's watcher (started by the first command, or by ``strata watch``)
runs the command itself
(in its own process, with the caller's arguments, folder, environment and
umask) and sends back what it printed and its exit code, which the caller
prints byte for byte. The request carries the watcher's key, read from
``REPO/watch/watch.key`` (readable by its owner only): a process that cannot
read the repository (a sandboxed command, another user) is refused. This
saves the ~150 ms of imports a snapshot needs. The served commands are those
whose cost is start-up (:data:`SERVED`); a command that needs the terminal or
runs a child process (``run``, ``draft run``, ``init``, ``watch``) runs here.

``strata run`` in its plain form (``strata run [--label L] [--author A]
[--author-kind K] [--] CMD...``) is half served: the watcher *begins* the run
(its ``before`` snapshot and lease), this process executes CMD as its own
child, with its terminal, stdin and signals, then the watcher *ends* it
(see ``strata.runs.thin``); any other form of ``run`` runs here entirely.

Only the standard library is imported here, before anything else of Strata,
and of it only what starts fast: ``_socket`` rather than ``socket`` (whose
enums cost 2 ms), no ``typing``, JSON through :mod:`strata._wire` rather
than :mod:`json` (which imports ``re``: 6 ms);
once the command's output is printed, the process ends without the
interpreter's tear-down (nothing but the standard library ran here).
Whenever there is a doubt (no watcher, another protocol, a busy or dead
watcher, an option that depends on the terminal), :func:`try_resident`
returns False and the command runs in this process as usual. A command is
never run twice: the caller says "go" only after the watcher said it is
ready, and once it has said "go" it never falls back (see
``strata.watch.monitor`` for the protocol).
"""

from __future__ import annotations

import _socket
import os
import sys

# import nothing but the standard library (_wire: JSON without the json module's 6 ms)
from strata import _wire
from strata._locate import find_repo
from strata.watch import served
from strata.watch.served import LOCAL_ONLY, LOCAL_SUB, SERVED, has_local_option, is_served_hook

TYPE_CHECKING = False  # (not typing's: importing typing costs 2 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    #: ends a run the watcher began and then lost, here (lease fd, report) -> exit code
    FinishRun = Callable[[int, dict[str, object]], int]

READY_TIMEOUT = 2.0
#: how long to wait while the watcher finishes another caller's command
QUEUE_TIMEOUT = 65.0


def _find_socket(cwd: str) -> str | None:
    """The watcher socket of the workspace containing ``cwd``."""
    found = find_repo(cwd)
    if found is None:
        return None
    path = os.path.join(found[1], "watch", "watch.sock")
    return path if len(os.fsencode(path)) < 100 and os.path.exists(path) else None


def _read_key(sock_path: str) -> str | None:
    """The watcher's key (``watch.key`` beside its socket), or None when unreadable."""
    try:
        with open(os.path.join(os.path.dirname(sock_path), "watch.key"), encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


def _read_line(
    sock: _socket.socket, rest: bytearray, fds: list[int] | None = None
) -> dict[str, object] | None:
    """The watcher's next reply (one JSON line); None at the end of the stream or if unreadable.

    Two replies may come in one read ("queued", then "ready"): what is read
    past the line stays in ``rest`` for the next call. With ``fds``, the
    descriptors sent along are added to it.
    """
    data = bytearray(rest)  # grows in place: a command's output may be large
    rest.clear()
    searched = 0
    while (end := data.find(b"\n", searched)) < 0:
        searched = len(data)
        if fds is None:
            chunk = sock.recv(1 << 20)
        else:
            chunk, more = _recv_fds(sock, 1 << 20, 4)
            fds += more
        if not chunk:
            return None
        data += chunk
    rest += data[end + 1 :]
    del data[end + 1 :]
    try:
        reply = _wire.loads(data)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def try_resident(argv: list[str], *, finish_run: FinishRun | None = None) -> bool:
    """Run ``strata ARGV`` in the workspace's watcher; False when it did not start it.

    Once the watcher has started the command this does not return: it
    prints the command's output and exits with its code (or reports that
    the watcher stopped midway). Ctrl-C ends it as it ends the command line.
    A plain ``strata run`` is begun and ended by the watcher and executed
    here, given ``finish_run`` (the command line's, which records the run
    here when the watcher goes away meanwhile); without it, it is not.
    """
    try:
        return _try_resident(argv, finish_run)
    except KeyboardInterrupt:
        if _handed_over:  # the watcher runs it: Ctrl-C ends only this side
            pid, command = _handed_over
            _error(
                argv,
                "Interrupted",
                f"interrupted; the watcher (pid {pid}) finishes 'strata {command}' "
                "(it may have recorded it)",
                "see 'strata history' and 'strata status'",
            )
        else:
            _error(argv, "Interrupted", "interrupted", None)
        sys.exit(130)


def _error(argv: list[str], kind: str, message: str, hint: str | None) -> None:
    """Report an error on stderr as the command line does (one JSON line under ``--json``)."""
    own = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" in own:
        body = {"schema": 1, "error": {"type": kind, "message": message, "hint": hint}}
        sys.stderr.write(_wire.dumps(body, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n" + (f"hint: {hint}\n" if hint else ""))
    sys.stderr.flush()


#: (watcher pid, command) once a command has been handed to the watcher
_handed_over: tuple[object, str] | None = None


#: the options of the plain form of ``strata run`` (each takes a value)
PLAIN_RUN_OPTIONS = ("--label", "--author", "--author-kind")


def _plain_run(args: list[str]) -> bool:
    """True when ``strata run ARGS`` is the plain form: only :data:`PLAIN_RUN_OPTIONS`, then CMD."""
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return i + 1 < len(args)
        if not token.startswith("-") or token == "-":
            return True
        name, eq, _ = token.partition("=")
        if name not in PLAIN_RUN_OPTIONS:
            return False
        i += 1 if eq else 2
    return False


def _try_resident(argv: list[str], finish_run: FinishRun | None) -> bool:
    if sys.stdout is None or sys.stderr is None:
        return False
    if argv[:1] == ["run"]:
        if finish_run is None or not _plain_run(argv[1:]):
            return False
    elif (
        not argv
        or (argv[0] not in SERVED and not is_served_hook(argv))
        or any(a in LOCAL_ONLY for a in argv)
    ):
        return False
    if len(argv) > 1 and argv[1] in LOCAL_SUB.get(argv[0], ()):
        return False
    if has_local_option(argv):
        return False
    if os.environ.get("STRATA_DEBUG") == "1" or os.environ.get("STRATA_NO_RESIDENT") == "1":
        return False
    try:
        cwd = os.getcwd()
        path = _find_socket(cwd)
    except OSError:
        return False
    if path is None:
        return False
    key = _read_key(path)
    if key is None:
        return False
    body = _request(argv, key, cwd)
    if argv[0] == "run" and finish_run is not None:
        return _thin_run(path, body, finish_run)
    started, done, fds = _exchange(path, body, command=argv[0])
    for extra in fds:  # none is expected for a served command
        os.close(extra)
    if not started:
        return False
    code = (done or {}).get("code")
    if done is None or not isinstance(code, int):
        _stopped(started, argv)
    _print(done.get("output"))
    _exit(code)


def _exit(code: int) -> NoReturn:
    """End the process at once, its output flushed (only the standard library ran here)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = code or 1
    os._exit(code)


def _stopped(ready: dict[str, object] | None, argv: list[str]) -> NoReturn:
    pid = (ready or {}).get("pid")
    _error(
        argv,
        "WatcherStopped",
        f"the watcher (pid {pid}) stopped while running 'strata {argv[0]}'; "
        "it may or may not have recorded it",
        "see 'strata history' and 'strata check'",
    )
    sys.exit(1)


def _print(output: object) -> None:
    """Print what a command wrote, byte for byte, in the order written."""
    streams = {1: sys.stdout, 2: sys.stderr}
    try:
        for fd, text in output if isinstance(output, list) else []:
            stream = streams[1 if fd == 1 else 2]
            data = str(text).encode("latin-1")
            stream.buffer.write(data)
            if stream.line_buffering and b"\n" in data:  # buffered as the command's own output
                stream.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # as the command line does: the reader went away
        sys.stderr.close()
        sys.exit(1)


def _request(argv: list[str], key: str, cwd: str) -> dict[str, object]:
    """A request to run ``strata ARGV`` as this process would (folder, environment, streams)."""
    from strata._version import __version__

    umask = os.umask(0o022)
    os.umask(umask)
    return {
        "v": 1,
        "op": "run",
        "key": key,
        "version": __version__,
        "argv": argv,
        "cwd": cwd,
        "env": dict(os.environ),
        "umask": umask,
        "fsencoding": [sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()],
        "tty": [sys.stdout.isatty(), sys.stderr.isatty()],
        "encoding": [
            [sys.stdout.encoding, sys.stdout.errors],
            [sys.stderr.encoding, sys.stderr.errors],
        ],
    }


def _exchange(
    path: str, body: dict[str, object], fd: int | None = None, *, command: str | None = None
) -> tuple[dict[str, object] | None, dict[str, object] | None, list[int]]:
    """Send ``body`` (with ``fd`` attached), then "go": ("ready" reply, "done" reply, fds).

    "ready" is None when the watcher did not start it: nothing was done, the
    caller runs the command itself (a watcher that timed out is not asked
    again by this process). "done" is None when the watcher stopped after
    "go": it may have acted. ``command``: the served command Ctrl-C then names (a
    thin run's requests name none: the command runs here).
    """
    global _handed_over
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    fds: list[int] = []
    rest = bytearray()
    try:
        sock.settimeout(READY_TIMEOUT)
        try:
            sock.connect(path)
            data = _wire.dumps(body).encode() + b"\n"
            if fd is not None:
                _send_fds(sock, data[:1], [fd])
                data = data[1:]
            sock.sendall(data)
            ready = _read_line(sock, rest)
            if ready and ready.get("queued") is True:  # another caller's command runs
                sock.settimeout(QUEUE_TIMEOUT)
                ready = _read_line(sock, rest)
                sock.settimeout(READY_TIMEOUT)
            if not ready or ready.get("v") != 1 or ready.get("ready") is not True:
                return None, None, fds
            if command is not None:  # before "go": a Ctrl-C as it leaves names the watcher
                _handed_over = (ready.get("pid"), command)
            sock.sendall(b'{"go": true}\n')
        except TimeoutError:  # stopped or stuck: this process asks it nothing more
            served.silent_watcher = True
            _handed_over = None
            return None, None, fds
        except (OSError, ValueError):
            _handed_over = None
            return None, None, fds
        # From here on the watcher may have started: never fall back.
        sock.settimeout(None)
        try:
            done = _read_line(sock, rest, fds)
        except OSError:
            done = None
    finally:
        sock.close()
    if done is None or done.get("done") is not True or not isinstance(done.get("code"), int):
        return ready, None, fds
    return ready, done, fds


#: the size of a C ``int`` (a file descriptor in ``SCM_RIGHTS``) on Linux
_INT = 4


def _send_fds(sock: _socket.socket, data: bytes, fds: list[int]) -> None:
    """Send ``data`` with ``fds`` attached (``SCM_RIGHTS``), as ``socket.send_fds`` does."""
    rights = b"".join(fd.to_bytes(_INT, sys.byteorder, signed=True) for fd in fds)
    sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])


def _recv_fds(sock: _socket.socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """Bytes and the descriptors sent with them, as ``socket.recv_fds`` (close-on-exec)."""
    data, ancillary, _flags, _addr = sock.recvmsg(
        size, _socket.CMSG_LEN(most * _INT), _socket.MSG_CMSG_CLOEXEC
    )
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            whole = len(payload) - len(payload) % _INT
            fds += memoryview(payload[:whole]).cast("i").tolist()
    return data, fds


def _thin_run(path: str, body: dict[str, object], finish_run: FinishRun) -> bool:
    """``strata run`` begun and ended by the watcher, its command executed here; see the module.

    False (nothing done) when the watcher does not begin it; otherwise this
    exits with the command's code as ``strata run`` would.
    """
    _, done, fds = _exchange(path, {**body, "op": "run_begin"})
    for extra in fds[1:]:
        os.close(extra)
    if done is None or done.get("thin") is False:
        if fds:
            os.close(fds[0])
        return False  # nothing begun (a run the watcher began and lost is recovered later)
    _print(done.get("output"))
    run_id, argv, cwd, env = done.get("run_id"), done.get("argv"), done.get("cwd"), done.get("env")
    if done.get("begun") is not True:
        sys.exit(int(done["code"]))  # type: ignore[call-overload]
    if not (
        fds
        and isinstance(run_id, str)
        and isinstance(argv, list)
        and isinstance(cwd, str)
        and isinstance(env, dict)
    ):
        sys.stderr.write("error: the watcher began the run but did not hand it over\n")
        sys.exit(125)
    lease = fds[0]
    from strata.runs.process import note_group, run_command

    report: dict[str, object] = {}
    try:
        outcome = run_command(
            [str(a) for a in argv],
            cwd=cwd,
            env={**os.environ, **{str(k): str(v) for k, v in env.items()}} if env else None,
            own_group=True,  # the lease names it: ended by the next command should we die
            on_start=lambda pid: note_group(lease, pid),
        )
    except FileNotFoundError:
        report["start_error"] = {"kind": "not_found"}
    except PermissionError as exc:
        report["start_error"] = {"kind": "not_executable", "reason": exc.strerror}
    else:
        report["outcome"] = {
            "exit_code": outcome.exit_code,
            "signal": outcome.signal,
            "interrupted": outcome.interrupted,
            "received": outcome.received,
            "duration_ms": outcome.duration_ms,
        }
    end = {**body, "op": "run_end", "run_id": run_id, **report}
    _, done, fds = _exchange(path, end, lease)
    for extra in fds:
        os.close(extra)
    if done is None:  # the watcher is gone, or never got it: record it here
        code = finish_run(lease, report)
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(code)
    os.close(lease)
    _print(done.get("output"))
    sys.exit(int(done["code"]))  # type: ignore[call-overload]
