"""``strata mcp`` started ahead: the MCP library loaded once, each session a fork of it.

Importing the ``mcp`` package (its protocol types, pydantic models for two
protocol versions) is most of ``strata mcp``'s start: about 0.57 s of 0.69 s
on a quiet machine. A *prestarted* server is a process of the workspace's
own (started in the background by a ``strata mcp`` that found none) that has
imported the library, Strata's MCP server and the command line, and waits on
``REPO/watch/mcp.sock``. A later ``strata mcp`` (:func:`try_prestarted`,
called by ``strata._entry`` before anything else is imported) hands it its
standard streams (``SCM_RIGHTS``), arguments, folder, environment and umask;
the prestarted process forks, and the child takes them and runs the command
line's ``strata mcp`` itself: today's server, its tools, errors, elicitation,
``--ask-studio`` and confinement unchanged, only without the imports. The
asker waits for the child's exit code and exits with it; when the asker goes
(its MCP client stopped it), the child is sent SIGTERM.

Only a request of the same user (``SO_PEERCRED``) carrying the key written
to ``REPO/watch/mcp.key`` (mode 0600; the repository is masked in the
sandbox) and of the same Strata version is served; anything else, a missing
or dead prestarted server, or ``STRATA_NO_DAEMON``, and ``strata mcp`` starts
as it always did. The prestarted process exits after :data:`IDLE_TIMEOUT`
seconds with no session (``[watch] idle_timeout``, as the watcher), when its
repository is gone, or when the installed Strata is no longer the build it
loaded (:func:`strata._build.code_fingerprint`, checked as each session
arrives: a reinstall or an edited source file of the same version number);
that session is then refused and runs as a cold one, which starts a new
prestarted server.

Who starts it: the first stdio ``strata mcp`` of a workspace (for the next
ones), and the workspace's watcher a few seconds after it starts
(:func:`wanted`) when the workspace has served an MCP session before
(``REPO/watch/mcp.used``, written by each stdio session) or its
``.mcp.json`` registers ``strata ... mcp`` (``claude mcp add --scope
project``): the watcher is started by any ``strata`` command and by an
agent's first hook, so the first session of the day usually finds the
server warm.

Only the standard library is imported by the asker's side.
"""

from __future__ import annotations

import contextlib
import os
import sys

TYPE_CHECKING = False  # (not typing's: the asker's side imports nothing it does not use)
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

SOCKET = "mcp.sock"
KEYFILE = "mcp.key"
PIDFILE = "mcp.pid"
#: written by each stdio session: the workspace is served over MCP (see :func:`wanted`)
USED = "mcp.used"
#: how long a prestarted server waits for a session before it exits (seconds)
IDLE_TIMEOUT = 1800.0
#: how long the asker waits for the prestarted server to take its session
READY_TIMEOUT = 2.0
#: what a session loads as it starts and answers its first calls (measured with
#: ``python -X importtime``), loaded by the prestarted server once
WARM = (
    "mcp.server.mcpserver",
    "mcp.server.elicitation",
    "anyio.to_thread",
    "anyio._core._sockets",
    "pydantic",
    "rich.console",
    "rich.logging",
    "pathspec",
    "difflib",
    "rfc8785",
    "strata.gateway",
    "strata.agent.tools",
    "strata.watch.monitor",
    "strata.cli.watcher",
    "strata.cli.observe",
    "strata.runs.recovery",
    "strata.workbench.recovery",
    "strata.workshop.recovery",
    "strata.diff.patch",
    "strata.ledger.drivers.sqlite",
    "strata.ledger.migrate",
)


def _version() -> str:
    from strata._version import __version__

    return __version__


def _place(cwd: str) -> tuple[str, str] | None:
    """``(socket, key file)`` of the workspace containing ``cwd``; None outside one."""
    from strata._locate import find_repo

    found = find_repo(cwd)
    if found is None:
        return None
    folder = os.path.join(found[1], "watch")
    return os.path.join(folder, SOCKET), os.path.join(folder, KEYFILE)


def _turned_off() -> bool:
    return os.environ.get("STRATA_NO_DAEMON", "") not in ("", "0") or (
        os.environ.get("STRATA_NO_RESIDENT") == "1"
    )


def where(argv: list[str], cwd: str) -> str | None:
    """The folder ``strata ARGV`` serves when it is ``mcp ...`` or ``-C DIR mcp ...``; else None."""
    if argv[:1] == ["mcp"]:
        return cwd
    if len(argv) > 2 and argv[0] == "-C" and argv[2] == "mcp":
        return os.path.join(cwd, argv[1])
    return None


