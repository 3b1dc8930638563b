"""The watcher as every command sees it: started in the background, and reported on.

:func:`autostart` is what every command that opens the repository calls
(``strata.cli.common.open_repo``); :func:`watcher_report` and
:func:`watcher_line` are what ``status`` says about it. ``strata watch``
itself, and how a watcher serves the command line, are in
:mod:`strata.cli.watch`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from strata.layout import bad_config, watch_problem


def status_json(folder: Path) -> dict[str, Any]:
    """What ``strata watch --status --json`` prints: the pid file and the answer of the watcher."""
    from strata.watch.monitor import read_pidfile, watcher_status

    status = watcher_status(folder)
    if status is None:
        return {"running": False}
    return {"running": True, **(read_pidfile(folder) or {}), **status}


#: a self-started watcher exits after this long with no request and no change
#: (``[watch] idle_timeout`` in config.toml, seconds)
IDLE_TIMEOUT = 1800.0
#: after a watcher could not run here, none is started again for this long
RETRY_AFTER = 600.0


def daemonturned_off() -> bool:
    """Whether ``STRATA_NO_DAEMON`` keeps commands from starting a watcher."""
    return os.environ.get("STRATA_NO_DAEMON", "") not in ("", "0")


def watch_config(repo: Any) -> dict[str, Any]:
    """The ``[watch]`` table; a bad one refuses the watcher (never the other commands)."""
    problem = watch_problem(repo.config.raw)
    if problem is not None:
        raise bad_config(repo.layout, problem)
    table = repo.config.raw.get("watch", {})
    return table if isinstance(table, dict) else {}


def turned_off(repo: Any) -> str | None:
    """Why no watcher is started by commands here (None: one is)."""
    if daemonturned_off():
        return "turned off by STRATA_NO_DAEMON"
    problem = watch_problem(repo.config.raw)
    if problem is not None:
        return f"not started: config.toml: {problem}"
    if watch_config(repo).get("auto") is False:
        return "turned off in config.toml ([watch] auto = false)"
    return None


#: set by a command whose caller waits for its answer (an agent's hook): the watcher is
#: started once the command is done, so that its start (an interpreter, the whole of
#: Strata, a watch on every folder) does not share the cores with the command's own walk
deferred = False
_started_later = False


def autostart(repo: Any) -> None:
    """Start the workspace's watcher in the background when none runs; never wait for it.

    Called by every command that opens the repository (``open_repo``). The
    watcher (``strata watch --auto``) serves the command line, exits after
    ``[watch] idle_timeout`` seconds without a request or a change, and
    captures live steps only with ``[watch] capture = true``. Nothing is
    started when it is turned off, when a watcher runs or is starting (the
    pid file is locked), or when one could not run here lately. When
    :data:`deferred`, it is started as this process exits (``atexit``).
    """
    global _started_later
    if deferred:
        if not _started_later:
            import atexit

            _started_later = True
            atexit.register(_spawn, repo)  # (what it reads of the repository stays readable)
        return
    _spawn(repo)


def _spawn(repo: Any) -> None:
    if turned_off(repo) is not None:
        return  # (before importing the watcher's module: it loads the socket machinery)
    from strata.watch.monitor import unavailable, watcher_alive

    folder: Path = repo.layout.watch
    if watcher_alive(folder) or unavailable(folder, within=RETRY_AFTER) is not None:
        return
    if not os.access(repo.layout.repo, os.W_OK):  # a read-only view of the repository
        return
    try:
        folder.mkdir(exist_ok=True)
        log = folder / "watch.log"
        with contextlib.suppress(OSError):
            if log.stat().st_size > 1 << 20:
                log.unlink()
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "strata", "-C", str(repo.root), "watch", "--auto"],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
        )
    except OSError:
        return  # the command goes on without a watcher


def watcher_report(repo: Any) -> dict[str, Any]:
    """Whether a watcher serves this workspace, and when none does, why (for ``status``).

    ``{"running": bool, "pid": int | None, "capture": bool | None, "reason": str | None}``
    """
    from strata.watch import served
    from strata.watch.monitor import read_pidfile, unavailable, unwatchable

    folder: Path = repo.layout.watch
    info = read_pidfile(folder)
    if info is not None and served.silent_watcher:
        pid = info.get("pid")
        return {
            "running": False,
            "pid": pid if isinstance(pid, int) else None,
            "capture": None,
            "reason": f"pid {pid} does not answer: stopped or stuck",
        }
    if info is not None:
        pid = info.get("pid")
        capture = info.get("capture")
        return {
            "running": True,
            "pid": pid if isinstance(pid, int) else None,
            "capture": capture if isinstance(capture, bool) else None,
            "reason": None,
        }
    reason = unavailable(folder) or unwatchable(repo.root) or turned_off(repo)
    return {"running": False, "pid": None, "capture": None, "reason": reason}


def counted(n: object, noun: str) -> str:
    """``1 change``, ``2 changes``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def watcher_line(report: dict[str, Any]) -> str:
    """``report`` (:func:`watcher_report`) as one line."""
    if report["running"]:
        what = "records live steps and serves" if report["capture"] else "serves"
        return f"Watcher: pid {report['pid']} {what} this workspace."
    if report["reason"]:
        return f"Watcher: none ({report['reason']}); every command reads the whole tree."
    return "Watcher: none answers yet (commands that use the workspace start one)."
