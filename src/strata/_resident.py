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

Only the standard library is imported here, before anything else of Strata.
Whenever there is a doubt (no watcher, another protocol, a busy or dead
watcher, an option that depends on the terminal), :func:`try_resident`
returns False and the command runs in this process as usual. A command is
never run twice: the caller says "go" only after the watcher said it is
ready, and once it has said "go" it never falls back (see
``strata.store.watch`` for the protocol).
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: the commands a watcher runs (it refuses any other; ``strata.store.watch.RUNNABLE``);
#: anything else runs in the calling process
SERVED = (
    "snapshot",
    "status",
    "diff",
    "history",
    "show",
    "cat",
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
#: sub-commands of a served command that run here (they start a child process)
LOCAL_SUB = {"draft": ("run",)}
#: options whose output depends on the terminal or the process: always run locally
LOCAL_ONLY = ("-h", "--help", "--debug")
READY_TIMEOUT = 2.0
#: how long to wait while the watcher finishes another caller's command
QUEUE_TIMEOUT = 65.0


def _find_socket(cwd: str) -> str | None:
    """The watcher socket of the workspace containing ``cwd`` (as ``find_layout`` finds it)."""
    folder = os.path.realpath(cwd)
    while True:
        marker = os.path.join(folder, ".strata")
        if os.path.lexists(marker):
            if os.path.isdir(marker) and not os.path.islink(marker):
                repo = marker
            else:
                try:
                    with open(marker, encoding="utf-8") as f:
                        text = f.read().strip()
                except (OSError, UnicodeDecodeError):
                    return None
                if not text.startswith("strata-dir: "):
                    return None
                repo = text[len("strata-dir: ") :]
            break
        hidden = os.path.join(folder, ".git", "strata", "repo")
        if os.path.isfile(os.path.join(hidden, "config.toml")):
            repo = hidden
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    path = os.path.join(repo, "watch", "watch.sock")
    return path if len(os.fsencode(path)) < 100 and os.path.exists(path) else None


def _read_key(sock_path: str) -> str | None:
    """The watcher's key (``watch.key`` beside its socket), or None when unreadable."""
    try:
        with open(os.path.join(os.path.dirname(sock_path), "watch.key"), encoding="ascii") as f:
            return f.read().strip() or None
    except (OSError, ValueError):
        return None


def _read_line(sock: socket.socket) -> dict[str, object] | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 20)
        if not chunk:
            return None
        data += chunk
    try:
        reply = json.loads(data)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def try_resident(argv: list[str]) -> bool:
    """Run ``strata ARGV`` in the workspace's watcher; False when it did not start it.

    Once the watcher has started the command this does not return: it
    prints the command's output and exits with its code (or reports that
    the watcher stopped midway). Ctrl-C ends it as it ends the command line.
    """
    try:
        return _try_resident(argv)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)


def _try_resident(argv: list[str]) -> bool:
    if sys.stdout is None or sys.stderr is None:
        return False
    if not argv or argv[0] not in SERVED or any(a in LOCAL_ONLY for a in argv):
        return False
    if len(argv) > 1 and argv[1] in LOCAL_SUB.get(argv[0], ()):
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
    from strata._version import __version__

    umask = os.umask(0o022)
    os.umask(umask)
    body = {
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
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(READY_TIMEOUT)
        try:
            sock.connect(path)
            sock.sendall(json.dumps(body).encode() + b"\n")
            ready = _read_line(sock)
            if ready and ready.get("queued") is True:  # another caller's command runs
                sock.settimeout(QUEUE_TIMEOUT)
                ready = _read_line(sock)
                sock.settimeout(READY_TIMEOUT)
            if not ready or ready.get("v") != 1 or ready.get("ready") is not True:
                return False
            sock.sendall(b'{"go": true}\n')
        except (OSError, ValueError):
            return False
        # From here on the watcher may have started: never fall back.
        sock.settimeout(None)
        try:
            done = _read_line(sock)
        except OSError:
            done = None
    finally:
        sock.close()
    code, output = (done or {}).get("code"), (done or {}).get("output")
    if not done or done.get("done") is not True or not isinstance(code, int):
        pid = (ready or {}).get("pid")
        sys.stderr.write(
            f"error: the watcher (pid {pid}) stopped while running 'strata {argv[0]}'; "
            "it may or may not have recorded it\n"
            "hint: see 'strata history' and 'strata check'\n"
        )
        sys.stderr.flush()
        sys.exit(1)
    streams = {1: sys.stdout, 2: sys.stderr}
    try:
        for fd, text in output if isinstance(output, list) else []:  # in the order written
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
    sys.exit(code)
