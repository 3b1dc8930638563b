"""The deterministic workspace scan a digest starts from.

:func:`scan_tree` reads one stored tree (a snapshot's, or the tree a
hash-only scan of the live files made) and reports what a newcomer to the
workspace would look for first:

- the README's first heading and first paragraph (clipped);
- build, test and other commands found in ``pyproject.toml``, ``setup.cfg``,
  ``package.json`` scripts, ``Makefile`` targets and CI files
  (``.github/workflows/*``, ``.gitlab-ci.yml``, ``.ci/``);
- the layout: each top-level folder with the number of files below it;
- the languages, by file extension, with their file counts;
- entry points: console scripts, ``package.json`` ``bin``, ``__main__.py`` files.

The report is a function of the tree alone: paths are walked in the tree's
(sorted) order, every list is sorted, nothing depends on the clock, the
folder the files sit in or the order the file system lists them, so the same
tree gives the same bytes (:meth:`WorkspaceScan.to_bytes`). Only the few
files named above are read (at most :data:`READ_LIMIT` bytes each); the
rest is counted from the tree's entries. Because the tree is made by
Strata's own scan, ignored files (``.gitignore``, ``.strataignore``,
``.strata``, ``.git``) are never seen, let alone read.
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml

from strata.ids import ObjectId
from strata.schemas import fields_json
from strata.store.tree import walk_tree

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.store.objects import ObjectStore

SCAN_FORMAT = "strata-digest-scan"
SCAN_VERSION = 1
#: the most bytes read of any one file the scan looks into
READ_LIMIT = 256 * 1024
#: a README summary is clipped to this many characters
SUMMARY_LIMIT = 400
#: at most this many commands are kept per source file
COMMANDS_PER_FILE = 40
#: a command longer than this is clipped
COMMAND_LIMIT = 200

README_NAMES = ("readme.md", "readme.rst", "readme.txt", "readme", "readme.markdown")

#: file extension -> language (lower-case extensions; names without one are not counted)
LANGUAGES: dict[str, str] = {
    ".py": "Python",
    ".pyi": "Python",
    ".pyx": "Cython",
    ".js": "JavaScript",
    ".mjs": "JavaScript",
    ".cjs": "JavaScript",
    ".jsx": "JavaScript",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".go": "Go",
    ".rs": "Rust",
    ".java": "Java",
    ".kt": "Kotlin",
    ".scala": "Scala",
    ".c": "C",
    ".h": "C",
    ".cc": "C++",
    ".cpp": "C++",
    ".cxx": "C++",
    ".hpp": "C++",
    ".cs": "C#",
    ".rb": "Ruby",
    ".php": "PHP",
    ".swift": "Swift",
    ".m": "Objective-C",
    ".sh": "Shell",
    ".bash": "Shell",
    ".zsh": "Shell",
    ".ps1": "PowerShell",
    ".lua": "Lua",
    ".r": "R",
    ".jl": "Julia",
    ".hs": "Haskell",
    ".ex": "Elixir",
    ".exs": "Elixir",
    ".erl": "Erlang",
    ".clj": "Clojure",
    ".dart": "Dart",
    ".zig": "Zig",
    ".sql": "SQL",
    ".html": "HTML",
    ".htm": "HTML",
    ".css": "CSS",
    ".scss": "SCSS",
    ".vue": "Vue",
    ".svelte": "Svelte",
    ".md": "Markdown",
    ".markdown": "Markdown",
    ".rst": "reStructuredText",
    ".txt": "Text",
    ".toml": "TOML",
    ".yml": "YAML",
    ".yaml": "YAML",
    ".json": "JSON",
    ".xml": "XML",
    ".ini": "INI",
    ".cfg": "INI",
    ".tex": "TeX",
    ".ipynb": "Jupyter Notebook",
}

_TEST_NAMES = re.compile(r"(?i)(^|[:_-])(test|tests|check|pytest|spec|e2e|coverage|cov)($|[:_-])")
_BUILD_NAMES = re.compile(r"(?i)(^|[:_-])(build|compile|dist|package|bundle|wheel|sdist)($|[:_-])")
_LINT_NAMES = re.compile(
    r"(?i)(^|[:_-])(lint|format|fmt|typecheck|mypy|ruff|eslint|style)($|[:_-])"
)
_TEST_COMMANDS = re.compile(
    r"(?i)\b(pytest|tox|nox|unittest|jest|vitest|mocha|go test|cargo test|npm test"
    r"|make (?:-C \S+ )?(?:test|check))\b"
)
_BUILD_COMMANDS = re.compile(
    r"(?i)(\bpython3? -m build\b|\bcargo build\b|\bgo build\b|\btsc\b"
    r"|\bmake (?:-C \S+ )?build\b|\buv build\b)"
)
_MAKE_TARGET = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_./-]*)\s*:(?!=)")


@dataclass(frozen=True, order=True)
class Command:
    """A command the workspace names: where it was found, its name, what it runs, its kind."""

    source: str
    name: str
    command: str
    kind: str  # build | test | lint | run | other

    def to_json(self) -> dict[str, str]:
        """The command as JSON."""
        return fields_json(self)


@dataclass(frozen=True, order=True)
class EntryPoint:
    """A way in: a console script, a ``bin`` of package.json, a ``__main__.py``."""

    kind: str  # console_script | bin | main_module
    name: str
    target: str
    source: str

    def to_json(self) -> dict[str, str]:
        """The entry point as JSON."""
        return fields_json(self)


@dataclass
class WorkspaceScan:
    """What :func:`scan_tree` found; :meth:`to_bytes` is byte-stable for a tree."""

    tree: str
    files: int = 0
    readme: dict[str, str] | None = None
    commands: list[Command] = field(default_factory=list)
    layout: list[tuple[str, int]] = field(default_factory=list)  # (folder, files below it)
    top_level_files: int = 0
    languages: list[tuple[str, int]] = field(default_factory=list)
    entry_points: list[EntryPoint] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The scan as JSON."""
        return {
            "format": SCAN_FORMAT,
            "version": SCAN_VERSION,
            "tree": self.tree,
            "files": self.files,
            "readme": self.readme,
            "commands": [c.to_json() for c in self.commands],
            "layout": [{"path": p, "files": n} for p, n in self.layout],
            "top_level_files": self.top_level_files,
            "languages": [{"language": lang, "files": n} for lang, n in self.languages],
            "entry_points": [e.to_json() for e in self.entry_points],
            "warnings": list(self.warnings),
        }

    def to_bytes(self) -> bytes:
        """The canonical bytes of the scan (sorted keys, no spaces that vary)."""
        return json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False, indent=1).encode()

    def to_markdown(self) -> str:
        """The scan as the markdown the optimize prompt and ``digest scan`` show."""
        out: list[str] = []
        if self.readme is not None:
            out.append(f"README ({self.readme['path']}): {self.readme['title']}")
            if self.readme["summary"]:
                out.append("")
                out.append(self.readme["summary"])
            out.append("")
        out.append(f"Files: {self.files} ({self.top_level_files} at the top level)")
        if self.layout:
            out.append("")
            out.append("Layout:")
            out += [f"- {path}/ ({_files_word(n)})" for path, n in self.layout]
        if self.languages:
            out.append("")
            out.append("Languages:")
            out += [f"- {lang}: {_files_word(n)}" for lang, n in self.languages]
        if self.commands:
            out.append("")
            out.append("Commands:")
            out += [f"- [{c.kind}] {c.command}  ({c.source}: {c.name})" for c in self.commands]
        if self.entry_points:
            out.append("")
            out.append("Entry points:")
            out += [f"- {e.kind} {e.name} -> {e.target}  ({e.source})" for e in self.entry_points]
        if self.warnings:
            out.append("")
            out.append("Not read:")
            out += [f"- {w}" for w in self.warnings]
        return "\n".join(out) + "\n"


