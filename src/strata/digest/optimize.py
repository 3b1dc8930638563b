"""``optimize``: a model condenses the workspace scan into the digest, recorded and replayable.

Seed 003's optimization prompt, assembled from Strata's prompt sections (a
sequence of ``(title, text)``): the **workspace section** (the deterministic
scan of :mod:`strata.digest.scan`, as markdown), the **digest section** (the
section key the answer is for; its current body is left out, so the prompt
is restricted to what the tree says), then the injected **Optimization
Goal** and **Expectations** sections and, when the caller gives them,
**Focus Areas**. Nothing of a user's task enters it: the digest is task
agnostic. The model may read files with two read-only tools,
``list_files`` and ``read_file`` (:mod:`strata.digest.tools`), which answer
from the scanned tree; the conversation goes on until an answer without a
tool call (at most :data:`MAX_CALLS` model calls).

The model's answer is parsed as structured output when it is a JSON object
holding the section key (``{"workspace-digest": "..."}``), else its text is
the digest. :func:`optimize` then persists it itself: always in the session's
slice, and with :attr:`Scope.GLOBAL` in the overrides store too (under the
tag). A GLOBAL call without a store or a tag is refused before anything is
scanned, recorded or asked of a model.

Recording follows every model call of Strata (:mod:`strata.providers.trace`):
Published's unrecorded work is auto-saved first (so the scanned tree is a
recorded one), the call's trace is stored, and an ``agent_step``
annotation anchored at that state event links it (``artifacts``) with what
the replay needs in ``data.digest`` (the step's own fields in ``data.step``;
earlier versions wrote a ``digest_optimize`` annotation, read alike).
:func:`replay_optimize` runs it again from a rebuilt tree: the same scan, the
same prompt, the recorded answer (no network), the same digest, or the first
difference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3

from strata.agent.step import STEP, LoopDetector, step_data, take_step
from strata.digest.scan import WorkspaceScan, scan_tree
from strata.digest.store import (
    DEFAULT_KEY,
    DEFAULT_SESSION,
    NAMESPACE,
    TITLE,
    DigestEntry,
    OverridesStore,
    Scope,
    SessionDigests,
    normalize_key,
    prompt_key_for,
)
from strata.digest.tools import run_tree_tool, tool_specs
from strata.errors import ProviderProtocolError, UsageError
from strata.ids import ObjectId
from strata.ledger.events import Author, Event, EventType
from strata.providers.base import Message, Provider, Request, Response
from strata.providers.trace import LLM_CALL, TOOL_CALL, Recorder, RecordingProvider, Trace

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.store.objects import ObjectStore

OPTIMIZE_SYSTEM = (
    "You write the workspace digest of a software workspace: a task-agnostic markdown summary "
    "that later prompts reuse instead of exploring the files again. Describe only what the "
    "workspace shows; never invent commands or files."
)
GOAL = "Focus on summarizing the workspace so future prompts can rely on a cached digest."
EXPECTATIONS = "List key files, configs, and workflows; avoid task-specific advice."
INSTRUCTIONS = (
    "Read the README and docs first, record the build and test commands, note the layout, "
    "the languages, the entry points and the tooling defaults (tests, linters, package "
    "managers, containers), and emit a markdown digest suitable for the {title} section. "
    'Answer with the digest\'s markdown only, or with a JSON object {{"{key}": "<markdown>"}}.'
)
#: the agent id an optimize call's trace carries
AGENT_ID = "digest"
#: the most model calls one optimization makes (each answer with tool calls asks again)
MAX_CALLS = 8
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)


def optimization_sections(
    scan: WorkspaceScan, *, key: str = DEFAULT_KEY, focus: str | None = None
) -> list[tuple[str, str]]:
    """The optimization prompt's sections, in order (see the module doc)."""
    key = normalize_key(key)
    sections = [
        ("Workspace", scan.to_markdown().rstrip()),
        (TITLE, f"Section key: `{key}`. This is the section your answer becomes."),
        ("Optimization Goal", GOAL),
        ("Expectations", EXPECTATIONS + "\n\n" + INSTRUCTIONS.format(title=TITLE, key=key)),
    ]
    if focus is not None and focus.strip():
        sections.append(("Focus Areas", focus.strip()))
    return sections


