"""The Workshop: a chat with an agent whose edits land in the Draft (issue 13).

:class:`Workshop` (get one with :meth:`strata.Repository.workshop`) sends
messages, rewinds, regenerates and switches models; the conversation is kept
in the ledger (:mod:`strata.workshop.conversation`); a turn reports its
progress with the events of :mod:`strata.workshop.events`. See
``docs/workshop.md``.
"""

from strata.workshop.conversation import ChatMessage, ConversationInfo, ConversationLog
from strata.workshop.session import RewindResult, Turn, Workshop

__all__ = ["ChatMessage", "ConversationInfo", "ConversationLog", "RewindResult", "Turn", "Workshop"]