def _files_word(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


# -- reading the tree -------------------------------------------------------------------


@dataclass(frozen=True)
class _File:
    path: str
    oid: ObjectId
    size: int


def _files(store: ObjectStore, tree: ObjectId) -> Iterator[_File]:
    for path, entry in walk_tree(store, tree):
        if entry.kind == "file":
            yield _File(path, entry.oid, entry.size)


def _kind(name: str, command: str) -> str:
    """build, test, lint, run or other: by what the command runs, then by its name."""
    if _TEST_COMMANDS.search(command):
        return "test"
    if _BUILD_COMMANDS.search(command):
        return "build"
    if _TEST_NAMES.search(name):
        return "test"
    if _BUILD_NAMES.search(name):
        return "build"
    if _LINT_NAMES.search(name):
        return "lint"
    if re.search(r"(?i)(^|[:_-])(run|start|serve|dev)($|[:_-])", name):
        return "run"
    return "other"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _cmd(source: str, name: str, command: str) -> Command:
    command = _clip(command, COMMAND_LIMIT)
    return Command(source, name, command, _kind(name, command))


# -- README ---------------------------------------------------------------------------------

_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def readme_summary(path: str, text: str) -> dict[str, str]:
    """The README's first heading (title) and its first paragraph after it, clipped."""
    lines = text.replace("\r\n", "\n").split("\n")
    title = ""
    start = 0
    for i, line in enumerate(lines):
        m = _MD_HEADING.match(line)
        if m:
            title, start = m.group(1), i + 1
            break
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and _RST_UNDERLINE.match(nxt) and not _RST_UNDERLINE.match(line):
            title, start = line.strip(), i + 2
            break
        if (
            line.strip()
            and _RST_UNDERLINE.match(line)
            and _RST_UNDERLINE.match(lines[i + 2] if i + 2 < len(lines) else "")
        ):  # an over- and underlined rst title
            title, start = nxt.strip(), i + 3
            break
    paragraph: list[str] = []
    in_fence = False
    for line in lines[start:]:
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
            if paragraph:
                break
            continue
        if in_fence:
            continue
        if not stripped:
            if paragraph:
                break
            continue
        if not paragraph and (
            _MD_HEADING.match(line)
            or _RST_UNDERLINE.match(stripped)
            or stripped.startswith(("[![", "![", "<", "..", "|", ":", "---", "==="))
        ):
            continue
        if paragraph and _MD_HEADING.match(line):
            break
        paragraph.append(stripped)
    return {
        "path": path,
        "title": _clip(title, 120),
        "summary": _clip(" ".join(paragraph), SUMMARY_LIMIT),
    }


# -- configuration files --------------------------------------------------------------------


def _pyproject(path: str, text: str, found: _Found) -> None:
    data = tomllib.loads(text)
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    for kind, table in (("console_script", "scripts"), ("gui_script", "gui-scripts")):
        scripts = project.get(table) if isinstance(project, dict) else None
        if isinstance(scripts, dict):
            for name, target in scripts.items():
                found.entry(EntryPoint(kind, str(name), str(target), path))
    if isinstance(data.get("build-system"), dict):
        found.command(Command(path, "build-system", "python -m build", "build"))
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    assert isinstance(tool, dict)
    poetry = tool.get("poetry")
    if isinstance(poetry, dict) and isinstance(poetry.get("scripts"), dict):
        for name, target in poetry["scripts"].items():
            if isinstance(target, str):
                found.entry(EntryPoint("console_script", str(name), target, path))
    pytest_cfg = tool.get("pytest")
    if isinstance(pytest_cfg, dict) and "ini_options" in pytest_cfg:
        found.command(Command(path, "tool.pytest", "pytest", "test"))
    for section in ("ruff", "mypy", "black"):
        if section in tool:
            verb = {"ruff": "ruff check .", "mypy": "mypy", "black": "black --check ."}[section]
            found.command(Command(path, f"tool.{section}", verb, "lint"))
    tasks: list[tuple[str, Any]] = []
    poe = tool.get("poe")
    if isinstance(poe, dict) and isinstance(poe.get("tasks"), dict):
        tasks += [(f"poe {n}", t) for n, t in poe["tasks"].items()]
    pdm = tool.get("pdm")
    if isinstance(pdm, dict) and isinstance(pdm.get("scripts"), dict):
        tasks += [(f"pdm run {n}", t) for n, t in pdm["scripts"].items()]
    hatch = tool.get("hatch")
    envs = hatch.get("envs") if isinstance(hatch, dict) else None
    if isinstance(envs, dict):
        for env, spec in envs.items():
            scripts = spec.get("scripts") if isinstance(spec, dict) else None
            if isinstance(scripts, dict):
                prefix = "hatch run " + ("" if env == "default" else f"{env}:")
                tasks += [(f"{prefix}{n}", t) for n, t in scripts.items()]
    for name, task in tasks:
        if isinstance(task, dict):
            task = task.get("cmd") or task.get("shell") or task.get("script") or ""
        if isinstance(task, list):
            task = " && ".join(str(t) for t in task)
        found.command(_cmd(path, str(name), str(task) or str(name)))


def _setup_cfg(path: str, text: str, found: _Found) -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    if parser.has_option("options.entry_points", "console_scripts"):
        for line in parser.get("options.entry_points", "console_scripts").splitlines():
            name, sep, target = line.partition("=")
            if sep and name.strip():
                found.entry(EntryPoint("console_script", name.strip(), target.strip(), path))
    if parser.has_section("tool:pytest"):
        found.command(Command(path, "tool:pytest", "pytest", "test"))
    if parser.has_section("flake8"):
        found.command(Command(path, "flake8", "flake8", "lint"))


def _package_json(path: str, text: str, found: _Found) -> None:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    scripts = data.get("scripts")
    if isinstance(scripts, dict):
        for name, command in scripts.items():
            if isinstance(command, str):
                call = "npm test" if name == "test" else f"npm run {name}"
                found.command(
                    Command(
                        path,
                        str(name),
                        _clip(f"{call}  # {command}", COMMAND_LIMIT),
                        _kind(str(name), command),
                    )
                )
    bin_ = data.get("bin")
    if isinstance(bin_, str):
        found.entry(
            EntryPoint("bin", str(data.get("name") or PurePosixPath(bin_).stem), bin_, path)
        )
    elif isinstance(bin_, dict):
        for name, target in bin_.items():
            found.entry(EntryPoint("bin", str(name), str(target), path))


def _makefile(path: str, text: str, found: _Found) -> None:
    folder = str(PurePosixPath(path).parent)
    make = "make" if folder == "." else f"make -C {folder}"
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith(("\t", " ", "#", ".")):
            continue
        m = _MAKE_TARGET.match(line)
        if m and "%" not in m.group(1) and "$" not in m.group(1):
            for target in m.group(1).split():
                found.command(_cmd(path, target, f"{make} {target}"))


def _steps(commands: Iterable[Any]) -> Iterator[str]:
    for run in commands:
        if isinstance(run, str):
            for line in run.strip().split("\n"):
                line = line.strip()
                if line and not line.startswith("#"):
                    yield line


#: libyaml's loader where PyYAML has it (ten times faster); both load the same data
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YAML_LOADER)  # a safe loader, C or Python


