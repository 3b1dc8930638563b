"""The file tools an agent step may call, confined to one folder (the Draft's).

Every path is a workspace path checked at the edge
(:func:`strata.sandbox.paths.check_relative`), and every read and write goes
through :class:`~strata.store.fsops.WorkspaceWriter`, which never follows a
symlink: a tool cannot reach outside the folder it is given, whatever the
model asks. A tool's failure (a missing file, an edit that does not match) is
its result, marked as an error, for the model to read; it never ends the step.

Tools are deterministic functions of the folder and their arguments, so a
replay that runs them again on the same files gets the same results.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata import telemetry
from strata.errors import StrataError
from strata.providers.base import ToolSpec
from strata.sandbox.paths import check_relative, is_internal
from strata.store.fsops import WorkspaceWriter

#: the most a tool result may hold; longer results are clipped with a marker
RESULT_LIMIT = 16_000
LIST_LIMIT = 500


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned: the text the model reads, and whether it is an error."""

    text: str
    is_error: bool = False


def tool_path(arguments: dict[str, Any]) -> str:
    """The checked workspace path of a call's ``path`` argument (ValueError when it is not)."""
    raw = arguments.get("path")
    if not isinstance(raw, str):
        raise ValueError("'path' must be a string")
    path = check_relative(raw.strip().removeprefix("./"))
    if is_internal(path):
        raise ValueError(f"{path} is inside .strata or .git, which tools may not touch")
    return path


def _clip(text: str) -> str:
    if len(text) <= RESULT_LIMIT:
        return text
    return text[:RESULT_LIMIT] + f"\n[truncated: {len(text) - RESULT_LIMIT} more characters]"


def list_files(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Every file below the folder, sorted, one per line (``.strata``/``.git`` left out)."""
    found: list[str] = []
    root = str(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not is_internal(d))
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            found.append(name if rel == "." else f"{rel}/{name}")
    found.sort()
    if not found:
        return ToolResult("(no files)")
    shown = found[:LIST_LIMIT]
    more = f"\n[truncated: {len(found) - LIST_LIMIT} more files]" if len(found) > LIST_LIMIT else ""
    return ToolResult("\n".join(shown) + more)


def read_file(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """A file's text (UTF-8; undecodable bytes replaced)."""
    path = tool_path(arguments)
    with WorkspaceWriter(folder) as writer:
        data = writer.read_file(path)
    return ToolResult(_clip(data.decode("utf-8", "replace")))


def write_file(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Create or replace a file with the given text."""
    path = tool_path(arguments)
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ValueError("'content' must be a string")
    data = content.encode()
    with WorkspaceWriter(folder) as writer:
        st = writer.lstat(path)
        mode = stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISREG(st.st_mode) else 0o644
        writer.write_file(path, data, mode=mode)
    return ToolResult(f"wrote {len(data)} bytes to {path}")


def edit_file(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Replace the one exact occurrence of ``old`` in a file with ``new``."""
    path = tool_path(arguments)
    old, new = arguments.get("old"), arguments.get("new")
    if not isinstance(old, str) or not old or not isinstance(new, str):
        raise ValueError("'old' must be a non-empty string and 'new' a string")
    with WorkspaceWriter(folder) as writer:
        text = writer.read_file(path).decode("utf-8")
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times; make it unique"
            return ToolResult(f"edit_file {path}: the text to replace was {where}", True)
        st = writer.lstat(path)
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        writer.write_file(path, text.replace(old, new).encode(), mode=mode)
    return ToolResult(f"edited {path}")


_PATH = {"type": "string", "description": "a path relative to the workspace root"}

TOOLS: dict[str, tuple[ToolSpec, Callable[[Path, dict[str, Any]], ToolResult]]] = {
    "list_files": (
        ToolSpec(
            "list_files",
            "List every file in the workspace, one path per line.",
            {"type": "object", "properties": {}, "required": []},
        ),
        list_files,
    ),
    "read_file": (
        ToolSpec(
            "read_file",
            "Read a file's text.",
            {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
        ),
        read_file,
    ),
    "write_file": (
        ToolSpec(
            "write_file",
            "Create or replace a file with the given text.",
            {
                "type": "object",
                "properties": {"path": _PATH, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        ),
        write_file,
    ),
    "edit_file": (
        ToolSpec(
            "edit_file",
            "Replace the one exact occurrence of 'old' in a file with 'new'.",
            {
                "type": "object",
                "properties": {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["path", "old", "new"],
            },
        ),
        edit_file,
    ),
}


def specs() -> tuple[ToolSpec, ...]:
    """The tools' specifications, in a stable order."""
    return tuple(spec for spec, _ in TOOLS.values())


def call_tool(
    tools: Mapping[str, tuple[ToolSpec, Callable[[Path, dict[str, Any]], ToolResult]]],
    folder: Path,
    name: str,
    arguments: dict[str, Any],
) -> ToolResult:
    """Run tool ``name`` of ``tools`` on ``folder``; an unknown tool or a failure is an error."""
    entry = tools.get(name)
    if entry is None:
        return ToolResult(f"unknown tool {name!r}; use one of {', '.join(tools)}", True)
    try:
        with telemetry.span("strata.tool_call", {"strata.tool": name}):
            return entry[1](folder, arguments)
    except FileNotFoundError:
        return ToolResult(f"{name}: {arguments.get('path')} does not exist", True)
    except UnicodeDecodeError:
        return ToolResult(f"{name}: {arguments.get('path')} is not UTF-8 text", True)
    except (StrataError, ValueError, OSError) as exc:
        return ToolResult(f"{name}: {exc}", True)
