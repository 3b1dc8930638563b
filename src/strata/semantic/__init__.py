"""Semantic diff handlers: what changed, in the terms a reader uses.

A handler turns two versions of one file into :class:`~strata.semantic.base.HandlerResult`:
the blocks that changed (functions, JSON Pointers, headings, cells), a one-line
summary, and the diff mode. :func:`~strata.semantic.registry.analyze` picks the
handler for a path, bounds it in time and size, and falls back to line ranges of
the unified diff with the reason when it cannot.
"""
