"""The tools of an optimize call: ``list_files`` and ``read_file``, read-only, on a stored tree.

They answer from the tree the digest describes (read from the object store,
or from the files a replay rebuilt), never from the live folder, so a tool's
result is a function of the tree and its arguments: the replay of an
optimization gets the same results. Their names, descriptions and output
match the agent's tools of the same names (:mod:`strata.agent.tools`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strata.agent.tools import TOOLS, ToolResult, clip, listing
from strata.errors import StrataError
from strata.ids import ObjectId
from strata.providers.base import ToolSpec
from strata.sandbox.paths import check_relative, is_internal
from strata.store.tree import lookup, walk_tree

if TYPE_CHECKING:
    from strata.store.objects import ObjectStore

#: the read-only tools, in a stable order
NAMES = ("list_files", "read_file")


def tool_specs() -> tuple[ToolSpec, ...]:
    """The specifications the optimize request offers."""
    return tuple(TOOLS[name][0] for name in NAMES)


def _list(store: ObjectStore, tree: ObjectId) -> ToolResult:
    return listing([path for path, entry in walk_tree(store, tree) if entry.kind != "dir"])


def _read(store: ObjectStore, tree: ObjectId, arguments: dict[str, Any]) -> ToolResult:
    raw = arguments.get("path")
    if not isinstance(raw, str):
        return ToolResult("read_file: 'path' must be a string", True)
    try:
        path = check_relative(raw.strip().removeprefix("./"))
    except (StrataError, ValueError) as exc:
        return ToolResult(f"read_file: {exc}", True)
    if is_internal(path):
        return ToolResult(
            f"read_file: {path} is inside .strata or .git, which tools may not read", True
        )
    entry = lookup(store, tree, path)
    if entry is None:
        return ToolResult(f"read_file: {path} does not exist", True)
    if entry.kind != "file":
        return ToolResult(f"read_file: {path} is a {entry.kind}, not a file", True)
    return ToolResult(clip(store.get(entry.oid).decode("utf-8", "replace")))


def run_tree_tool(
    store: ObjectStore, tree: ObjectId, name: str, arguments: dict[str, Any]
) -> ToolResult:
    """Run read-only tool ``name`` on ``tree``; anything else is an error result for the model."""
    if name == "list_files":
        return _list(store, tree)
    if name == "read_file":
        return _read(store, tree, arguments)
    return ToolResult(f"unknown tool {name!r}; use one of {', '.join(NAMES)}", True)
