"""The layers of docs/architecture.md, enforced on the source: data flows one way.

:func:`problems` reads module sources (the real ``src/strata``, or a few
made-up modules that show it failing) and reports:

- an import of a higher layer (function-level and ``TYPE_CHECKING`` imports
  count too);
- an import between ``store`` and ``ledger``, which sit side by side and
  must never know each other (``store`` knows bytes and trees, ``ledger``
  events and refs);
- an import loop, between modules or between packages
  (``scripts/import_graph.py`` finds them);
- a private name of another module: imported (``from m import _x``) or
  reached (``m._x``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import import_graph  # noqa: E402

# the lowest layer first; a module's layer is that of the longest prefix of its dotted name.
# A module may import its own layer and lower ones (never in a loop), never a higher one.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "strata._version",
            "strata._locate",  # where a workspace keeps its repository (os alone)
            "strata._walk",  # the C walk (native/walk.c)
            "strata._wire",  # the watcher's wire format, shared with the fast client
            "strata.errors",
            "strata.ids",
            "strata.atomic",
            "strata.redaction",  # secrets kept out of what Strata writes
            "strata.schemas",
            "strata.telemetry",  # spans, a no-op unless a front end starts the export
        ),
    ),
    # store and ledger side by side, never importing each other (see SEPARATE)
    (
        "plumbing",
        (
            "strata.sandbox",
            "strata.store",
            "strata.ledger",
            "strata.diff",
            "strata.layout",
            "strata.semantic",  # pure semantic diff handlers
            "strata.documents",  # what a file is; DOCX, PDF, XLSX, PPTX readers
        ),
    ),
    ("above the store", ("strata.watch", "strata.merge")),  # the watcher; tree merges
    ("core", ("strata.core",)),
    ("model providers", ("strata.providers",)),
    (
        "runs, Draft, gateway",
        ("strata.runs", "strata.workbench", "strata.gateway", "strata.changes"),
    ),
    ("sync", ("strata.sync",)),  # Git sync and audit bundles
    ("agents", ("strata.agent", "strata.kb", "strata.digest", "strata.host")),
    ("Workshop, replay", ("strata.workshop", "strata.replay")),
    ("facade", ("strata.repo", "strata.aio", "strata")),
    # the front ends: the fast client of a watcher, then the integrations (the MCP server,
    # agent hooks, the model proxy) and the web UI, then the command line that wraps them
    ("fast client", ("strata._resident",)),
    ("integrations", ("strata.integrations", "strata.studio")),
    ("command line", ("strata.cli",)),
    ("entry", ("strata._entry", "strata.__main__")),
]

#: packages of one layer that must not import each other, in either direction
SEPARATE = [("strata.store", "strata.ledger")]


def rank(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (-1: none)."""
    best = -1
    best_len = -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def problems(sources: Mapping[str, str]) -> list[str]:
    """Every breach of the rules above, one line each (``sources``: path -> text)."""
    edges = import_graph.imports(sources)
    known = {import_graph.module_name(path) for path in sources}
    found: list[str] = []
    for edge in edges:
        where = f"{edge.source}:{edge.line}"
        mine, theirs = rank(edge.source), rank(edge.target)
        if theirs > mine:
            found.append(
                f"{where}: {LAYERS[mine][0]} module imports {edge.target} ({LAYERS[theirs][0]})"
            )
        for a, b in SEPARATE:
            for x, y in ((a, b), (b, a)):
                if _under(edge.source, x) and _under(edge.target, y):
                    found.append(f"{where}: {x} imports {edge.target} ({y} is not its to know)")
        for name in edge.names:
            private = name.startswith("_") and not name.startswith("__")
            if private and edge.target != edge.source and f"{edge.target}.{name}" not in known:
                found.append(f"{where}: imports the private name {name} of {edge.target}")
    found += import_graph.describe_loops(edges)
    for path, text in sources.items():
        found += [f"{path}:{line}: uses .{name}" for line, name in _private_uses(text)]
    return found


#: names with a leading underscore that their module documents as public
DOCUMENTED = {("os", "_exit"), ("sys", "_getframe")}


def _private_uses(text: str) -> list[tuple[int, str]]:
    """``x._name`` where ``_name`` is not defined in the module itself (nor on self/cls)."""
    tree = ast.parse(text)
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
    used = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if isinstance(node.value, ast.Name) and (node.value.id, name) in DOCUMENTED:
            continue
        used.append((node.lineno, name))
    return used


