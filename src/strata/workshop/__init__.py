"""The Workshop: a chat with an agent whose edits land in the Draft (issue 13).

See :mod:`strata.workshop.session` (:class:`Workshop`) and
:mod:`strata.workshop.conversation` (the conversation as ledger events).
"""
