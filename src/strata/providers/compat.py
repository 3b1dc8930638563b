"""The compatibility flow: a model without tool calling still edits the Draft.

Seed 000's second Workshop path. A model (or a server) that cannot call tools
is asked for a streamed reply followed by a *proposal*: one JSON object in a
fenced ```json block, in a strict schema (:data:`PROPOSAL_SCHEMA`)::

    {"no_changes": false,
     "files": [{"path": "notes/todo.md", "content": "...", "summary": "..."}]}

Files are created or replaced whole; nothing is deleted. The proposal is
validated before anything is applied (:func:`parse_proposal`): a schema
violation, an absolute path, ``..``, a path into ``.strata``, a duplicate
path or an oversized file refuses the whole proposal with
:class:`~strata.errors.ProposalRefused`, and the turn fails with nothing
written and no Draft opened.

:class:`CompatProvider` wraps the provider that cannot call tools and speaks
the agent loop's language: to the loop it answers with ``write_file`` tool
calls, one per proposed file, so the proposal is applied by the same tools
(the Draft opened at the first write, the write limits, a revision per step)
and the recorded model call *is* the proposal: a replay serves the same
calls back and rewrites the same bytes, offline. After the writes, the loop's
next call is answered without the model (the reply already said what it did).

A step whose tools cannot write (an RPI turn's research and plan phases) is
asked without tools too, told it may not change files, and its whole
answer is its text: no proposal is asked of it or read from it (a fenced
block in its notes is prose; a proposal it makes anyway is not applied).

Which providers use it: ``tools = "none"`` in ``[providers.NAME]`` always;
``tools = "auto"`` when the server refuses a request because of its tools
(HTTP 4xx naming tools), from that call on; with ``native`` (the default), a
Workshop turn (plain or RPI) whose server refuses tools before its first
step is asked again through the flow (:func:`fallback`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from strata.errors import ProposalRefused, ProviderError
from strata.providers.base import (
    CancelToken,
    Finished,
    Message,
    Provider,
    Request,
    Response,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
)

#: values of ``tools`` in a ``[providers.NAME]`` table
TOOL_MODES: tuple[str, ...] = ("native", "none", "auto")

#: the largest file a proposal may write (the write limits of ``[edits]`` apply too)
MAX_FILE_BYTES = 1024 * 1024
#: the most files one proposal may write
MAX_FILES = 64

PROPOSAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "no_changes": {"type": "boolean"},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "summary": {"type": ["string", "null"]},
                },
                "required": ["path", "content", "summary"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["no_changes", "files"],
    "additionalProperties": False,
}

READ_ONLY = (
    "You cannot call tools and may not change files in this step. Answer in plain prose "
    "from what you are given; do not propose file contents."
)

INSTRUCTIONS = (
    "You cannot call tools. Answer the user in plain prose. If the request needs files "
    "created or changed, end your answer with exactly one fenced ```json block holding a "
    "proposal in this JSON schema:\n"
    + json.dumps(PROPOSAL_SCHEMA, sort_keys=True)
    + "\nEach entry of files is a whole file (path relative to the workspace root, its "
    "complete new content, a one-line summary). Nothing is deleted. When no file must "
    'change, write {"no_changes": true, "files": []} or no block at all.'
)

_FENCE = "```"
_BLOCK = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n?```", re.DOTALL)
_TOOLS_REFUSED = re.compile(r"HTTP 4\d\d\b.*\btool", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class ProposedFile:
    """One file of a proposal: where, its whole new content, what changed."""

    path: str
    content: str
    summary: str | None

    def to_json(self) -> dict[str, Any]:
        """The file as recorded with the turn (its content as a SHA-256 and a size)."""
        data = self.content.encode()
        return {
            "path": self.path,
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "summary": self.summary,
        }


@dataclass(frozen=True)
class Proposal:
    """A validated changeset: the reply's prose and the files to write."""

    reply: str
    files: tuple[ProposedFile, ...]

    @property
    def no_changes(self) -> bool:
        """True when the proposal writes nothing."""
        return not self.files

    @property
    def id(self) -> str:
        """A stable id: the hash of the files (same proposal, same id)."""
        body = json.dumps(
            [[f.path, f.content] for f in self.files], sort_keys=True, ensure_ascii=False
        )
        return "prop_" + hashlib.sha256(body.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The proposal as the turn records it (``data.proposal`` of the answer)."""
        return {
            "proposal_id": self.id,
            "no_changes": self.no_changes,
            "files": [f.to_json() for f in self.files],
        }


def check_path(path: str) -> str:
    """``path`` if a proposal may write it (relative, inside, not ``.strata``), else refused."""
    if not path or "\x00" in path or "\\" in path:
        raise ProposalRefused(f"path {path!r} is not a plain relative path")
    pure = PurePosixPath(path)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", path):
        raise ProposalRefused(f"path {path!r} is absolute: proposals write inside the workspace")
    parts = [p for p in pure.parts if p != "."]
    if not parts or ".." in parts:
        raise ProposalRefused(f"path {path!r} is outside the workspace")
    if parts[0] == ".strata":
        raise ProposalRefused(f"path {path!r} is inside .strata, which no proposal may write")
    return "/".join(parts)


def _reply_and_block(text: str) -> tuple[str, str | None]:
    """The prose before the first fence and the last fenced block (None: no proposal)."""
    cut = text.find(_FENCE)
    if cut < 0:
        stripped = text.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            return "", stripped  # the whole answer is the proposal
        return text.strip(), None
    blocks = _BLOCK.findall(text)
    if not blocks:
        raise ProposalRefused("the proposal's ```json block is not closed (cut off?)")
    return text[:cut].strip(), str(blocks[-1])


def parse_proposal(text: str) -> Proposal:
    """The proposal ``text`` (a model's whole answer) holds, validated; none: no changes.

    Raises :class:`~strata.errors.ProposalRefused` naming the first problem.
    """
    reply, block = _reply_and_block(text)
    if block is None:
        return Proposal(reply, ())
    try:
        raw = json.loads(block)
    except json.JSONDecodeError as exc:
        raise ProposalRefused(f"the proposal is not valid JSON ({exc.msg} at {exc.pos})") from exc
    problem = next(iter(_validator().iter_errors(raw)), None)
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "the proposal"
        raise ProposalRefused(f"{where} breaks the proposal schema: {problem.message}")
    files = raw["files"]
    if raw["no_changes"] and files:
        raise ProposalRefused("the proposal says no_changes but lists files")
    if len(files) > MAX_FILES:
        raise ProposalRefused(f"the proposal writes {len(files)} files (at most {MAX_FILES})")
    out: list[ProposedFile] = []
    seen: set[str] = set()
    for entry in files:
        path, content, summary = entry["path"], entry["content"], entry["summary"]
        clean = check_path(path)
        if clean in seen:
            raise ProposalRefused(f"the proposal writes {clean!r} twice")
        seen.add(clean)
        if len(content.encode()) > MAX_FILE_BYTES:
            raise ProposalRefused(
                f"the proposal's {clean!r} is larger than {MAX_FILE_BYTES // 1024} KiB"
            )
        out.append(ProposedFile(clean, content, summary))
    return Proposal(reply, tuple(out))


def _validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(PROPOSAL_SCHEMA)


def tools_refused(error: ProviderError) -> bool:
    """True when ``error`` is a server refusing a request because of its tools."""
    return type(error) is ProviderError and _TOOLS_REFUSED.search(str(error)) is not None


def plain_messages(request: Request, *, writes: bool = True) -> tuple[Message, ...]:
    """The request's messages for a model without tools: the instructions added, calls as text.

    ``writes`` False (a step whose tools cannot write) adds :data:`READ_ONLY`
    in place of the proposal's :data:`INSTRUCTIONS`.
    """
    instructions = INSTRUCTIONS if writes else READ_ONLY
    out: list[Message] = []
    for m in request.messages:
        if m.role == "tool":
            out.append(Message("user", f"[result of {m.name or 'a tool'}]\n{m.content}"))
        elif m.tool_calls:
            out.append(Message("assistant", m.content))
        else:
            out.append(m)
    if out and out[0].role == "system":
        out[0] = Message("system", out[0].content + "\n\n" + instructions)
    else:
        out.insert(0, Message("system", instructions))
    return tuple(out)


class CompatProvider:
    """``inner`` (a model without tool calling) answering the agent loop with proposals.

    ``mode`` is ``none`` (always the compatibility flow) or ``auto`` (the
    model's own tool calling until its server refuses tools). The last
    proposal is :attr:`proposal` (None until one is parsed), every one of
    them :attr:`proposals`. The inner provider's ``base_url``,
    ``max_tokens`` and ``context_window`` are its own, so the prompt is fitted
    to the model's context as the inner provider's would be.
    """

    def __init__(self, inner: Provider, *, mode: str = "none") -> None:
        if mode not in ("none", "auto"):
            raise ValueError(f"unknown tools mode {mode!r}")
        self.inner = inner
        self.name = inner.name
        self.adapter = inner.adapter
        self.model = inner.model
        self.base_url: str | None = getattr(inner, "base_url", None)
        self.max_tokens: int | None = getattr(inner, "max_tokens", None)
        self.context_window: int | None = getattr(inner, "context_window", None)
        self.active = mode == "none"
        self.proposals: list[Proposal] = []

    @property
    def proposal(self) -> Proposal | None:
        """The last proposal parsed (None: none yet)."""
        return self.proposals[-1] if self.proposals else None

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """The inner model's answer, its proposal turned into ``write_file`` calls."""
        writes = any(t.name == "write_file" for t in request.tools)
        if not request.tools:
            yield from self.inner.stream(request, cancel=cancel)
            return
        if not self.active:
            started = False
            try:
                for event in self.inner.stream(request, cancel=cancel):
                    started = True
                    yield event
                return
            except ProviderError as exc:
                if started or not tools_refused(exc):
                    raise
                self.active = True
        if request.has_tool_result():
            # the proposal's writes are done: the reply that proposed them is the answer, with
            # the writes the tools refused (a write bound), which a successful write never is
            last = max(i for i, m in enumerate(request.messages) if m.tool_calls or i == 0)
            said = request.messages[last].content if request.messages[last].tool_calls else ""
            refused = [
                m.content
                for m in request.messages[last + 1 :]
                if m.role == "tool" and not m.content.startswith("wrote ")
            ]
            note = "\n\nNot written:\n" + "\n".join(refused) if refused else ""
            if note:
                yield TextDelta(note)  # the reply itself streamed with the proposal
            yield Finished(Response(text=said + note, model=self.model))
            return
        if not writes:
            plain = plain_messages(request, writes=False)
            yield from self.inner.stream(
                replace(request, messages=plain, tools=(), tool_choice=None), cancel=cancel
            )
            return
        yield from self._propose(request, cancel=cancel)

    def _propose(self, request: Request, *, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        plain = Request(
            model=request.model,
            messages=plain_messages(request),
            reasoning_effort=request.reasoning_effort,
            max_output_tokens=request.max_output_tokens,
        )
        text: list[str] = []
        sent = 0
        final: Response | None = None
        for event in self.inner.stream(plain, cancel=cancel):
            if isinstance(event, TextDelta):
                text.append(event.text)
                whole = "".join(text)
                cut = whole.find(_FENCE)
                shown = whole[:cut] if cut >= 0 else whole.rstrip("`")
                if len(shown) > sent:  # the proposal itself is not streamed to the reader
                    yield TextDelta(shown[sent:])
                    sent = len(shown)
            elif isinstance(event, Finished):
                final = event.response
        if final is None:  # pragma: no cover - every provider ends with Finished
            raise ProviderError(self.name, "the answer ended without finishing")
        try:
            proposal = parse_proposal(final.text)
        except ProposalRefused as exc:
            if final.finish_reason == "length":
                raise ProposalRefused(
                    f"{exc.problem}; the answer reached its output limit (max_tokens)",
                    provider=self.name,
                ) from exc
            raise ProposalRefused(exc.problem, provider=self.name) from exc
        self.proposals.append(proposal)
        calls = tuple(
            ToolCall(
                f"call_{proposal.id}_{n}", "write_file", {"path": f.path, "content": f.content}
            )
            for n, f in enumerate(proposal.files, 1)
        )
        for call in calls:
            yield ToolCallEvent(call)
        yield Finished(
            Response(
                text=proposal.reply,
                tool_calls=calls,
                finish_reason="tool_calls" if calls else final.finish_reason,
                usage=final.usage,
                model=final.model,
            )
        )


def wrap(provider: Provider, mode: str) -> Provider:
    """``provider`` as configured: itself for ``native``, else in a :class:`CompatProvider`."""
    if mode == "native":
        return provider
    return CompatProvider(provider, mode=mode)


def fallback(provider: Provider, error: ProviderError) -> CompatProvider | None:
    """The compatibility flow for ``provider`` when ``error`` is its server refusing tools.

    None when the error is another one, or ``provider`` already answers through it.
    """
    if isinstance(provider, CompatProvider) or not tools_refused(error):
        return None
    return CompatProvider(provider, mode="none")


def proposal_data(provider: CompatProvider) -> dict[str, Any]:
    """What a turn records of the compatibility flow: that it ran, and the proposal's files."""
    out: dict[str, Any] = {"flow": "compatibility"}
    if provider.proposal is not None:
        out["proposal"] = provider.proposal.to_json()
    if len(provider.proposals) > 1:  # an RPI turn: one a plan item
        out["proposals"] = [p.to_json() for p in provider.proposals]
    return out
