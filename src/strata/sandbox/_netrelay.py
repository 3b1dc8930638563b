"""Inside the sandbox: a loopback port that leads to Strata's allow-list proxy, then the command.

The sandbox's network namespace has only its own loopback. Strata's proxy
(:class:`strata.sandbox.net.NetProxy`) listens on a Unix socket bound into the
sandbox. This program, started by bubblewrap as the sandbox's command::

    python -I -S -B _netrelay.py PORT SOCKET -- COMMAND…

binds ``127.0.0.1:PORT`` first (so the port is ready before the command
starts), forks a child that passes every connection on to ``SOCKET``, and
executes ``COMMAND`` in its own process: the command keeps the pid bubblewrap
gave it (signals and the exit status are the command's). The child leaves the
command's session (a Ctrl-C for the command does not stop it) and dies with
the sandbox: when the command ends, bubblewrap's pid 1 ends and the kernel
kills what is left in the sandbox's pid namespace.

The relay enforces nothing; the proxy on the other side of the socket does.
Like :mod:`strata.sandbox._relay` it runs as a script in an isolated
interpreter and imports only the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
import threading

_CHUNK = 64 * 1024


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _connection(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        try:
            client, _ = listener.accept()
        except InterruptedError:
            continue
        threading.Thread(target=_connection, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    """Listen on the port, fork the relay, then become the command."""
    if len(argv) < 4 or argv[2] != "--" or not argv[0].isdigit():
        print("usage: _netrelay.py PORT SOCKET -- COMMAND…", file=sys.stderr)
        return 2
    port, path, command = int(argv[0]), argv[1], argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    except OSError as exc:
        print(f"strata: cannot open the network relay on port {port}: {exc}", file=sys.stderr)
        return 125
    if os.fork() == 0:
        try:
            _serve(listener, path)
        finally:  # never the command's cleanup: end here, whatever happened
            os.kill(os.getpid(), signal.SIGKILL)
    listener.close()
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; the command must not
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"strata: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if exc.errno == errno.ENOENT else 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