def test_every_module_has_a_layer() -> None:
    modules = [import_graph.module_name(path) for path in import_graph.read_sources()]
    assert [m for m in modules if rank(m) < 0] == []


def test_the_source_keeps_every_rule() -> None:
    assert problems(import_graph.read_sources()) == []


# -- the checker fails on each fault -------------------------------------------------------

#: a made-up house that keeps every rule: a provider, an agent above it, the store, the ledger
CLEAN = {
    "strata/__init__.py": "",
    "strata/errors.py": "class StrataError(Exception):\n    pass\n",
    "strata/store/__init__.py": "",
    "strata/store/objects.py": "from strata.errors import StrataError\n",
    "strata/ledger/__init__.py": "",
    "strata/ledger/records.py": "from strata import errors\n",
    "strata/providers/__init__.py": "",
    "strata/providers/base.py": "_secret = 1\nPUBLIC = _secret\n",
    "strata/agent/__init__.py": "",
    "strata/agent/loop.py": (
        "from strata.providers.base import PUBLIC\n"
        "def run():\n"
        "    from strata.agent import tools\n"
        "    return tools.call(PUBLIC)\n"
    ),
    "strata/agent/tools.py": "def call(x):\n    return x\n",
    "strata/kb/__init__.py": "",
    "strata/kb/base.py": "from strata.agent.loop import run\n",
    "strata/digest/__init__.py": "",
    "strata/digest/scan.py": "import strata.store.objects\n",
}

FAULTS = {
    "an upward import between feature packages": (
        "strata/providers/base.py",
        "from strata.agent.loop import run\n",
        "model providers module imports strata.agent.loop (agents)",
    ),
    "an upward import under TYPE_CHECKING": (
        "strata/store/objects.py",
        "import typing\nif typing.TYPE_CHECKING:\n    from strata.providers import base\n",
        "plumbing module imports strata.providers.base (model providers)",
    ),
    "store imports ledger": (
        "strata/store/objects.py",
        "def load():\n    from strata.ledger.records import Record\n",
        "strata.store imports strata.ledger.records",
    ),
    "ledger imports store": (
        "strata/ledger/records.py",
        "import strata.store.objects\n",
        "strata.ledger imports strata.store.objects",
    ),
    "a private name imported": (
        "strata/agent/loop.py",
        "from strata.providers.base import _secret\n",
        "imports the private name _secret of strata.providers.base",
    ),
    "a private name reached": (
        "strata/agent/loop.py",
        "from strata.providers import base\nx = base._secret\n",
        "uses ._secret",
    ),
    "a loop between modules through a function-level import": (
        "strata/agent/tools.py",
        "def call(x):\n    from strata.agent.loop import run\n    return run\n",
        "module loop: strata.agent.loop <-> strata.agent.tools",
    ),
    "a loop between packages of one layer": (
        "strata/agent/tools.py",
        "def call(x):\n    from strata.kb import base\n",
        "package loop: strata.agent <-> strata.kb",
    ),
}


def test_the_made_up_house_keeps_every_rule() -> None:
    assert problems(CLEAN) == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_found(fault: str) -> None:
    path, text, expected = FAULTS[fault]
    found = problems({**CLEAN, path: CLEAN[path] + text})
    assert found, fault
    assert any(expected in line for line in found), found


def test_faults_added_at_once_are_each_found() -> None:
    house = dict(CLEAN)
    for name in ("an upward import between feature packages", "a private name imported"):
        path, text, _ = FAULTS[name]
        house[path] += text
    house["strata/store/objects.py"] += "import strata.ledger.records\n"
    found = "\n".join(problems(house))
    assert "imports strata.agent.loop (agents)" in found
    assert "strata.store imports strata.ledger.records" in found
    assert "imports the private name _secret" in found
    assert "module loop: strata.agent.loop <-> strata.providers.base" in found


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        ("strata.store.scan", "strata.core", False),
        ("strata.core.core", "strata.runs.flow", False),
        ("strata.runs.flow", "strata.repo", False),
        ("strata.providers.base", "strata.agent.loop", False),
        ("strata.agent.loop", "strata.workshop.session", False),
        ("strata.workbench.draft", "strata.merge.three_way", True),
        ("strata.cli.record", "strata.repo", True),
        ("strata.workbench.draft", "strata.core", True),
        ("strata.replay.preflight", "strata.workbench.publish", True),
    ],
)
def test_the_rule_itself(module: str, name: str, expected: bool) -> None:
    """The layer ranks say what the architecture says (so the tests above can fail)."""
    assert (rank(name) <= rank(module)) is expected
