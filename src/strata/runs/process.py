"""Run a child command as a wrapper should: same terminal, signals passed on.

The child inherits stdin, stdout and stderr, so a TUI agent keeps the
terminal. While it runs, SIGINT, SIGQUIT, SIGTERM and SIGHUP do not stop this
process: they are passed to the child, and the outcome says the run was
interrupted, so the caller can still record what the command left behind.

A Ctrl-C typed at the terminal already reaches every process of the
foreground process group, the child included; passing SIGINT or SIGQUIT on
again would deliver it twice, so those two are passed on only when the child
cannot have received them itself: it runs in a session of its own
(``new_session``), or this process is not in the terminal's foreground group.

A run's command starts a process group of its own (``own_group``), so that a
command left behind by a strata killed with SIGKILL can be ended as a whole:
its run's lease records the group (:func:`group_record`), and the next command
that writes ends it (:func:`end_group`) before recording the run as
interrupted. When this process holds the terminal, the command's group is
given the terminal (as a shell gives it to a job): it reads and types as it
would in the foreground; Ctrl-C and Ctrl-Z reach it, and a command stopped by
Ctrl-Z stops this process too, continuing together.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


@dataclass(frozen=True)
class ProcessOutcome:
    """How a child command ended."""

    exit_code: int
    """The child's exit status; 128 + N when signal N ended it (as shells report)."""
    signal: int | None
    """The signal that ended the child, if one did."""
    interrupted: bool
    """True when this process received SIGINT, SIGQUIT, SIGTERM or SIGHUP during the run
    (or the command, holding the terminal, was ended by one typed there: Ctrl-C)."""
    received: int | None
    """The first such signal received."""
    duration_ms: int


def _in_terminal_foreground() -> bool:
    return _terminal() is not None


def _terminal() -> int | None:
    """The descriptor of the terminal whose foreground group this process is in, if any."""
    for fd in (0, 1, 2):
        try:
            if os.tcgetpgrp(fd) == os.getpgrp():
                return fd
            return None
        except OSError:
            continue
    return None


def _give_terminal(fd: int, pgid: int) -> None:
    """Make ``pgid`` the terminal's foreground group (SIGTTOU held off meanwhile)."""
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with suppress(OSError):
            os.tcsetpgrp(fd, pgid)
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _wait_job(proc: subprocess.Popen[bytes], terminal: int | None) -> int:
    """Wait for ``proc``, the leader of its own group; its exit status as ``Popen.wait``'s.

    Holding ``terminal``, a command that stops (Ctrl-Z) stops this process too: the
    terminal goes back to this process's group, and when the shell continues
    it, the command's group gets the terminal back and continues.
    """
    if terminal is None:
        return proc.wait()
    while True:
        try:
            _, status = os.waitpid(proc.pid, os.WUNTRACED)
        except ChildProcessError:  # reaped by Popen.send_signal's poll in a signal handler
            return proc.wait()
        if not os.WIFSTOPPED(status):
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode
        _give_terminal(terminal, os.getpgrp())
        os.kill(os.getpid(), signal.SIGSTOP)  # as the command stopped: the shell takes over
        _give_terminal(terminal, proc.pid)
        kill_group(proc.pid, signal.SIGCONT)


def run_command(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    pass_fds: Sequence[int] = (),
    own_group: bool = False,
    on_start: Callable[[int], object] | None = None,
) -> ProcessOutcome:
    """Run ``argv`` to its end, passing signals on; raise ``OSError`` if it cannot start.

    ``new_session`` starts the child in a session of its own (it then has no
    controlling terminal, so every signal is passed on to it); ``own_group``
    in a process group of its own, given the terminal when this process holds
    it. ``on_start`` is called with the child's pid as soon as it exists.
    """
    received: list[int] = []
    children: list[subprocess.Popen[bytes]] = []
    terminal = _terminal() if own_group and not new_session else None
    # a command in a group of its own gets nothing this process gets from the terminal
    foreground = not own_group and _in_terminal_foreground()

    def pass_on(signum: int) -> None:
        if signum in _FROM_TERMINAL and foreground and not new_session:
            return  # the terminal delivered it to the child (and maybe here) already
        for child in children:
            with suppress(ProcessLookupError):
                child.send_signal(signum)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        pass_on(signum)

    # installed before the child starts, so no signal can stop this process meanwhile
    previous = {s: signal.signal(s, on_signal) for s in FORWARDED}
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=new_session,
            process_group=0 if own_group and not new_session else None,
            pass_fds=tuple(pass_fds),
        )
        children.append(proc)
        if on_start is not None:
            on_start(proc.pid)
        if terminal is not None:
            _give_terminal(terminal, proc.pid)
            # a command that touched the terminal before it had it was stopped (SIGTTIN)
            kill_group(proc.pid, signal.SIGCONT)
        for signum in received:  # arrived while the child was starting
            pass_on(signum)
        try:
            status = _wait_job(proc, terminal)
        finally:
            if terminal is not None:
                _give_terminal(terminal, os.getpgrp())
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    duration = int((time.monotonic() - start) * 1000)
    sig = -status if status < 0 else None
    code = 128 + sig if sig is not None else status
    if terminal is not None and not received and sig in _FROM_TERMINAL:
        received.append(sig)  # Ctrl-C reached the command alone: the run was interrupted
    return ProcessOutcome(code, sig, bool(received), received[0] if received else None, duration)