def optimization_request(
    scan: WorkspaceScan,
    *,
    model: str,
    key: str = DEFAULT_KEY,
    focus: str | None = None,
    input_budget: int | None = None,
) -> Request:
    """The first request of an optimization: the system prompt, the sections, the read-only tools.

    ``tool_choice`` is ``auto``: the model may answer at once from the scan,
    or read files first. ``input_budget`` keeps every call within the model's
    context (the files it reads pile up; :func:`strata.providers.window.fit_request`).
    """
    body = "\n\n".join(
        f"## {title}\n\n{text}" for title, text in optimization_sections(scan, key=key, focus=focus)
    )
    return Request(
        model=model,
        messages=(Message("system", OPTIMIZE_SYSTEM), Message("user", body + "\n")),
        tools=tool_specs(),
        tool_choice="auto",
        input_budget=input_budget,
    )


def converse(
    provider: Provider,
    request: Request,
    store: ObjectStore,
    tree: ObjectId,
    recorder: Recorder,
    *,
    max_calls: int = MAX_CALLS,
) -> Response:
    """Ask until the model answers without a tool call; its tool calls run on ``tree``.

    Each tool call is recorded with ``recorder`` (the model calls are, by a
    :class:`RecordingProvider` around ``provider``). The last of ``max_calls``
    calls, and the call after the loop detector's warning (the model
    repeating one tool call, :class:`strata.agent.step.LoopDetector`), is
    asked with ``tool_choice`` ``none``: the model must answer with the
    digest, so a small model that keeps listing files still ends with one.
    Raises :class:`ProviderProtocolError` when even that call answers with a
    tool call. Each call is one step of the step loop
    (:func:`strata.agent.step.take_step`).
    """
    messages = list(request.messages)
    loop = LoopDetector()
    answer_now = False
    for n in range(max_calls):
        last = answer_now or n == max_calls - 1
        ask = Request(
            model=request.model,
            messages=tuple(messages),
            tools=request.tools,
            tool_choice="none" if last and request.tools else request.tool_choice,
            reasoning_effort=request.reasoning_effort,
            max_output_tokens=request.max_output_tokens,
            input_budget=request.input_budget,
        )
        outcome = take_step(
            provider,
            ask,
            lambda name, arguments: run_tree_tool(store, tree, name, arguments),
            recorder,
            record_model=False,
            loop=loop,
            clock=_no_clock,  # a tool call's trace holds no timing: a replay records the same
        )
        if not outcome.response.tool_calls:
            return outcome.response
        if last:
            break
        answer_now = bool(outcome.warnings)
        messages = outcome.conversation()
    raise ProviderProtocolError(
        provider.name, "no digest: the model answered with a tool call when asked for the digest"
    )


def _no_clock() -> float:
    return 0.0


