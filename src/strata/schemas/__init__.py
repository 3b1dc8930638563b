"""JSON Schemas shipped with Strata.

``ChangeEvent`` and ``Snapshot`` describe stored records. ``cli/<command>.schema.json``
describes what ``strata <command> --json`` prints (the words of a subcommand joined
by ``-``, e.g. ``cli/bookmark-add.schema.json``), and ``cli/error.schema.json`` the
error object printed on stderr; docs/json.md explains the contract.
"""

import dataclasses
from typing import Any

SCHEMA_VERSION = 1
"""The version of every ``--json`` output object (its ``"schema"`` key); see docs/json.md."""


def versioned(value: Any) -> Any:
    """``value`` with ``"schema": SCHEMA_VERSION`` first when it is an object (lists stay lists)."""
    if isinstance(value, dict):
        return {"schema": SCHEMA_VERSION, **value}
    return value


def fields_json(record: Any) -> dict[str, Any]:
    """A flat dataclass's fields as a JSON object, in their declared order.

    The ``to_json`` of a record whose JSON is exactly its fields, so that a
    field added is a field reported.
    """
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