def _github_workflow(path: str, text: str, found: _Found) -> None:
    data = _yaml(text)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        return
    for job_name, job in jobs.items():
        steps = job.get("steps") if isinstance(job, dict) else None
        if not isinstance(steps, list):
            continue
        runs = [s.get("run") for s in steps if isinstance(s, dict)]
        for command in _steps(runs):
            found.command(_cmd(path, str(job_name), command))


def _gitlab_ci(path: str, text: str, found: _Found) -> None:
    data = _yaml(text)
    if not isinstance(data, dict):
        return
    for job_name, job in data.items():
        if not isinstance(job, dict) or str(job_name).startswith("."):
            continue
        script = job.get("script")
        lines = script if isinstance(script, list) else [script]
        for command in _steps(lines):
            found.command(_cmd(path, str(job_name), command))


def _ci_script(path: str, text: str, found: _Found) -> None:
    name = PurePosixPath(path).name
    found.command(_cmd(path, name, f"./{path}"))


@dataclass
class _Found:
    commands: list[Command] = field(default_factory=list)
    entries: list[EntryPoint] = field(default_factory=list)
    per_file: Counter[str] = field(default_factory=Counter)

    def command(self, command: Command) -> None:
        if self.per_file[command.source] < COMMANDS_PER_FILE:
            self.per_file[command.source] += 1
            self.commands.append(command)

    def entry(self, entry: EntryPoint) -> None:
        self.entries.append(entry)


