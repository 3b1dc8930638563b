"""JSON for the thin client, without importing :mod:`json` (which imports :mod:`re`).

The client (``strata._resident``, ``strata.integrations.fasthook``) speaks JSON
with the watcher. Importing :mod:`json` costs about 6 ms, most of it the
regular-expression engine its pure-Python parts compile at import; its C
accelerator ``_json`` is built into the interpreter and loads in microseconds.
:func:`loads` is ``json.loads`` on that accelerator's scanner (the same code
``json.loads`` runs); :func:`dumps` writes what ``json.dumps`` writes with its
default separators, using the accelerator's string escaping. When the
accelerator is missing (another Python implementation), :mod:`json` is used.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]


def _no_constant(name: str) -> object:
    raise ValueError(f"not JSON: {name}")


class _Context:
    """What the accelerator's scanner reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)


_scan = _json.make_scanner(_Context()) if _json is not None else None  # type: ignore[arg-type]


def loads(text: str | bytes | bytearray) -> object:
    """The value of one JSON document (surrounding whitespace allowed); ValueError if not JSON."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"not JSON at character {exc.value}") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"extra data at character {end}")
    return value


def dumps(value: object, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=...)``, for str-keyed dicts, lists, strings and numbers.

    Infinity and NaN are refused (ValueError), as are other types (TypeError).
    """
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=False)
    parts: list[str] = []
    _write(value, parts, _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring)
    return "".join(parts)


def _write(value: object, parts: list[str], string: object) -> None:
    encode = string  # a C function: str -> its quoted JSON form
    if isinstance(value, str):
        parts.append(encode(value))  # type: ignore[operator]
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("Infinity and NaN are not JSON")
        parts.append(float.__repr__(value))
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for i, item in enumerate(value):
            if i:
                parts.append(", ")
            _write(item, parts, string)
        parts.append("]")
    elif isinstance(value, dict):
        parts.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            if i:
                parts.append(", ")
            parts.append(encode(key))  # type: ignore[operator]
            parts.append(": ")
            _write(item, parts, string)
        parts.append("}")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")


@contextlib.contextmanager
def short_socket_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A path for ``bind``/``connect`` short enough for ``sun_path`` (108 bytes).

    A longer one goes through its folder's descriptor (``/proc/self/fd/N/NAME``),
    held open while the block runs.
    """
    if len(os.fsencode(path)) < 100:
        yield os.fspath(path)
        return
    folder, name = os.path.split(os.fspath(path))
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)
