"""The layers of docs/architecture.md, enforced on the source: data flows one way.

A module may import modules of its own layer or of lower layers, never of a
higher one (function-level and ``TYPE_CHECKING`` imports count too), and no
module reaches into another module's private names (``x._name`` where
``_name`` is not defined in the module itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "strata"

# the lowest layer first; a module's layer is the first prefix that matches its dotted name
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "leaves",
        (
            "strata._version",
            "strata._locate",  # where a workspace keeps its repository (os alone)
            "strata._walk",  # the C walk (native/walk.c)
            "strata.errors",
            "strata.ids",
            "strata.atomic",
            "strata.redaction",  # secrets kept out of what Strata writes
            "strata.schemas",
            "strata.store",
            "strata.ledger",
            "strata.diff",
            "strata.merge",
            "strata.sandbox",
            "strata.layout",
            "strata.documents",  # what a file is; DOCX, PDF, XLSX, PPTX readers
        ),
    ),
    ("core", ("strata.core",)),
    (
        "features",
        (
            "strata.runs",
            "strata.workbench",
            "strata.replay",
            "strata.providers",
            "strata.agent",
            "strata.digest",  # the workspace digest
            "strata.workshop",  # issue 13
            "strata.gateway",  # the tool gateway
            "strata.kb",  # the knowledge base
            "strata.host",  # the host loop (seed 001)
        ),
    ),
    ("facade", ("strata.repo", "strata.aio", "strata")),
    (
        "front ends",
        (
            "strata.cli",
            "strata._resident",
            "strata._entry",
            "strata.__main__",
            "strata.integrations",  # the MCP server and agent hooks (issue 14)
        ),
    ),
]

# imports the watcher's serving path needs; each names why it may cross upward
EXCEPTIONS: set[tuple[str, str]] = set()


def rank(module: str) -> int:
    best = -1
    best_len = -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def imported(module: str, path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("strata")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name.startswith("strata"):
                found.append((node.lineno, name))
                # 'from strata.core import restore' imports the module strata.core.restore
                for alias in node.names:
                    sub = f"{name}.{alias.name}"
                    if (SRC.parent / Path(*sub.split("."))).with_suffix(".py").exists():
                        found.append((node.lineno, sub))
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m, _ in modules() if rank(m) < 0] == []


def test_no_module_imports_a_higher_layer() -> None:
    wrong = []
    for module, path in modules():
        mine = rank(module)
        for line, name in imported(module, path):
            theirs = rank(name)
            if theirs > mine and (module, name) not in EXCEPTIONS:
                wrong.append(
                    f"{path.relative_to(SRC.parent)}:{line}: {LAYERS[mine][0]} module "
                    f"{module} imports {name} ({LAYERS[theirs][0]})"
                )
    assert wrong == []


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_no_module_uses_another_modules_private_names() -> None:
    wrong = []
    for _module, path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _defined_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in own:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            wrong.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: .{name}")
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        ("strata.store.scan", "strata.core", False),
        ("strata.core.core", "strata.runs.flow", False),
        ("strata.runs.flow", "strata.repo", False),
        ("strata.cli.record", "strata.repo", True),
        ("strata.workbench.draft", "strata.core", True),
    ],
)
def test_the_rule_itself(module: str, name: str, expected: bool) -> None:
    """The layer ranks say what the architecture says (so the tests above can fail)."""
    assert (rank(name) <= rank(module)) is expected
