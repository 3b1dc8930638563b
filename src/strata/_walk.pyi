"""Types of ``strata._walk``, built from ``native/walk.c`` by setup.py (see its source)."""

from collections.abc import Sequence

def match(
    items: list[tuple[str, str, Sequence[str]]], threads: int, /
) -> list[tuple[bytes, list[str], list[tuple[str, bool]]] | None]: ...