Reader = Callable[[str, str, _Found], None]


def _reader_for(path: str) -> Reader | None:
    """How a file that names commands is read (None: the scan does not read it)."""
    pure = PurePosixPath(path)
    name = pure.name
    depth = len(pure.parts)
    if depth == 1:
        if name == "pyproject.toml":
            return _pyproject
        if name == "setup.cfg":
            return _setup_cfg
        if name == "package.json":
            return _package_json
        if name in ("Makefile", "makefile", "GNUmakefile"):
            return _makefile
        if name == ".gitlab-ci.yml":
            return _gitlab_ci
    if path.startswith(".github/workflows/") and depth == 3 and name.endswith((".yml", ".yaml")):
        return _github_workflow
    if path.startswith(".ci/") and depth == 2:
        return _ci_script
    return None


# -- the scan ---------------------------------------------------------------------------


def scan_tree(store: ObjectStore, tree: ObjectId) -> WorkspaceScan:
    """Scan a stored tree (see the module doc); reads only README, config and CI files."""
    result = WorkspaceScan(tree=str(tree))
    layout: Counter[str] = Counter()
    languages: Counter[str] = Counter()
    found = _Found()
    readme: _File | None = None
    readme_rank = len(README_NAMES)
    mains: list[EntryPoint] = []
    for f in _files(store, tree):
        result.files += 1
        pure = PurePosixPath(f.path)
        if len(pure.parts) == 1:
            result.top_level_files += 1
            lower = pure.name.lower()
            if lower in README_NAMES and README_NAMES.index(lower) < readme_rank:
                readme, readme_rank = f, README_NAMES.index(lower)
        else:
            layout[pure.parts[0]] += 1
        lang = LANGUAGES.get(pure.suffix.lower())
        if lang is not None:
            languages[lang] += 1
        if pure.name == "__main__.py":
            module = ".".join(pure.parts[:-1])
            for prefix in ("src.", "lib."):
                module = module.removeprefix(prefix)
            mains.append(
                EntryPoint("main_module", module or "__main__", f"python -m {module}", f.path)
            )
        reader = _reader_for(f.path)
        if reader is not None:
            text = _read(store, f, result.warnings)
            if text is not None:
                try:
                    reader(f.path, text, found)
                except (ValueError, TypeError, KeyError, yaml.YAMLError, configparser.Error) as exc:
                    result.warnings.append(f"{f.path}: cannot be parsed ({_first_line(exc)})")
    if readme is not None:
        text = _read(store, readme, result.warnings)
        if text is not None:
            result.readme = readme_summary(readme.path, text)
    result.layout = sorted(layout.items())
    result.languages = sorted(languages.items(), key=lambda kv: (-kv[1], kv[0]))
    result.commands = sorted(set(found.commands), key=_command_order)
    result.entry_points = sorted(set(found.entries + mains))
    result.warnings.sort()
    return result


