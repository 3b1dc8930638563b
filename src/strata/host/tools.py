"""The host's tools: ``local_kb_retrieval`` and ``create_plan``, as strict JSON schemas.

The host model sees two tools (seed 001, decisions 1 and 2):

``local_kb_retrieval``
    ``{"query": "…", "k": N | null}``: the knowledge base's BM25 search
    (:meth:`strata.kb.KnowledgeBase.search`); the result lists the passages,
    each numbered across the whole run (``[1]``, ``[2]``…) with its citation
    ``path:start-end@snapshot``. The host may call it as often as it needs.
``create_plan``
    ``{"goal": "…", "tasks": [...]}``: a plan of capability tasks, dispatched
    in order through the gateway's registry
    (:func:`strata.gateway.run_capability`). A task is flat and strict: its
    ``kind`` (``terminal_exec``, ``docx``, ``excel``, or whatever the
    registry holds), a ``title`` in plain words, and the fields its kind
    reads (``command`` and ``timeout_s`` for ``terminal_exec``; ``action``,
    ``path``, ``paragraphs``, ``sheet``, ``cells`` for ``docx``/``excel``),
    the others null.

Both schemas are already strict in the sense of
:func:`strata.providers.profile.strict_schema` (every object closed, every
property required, optional ones nullable), so what the adapters send is
exactly what is written here. ``kind`` is a plain string, not an enum: an
unknown kind reaches the registry, whose ``unsupported capability kind: X``
comes back to the model as the task's error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from strata.errors import UsageError
from strata.providers.base import ToolSpec

KB_TOOL = "local_kb_retrieval"
PLAN_TOOL = "create_plan"
#: the most passages one retrieval returns
MAX_K = 20
DEFAULT_K = 5
#: what a task result keeps of a command's output, per stream (characters)
OUTPUT_LIMIT = 8_000
#: result keys the model is not shown: ids and timings differ from run to run, so a
#: request holding them would never replay
_VOLATILE = ("run_id", "tool_call_id", "duration_ms", "before_snapshot", "after_snapshot")


def _closed(properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _nullable(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], "description": description, **extra}


def task_schema() -> dict[str, Any]:
    """The strict schema of one plan task."""
    cell = _closed(
        {
            "cell": {"type": "string", "description": "a cell name such as A1"},
            "value": {
                "type": ["string", "number", "boolean", "null"],
                "description": "the value to write (null when reading)",
            },
        }
    )
    return _closed(
        {
            "kind": {
                "type": "string",
                "description": "the capability: terminal_exec, docx or excel",
            },
            "title": {"type": "string", "description": "what the task does, in plain words"},
            "command": _nullable(
                "string", "terminal_exec: the shell command, run in the workspace root"
            ),
            "timeout_s": _nullable("number", "terminal_exec: seconds before it is killed"),
            "action": _nullable("string", "docx: create, append or read; excel: write or read"),
            "path": _nullable("string", "docx/excel: the file, relative to the workspace"),
            "paragraphs": _nullable(
                "array", "docx create/append: the paragraphs", items={"type": "string"}
            ),
            "sheet": _nullable("string", "excel: the sheet name"),
            "cells": _nullable(
                "array", "excel: cells to write (with values) or to read", items=cell
            ),
        }
    )


def specs() -> tuple[ToolSpec, ...]:
    """The host's tools, in a stable order."""
    return (
        ToolSpec(
            KB_TOOL,
            "Search the workspace's local knowledge base (its documents and code). Returns "
            "numbered passages with citations; cite them as [n] in your answer. Call it again "
            "with other words until you have enough context.",
            _closed(
                {
                    "query": {"type": "string", "description": "the words to search for"},
                    "k": _nullable("integer", f"how many passages (default {DEFAULT_K})"),
                }
            ),
        ),
        ToolSpec(
            PLAN_TOOL,
            "Run a plan of capability tasks in the workspace, in order: terminal_exec runs a "
            "shell command through the policy and approval gate; docx and excel write or read "
            "documents. Every change is recorded and can be undone. Returns each task's "
            "outcome; a failed task stops the plan.",
            _closed(
                {
                    "goal": {"type": "string", "description": "what the plan achieves"},
                    "tasks": {"type": "array", "items": task_schema()},
                }
            ),
        ),
    )


def task_args(task: Mapping[str, Any]) -> dict[str, Any]:
    """The capability arguments of a plan task: its non-null fields but kind and title.

    ``cells`` (a list of ``{"cell", "value"}``) becomes the mapping ``excel``
    writes, or the list of names it reads.
    """
    args = {k: v for k, v in task.items() if k not in ("kind", "title") and v is not None}
    cells = args.get("cells")
    if isinstance(cells, list):
        if not all(isinstance(c, dict) and isinstance(c.get("cell"), str) for c in cells):
            raise UsageError('"cells" must be a list of {"cell": "A1", "value": …}')
        if args.get("action") == "read":
            args["cells"] = [c["cell"] for c in cells]
        else:
            args["cells"] = {c["cell"]: c.get("value") for c in cells}
    return args


def shown_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A capability's result as the model reads it: no ids or timings, output clipped."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key in _VOLATILE:
            continue
        if isinstance(value, str) and len(value) > OUTPUT_LIMIT:
            value = value[:OUTPUT_LIMIT] + f"\n[clipped: {len(value) - OUTPUT_LIMIT} more]"
        out[key] = value
    return out


def dumps(value: Any) -> str:
    """A tool result as stable JSON text (sorted keys)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def parse_k(raw: Any, *, default: int = DEFAULT_K) -> int:
    """The ``k`` of a retrieval call: ``default`` when null, capped at :data:`MAX_K`."""
    if raw is None:
        return min(default, MAX_K)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise UsageError('"k" must be a whole number of passages, 1 or more')
    return min(raw, MAX_K)


def plan_tasks(arguments: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The goal and the tasks of a ``create_plan`` call (UsageError when malformed)."""
    goal = arguments.get("goal") or ""
    tasks = arguments.get("tasks")
    if not isinstance(goal, str):
        raise UsageError('"goal" must be a string')
    if not isinstance(tasks, Sequence) or isinstance(tasks, str) or not tasks:
        raise UsageError('"tasks" must be a non-empty list of tasks')
    out: list[dict[str, Any]] = []
    for n, task in enumerate(tasks, start=1):
        if not isinstance(task, Mapping) or not isinstance(task.get("kind"), str):
            raise UsageError(f'task {n} has no "kind" (a capability name)')
        out.append(dict(task))
    return goal, out
