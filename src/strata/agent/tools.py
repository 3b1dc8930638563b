"""The tools a step may call: named groups composed into one :class:`ToolSet` per use.

A :class:`Tool` is a specification (what the model is told) and a handler
``handler(folder, arguments) -> ToolResult`` run on one folder (the Draft's).
Tools come in named groups (:attr:`Tool.group`): ``files`` here (list, read,
write, edit), ``maps``/``tables`` in :mod:`strata.workshop.tools`,
``knowledge`` (retrieval and plans) in :mod:`strata.host.tools`. A use
composes the groups it wants into a :class:`ToolSet` (``strata agent``:
:data:`TOOLS`; the Workshop: :func:`strata.workshop.tools.workshop_tools`),
and the set is the one executor, :meth:`ToolSet.run`:

- an unknown tool, or one the set was not given, is an error result naming
  the tools there are;
- the arguments are checked against the tool's JSON schema (jsonschema; a
  property left out counts as null where the schema allows null), and a call
  that does not fit is an error result naming the problem;
- a tool's failure is its result, marked as an error, for the model to read
  (:func:`failure`: a missing file, text in no known encoding, a refused
  path, a parser failing on a corrupt document); it never ends the step;
- a result longer than :data:`RESULT_LIMIT` is cut with a marker (with
  ``recall``, the set keeps every full result and the marker names the
  ``recall_tool_result`` call that reads on).

Every path is a workspace path checked at the edge (:func:`tool_path`), and
every read and write goes through :class:`~strata.store.fsops.WorkspaceWriter`,
which never follows a symlink: a tool cannot reach outside the folder it is
given, whatever the model asks. Binary documents (xlsx, docx, pptx, pdf) are
never written as text. Tools are deterministic functions of the folder and
their arguments, so a replay that runs them again gets the same results.

Writes are bounded (:class:`WriteLimits`: the size of one file, the bytes
one turn may write; :func:`bounded` sets them for a turn, a default bound
holds otherwise) and never land on a symlink or a special file: a call that
would is refused with an error result saying why. A tool marked ``writes``
(``write_file``, ``edit_file``, the Workshop's ``table_export``) is one a
caller may open the Draft for (:func:`writes`); a call's folder may be a
function of the tool's name (:data:`Folder`), so a session reads Published
until its first write opens the Draft (:class:`strata.agent.loop.DraftOnWrite`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata import telemetry
from strata.documents.kinds import DOCUMENTS, OPAQUE_TYPES, detect_encoding, type_of
from strata.errors import StrataError
from strata.providers.base import ToolSpec
from strata.sandbox.paths import check_relative, is_internal
from strata.store.fsops import WorkspaceWriter

#: the most a tool result may hold; longer results are clipped with a marker
RESULT_LIMIT = 16_000
LIST_LIMIT = 500
#: the tool that reads a clipped result on (in a set made with ``recall``)
RECALL = "recall_tool_result"


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned: the text the model reads, and whether it is an error."""

    text: str
    is_error: bool = False


#: what runs a tool: ``handler(folder, arguments) -> ToolResult``
Handler = Callable[[Path, dict[str, Any]], ToolResult]


@dataclass(frozen=True)
class Tool:
    """One tool: its specification, its handler and the group it belongs to."""

    spec: ToolSpec
    handler: Handler
    group: str
    #: True for a tool that changes the folder's files
    writes: bool = False

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.spec.name


# -- the executor ----------------------------------------------------------------------------


def check_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The arguments checked against ``spec``'s schema (ValueError naming the first problem).

    A property left out counts as null where its schema allows null (a
    strict schema's optional property), so handlers read every property.
    """
    import jsonschema

    if not isinstance(arguments, dict):
        raise ValueError("the arguments must be a JSON object")
    schema = spec.parameters
    filled = {
        key: None
        for key, prop in (schema.get("properties") or {}).items()
        if key not in arguments and _nullable(prop)
    }
    filled.update(arguments)
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(filled), key=lambda e: list(e.path)
    )
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.path) or "arguments"
        raise ValueError(f"invalid {where}: {error.message}")
    return filled


def _nullable(prop: Any) -> bool:
    if not isinstance(prop, dict):
        return False
    kind = prop.get("type")
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


def failure(name: str, arguments: Mapping[str, Any], exc: Exception) -> ToolResult:
    """The error result of tool ``name`` failing with ``exc``: what the model reads."""
    path = arguments.get("path")
    if isinstance(exc, FileNotFoundError):
        return ToolResult(f"{name}: {path} does not exist", True)
    if isinstance(exc, UnicodeDecodeError):
        return ToolResult(f"{name}: {path} is not text in its encoding", True)
    if isinstance(exc, StrataError | ValueError | OSError):
        return ToolResult(f"{name}: {exc}", True)
    # a parser failing on a corrupt file: the model reads why
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return ToolResult(f"{name}: {path} could not be read ({what})", True)


def clip(text: str, limit: int = RESULT_LIMIT) -> str:
    """``text`` cut at ``limit`` characters, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"


_RECALL_SPEC = ToolSpec(
    RECALL,
    "The full text of an earlier tool result of this turn (1-based index, in call "
    "order), from a character offset: reads what a [truncated] marker left out.",
    {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "minimum": 1},
            "offset": {"type": ["integer", "null"], "minimum": 0},
        },
        "required": ["index", "offset"],
        "additionalProperties": False,
    },
)


