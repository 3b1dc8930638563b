"""JSON Schemas shipped with Strata.

``ChangeEvent`` and ``Snapshot`` describe stored records. ``cli/<command>.schema.json``
describes what ``strata <command> --json`` prints (the words of a subcommand joined
by ``-``, e.g. ``cli/bookmark-add.schema.json``), and ``cli/error.schema.json`` the
error object printed on stderr; docs/json.md explains the contract.
"""
