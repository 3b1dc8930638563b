"""Start bubblewrap and pass signals on to the command inside the sandbox.

bubblewrap does not pass signals on: a SIGTERM sent to ``bwrap`` kills it, and
``--die-with-parent`` then SIGKILLs the sandboxed command, which never gets a
chance to shut down cleanly. This small program sits between the caller and
``bwrap``::

    python -I -S _relay.py BWRAP [BWRAP OPTIONS…] -- COMMAND…

It adds ``--info-fd`` to learn the host pid of the sandbox's first process (bwrap's
reaper, pid 1 inside), finds the command (pid 2 inside, the reaper's child) and
passes SIGINT and SIGQUIT on to the command's process group (as a terminal's
Ctrl-C would) and SIGTERM and SIGHUP to the command itself. It exits with
bubblewrap's status (the command's exit code, 128 + N when signal N ended it)
and dies with its parent (``PR_SET_PDEATHSIG``), so killing the caller with
SIGKILL takes the relay, bubblewrap and the sandbox with it.

It runs as a script in an isolated interpreter (``-I -S``), so no variable of
the sandbox's environment can change how it runs, and imports only what starts
fast (no ``subprocess``, ``json`` or ``re``, which would triple its start-up).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)
_TO_GROUP = (signal.SIGINT, signal.SIGQUIT)
_COMMAND_APPEARS_S = 5.0  # how long to wait for the command once the sandbox exists


def _die_with_parent() -> bool:
    """Ask for SIGKILL when the parent dies; False when it already has."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent and parent != 1


def _read_info(fd: int) -> int | None:
    """The host pid of the sandbox's first process, from bwrap's ``--info-fd`` JSON.

    The JSON is one object of numbers (``{"child-pid": 1234, …}``), read to its
    closing brace (bwrap would get SIGPIPE if the pipe closed before it is done
    writing). Only that field is needed, so it is picked out without a JSON
    parser.
    """
    data = b""
    try:
        while not data.rstrip().endswith(b"}"):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    key = b'"child-pid"'
    at = data.find(key)
    if at < 0:
        return None
    rest = data[at + len(key) :].lstrip(b" \t\n:")
    digits = rest[: len(rest) - len(rest.lstrip(b"0123456789"))]
    return int(digits) if digits else None


def _inner_pid(pid: int) -> str | None:
    """The pid of host process ``pid`` inside its own pid namespace."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return line.split()[-1]
    except OSError:
        return None
    return None


def _command_pid(init: int) -> int | None:
    """The sandboxed command: the child of bwrap's reaper that is pid 2 inside."""
    deadline = time.monotonic() + _COMMAND_APPEARS_S
    while True:
        try:
            with open(f"/proc/{init}/task/{init}/children", encoding="ascii") as listing:
                children = [int(word) for word in listing.read().split()]
        except OSError:
            return None  # the sandbox has ended
        for child in children:
            if _inner_pid(child) == "2":
                return child
        if time.monotonic() > deadline:
            return None
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    """Run bubblewrap as ``argv`` says; return its exit status."""
    if not argv:
        print("usage: _relay.py BWRAP [OPTIONS…] -- COMMAND…", file=sys.stderr)
        return 2
    if not _die_with_parent():
        return 1
    pending: list[int] = []
    known: dict[str, int | None] = {"bwrap": None, "init": None, "command": None}
    ready = [False]

    def deliver() -> None:
        bwrap = known["bwrap"]
        if not ready[0] or bwrap is None:
            return
        while pending:
            signum = pending.pop(0)
            init = known["init"]
            if init is not None and known["command"] is None:
                known["command"] = _command_pid(init)
            command = known["command"]
            try:
                if command is None:
                    os.kill(bwrap, signum)  # no sandbox yet: stop bwrap itself
                elif signum in _TO_GROUP:
                    os.killpg(os.getpgid(command), signum)
                else:
                    os.kill(command, signum)
            except ProcessLookupError:
                pass

    def on_signal(signum: int, frame: object) -> None:
        pending.append(signum)
        deliver()

    for signum in _FORWARDED:
        signal.signal(signum, on_signal)
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    command = [argv[0], "--info-fd", str(write_end), *argv[1:]]
    try:
        # SIGPIPE back to its default: Python ignores it, and an ignored signal
        # stays ignored across exec (the command would never get it)
        pid = os.posix_spawn(argv[0], command, os.environ, setsigdef=(signal.SIGPIPE, *_FORWARDED))
    except OSError as exc:
        print(f"error: cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    finally:
        os.close(write_end)
    known["bwrap"] = pid
    known["init"] = _read_info(read_end)
    ready[0] = True
    deliver()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):  # bwrap itself was killed: end the same way
        killed = os.WTERMSIG(status)
        signal.signal(killed, signal.SIG_DFL)
        os.kill(os.getpid(), killed)
        return 128 + killed
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