def kill_group(pid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pid``; nothing when it is gone (or not ours)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """``proc.wait(timeout=timeout_s)``, told of the exit at once (a pidfd) rather than polling.

    ``Popen.wait`` with a timeout polls, sleeping up to 50 ms between looks: a
    command that takes 10 ms would be seen ended 5 ms later on average.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here (or the process is reaped already)
        return proc.wait(timeout=timeout_s)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    if not ready:
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return proc.wait()


def wait_session(
    proc: subprocess.Popen[bytes], *, timeout_s: float, grace_s: float
) -> tuple[int, bool]:
    """Wait for ``proc`` (in a session of its own): its status, and whether it timed out.

    Past ``timeout_s`` its whole group gets SIGTERM, then SIGKILL after ``grace_s``. However
    it ends (an interrupt included), whatever it left running in its session is killed.
    """
    timed_out = False
    try:
        try:
            status = _wait(proc, timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid, signal.SIGTERM)
            try:
                status = proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid, signal.SIGKILL)
                status = proc.wait()
    finally:
        if proc.returncode is None:  # interrupted while waiting
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_group(proc.pid, signal.SIGKILL)  # what it left running in its session
    return status, timed_out


# -- a run's process group, as its lease keeps it ---------------------------------

#: how long a group has to end after SIGTERM before it gets SIGKILL
END_GRACE_S = 2.0


def _stat(pid: int | str) -> tuple[bytes, int, int, int] | None:
    """``(state, pgid, sid, start time in clock ticks after boot)`` of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        fields = raw[raw.rindex(b")") + 2 :].split()
        # fields 3 (state), 5 (pgrp), 6 (session) and 22 (starttime) of proc(5)
        return fields[0], int(fields[2]), int(fields[3]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def group_record(pid: int) -> dict[str, object]:
    """What a run's lease keeps of the process group that its command ``pid`` leads.

    The group's id, its session, and its leader's start time and the boot it
    belongs to, so that a pid used again by another process is never taken for
    the command's (:func:`group_members`).
    """
    stat = _stat(pid)
    return {
        "pgid": pid,
        "sid": stat[2] if stat else None,
        "start": stat[3] if stat else None,
        "boot": _boot_id(),
    }


def note_group(fd: int, pid: int) -> None:
    """Add the process group led by ``pid`` to the lease open on ``fd`` (as ``process_group``).

    The new content is written over the old (which it outgrows) before the file
    is cut to its length, so a process killed meanwhile leaves the old content
    or the new.
    """
    from strata import _wire

    with suppress(OSError, ValueError, TypeError):
        info = _wire.loads(os.pread(fd, 1 << 20, 0))
        if not isinstance(info, dict):
            return
        info["process_group"] = group_record(pid)
        body = _wire.dumps(info).encode()
        os.pwrite(fd, body, 0)
        os.ftruncate(fd, len(body))


def group_members(record: object) -> list[int]:
    """The live processes of the group a lease recorded (``process_group``); [] when none.

    A process belongs when it is in that group and session, started no earlier
    than the group's leader, in the same boot; when the group's id is the pid of
    a process that started at another time, the group is another's, and nothing
    belongs. Read from ``/proc``, which shows every user's processes.
    """
    if not isinstance(record, dict):
        return []
    pgid, sid, start = record.get("pgid"), record.get("sid"), record.get("start")
    if not isinstance(pgid, int) or pgid <= 1 or not isinstance(start, int):
        return []
    if record.get("boot") != _boot_id():
        return []  # the machine restarted: the group died with it
    leader = _stat(pgid)
    if leader is not None and leader[3] != start:
        return []  # the pid is another process's now
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat(entry.name)
        if stat is None or stat[0] in (b"Z", b"X") or stat[1] != pgid:
            continue
        if stat[2] == sid and stat[3] >= start:
            found.append(int(entry.name))
    return sorted(found)


def end_group(record: object, *, grace_s: float = END_GRACE_S) -> list[int]:
    """End what is left of the group a lease recorded: SIGTERM, then SIGKILL after ``grace_s``.

    Returns the pids that were found alive. Processes this user may not signal
    are left (and still returned).
    """
    members = group_members(record)
    if not members:
        return []
    assert isinstance(record, dict)
    pgid = int(record["pgid"])
    kill_group(pgid, signal.SIGTERM)
    kill_group(pgid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    deadline = time.monotonic() + grace_s
    while group_members(record) and time.monotonic() < deadline:
        time.sleep(0.02)
    if group_members(record):
        kill_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        while group_members(record) and time.monotonic() < deadline:
            time.sleep(0.02)
    return members
