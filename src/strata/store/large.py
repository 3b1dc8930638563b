"""The large-file guard: files over ``[snapshot] max_file_size`` are skipped, not recorded.

A snapshot that meets a file bigger than the limit (100 MiB unless set;
``0``: no limit) does not read it: the scan names it in a warning and in its
errors, and records for it what the previous scan recorded (nothing, if it
never saw it), as for a file it cannot read. So ``status``, ``snapshot``,
``run`` and ``review`` say it was skipped, and a rollback or rewind, which
leave every such path alone, never delete or overwrite it. A path that
``large_files`` names (gitignore-style patterns, from the workspace's root)
is recorded whatever its size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the limit of a repository whose config sets none
DEFAULT_MAX_FILE_SIZE = 100 * 1024 * 1024
#: the settings of ``[snapshot]``
SNAPSHOT_SETTINGS = ("max_file_size", "large_files")


@dataclass(frozen=True)
class LargeFiles:
    """Which files a scan skips for their size."""

    #: files of more bytes than this are skipped (0: none is)
    limit: int = DEFAULT_MAX_FILE_SIZE
    #: gitignore-style patterns of the paths recorded whatever their size
    allowed: tuple[str, ...] = ()
    _spec: list[Any] = field(default_factory=list, repr=False, compare=False)

    def skips(self, path: str, size: int) -> bool:
        """Whether the file at workspace path ``path``, of ``size`` bytes, is skipped."""
        if not self.limit or size <= self.limit:
            return False
        if not self.allowed:
            return True
        if not self._spec:
            import pathspec

            self._spec.append(pathspec.GitIgnoreSpec.from_lines(self.allowed))
        return not self._spec[0].match_file(path)

    def warning(self, path: str, size: int) -> str:
        """The one-line warning of a file skipped for its size."""
        return (
            f"skipped {path}: {_size(size)} is over [snapshot] max_file_size "
            f"({_size(self.limit)}); not recorded, and rollback and rewind leave it alone "
            f"(record it: add it to [snapshot] large_files)"
        )


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover


def large_files(table: object, parse_size: Callable[[object], int]) -> LargeFiles:
    """The guard of a parsed ``[snapshot]`` table; ValueError naming a bad setting."""
    if table is None:
        return LargeFiles()
    if not isinstance(table, dict):
        raise ValueError("[snapshot] is not a table")
    unknown = sorted(set(table) - set(SNAPSHOT_SETTINGS))
    if unknown:
        raise ValueError(
            f"snapshot.{unknown[0]} is not a setting (known: {', '.join(SNAPSHOT_SETTINGS)})"
        )
    try:
        limit = parse_size(table.get("max_file_size", DEFAULT_MAX_FILE_SIZE))
    except ValueError as exc:
        raise ValueError(f"snapshot.max_file_size: {exc}") from None
    allowed = table.get("large_files", [])
    if (
        not isinstance(allowed, Sequence)
        or isinstance(allowed, str)
        or not all(isinstance(p, str) for p in allowed)
    ):
        raise ValueError("snapshot.large_files must be a list of path patterns")
    return LargeFiles(int(limit), tuple(allowed))
