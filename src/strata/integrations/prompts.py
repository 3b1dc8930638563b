"""The prompt an agent session is working on: the group its tool calls join.

Claude Code's ``UserPromptSubmit`` hook opens a group of kind ``prompt`` for
its session (:meth:`strata.core.core.Core.new_group`: the prompt's first line
as its title, the session as its author, the session id and transcript path
to link a point back to the conversation); each later hook of that session
records its snapshots as steps of it, and ``Stop`` closes it. The open group
of each session is one small file in ``REPO/hooks/sessions/``; a session whose
``Stop`` never came has its group replaced by its next prompt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from strata.atomic import atomic_write
from strata.layout import Layout


def _path(layout: Layout, session: str) -> Path:
    name = hashlib.blake2b(session.encode(), digest_size=16).hexdigest()
    return layout.repo / "hooks" / "sessions" / f"{name}.json"


def open_prompt(layout: Layout, session: str, group: dict[str, Any]) -> None:
    """Make ``group`` the open prompt of ``session`` (replacing any other)."""
    path = _path(layout, session)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(group).encode(), durable=False)


def current(layout: Layout, session: str) -> dict[str, Any] | None:
    """The open prompt of ``session`` (its group as JSON), or None."""
    try:
        found = json.loads(_path(layout, session).read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and "id" in found else None


def close_prompt(layout: Layout, session: str) -> None:
    """End ``session``'s open prompt (nothing when there is none)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_path(layout, session))