def try_prestarted(argv: list[str]) -> None:
    """Run ``strata ARGV`` (``mcp ...``) in the workspace's prestarted server; return when none.

    Once the session is handed over this does not return: it waits for the
    session's end and exits with its code.
    """
    import _socket

    from strata import _wire

    if _turned_off() or any(a in ("-h", "--help", "--debug") for a in argv):
        return
    try:
        cwd = os.getcwd()
        folder = where(argv, cwd)
        if folder is None:
            return
        place = _place(folder)
        if place is None or not os.path.exists(place[0]):
            return
        with open(place[1], encoding="ascii") as f:
            key = f.read().strip()
    except (OSError, ValueError):
        return
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(READY_TIMEOUT)
        with _wire.short_socket_path(place[0]) as address:
            sock.connect(address)
        body = {
            "v": 1,
            "key": key,
            "version": _version(),
            "argv": argv,
            "cwd": cwd,
            "env": dict(os.environ),
            "umask": _umask(),
        }
        line = (_wire.dumps(body) + "\n").encode()
        sock.sendmsg([line], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _fds(0, 1, 2))])
        reply = _read_line(sock)
    except OSError:
        sock.close()
        return  # not taken: this process serves the session
    if reply is None or reply.get("ok") is not True:
        sock.close()
        return  # refused before anything ran
    # from here on the session is the prestarted server's child's: never run it twice
    sock.settimeout(None)
    try:
        done = _read_line(sock)
    except KeyboardInterrupt:
        os._exit(130)
    except OSError:
        done = None
    if done is None or not isinstance(done.get("code"), int):
        sys.stderr.write("error: the prestarted MCP server stopped during the session\n")
        sys.stderr.flush()
        os._exit(1)
    os._exit(int(done["code"]))  # type: ignore[call-overload]


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def _fds(*fds: int) -> bytes:
    import array

    return array.array("i", fds).tobytes()


def _read_line(sock: object) -> dict[str, object] | None:
    from strata import _wire

    data = bytearray()
    while b"\n" not in data:
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            return None
        data += chunk
    try:
        found = _wire.loads(bytes(data[: data.index(b"\n")]))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


# -- the prestarted server ------------------------------------------------------------------


def start_later(repo_folder: str, root: str) -> None:
    """Start the prestarted server of a repository in the background, unless one runs."""
    import subprocess

    if _turned_off():
        return
    folder = os.path.join(repo_folder, "watch")
    if _locked(os.path.join(folder, PIDFILE)):
        return
    try:
        os.makedirs(folder, exist_ok=True)
        subprocess.Popen(
            [sys.executable, "-m", "strata.cli.mcp_serve", root, repo_folder],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return  # the next strata mcp starts as usual


def note_used(repo_folder: str) -> None:
    """Remember that this workspace served an MCP session (see :func:`wanted`)."""
    path = os.path.join(repo_folder, "watch", USED)
    if not os.path.exists(path):
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="ascii") as f:
                f.write("strata mcp served this workspace\n")


def wanted(repo_folder: str, root: str) -> bool:
    """Whether the workspace's watcher should start the MCP server ahead.

    True when the workspace served an MCP session before (:data:`USED`) or
    its ``.mcp.json`` (Claude Code's project servers) runs ``strata ... mcp``.
    """
    if os.path.exists(os.path.join(repo_folder, "watch", USED)):
        return True
    try:
        with open(os.path.join(root, ".mcp.json"), encoding="utf-8") as f:
            servers = _wire_loads(f.read()).get("mcpServers")
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(servers, dict):
        return False
    for server in servers.values():
        if not isinstance(server, dict):
            continue
        words = [str(server.get("command", "")), *map(str, server.get("args") or [])]
        if "mcp" in words and any(os.path.basename(w).startswith("strata") for w in words):
            return True
    return False


def _wire_loads(text: str) -> dict[str, object]:
    import json

    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError("not an object")
    return found


def _locked(path: str) -> bool:
    from strata.atomic import held_elsewhere

    try:
        return held_elsewhere(path)
    except OSError:
        return False  # (unreadable: not a server this user can be served by)


