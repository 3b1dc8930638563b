"""JSON Schemas shipped with Strata.

``ChangeEvent`` and ``Snapshot`` describe stored records. ``cli/<command>.schema.json``
describes what ``strata <command> --json`` prints (the words of a subcommand joined
by ``-``, e.g. ``cli/bookmark-add.schema.json``), and ``cli/error.schema.json`` the
error object printed on stderr; docs/json.md explains the contract.
"""

from typing import Any

SCHEMA_VERSION = 1
"""The version of every ``--json`` output object (its ``"schema"`` key); see docs/json.md."""


def versioned(value: Any) -> Any:
    """``value`` with ``"schema": SCHEMA_VERSION`` first when it is an object (lists stay lists)."""
    if isinstance(value, dict):
        return {"schema": SCHEMA_VERSION, **value}
    return value
