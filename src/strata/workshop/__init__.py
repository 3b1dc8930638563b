"""The Workshop: a chat with an agent whose edits land in the Draft (issue 13).

:class:`Workshop` (get one with :meth:`strata.Repository.workshop`) sends
messages, rewinds, regenerates and switches models; the conversation is kept
in the ledger (:mod:`strata.workshop.conversation`); a turn reports its
progress with the events of :mod:`strata.workshop.events`. See
``docs/workshop.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strata.workshop.conversation import ChatMessage, ConversationInfo, ConversationLog
    from strata.workshop.session import RewindResult, Turn, Workshop

__all__ = ["ChatMessage", "ConversationInfo", "ConversationLog", "RewindResult", "Turn", "Workshop"]

#: where each public name lives: loaded on first use, so that the recoverer every writing
#: command calls (:mod:`strata.workshop.recovery`) does not load the whole Workshop
_HOMES = {
    "ChatMessage": "conversation",
    "ConversationInfo": "conversation",
    "ConversationLog": "conversation",
    "RewindResult": "session",
    "Turn": "session",
    "Workshop": "session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'strata.workshop' has no attribute {name!r}")
    return getattr(importlib.import_module(f"strata.workshop.{home}"), name)