def serve(
    root: str,
    repo_folder: str,
    *,
    warm: Callable[[], object],
    run: Callable[[list[str]], object],
    idle_timeout: float = IDLE_TIMEOUT,
) -> None:
    """Run the prestarted server of the repository in ``repo_folder`` until it is idle.

    ``warm`` loads what a session needs (the command line, the MCP server), once;
    ``run`` runs one session's command line in a forked child
    (:mod:`strata.cli.mcp_serve` gives both).
    """
    import fcntl
    import importlib
    import secrets
    import select
    import signal
    import socket
    import time

    from strata._build import code_fingerprint

    build = code_fingerprint()  # before the imports: a file changed meanwhile is caught
    folder = os.path.join(repo_folder, "watch")
    pid_fd = os.open(os.path.join(folder, PIDFILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(pid_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another one runs
    os.ftruncate(pid_fd, 0)
    os.write(pid_fd, f"{os.getpid()}\n".encode())
    # what a session needs, loaded once (before the socket exists: a session never waits)
    warm()
    for name in WARM:
        with contextlib.suppress(ImportError):  # (not installed: the session does without)
            importlib.import_module(name)

    key = secrets.token_hex(16)
    key_path = os.path.join(folder, KEYFILE)
    temporary = f"{key_path}.{os.getpid()}.tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(key)
    os.replace(temporary, key_path)
    sock_path = os.path.join(folder, SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock_path)
        from strata._wire import short_socket_path

        with short_socket_path(sock_path) as address:
            listener.bind(address)
    finally:
        os.umask(old)
    listener.listen(16)
    version = _version()
    sessions: dict[int, socket.socket] = {}  # child pid -> the asker's connection
    last = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    listening = True

    def retire() -> None:
        """Take no more sessions (the files go now: a new server may take the place)."""
        nonlocal listening
        if listening:
            listening = False
            listener.close()
            for path in (sock_path, key_path):
                with contextlib.suppress(OSError):
                    os.unlink(path)
            os.close(pid_fd)  # a new prestarted server may start while these sessions end

    try:
        while True:
            for pid in list(sessions):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    conn = sessions.pop(pid)
                    _send(conn, {"done": True, "code": os.waitstatus_to_exitcode(status)})
                    conn.close()
                    last = time.monotonic()
            if not os.path.isdir(repo_folder):
                break
            if not sessions and (not listening or time.monotonic() - last > idle_timeout):
                break
            watched = [listener, *sessions.values()] if listening else list(sessions.values())
            ready, _, _ = select.select(watched, [], [], 0.2)
            for conn in ready:
                if conn is listener:
                    taken = _accept(listener, key, version, root, run, build)
                    if taken == "rebuilt":
                        retire()  # the sessions running go on with the code they loaded
                        break
                    if isinstance(taken, tuple):
                        sessions[taken[0]] = taken[1]
                        last = time.monotonic()
                    continue
                # the asker went (its client stopped it): the session goes too
                gone = [p for p, c in sessions.items() if c is conn]
                if not conn.recv(1, socket.MSG_PEEK):
                    for p in gone:
                        os.kill(p, signal.SIGTERM)
    finally:
        for conn in sessions.values():
            conn.close()
        retire()


def _send(conn: object, body: dict[str, object]) -> None:
    import json

    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(body) + "\n").encode())  # type: ignore[attr-defined]


def _accept(
    listener: socket.socket,
    key: str,
    version: str,
    root: str,
    run: Callable[[list[str]], object],
    build: object = None,
) -> tuple[int, socket.socket] | str | None:
    """Take one asker's session: fork a child that runs it; (pid, connection), or None.

    ``"rebuilt"`` when the installed Strata is no longer ``build`` (the
    session is refused: this server must make way).
    """
    import json
    import socket
    import struct

    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        conn.settimeout(READY_TIMEOUT)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        data = bytearray()
        while b"\n" not in data:
            chunk, more, _, _ = socket.recv_fds(conn, 1 << 20, 4)
            fds += more
            if not chunk:
                raise ValueError("no request")
            data += chunk
        request = json.loads(bytes(data[: data.index(b"\n")]))
        refusal = _refusal(request, uid, key, version, root, fds)
        if refusal is None and build is not None:
            from strata._build import code_fingerprint

            if code_fingerprint() != build:
                _send(conn, {"ok": False, "reason": "another build of Strata"})
                conn.close()
                return "rebuilt"
        if refusal is not None:
            _send(conn, {"ok": False, "reason": refusal})
            raise ValueError(refusal)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child runs the session and exits
            _run_session(request, fds, listener, conn, run)
        _send(conn, {"ok": True, "pid": pid})
        conn.settimeout(None)
        return pid, conn
    except (OSError, ValueError, TypeError, KeyError):
        conn.close()
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _end_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` when the prestarted server ends (its asker then has)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 1024


def _refusal(
    request: object, uid: int, key: str, version: str, root: str, fds: list[int]
) -> str | None:
    """Why a request is not served (None: it is)."""
    import hmac

    if uid != os.geteuid():
        return "another user"
    if not isinstance(request, dict) or not hmac.compare_digest(str(request.get("key", "")), key):
        return "bad key"
    if request.get("version") != version:
        return "another version of Strata"
    argv, cwd, env = request.get("argv"), request.get("cwd"), request.get("env")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "bad request"
    if not isinstance(cwd, str) or not isinstance(env, dict) or len(fds) != 3:
        return "bad request"
    folder = where(argv, cwd)
    if folder is None:
        return "not strata mcp"
    here = os.path.realpath(folder)
    if here != root and not here.startswith(root.rstrip("/") + "/"):
        return "outside this workspace"
    return None


def _run_session(
    request: dict[str, object],
    fds: list[int],
    listener: object,
    conn: object,
    run: Callable[[list[str]], object],
) -> None:
    """In the forked child: become the asker's ``strata mcp`` and run it (never returns)."""
    import signal

    code = 1
    try:
        listener.close()  # type: ignore[attr-defined]
        conn.close()  # type: ignore[attr-defined]
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _end_with_parent(signal.SIGTERM)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # nothing of the prestarted server's stays open here: its pid file's lock, its
        # socket, the other sessions' connections (their askers wait for them to close)
        os.closerange(3, _max_fd())
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        os.chdir(str(request["cwd"]))
        umask = request.get("umask")
        os.umask(umask if isinstance(umask, int) else 0o22)
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        sys.argv = ["strata", *argv]
        run(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
