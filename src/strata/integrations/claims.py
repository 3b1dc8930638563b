"""Files an agent's tool call is about to write, so that no other call records them first.

Claude Code asks PreToolUse before a file tool (Edit, Write, MultiEdit,
NotebookEdit) runs and PostToolUse after. Between the two, the file on disk
already holds the agent's edit, but nothing has recorded it yet; another
agent's PreToolUse at that moment records "changes made outside the agent"
and would take that edit for the person's. So PreToolUse *claims* the file
(one small file in ``REPO/hooks/claims/`` per session and path), records
every unrecorded change except the claimed paths, and PostToolUse records the
claimed path alone, as the agent's, and releases the claim.

A claim left by an agent that died between its two hooks is passed over
after :data:`CLAIM_TTL_S` (a person may take that long to answer Claude
Code's permission prompt, which comes after PreToolUse).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from strata.atomic import atomic_write
from strata.layout import Layout

#: how long a claim holds when its PostToolUse never comes (seconds)
CLAIM_TTL_S = 3600.0


def _folder(layout: Layout) -> Path:
    return layout.repo / "hooks" / "claims"


def _name(session: str, path: str) -> str:
    return hashlib.blake2b(f"{session}\0{path}".encode(), digest_size=16).hexdigest()


def claim(layout: Layout, session: str, path: str) -> None:
    """Claim workspace path ``path`` for ``session``'s tool call, until :func:`release`."""
    folder = _folder(layout)
    folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"session": session, "path": path, "time": time.time()})
    atomic_write(folder / _name(session, path), body.encode(), durable=False)


def release(layout: Layout, session: str, path: str) -> None:
    """Drop ``session``'s claim on ``path`` (nothing when there is none)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_folder(layout) / _name(session, path))


def claimed(layout: Layout, *, now: float | None = None) -> list[str]:
    """The workspace paths claimed now (stale claims are removed, unreadable ones passed over)."""
    now = time.time() if now is None else now
    try:
        names = os.listdir(_folder(layout))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if name.startswith("."):
            continue  # a claim being written (its temporary name)
        entry = _folder(layout) / name
        try:
            body = json.loads(entry.read_bytes())
            path, when = str(body["path"]), float(body["time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a claim
        if now - when > CLAIM_TTL_S:
            entry.unlink(missing_ok=True)
            continue
        found.append(path)
    return sorted(set(found))