class _Bound:
    """A tool's handler as its set hands it out: a call runs through the set's executor."""

    def __init__(self, owner: ToolSet, tool: Tool) -> None:
        self.owner = owner
        self.tool = tool

    def __call__(self, folder: Path, arguments: dict[str, Any]) -> ToolResult:
        return self.owner._execute(self.tool, folder, arguments)


class ToolSet(MutableMapping[str, tuple[ToolSpec, Handler]]):
    """Tools composed for one use, and the one executor of their calls (see the module doc).

    A mapping ``name -> (spec, handler)`` (each handler runs through
    :meth:`run`); setting an entry replaces that tool (in its group).
    ``recall`` adds ``recall_tool_result`` and keeps every full result of
    the set's calls (use one set per turn); ``only`` keeps
    the named tools of ``tools`` (an RPI phase's), whose other tools are
    then answered as unavailable.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        recall: bool = False,
        only: Iterable[str] | None = None,
    ) -> None:
        every = {t.name: t for t in tools}
        self.recall = recall
        if recall:
            every[RECALL] = Tool(_RECALL_SPEC, self._recall, "memory")
        self._known = tuple(every)
        wanted = set(every) if only is None else set(only)
        self._tools = {n: t for n, t in every.items() if n in wanted}
        #: the full text of each result, in call order (kept with ``recall``)
        self.results: list[str] = []

    def __getitem__(self, name: str) -> tuple[ToolSpec, Handler]:
        tool = self._tools[name]
        return tool.spec, _Bound(self, tool)

    def __setitem__(self, name: str, entry: tuple[ToolSpec, Handler]) -> None:
        spec, handler = entry
        if isinstance(handler, _Bound) and handler.owner is self:
            tool = Tool(spec, handler.tool.handler, handler.tool.group, handler.tool.writes)
        else:
            old = self._tools.get(name)
            tool = Tool(
                spec,
                handler,
                old.group if old is not None else "extra",
                old.writes if old is not None else False,
            )
        self._tools[name] = tool
        if name not in self._known:
            self._known += (name,)

    def __delitem__(self, name: str) -> None:
        del self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools' specifications, in a stable order."""
        return tuple(t.spec for t in self._tools.values())

    def groups(self) -> dict[str, tuple[str, ...]]:
        """The set's tool names by group."""
        out: dict[str, list[str]] = {}
        for tool in self._tools.values():
            out.setdefault(tool.group, []).append(tool.name)
        return {g: tuple(names) for g, names in out.items()}

    def run(self, folder: Path, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run tool ``name`` on ``folder``: unknown tools and failures are error results."""
        tool = self._tools.get(name)
        if tool is None:
            what = "unknown or unavailable tool" if name in self._known else "unknown tool"
            return self._kept(ToolResult(f"{what} {name!r}; use one of {', '.join(self)}", True))
        return self._execute(tool, folder, arguments)

    def _execute(self, tool: Tool, folder: Path, arguments: dict[str, Any]) -> ToolResult:
        try:
            with telemetry.span("strata.tool_call", {"strata.tool": tool.name}):
                result = tool.handler(folder, check_arguments(tool.spec, arguments))
        except Exception as exc:
            result = failure(tool.name, arguments if isinstance(arguments, dict) else {}, exc)
        return self._kept(result)

    def _kept(self, result: ToolResult) -> ToolResult:
        """The result as the model reads it: clipped (and kept whole, with ``recall``)."""
        if not self.recall:
            return ToolResult(clip(result.text), result.is_error)
        self.results.append(result.text)
        index = len(self.results)
        if len(result.text) > RESULT_LIMIT:
            more = len(result.text) - RESULT_LIMIT
            marker = (
                f"\n[truncated: {more} more characters; {RECALL} index={index} "
                f"offset={RESULT_LIMIT} reads on]"
            )
            return ToolResult(result.text[:RESULT_LIMIT] + marker, result.is_error)
        return result

    def _recall(self, folder: Path, args: dict[str, Any]) -> ToolResult:
        index = args["index"]
        offset = args["offset"] or 0
        if not 1 <= index <= len(self.results):
            return ToolResult(
                f"{RECALL}: no result {index}; this turn has {len(self.results)}", True
            )
        text = self.results[index - 1]
        if offset >= len(text) and text:
            return ToolResult(f"{RECALL}: result {index} has {len(text)} characters")
        return ToolResult(f"[result {index}, characters {offset}-]\n" + text[offset:])


#: where a call runs: a folder, or ``folder_for(tool name) -> folder`` (asked at each call)
Folder = Path | Callable[[str], Path]


def writes(tools: Mapping[str, tuple[ToolSpec, Handler]], name: str) -> bool:
    """True when tool ``name`` of ``tools`` changes files (an unknown tool: False).

    A set's tools say it themselves (:attr:`Tool.writes`), also when handed
    out as entries of a plain mapping (an RPI phase's); for any other handler
    the file tools' names decide.
    """
    entry = tools.get(name)
    if entry is None:
        return False
    handler = entry[1]
    if isinstance(handler, _Bound):
        return handler.tool.writes
    return name in ("write_file", "edit_file")


def call_tool(
    tools: Mapping[str, tuple[ToolSpec, Handler]],
    folder: Folder,
    name: str,
    arguments: dict[str, Any],
) -> ToolResult:
    """Run tool ``name`` of ``tools`` on ``folder``: :meth:`ToolSet.run` for a set, else alike.

    A ``folder`` that is a function is asked for the folder of this call (with
    the tool's name) first; if it fails, that is the call's error result.
    """
    if callable(folder):
        try:
            folder = folder(name)
        except StrataError as exc:
            return ToolResult(f"{name}: {exc}", True)
    if isinstance(tools, ToolSet):
        return tools.run(folder, name, arguments)
    entry = tools.get(name)
    if entry is None:
        return ToolResult(f"unknown tool {name!r}; use one of {', '.join(tools)}", True)
    try:
        return entry[1](folder, arguments)
    except Exception as exc:
        return failure(name, arguments, exc)


# -- the files group -------------------------------------------------------------------------


def tool_path(arguments: Mapping[str, Any], key: str = "path") -> str:
    """The checked workspace path of a call's ``key`` argument (ValueError when it is not)."""
    raw = arguments.get(key)
    if not isinstance(raw, str):
        raise ValueError(f"'{key}' must be a string")
    path = check_relative(raw.strip().removeprefix("./"))
    if is_internal(path):
        raise ValueError(f"{path} is inside .strata or .git, which tools may not touch")
    return path


def list_files(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Every file below the folder, sorted, one per line (``.strata``/``.git`` left out)."""
    found: list[str] = []
    root = str(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not is_internal(d))
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            found.append(name if rel == "." else f"{rel}/{name}")
    return listing(found)


def listing(paths: list[str]) -> ToolResult:
    """``list_files``' answer: the paths sorted, one per line, at most :data:`LIST_LIMIT`."""
    found = sorted(paths)
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
    return ToolResult(data.decode("utf-8", "replace"))


def writable(path: str) -> str:
    """``path``, or ValueError when it names a document or binary type that is never text."""
    kind = type_of(path)
    if kind in DOCUMENTS or kind in OPAQUE_TYPES:
        raise ValueError(f"{path} is a {kind} file; it cannot be written as text")
    return path


# -- bounds on writes --------------------------------------------------------------------------

#: the default bounds: one file at most 10 MiB, one turn at most 50 MiB written
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_TURN_BYTES = 50 * 1024 * 1024


@dataclass
class WriteLimits:
    """How much the edit tools may write: per file, and in all during one turn.

    ``written`` counts the bytes written so far under these limits (a turn's
    tools share one instance, see :func:`bounded`). Read from ``[edits]`` in
    ``config.toml`` by :meth:`from_config` (``max_file_bytes``, ``max_turn_bytes``).
    """

    max_file_bytes: int = MAX_FILE_BYTES
    max_turn_bytes: int = MAX_TURN_BYTES
    written: int = field(default=0, compare=False)

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> WriteLimits:
        """The limits ``[edits]`` of a parsed ``config.toml`` sets (defaults for the others).

        :class:`~strata.errors.UsageError` naming the key when one is not a positive integer.
        """
        from strata.errors import UsageError

        section = raw.get("edits") or {}
        values: dict[str, int] = {}
        for key, default in (
            ("max_file_bytes", MAX_FILE_BYTES),
            ("max_turn_bytes", MAX_TURN_BYTES),
        ):
            value = section.get(key, default) if isinstance(section, dict) else default
            if type(value) is not int or value < 1:
                raise UsageError(
                    f"[edits] {key} in config.toml must be a positive number of bytes, "
                    f"not {value!r}"
                )
            values[key] = value
        return cls(**values)

    def check(self, path: str, size: int) -> None:
        """Refuse (ValueError, the model reads why) a write of ``size`` bytes to ``path``."""
        if size > self.max_file_bytes:
            raise ValueError(
                f"refused: {path} would be {size} bytes, over the limit of "
                f"{self.max_file_bytes} bytes per file ([edits] max_file_bytes); write "
                "less, or split the content into several files"
            )
        if self.written + size > self.max_turn_bytes:
            raise ValueError(
                f"refused: writing {size} more bytes to {path} would pass this turn's "
                f"limit of {self.max_turn_bytes} bytes ({self.written} written so far; "
                "[edits] max_turn_bytes); finish the turn and continue in the next one"
            )

    def count(self, size: int) -> None:
        """Count ``size`` bytes written."""
        self.written += size


_LIMITS: contextvars.ContextVar[WriteLimits | None] = contextvars.ContextVar(
    "strata_write_limits", default=None
)


@contextlib.contextmanager
def bounded(limits: WriteLimits | None) -> Iterator[WriteLimits]:
    """Bound every edit tool's writes by ``limits`` (a new default one when None) meanwhile.

    One turn of a session runs inside one ``bounded``: its writes add up.
    """
    current = limits if limits is not None else WriteLimits()
    token = _LIMITS.set(current)
    try:
        yield current
    finally:
        _LIMITS.reset(token)


def write_limits() -> WriteLimits:
    """The limits in force (:func:`bounded`'s, else a default per-file bound, not counted)."""
    return _LIMITS.get() or WriteLimits()


def _regular_or_absent(writer: WorkspaceWriter, path: str) -> os.stat_result | None:
    """``path``'s lstat when it is a regular file, None when absent; else refused (ValueError)."""
    st = writer.lstat(path)
    if st is None or stat.S_ISREG(st.st_mode):
        return st
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(
            f"refused: {path} is a symlink; the edit tools never write through or over one"
        )
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"refused: {path} is a folder")
    raise ValueError(f"refused: {path} is a special file (a device, socket or pipe), not a file")


def write_bytes(folder: Path, path: str, data: bytes) -> None:
    """Create or replace ``path`` in ``folder`` (an existing file keeps its mode).

    Refused (ValueError) past the limits in force (:func:`write_limits`) or
    when a symlink or special file is at ``path``.
    """
    limits = write_limits()
    limits.check(path, len(data))
    with WorkspaceWriter(folder) as writer:
        st = _regular_or_absent(writer, path)
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        writer.write_file(path, data, mode=mode)
    limits.count(len(data))


def write_file(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Create or replace a text file with the given text."""
    path = writable(tool_path(arguments))
    data = str(arguments["content"]).encode()
    write_bytes(folder, path, data)
    return ToolResult(f"wrote {len(data)} bytes to {path}")


def edit_file(folder: Path, arguments: dict[str, Any]) -> ToolResult:
    """Replace the one exact occurrence of ``old`` in a text file with ``new``, in its encoding."""
    path = writable(tool_path(arguments))
    old, new = str(arguments["old"]), str(arguments["new"])
    if not old:
        raise ValueError("'old' must not be empty")
    limits = write_limits()
    with WorkspaceWriter(folder) as writer:
        st = _regular_or_absent(writer, path)
        if st is None:
            raise FileNotFoundError(path)
        data = writer.read_file(path)
        encoding = detect_encoding(data) or "utf-8"
        text = data.decode(encoding)
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times; make it unique"
            return ToolResult(f"edit_file {path}: the text to replace was {where}", True)
        content = text.replace(old, new).encode(encoding)
        limits.check(path, len(content))
        writer.write_file(path, content, mode=stat.S_IMODE(st.st_mode))
    limits.count(len(content))
    return ToolResult(f"edited {path}")


_PATH = {"type": "string", "description": "a path relative to the workspace root"}

#: the ``files`` group of ``strata agent``
FILES: tuple[Tool, ...] = (
    Tool(
        ToolSpec(
            "list_files",
            "List every file in the workspace, one path per line.",
            {"type": "object", "properties": {}, "required": []},
        ),
        list_files,
        "files",
    ),
    Tool(
        ToolSpec(
            "read_file",
            "Read a file's text.",
            {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
        ),
        read_file,
        "files",
    ),
    Tool(
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
        "files",
        writes=True,
    ),
    Tool(
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
        "files",
        writes=True,
    ),
)

#: the tools of ``strata agent``: the files group
TOOLS = ToolSet(FILES)


def specs() -> tuple[ToolSpec, ...]:
    """The tools' specifications, in a stable order."""
    return TOOLS.specs()
