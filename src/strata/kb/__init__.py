"""The local knowledge base (``strata kb``): index a snapshot's files, search them with citations.

See :mod:`strata.kb.base` for :class:`KnowledgeBase`, :mod:`strata.kb.extract`
for what is read of each kind of file, :mod:`strata.kb.chunk` for passages and
their line spans, :mod:`strata.kb.index` for the SQLite FTS5 file and
:mod:`strata.kb.dense` for the optional embedding model (the ``kb-dense`` extra).
"""

from strata.kb.base import (
    AskResult,
    Hit,
    IndexReport,
    KnowledgeBase,
    SearchResult,
    Skipped,
)

__all__ = ["AskResult", "Hit", "IndexReport", "KnowledgeBase", "SearchResult", "Skipped"]