def parse_digest(text: str, key: str = DEFAULT_KEY) -> str:
    """The digest in a model's answer: the key's value of a JSON object, else the text."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    candidate = fenced.group(1).strip() if fenced else stripped
    if candidate.startswith("{"):
        try:
            value = json.loads(candidate)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get(key), str):
            return str(value[key]).strip()
    return stripped


@dataclass
class OptimizationResult:
    """What an optimization produced (seed 003's ``OptimizationResult``)."""

    response: Response
    digest: str
    scope: Scope
    key: str
    session: str
    tag: str | None
    event_id: str
    anchor_event_id: str | None
    traces: tuple[str, ...]
    override_path: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON."""
        return {
            "key": self.key,
            "scope": self.scope.value,
            "session": self.session,
            "tag": self.tag,
            "digest": self.digest,
            "event_id": self.event_id,
            "anchor_event_id": self.anchor_event_id,
            "traces": list(self.traces),
            "provider_model": self.response.model,
            "finish_reason": self.response.finish_reason,
            "override_path": str(self.override_path) if self.override_path else None,
            "warnings": list(self.warnings),
        }


def check_scope(scope: Scope, overrides: OverridesStore | None, tag: str | None) -> None:
    """Refuse a GLOBAL scope without both an overrides store and a tag (seed 003)."""
    if scope is Scope.GLOBAL and (overrides is None or not tag):
        missing = " and ".join(
            what
            for what, absent in (("an overrides store", overrides is None), ("a tag", not tag))
            if absent
        )
        raise UsageError(
            f"the global scope needs {missing}: a global digest is written to the overrides "
            "store under a tag",
            hint="give --tag TAG (and --store DIR, or use the default user store), "
            "or use --scope session",
        )


def _digest_hash(text: str) -> str:
    return blake3.blake3(text.encode()).hexdigest()


def optimize(
    core: Core,
    provider: Provider,
    *,
    key: str = DEFAULT_KEY,
    session: str = DEFAULT_SESSION,
    scope: Scope = Scope.SESSION,
    overrides: OverridesStore | None = None,
    tag: str | None = None,
    focus: str | None = None,
    author: Author | None = None,
    secrets: tuple[str, ...] = (),
    now_ms: Callable[[], int] | None = None,
) -> OptimizationResult:
    """Condense the workspace into its digest with ``provider``; record and persist it.

    See the module doc. Raises :class:`UsageError` for a bad key, session or
    tag, or a GLOBAL scope without a store and a tag, before any model call.
    """
    key = normalize_key(key)
    sessions = SessionDigests(core.layout.repo, session)
    tag = normalize_key(tag, what="tag") if tag is not None else None
    check_scope(scope, overrides, tag)
    if focus is not None and len(focus) > 4000:
        raise UsageError("the focus areas are longer than 4,000 characters; shorten them")
    author = author or Author(AGENT_ID, "agent", provider.model or None)
    with core.transaction("digest optimize", author) as tx:
        auto, _ = tx.auto_save("digest optimize")
        anchor = auto or tx.head()
        tree = core.tree_of(anchor) if anchor is not None else core.head_tree()
    if anchor is None:  # an empty workspace with nothing recorded: nothing to describe
        raise UsageError(
            "the workspace is empty and nothing is recorded: there is nothing to digest"
        )
    scan = scan_tree(core.objects, tree)
    from strata.providers.window import context_window, input_budget

    budget = input_budget(provider, context_window(provider))
    request = optimization_request(
        scan, model=provider.model, key=key, focus=focus, input_budget=budget
    )
    recorder = Recorder(put=core.objects.put, agent_id=AGENT_ID, secrets=secrets)
    response = converse(
        RecordingProvider(provider, recorder), request, core.objects, tree, recorder
    )
    digest = parse_digest(response.text, key)
    if not digest:
        raise ProviderProtocolError(provider.name, "the model answered with an empty digest")
    with core.transaction("digest optimize", author) as tx:
        event = tx.annotate(
            EventType.AGENT_STEP,
            anchor=anchor.id,
            author=author,
            rationale=f"digest optimize: {key} ({scope.value})",
            artifacts=tuple(recorder.ids),
            data={
                "digest": {
                    "key": key,
                    "scope": scope.value,
                    "session": sessions.session,
                    "tag": tag,
                    "focus": focus,
                    "tree": str(tree),
                    "scan": _digest_hash(scan.to_bytes().decode()),
                    "digest": _digest_hash(digest),
                },
                STEP: step_data(
                    provider,
                    response,
                    loop="digest",
                    step=sum(1 for t in recorder.traces if t.event_type == LLM_CALL) - 1,
                ),
            },
        )
    # the call and the event are recorded: now its effects (seed 003: persisted inside optimize)
    stamp = now_ms() if now_ms is not None else core.now_ms()
    override_path = None
    if scope is Scope.GLOBAL:
        assert overrides is not None and tag is not None  # check_scope
        override_path = overrides.set_override(
            NAMESPACE, prompt_key_for(core.root), tag, key, digest, workspace=str(core.root)
        )
    with core.writing(finish_journals=False):  # the session file: one writer at a time
        sessions.set(DigestEntry(key, digest, "optimize", stamp, event.id))
    return OptimizationResult(
        response,
        digest,
        scope,
        key,
        sessions.session,
        tag,
        event.id,
        anchor.id,
        tuple(recorder.ids),
        override_path,
        scan.warnings,
    )


# -- replay ------------------------------------------------------------------------------


#: the event types of an optimization: an ``agent_step`` (``digest_optimize`` before)
OPTIMIZE_EVENTS = (EventType.AGENT_STEP, EventType.DIGEST_OPTIMIZE)


def is_optimize(event: Event) -> bool:
    """True for an optimization's ``agent_step`` (or older ``digest_optimize``) with traces."""
    return (
        event.action_type in OPTIMIZE_EVENTS
        and isinstance(event.data.get("digest"), dict)
        and bool(event.artifacts)
    )


def optimize_annotations(core: Core, anchors: Sequence[str]) -> dict[str, list[Event]]:
    """The optimizations' events anchored at each of ``anchors``, oldest first."""
    wanted = set(anchors)
    found: dict[str, list[Event]] = {}
    for record in core.ledger.driver.scan(kind="event"):
        body = record.body
        if body.get("action_type") not in OPTIMIZE_EVENTS:
            continue
        anchor = body.get("anchor_event_id")
        if anchor in wanted:
            event = Event.from_json(body, seq=record.seq)
            if is_optimize(event):
                found.setdefault(str(anchor), []).append(event)
    return found


@dataclass(frozen=True)
class OptimizeReplay:
    """What replaying one optimization found: None fields mean it reproduced."""

    event_id: str
    same: bool
    kind: str = ""  # scan | unrecorded_call | digest
    detail: str = ""
    observed: str = ""


def replay_optimize(
    event: Event,
    traces: Sequence[Trace],
    store: ObjectStore,
    tree: ObjectId,
    *,
    guard: Callable[[], Any] | None = None,
) -> OptimizeReplay:
    """Run a recorded optimization again on ``tree``: scan, prompt, the recorded answer, digest.

    ``guard`` is a context manager factory the model call runs inside (the
    replay's no-network guard).
    """
    from strata.errors import UnrecordedCall
    from strata.providers.replay import ReplayProvider

    info = event.data["digest"]
    scan = scan_tree(store, tree)
    if _digest_hash(scan.to_bytes().decode()) != info.get("scan"):
        return OptimizeReplay(
            event.id,
            False,
            "scan",
            f"the scan of tree {str(tree)[:12]} differs from the one recorded",
            scan.to_markdown(),
        )
    llm = [t for t in traces if t.event_type == LLM_CALL]
    if not llm:
        return OptimizeReplay(event.id, False, "unrecorded_call", "the event names no model call")
    model = str(llm[0].request.get("model", ""))
    budget = llm[0].request.get("input_budget")  # as the optimization fitted its calls
    request = optimization_request(
        scan,
        model=model,
        key=str(info["key"]),
        focus=info.get("focus"),
        input_budget=budget if isinstance(budget, int) else None,
    )
    provider = ReplayProvider(llm, name=f"replay of {llm[0].provider or llm[0].adapter}")
    observed = Recorder(
        put=lambda data: blake3.blake3(data).hexdigest(), agent_id=provider.agent_id
    )
    try:
        with guard() if guard is not None else nullcontext():
            response = converse(provider, request, store, tree, observed)
    except UnrecordedCall as exc:
        return OptimizeReplay(event.id, False, "unrecorded_call", exc.message, exc.observed)
    except ProviderProtocolError as exc:
        return OptimizeReplay(event.id, False, "unrecorded_call", exc.message)
    if not provider.exhausted:
        return OptimizeReplay(
            event.id, False, "unrecorded_call", f"the replay made fewer model calls than {len(llm)}"
        )
    recorded_tools = [t for t in traces if t.event_type == TOOL_CALL]
    if [(t.fingerprint, t.response) for t in observed.traces] != [
        (t.fingerprint, t.response) for t in recorded_tools
    ]:
        return OptimizeReplay(event.id, False, "digest", "a tool call returned something else")
    digest = parse_digest(response.text, str(info["key"]))
    if _digest_hash(digest) != info.get("digest"):
        return OptimizeReplay(
            event.id, False, "digest", "the replayed answer gives another digest", digest
        )
    return OptimizeReplay(event.id, True, detail=f"digest {info['key']} reproduced")
