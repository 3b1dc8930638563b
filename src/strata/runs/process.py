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
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
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
    """True when this process received SIGINT, SIGQUIT, SIGTERM or SIGHUP during the run."""
    received: int | None
    """The first such signal received."""
    duration_ms: int


def _in_terminal_foreground() -> bool:
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def run_command(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
    pass_fds: Sequence[int] = (),
) -> ProcessOutcome:
    """Run ``argv`` to its end, passing signals on; raise ``OSError`` if it cannot start.

    ``new_session`` starts the child in a session of its own (it then has no
    controlling terminal, so every signal is passed on to it).
    """
    received: list[int] = []
    children: list[subprocess.Popen[bytes]] = []
    foreground = _in_terminal_foreground()

    def pass_on(signum: int) -> None:
        if signum in _FROM_TERMINAL and foreground and not new_session:
            return  # the terminal delivered it to the child too
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
            pass_fds=tuple(pass_fds),
        )
        children.append(proc)
        for signum in received:  # arrived while the child was starting
            pass_on(signum)
        status = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    duration = int((time.monotonic() - start) * 1000)
    sig = -status if status < 0 else None
    code = 128 + sig if sig is not None else status
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
