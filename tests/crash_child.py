"""Run ``strata ARGS`` and stop it just before its N-th filesystem change, for crash tests.

Usage: ``python crash_child.py REPORT_FD STOP_AT ARGS...``.

Every call that changes the filesystem or makes it durable (``os.replace``,
``os.unlink``, ``os.fsync``, ...) is one step, and so is each swap of two
entries (``renameat2``, which Strata calls through ``ctypes``). With ``STOP_AT`` 0 the command
runs to its end and writes the list of its steps, as JSON, to ``REPORT_FD``.
Otherwise, just before step ``STOP_AT`` it writes one line naming the step to
``REPORT_FD`` and waits there for ever, so the test's SIGKILL lands exactly at
that point. When the command ends before that step, ``REPORT_FD`` is closed
without a line.
"""

from __future__ import annotations

import json
import os
import shutil  # noqa: F401  (imported before the patch: it checks os functions at import)
import sys
import tempfile  # noqa: F401
import time
from collections.abc import Callable
from typing import Any

STEP_FUNCTIONS = (
    "replace",
    "rename",
    "unlink",
    "remove",
    "rmdir",
    "mkdir",
    "symlink",
    "link",
    "chmod",
    "utime",
    "truncate",
    "fsync",
)


def main() -> None:
    report = int(sys.argv[1])
    stop_at = int(sys.argv[2])
    os.set_inheritable(report, False)
    steps: list[tuple[str, list[str]]] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            paths = [os.fsdecode(a) for a in args if isinstance(a, (str, bytes, os.PathLike))]
            steps.append((name, paths))
            if len(steps) == stop_at:
                os.write(report, json.dumps([name, paths]).encode() + b"\n")
                while True:
                    time.sleep(60)
            return real(*args, **kwargs)

        return step

    for name in STEP_FUNCTIONS:
        setattr(os, name, counted(name, getattr(os, name)))
    import strata.store.fsops as fsops

    exchange = fsops._renameat2

    def counted_exchange() -> Callable[..., Any] | None:
        real = exchange()  # renameat2(RENAME_EXCHANGE), called through ctypes
        return None if real is None else counted("renameat2", real)

    fsops._renameat2 = counted_exchange  # type: ignore[assignment]
    sys.argv = ["strata", *sys.argv[3:]]
    from strata._entry import run

    try:
        run()
    finally:
        with os.fdopen(report, "wb") as out:
            if stop_at == 0:
                out.write(json.dumps(steps).encode())


if __name__ == "__main__":
    main()
