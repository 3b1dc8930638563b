"""The code of the methods ``dataclasses`` writes, compiled once and kept between runs.

A ``@dataclass`` writes the source of its ``__init__``, ``__repr__``,
``__eq__``… and compiles it with ``exec`` each time its module is imported:
the command line's start-up makes about 270 of them, and parsing and
compiling their text is about a fifth of the instructions of an agent's hook
that records the workspace itself (no ``.pyc`` keeps them: they are not in
any file).

:func:`install` gives the ``dataclasses`` module an ``exec`` of its own (a
module global shadows the builtin) that compiles each text once: the code
objects are kept, by their exact source text, in one ``marshal`` file beside
Strata's own byte code (``strata/__pycache__``, tagged with the interpreter's
cache tag and byte-code magic number), read when installed and written back
at exit when a text was new. The code is what ``compile`` makes of the same
text, so the methods are the same; the file is a cache: a missing,
unreadable, foreign or corrupt one is ignored and rewritten, and nothing is
written where byte code is not (``PYTHONDONTWRITEBYTECODE``, a read-only
install).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
from importlib._bootstrap_external import MAGIC_NUMBER  # (loaded already: frozen)
from typing import Any

#: the most source texts kept (a text is about 1 KB of code)
LIMIT = 4000

_cache: dict[str, Any] = {}
_new = 0
_path = ""


def _cache_path() -> str:
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    return os.path.join(folder, f"dataclass-code.{sys.implementation.cache_tag}.marshal")


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    """``exec`` for ``dataclasses``: a source text is compiled once, then taken from the cache."""
    global _new
    if isinstance(source, str):
        code = _cache.get(source)
        if code is None:
            # (dataclasses has no __future__ import: nothing to inherit from its frame)
            code = compile(source, "<string>", "exec", dont_inherit=True)
            if len(_cache) < LIMIT:
                _cache[source] = code
                _new += 1
        source = code
    exec(source, globals, locals)  # the text dataclasses wrote, run as it would run it


def install() -> None:
    """Give ``dataclasses`` the caching ``exec``; load the kept code; write new code at exit."""
    global _path
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    _path = _cache_path()
    try:
        with open(_path, "rb") as f:
            data = f.read()
        if data[: len(MAGIC_NUMBER)] == MAGIC_NUMBER:
            found = marshal.loads(data[len(MAGIC_NUMBER) :])
            if isinstance(found, dict):
                _cache.update(found)
    except (OSError, ValueError, EOFError, TypeError):
        _cache.clear()  # none yet, or not one this interpreter reads: made again
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    if not sys.dont_write_bytecode:
        import atexit

        atexit.register(save)


def save() -> None:
    """Write the kept code back when a new text was compiled (atomically; failures ignored)."""
    global _new
    if not _new or not _path:
        return
    _new = 0
    temporary = f"{_path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        with open(temporary, "wb") as f:
            f.write(MAGIC_NUMBER + marshal.dumps(_cache))
        os.replace(temporary, _path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def warm(modules: tuple[str, ...] = ("strata.cli", "strata.repo")) -> int:
    """Compile the methods of the dataclasses ``modules`` load and write the file.

    What an install step runs (``python -m strata._fncache``), as ``compileall``
    writes byte code whatever ``PYTHONDONTWRITEBYTECODE`` says. The default is
    what every command loads (the command line and the repository); the code of
    what fewer commands load is added by the runs that load it, where byte code
    is written. Returns the number of texts kept.
    """
    import importlib

    global _new
    install()
    for name in modules:
        importlib.import_module(name)
    _new = max(_new, 1)
    save()
    return len(_cache)


if __name__ == "__main__":
    print(f"kept the code of {warm()} dataclass methods in {_cache_path()}")
