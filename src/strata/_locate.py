"""Where the workspace containing a folder keeps its repository, with nothing but ``os``.

The command-line client (:mod:`strata._resident`) and the walk a command starts
early (:mod:`strata.store.prefetch`) look before anything else is loaded.
"""

from __future__ import annotations

import os


def find_repo(cwd: str) -> tuple[str, str] | None:
    """(workspace folder, repository folder) of the workspace containing ``cwd``, or None.

    Found as ``find_layout`` finds them, with nothing but ``os``.
    """
    folder = os.path.realpath(cwd)
    while True:
        marker = os.path.join(folder, ".strata")
        if os.path.lexists(marker):
            if os.path.isdir(marker) and not os.path.islink(marker):
                return folder, marker
            try:
                with open(marker, encoding="utf-8") as f:
                    text = f.read().strip()
            except (OSError, UnicodeDecodeError):
                return None
            if not text.startswith("strata-dir: "):
                return None
            return folder, text[len("strata-dir: ") :]
        hidden = os.path.join(folder, ".git", "strata", "repo")
        if os.path.isfile(os.path.join(hidden, "config.toml")):
            return folder, hidden
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
