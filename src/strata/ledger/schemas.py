"""Validation of stored records against the shipped JSON Schemas."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMAS = ("ChangeEvent", "Snapshot")


@cache
def _validator(name: str) -> Any:
    import jsonschema

    text = resources.files("strata.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    schema = json.loads(text)
    return jsonschema.Draft202012Validator(schema)


def schema_text(name: str) -> str:
    """The text of a shipped schema (``ChangeEvent`` or ``Snapshot``)."""
    return resources.files("strata.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")


def problems(name: str, value: Any) -> list[str]:
    """Every way ``value`` breaks schema ``name`` (empty when it conforms)."""
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in _validator(name).iter_errors(value)
    ]
