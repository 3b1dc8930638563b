"""The capability registry: named operations a host can dispatch into a workspace.

:func:`run_capability` ``(core, kind, args)`` runs one capability and returns
a JSON-able dict. Three kinds exist (:data:`CAPABILITIES`):

``terminal_exec``
    ``{"command": "…"}`` (a shell string) or ``{"argv": [...]}``, plus
    ``timeout_s``, ``max_output``, ``cwd``: :meth:`strata.gateway.exec.Gateway.exec`,
    through the policy and the approval gate.
``docx`` (python-docx)
    ``{"action": "create", "path": "report.docx", "paragraphs": ["…"]}``,
    ``{"action": "append", "path": …, "paragraphs": [...]}``,
    ``{"action": "read", "path": …}`` → ``{"paragraphs": [...], "text": "…"}``.
``excel`` (openpyxl)
    ``{"action": "write", "path": "book.xlsx", "sheet": "Sheet1", "cells": {"A1": 3}}``
    (the book is made when missing), ``{"action": "read", "path": …, "sheet": …,
    "cells": ["A1", "B2"]}`` → ``{"cells": {...}}``; without ``cells``, every
    non-empty cell of the sheet.

Paths are workspace paths (relative to its root, inside it, not in
``.strata`` or ``.git``, no symlink leading out). A ``docx``/``excel`` write
is a medium-risk change of a file in the workspace: it is recorded as a run
(snapshot before, diff after), so ``strata undo`` reverts it. An unknown kind
raises :class:`~strata.errors.UnsupportedCapability`
(``unsupported capability kind: X``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import PathOutsideWorkspace, UnsupportedCapability, UsageError

if TYPE_CHECKING:
    from strata.core import Core
    from strata.gateway.exec import Gateway

Capability = Callable[["Core", Mapping[str, Any], "Gateway | None"], dict[str, Any]]


def run_capability(
    core: Core,
    kind: str,
    args: Mapping[str, Any],
    *,
    gateway: Gateway | None = None,
) -> dict[str, Any]:
    """Run capability ``kind`` with ``args`` in ``core``'s workspace; what it returned.

    ``gateway`` is used by ``terminal_exec`` (default: a new one with no
    approver, so a command that needs approval is denied).
    """
    handler = CAPABILITIES.get(kind)
    if handler is None:
        raise UnsupportedCapability(kind, tuple(CAPABILITIES))
    if not isinstance(args, Mapping):
        raise UsageError(f"the arguments of {kind} must be an object")
    return handler(core, args, gateway)


def _terminal_exec(core: Core, args: Mapping[str, Any], gateway: Gateway | None) -> dict[str, Any]:
    from strata.gateway.exec import DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT_S, Gateway

    command: str | list[str]
    if isinstance(args.get("command"), str):
        command = args["command"]
    elif isinstance(args.get("argv"), list) and all(isinstance(a, str) for a in args["argv"]):
        command = list(args["argv"])
    else:
        raise UsageError('terminal_exec needs "command" (a string) or "argv" (a list of strings)')
    gw = gateway or Gateway(core)
    result = gw.exec(
        command,
        timeout_s=float(args.get("timeout_s", DEFAULT_TIMEOUT_S)),
        max_output=int(args.get("max_output", DEFAULT_MAX_OUTPUT)),
        cwd=args.get("cwd"),
    )
    return result.to_json()


def _path(core: Core, args: Mapping[str, Any], suffixes: tuple[str, ...]) -> tuple[str, Path]:
    raw = args.get("path")
    if not isinstance(raw, str) or not raw:
        raise UsageError('give "path": a file of the workspace')
    from strata.sandbox.paths import is_internal, workspace_relative

    rel = workspace_relative(raw, cwd=core.root, root=core.root)
    if not rel or is_internal(rel):
        raise PathOutsideWorkspace(raw)
    # a symlink on the way must not lead the write out of the workspace
    if not (core.root / rel).resolve().is_relative_to(core.root.resolve()):
        raise PathOutsideWorkspace(raw)
    if not rel.lower().endswith(suffixes):
        raise UsageError(f"{raw} is not a {' or '.join(suffixes)} file")
    return rel, core.root / rel


def _recorded(core: Core, rel: str, label: str, write: Callable[[], None]) -> dict[str, Any]:
    """Run ``write`` as a recorded run: a snapshot before, the diff after."""
    from strata.runs.flow import execute_run

    result = execute_run(core, write, label=label)
    result.raise_error()
    diff = result.workspace.diff if result.workspace else {}
    return {
        "path": rel,
        "run_id": result.run_id,
        "changed_paths": list(diff.get("changed_paths", [])),
    }


def _docx(core: Core, args: Mapping[str, Any], gateway: Gateway | None) -> dict[str, Any]:
    from strata.documents.writers import docx_add, docx_read

    action = args.get("action")
    rel, path = _path(core, args, (".docx",))
    if action == "read":
        if not path.is_file():
            raise UsageError(f"{rel} does not exist")
        paragraphs = docx_read(path)
        return {"path": rel, "paragraphs": paragraphs, "text": "\n".join(paragraphs)}
    paragraphs = args.get("paragraphs", [])
    if not isinstance(paragraphs, list) or not all(isinstance(p, str) for p in paragraphs):
        raise UsageError('"paragraphs" must be a list of strings')
    if action == "create":
        if path.exists():
            raise UsageError(f"{rel} exists already (append to it, or choose another path)")
    elif action == "append":
        if not path.is_file():
            raise UsageError(f"{rel} does not exist (create it first)")
    else:
        raise UsageError(f"unknown docx action {action!r}; use create, append or read")
    return _recorded(core, rel, f"docx {action} {rel}", lambda: docx_add(path, paragraphs))


def _excel(core: Core, args: Mapping[str, Any], gateway: Gateway | None) -> dict[str, Any]:
    from strata.documents.writers import xlsx_cells, xlsx_set

    action = args.get("action")
    rel, path = _path(core, args, (".xlsx", ".xlsm"))
    sheet = args.get("sheet")
    if sheet is not None and not isinstance(sheet, str):
        raise UsageError('"sheet" must be a sheet name')
    if action == "read":
        if not path.is_file():
            raise UsageError(f"{rel} does not exist")
        wanted = args.get("cells")
        if wanted is not None and not (
            isinstance(wanted, list) and all(isinstance(c, str) for c in wanted)
        ):
            raise UsageError('"cells" must be a list of cell names such as "A1"')
        try:
            title, cells = xlsx_cells(path, sheet, wanted)
        except ValueError as exc:
            raise UsageError(f"{rel} {exc}") from None
        return {"path": rel, "sheet": title, "cells": _jsonable(cells)}
    if action == "write":
        values = args.get("cells")
        if not isinstance(values, Mapping) or not values:
            raise UsageError('"cells" must map cell names to values, e.g. {"A1": 3}')
        for name, value in values.items():
            if not isinstance(value, str | int | float | bool) and value is not None:
                raise UsageError(f"cell {name}: {type(value).__name__} is not a cell value")
        return _recorded(core, rel, f"excel write {rel}", lambda: xlsx_set(path, values, sheet))
    raise UsageError(f"unknown excel action {action!r}; use write or read")


def _jsonable(cells: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in cells.items():
        out[name] = (
            value if isinstance(value, str | int | float | bool) or value is None else str(value)
        )
    return out


CAPABILITIES: dict[str, Capability] = {
    "terminal_exec": _terminal_exec,
    "docx": _docx,
    "excel": _excel,
}
"""The registered capabilities, by kind."""
