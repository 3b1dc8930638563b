"""What identifies the installed build of Strata: every Python file's name, inode, size and mtime.

A long-lived process (the watcher, the MCP server started ahead) takes it
when it starts and compares it later: a reinstall, an upgrade or an edited
source file of an editable install changes it even when the version number
stays the same, and the process then makes way for one running the new code.
"""

from __future__ import annotations

import contextlib
import os

#: (path, inode, size, mtime_ns) of each ``.py`` file of the installed package, sorted
Fingerprint = tuple[tuple[str, int, int, int], ...]


def code_fingerprint() -> Fingerprint:
    """Every Python file of the installed Strata: name, inode, size, modification time."""
    base = os.path.dirname(os.path.abspath(__file__))
    found = []
    for folder, _dirs, files in os.walk(base):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    found.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))