_KIND_ORDER = {"build": 0, "test": 1, "lint": 2, "run": 3, "other": 4}


def _command_order(c: Command) -> tuple[int, str, str, str]:
    return (_KIND_ORDER.get(c.kind, 9), c.source, c.name, c.command)


_AT_LINE = re.compile(r"\bat line (\d+)")


def _first_line(exc: BaseException) -> str:
    """What a parse error says in the scan: its kind and line, worded the same by every version.

    The parsers' own messages change between Python and library versions; the
    scan's bytes must not (a replay compares them).
    """
    if isinstance(exc, yaml.YAMLError):  # libyaml and PyYAML word their messages differently
        mark = getattr(exc, "problem_mark", None)
        return f"YAML error at line {mark.line + 1}" if mark is not None else "YAML error"
    if isinstance(exc, json.JSONDecodeError):
        return f"JSON error at line {exc.lineno}"
    if isinstance(exc, tomllib.TOMLDecodeError):
        found = _AT_LINE.search(str(exc))
        return f"TOML error at line {found.group(1)}" if found else "TOML error"
    if isinstance(exc, configparser.Error):
        return "INI error"
    text = str(exc).strip().split("\n")[0]
    return text[:120] or type(exc).__name__


def _read(store: ObjectStore, f: _File, warnings: list[str]) -> str | None:
    if f.size > READ_LIMIT:
        warnings.append(f"{f.path}: larger than {READ_LIMIT // 1024} KiB, not read")
        return None
    data = store.get(f.oid)
    if b"\0" in data[:8192]:
        warnings.append(f"{f.path}: binary, not read")
        return None
    return data.decode("utf-8", "replace")


def scan_workspace(core: Core) -> WorkspaceScan:
    """Scan Published's files as they are now (a hash-only scan: nothing is stored)."""
    scan = core.workspace.scan(hash_only=True)
    return scan_tree(scan.store, scan.tree)
