"""Deterministic replay: rebuild the files at A, re-run each recorded step up to B, compare.

``replay(core, "A..B")`` walks the history from A to B (A must be an ancestor
of B, following each state event's parent). It writes A's files into a
scratch folder outside the workspace and the repository and hash-verifies the
rebuild (its tree must be A's). Then, event by event:

- an **agent step** (a ``draft_revision`` with ``data.agent`` and traces, see
  :mod:`strata.agent.loop`) runs again: its model calls are served from the
  recorded traces by :class:`~strata.providers.replay.ReplayProvider` (no
  network: a call that was not recorded, or whose request differs, stops the
  replay with :class:`~strata.errors.UnrecordedCall`), its tool calls run for
  real on the scratch files and their results must equal the recorded ones;
  within one session the conversation is carried from step to step, as the
  agent built it, so a changed tool result shows up in the next request too.
  While a step runs, this process may open no network connection (an audit
  hook refuses ``socket.connect``, :func:`no_network`);
- a **run** (a state event a ``strata run`` recorded, with its command) runs
  its command again on the scratch files in the bubblewrap sandbox with no
  network (:mod:`strata.sandbox.bwrap`), at the workspace's own path, with
  ``SOURCE_DATE_EPOCH`` set to the run's recorded time and ``PYTHONHASHSEED``
  fixed, so a command that honours them sees the same clock and hash seed on
  every replay; its exit code must be the recorded one. Published's ignored
  folders (``.venv``…) are shown read-only, as to a Draft's commands;
- any other state event (a person's snapshot) is taken as recorded: the
  scratch folder is moved to its tree;
- a **digest optimization** (an ``agent_step`` annotation anchored at
  one of the range's state events, see :mod:`strata.digest.optimize`) runs
  again once its anchor's files are rebuilt: the same scan, the same prompt,
  the recorded answer (no network), and the digest must be the recorded one.

After each replayed step the scratch folder's tree must equal the step's
recorded tree. The first difference ends the replay and is reported: the
event, the kind (``tree``, ``tool_result``, ``unrecorded_call``, ``digest``…), the path and
a diff. Nothing is written to the repository: a replay only reads it. With
``dry_run`` the steps are listed and their traces verified, nothing is run.
"""

from __future__ import annotations

import errno
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import blake3

from strata.agent.loop import ToolTable, run_step
from strata.agent.step import StepOutcome, recorded_step
from strata.core.refs import run_span
from strata.core.storage import ts_ms
from strata.digest.optimize import optimize_annotations, replay_optimize
from strata.errors import (
    CorruptRepository,
    ObjectMissing,
    ReplayError,
    SandboxUnavailable,
    TraceCorrupt,
    UnrecordedCall,
    UsageError,
)
from strata.ids import ObjectId
from strata.ledger.events import Event
from strata.providers.base import Message, Request, ToolSpec
from strata.providers.replay import ReplayProvider, first_difference
from strata.providers.trace import LLM_CALL, TOOL_CALL, Recorder, Trace
from strata.schemas import fields_json
from strata.store.materialize import export_tree
from strata.store.sealing import AGE_MAGIC, TraceCipher

if TYPE_CHECKING:
    from strata.core.core import Core
    from strata.core.workspace import Workspace

#: a divergence's diff is clipped to this many bytes
DIFF_LIMIT = 8_000


@dataclass
class StepReplay:
    """What happened to one event of the range."""

    event_id: str
    action_type: str
    kind: str  # agent | run | recorded
    status: str  # same | diverged | applied | verified (dry run)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        """The step as JSON."""
        return fields_json(self)


@dataclass
class Divergence:
    """The first place a replay differs from the record."""

    event_id: str
    kind: str  # tree | tool_result | unrecorded_call | exit_code
    path: str | None
    detail: str
    diff: str = ""

    def to_json(self) -> dict[str, Any]:
        """The divergence as JSON."""
        return fields_json(self)


@dataclass
class ReplayReport:
    """The outcome of a replay."""

    start: str
    end: str
    dry_run: bool
    steps: list[StepReplay] = field(default_factory=list)
    divergence: Divergence | None = None
    error: ReplayError | None = None

    @property
    def ok(self) -> bool:
        """True when every step reproduced its recorded files."""
        return self.divergence is None

    @property
    def replayed(self) -> int:
        """How many agent steps ran again."""
        return sum(1 for s in self.steps if s.kind == "agent" and s.status != "verified")

    def to_json(self) -> dict[str, Any]:
        """The report as JSON."""
        return {
            "from": self.start,
            "to": self.end,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "steps": [s.to_json() for s in self.steps],
            "first_divergence": self.divergence.to_json() if self.divergence else None,
        }


def parse_range(text: str) -> tuple[str, str]:
    """``A..B`` (``A..`` means ``A..HEAD``)."""
    if ".." not in text:
        raise UsageError(f"{text!r} is not a range; write A..B (e.g. HEAD~3..HEAD)")
    a, _, b = text.partition("..")
    if not a or b.startswith("."):
        raise UsageError(f"{text!r} is not a range; write A..B (e.g. HEAD~3..HEAD)")
    return a, b or "HEAD"


def path_between(core: Core, start: Event, end: Event) -> list[Event]:
    """The state events after ``start`` up to ``end``, oldest first.

    Each event's parent is followed, except that a publish is reached through
    the Draft it published (its revisions, the agent's steps, come before it)
    when ``start`` lies on that way.
    """
    for through_drafts in (True, False):
        chain: list[Event] = []
        event: Event | None = end
        while event is not None and event.id != start.id:
            chain.append(event)
            via = event.data.get("draft_event_id") if through_drafts else None
            if event.action_type == "publish" and isinstance(via, str):
                event = core.event(via)
            else:
                event = core.event(event.parent_event_id) if event.parent_event_id else None
        if event is not None:
            chain.reverse()
            return chain
    raise UsageError(f"{start.id} is not an ancestor of {end.id}; replay follows history forward")


def load_traces(core: Core, event: Event) -> list[Trace]:
    """The traces an event links, hash-verified (:class:`TraceCorrupt` when one is not)."""
    traces = []
    for oid in event.artifacts:
        try:
            data = core.objects.get(ObjectId(oid))
        except ObjectMissing:
            raise TraceCorrupt(oid, f"event {event.id} names it but it is missing") from None
        except CorruptRepository:
            raise TraceCorrupt(oid, "its content does not match its id") from None
        if core.trace_cipher is not None or data.startswith(AGE_MAGIC):
            data = (core.trace_cipher or TraceCipher(())).open(data, name=oid)
        traces.append(Trace.decode(data, name=oid))
    return traces


def is_agent_step(event: Event) -> bool:
    """True for a state event a ``strata agent`` step recorded (one with traces to replay)."""
    step = recorded_step(event)
    return step is not None and step["loop"] == "agent" and bool(event.artifacts)


class ModelServer(Protocol):
    """What serves a replayed command's recorded model calls (a replaying model proxy)."""

    socket_folder: Path | None
    """The folder of its Unix socket (``proxy.sock``), bound into the sandbox."""

    def environment(self) -> dict[str, str]:
        """The variables that point a command on the host's network at it."""
        ...

    def sandbox_environment(self) -> dict[str, str]:
        """The variables that point a sandboxed command at it (through its socket)."""
        ...

    def first_divergence(self) -> tuple[str, str] | None:
        """The first request that matched no recorded call: (what differs, the expected key)."""
        ...

    def served(self) -> tuple[int, int]:
        """How many recorded calls were asked for, of how many."""
        ...


#: makes the server of a run's recorded model calls: (the traces, the workspace path and
#: the home folder the command sees) -> a context manager serving them while it runs again
ModelReplay = Callable[[list[Trace], Path, str | None], AbstractContextManager[ModelServer]]


@dataclass(frozen=True)
class Commands:
    """How a replay runs recorded commands: the sandbox, the caller's environment, a timeout.

    ``model_replay`` serves the model calls of a run recorded with
    ``--record-model`` (the CLI passes :func:`strata.integrations.model_proxy.replaying`);
    without it such a run cannot be replayed.
    """

    environ: dict[str, str]
    sandbox: str = "bwrap"  # bwrap | none
    timeout_s: float = 600.0
    model_replay: ModelReplay | None = None
    bind_ro: tuple[Path, ...] = ()
    """Host paths the sandbox shows read-only (an agent installed outside system folders)."""
    env_names: tuple[str, ...] = ()
    """Variables of ``environ`` passed into the sandbox (which clears the environment)."""


def replay(
    core: Core,
    span: str,
    *,
    dry_run: bool = False,
    scratch: Path | None = None,
    commands: Commands | None = None,
    progress: Callable[[StepReplay], None] | None = None,
) -> ReplayReport:
    """Replay the range ``span`` (``A..B``, or a run id: its before..after); see the module doc.

    ``commands`` says how recorded runs are run again (default: in the
    sandbox, with an empty environment).
    """
    if ".." not in span and (found := run_span(core, span)) is not None:
        start, end = found  # a run id: from its before state to its after state
    else:
        a_ref, b_ref = parse_range(span)
        start, end = core.resolve(a_ref), core.resolve(b_ref)
    if start.event is None or end.event is None:
        raise UsageError("both ends of a replay must be recorded events")
    events = path_between(core, start.event, end.event)
    runs = run_annotations(core, events)
    digests = optimize_annotations(core, [e.id for e in events])
    report = ReplayReport(start.event.id, end.event.id, dry_run)
    if dry_run:
        for event in events:
            if is_agent_step(event):
                kind, detail = "agent", f"{len(load_traces(core, event))} traces verified"
            elif event.id in runs:
                kind, detail = "run", shlex.join(runs[event.id].data["argv"])
            else:
                kind, detail = "recorded", "files taken as recorded"
            step = StepReplay(event.id, event.action_type, kind, "verified", detail)
            report.steps.append(step)
            if progress is not None:
                progress(step)
            for optimized in digests.get(event.id, ()):  # the digest optimizations made here
                detail = f"{len(load_traces(core, optimized))} traces verified"
                step = StepReplay(optimized.id, optimized.action_type, "digest", "verified", detail)
                report.steps.append(step)
                if progress is not None:
                    progress(step)
        return report
    own = scratch is None
    base = Path(tempfile.mkdtemp(prefix="strata-replay-")) if scratch is None else scratch
    if runs and (commands is None or commands.sandbox == "bwrap"):
        from strata.sandbox.bwrap import sandbox_problem

        problem = sandbox_problem()
        if problem is not None:
            raise SandboxUnavailable(
                f"the range holds {len(runs)} recorded commands and the sandbox cannot run: "
                f"{problem}"
            )
    try:
        _run(
            core,
            start.tree,
            events,
            runs,
            commands or Commands({}),
            base,
            report,
            progress,
            digests,
        )
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
    return report


def _scratch_workspace(core: Core, base: Path) -> Workspace:
    from strata.core.workspace import Workspace

    return Workspace(
        base / "files", objects=core.objects, cache_path=base / "statcache", rules=core.rules
    )


def run_annotations(core: Core, events: list[Event]) -> dict[str, Event]:
    """The ``run`` events (with their command) that recorded the state events ``events``.

    A run that changed no file anchors at the state event before it, which it
    did not make: only a run of the same operation made its anchor.
    """
    ops = {e.id: e.operation_id for e in events}
    found: dict[str, Event] = {}
    for record in core.ledger.driver.scan(kind="event"):
        body = record.body
        anchor = body.get("anchor_event_id")
        if body.get("action_type") != "run" or anchor not in ops:
            continue
        if body.get("operation_id") != ops[anchor]:
            continue
        argv = (body.get("data") or {}).get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            found[str(anchor)] = Event.from_json(body, seq=record.seq)
    return found


def _run(
    core: Core,
    tree: ObjectId,
    events: list[Event],
    runs: dict[str, Event],
    commands: Commands,
    base: Path,
    report: ReplayReport,
    progress: Callable[[StepReplay], None] | None,
    digests: dict[str, list[Event]] | None = None,
) -> None:
    files = base / "files"
    export_tree(core.objects, tree, files)
    ws = _scratch_workspace(core, base)
    scan = ws.scan(hash_only=True)
    if scan.tree != tree:
        report.divergence = _tree_divergence(core, "(start)", tree, scan)
        return
    carried: tuple[str, int, list[Message]] | None = None  # session, step, messages
    tables: dict[str, ToolTable] = {}  # each session's tool table (a Workshop's keeps results)
    for event in events:
        expected = core.tree_of(event)
        if event.id in runs and not is_agent_step(event):
            carried = None
            run = runs[event.id]
            with ExitStack() as stack:
                extra: dict[str, str] = {}
                server: ModelServer | None = None
                if run.artifacts:  # its model calls were recorded: served again, offline
                    server = stack.enter_context(_model_server(core, run, files, commands))
                    extra = (
                        server.environment()
                        if commands.sandbox == "none"
                        else server.sandbox_environment()
                    )
                proxy = server.socket_folder if server is not None else None
                code, output = _run_command(core, run, files, commands, extra, proxy)
                unrecorded = server.first_divergence() if server is not None else None
                served = server.served() if server is not None else None
            recorded_code = run.data.get("exit_code")
            scan = ws.scan(hash_only=True)
            if unrecorded is not None:  # what the command did after it says less than this
                report.divergence = Divergence(
                    event.id,
                    "unrecorded_call",
                    None,
                    f"unrecorded model call: {unrecorded[0]}",
                    f"expected {unrecorded[1]}" if unrecorded[1] else "",
                )
            elif code is None:  # it did not end: what it left half-written says less than that
                report.divergence = Divergence(
                    event.id,
                    "exit_code",
                    None,
                    f"the command did not end within {commands.timeout_s:g} s "
                    f"(recorded: exit {recorded_code})",
                    output,
                )
            elif scan.tree != expected:
                report.divergence = _tree_divergence(core, event.id, expected, scan)
            elif isinstance(recorded_code, int) and code != recorded_code:
                report.divergence = Divergence(
                    event.id,
                    "exit_code",
                    None,
                    f"the command exited {code}, recorded {recorded_code}",
                    output,
                )
            if report.divergence is not None:
                report.steps.append(StepReplay(event.id, event.action_type, "run", "diverged"))
                return
            shown = shlex.join(run.data["argv"])
            if served is not None:
                shown += f" ({served[0]} of {served[1]} recorded model calls served)"
            step = StepReplay(event.id, event.action_type, "run", "same", shown)
        elif not is_agent_step(event):
            ws.apply(ws.plan(ws.scan(hash_only=True), expected))
            step = StepReplay(event.id, event.action_type, "recorded", "applied")
            carried = None
        else:
            info = recorded_step(event) or {}
            traces = load_traces(core, event)
            redacted = sum(t.redactions for t in traces)
            note = (
                f" (this step's traces had {redacted} secrets redacted; "
                "what was redacted cannot be replayed)"
                if redacted
                else ""
            )
            divergence: Divergence | None = None
            messages: list[Message] | None = None
            session = str(info.get("session"))
            try:
                if carried and carried[0] == session and carried[1] + 1 == info["step"]:
                    messages = carried[2]
                else:
                    tables.pop(session, None)  # a session replayed from its middle
                outcome, messages = _replay_step(
                    traces, files, messages, tables=tables, session=session, core=core
                )
            except UnrecordedCall as exc:
                divergence = Divergence(
                    event.id, "unrecorded_call", None, exc.message + note, exc.observed
                )
                report.error = exc
            except _ToolDiverged as exc:
                divergence = Divergence(event.id, "tool_result", exc.path, exc.detail + note)
            if divergence is None:
                assert messages is not None
                carried = (str(info.get("session")), int(info["step"]), messages)
                scan = ws.scan(hash_only=True)
                if scan.tree != expected:
                    divergence = _tree_divergence(core, event.id, expected, scan)
                    divergence.detail += note
            if divergence is not None:
                report.divergence = divergence
                report.steps.append(StepReplay(event.id, event.action_type, "agent", "diverged"))
                return
            calls = ", ".join(c.name for c in outcome.response.tool_calls) or "no tool call"
            step = StepReplay(event.id, event.action_type, "agent", "same", calls)
        report.steps.append(step)
        if progress is not None:
            progress(step)
        for optimized in (digests or {}).get(event.id, ()):
            # a digest optimization anchored here: the same scan of these files, the same
            # prompt, the recorded answer (no network), the same digest
            scan = ws.scan(hash_only=True)
            again = replay_optimize(
                optimized, load_traces(core, optimized), scan.store, scan.tree, guard=no_network
            )
            if not again.same:
                report.divergence = Divergence(
                    optimized.id,
                    "unrecorded_call" if again.kind == "unrecorded_call" else "digest",
                    None,
                    again.detail,
                    again.observed,
                )
                report.steps.append(
                    StepReplay(optimized.id, optimized.action_type, "digest", "diverged")
                )
                return
            step = StepReplay(optimized.id, optimized.action_type, "digest", "same", again.detail)
            report.steps.append(step)
            if progress is not None:
                progress(step)


def _model_server(
    core: Core, run: Event, files: Path, commands: Commands
) -> AbstractContextManager[ModelServer]:
    """The server of ``run``'s recorded model calls, for its command replayed on ``files``.

    In the sandbox the command sees the workspace at its own path and a home
    of the sandbox's; without it, the scratch folder and the caller's home.
    """
    if commands.model_replay is None:
        raise ReplayError(f"run {run.id} recorded its model calls; this replay cannot serve them")
    if commands.sandbox == "none":
        root, home = files, commands.environ.get("HOME")
    else:
        from strata.sandbox.bwrap import SandboxSpec, sandbox_home

        spec = SandboxSpec(workspace=core.root, source=files, cwd=core.root)
        root, home = core.root, str(sandbox_home(spec, environ=commands.environ))
    return commands.model_replay(load_traces(core, run), root, home)


def _run_command(
    core: Core,
    run: Event,
    files: Path,
    commands: Commands,
    extra: dict[str, str] | None = None,
    proxy: Path | None = None,
) -> tuple[int | None, str]:
    """Run a recorded command again on ``files``: its exit code (None: it timed out), its output.

    ``extra`` are variables set for it (the replaying model proxy's URLs);
    ``proxy`` the folder of that proxy's socket, bound into the sandbox.
    """
    from strata.replay.preflight import run_in_copy

    cwd = Path(str(run.data.get("cwd") or core.root))
    try:
        rel = cwd.relative_to(core.root).as_posix()
    except ValueError:
        rel = ""
    result = run_in_copy(
        core,
        list(run.data["argv"]),
        files=files,
        sandbox=commands.sandbox,
        environ=commands.environ,
        timeout_s=commands.timeout_s,
        cwd="" if rel == "." else rel,
        extra_env={
            "SOURCE_DATE_EPOCH": str(ts_ms(run.ts) // 1000),
            "PYTHONHASHSEED": "0",
            "STRATA_REPLAY": "1",
            **(extra or {}),
        },
        bind_ro=commands.bind_ro,
        env_names=commands.env_names,
        proxy=proxy,
    )
    if result.timed_out:
        return None, result.output_tail
    return result.exit_code, result.output_tail


_DENY = threading.local()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_DENY, "on", False) and event in ("socket.connect", "socket.sendto"):
        where = args[1] if len(args) > 1 else "?"
        # an OSError, as a refused connection is: callers close their socket and report it
        raise PermissionError(
            errno.EACCES, f"a replayed step tried to reach the network ({where}); replay denies it"
        )


_hooked = False


@contextmanager
def no_network() -> Iterator[None]:
    """Refuse every socket connection this thread opens while inside the block."""
    global _hooked
    if not _hooked:  # an audit hook cannot be removed: install it once, switch it per thread
        sys.addaudithook(_audit)
        _hooked = True
    _DENY.on = True
    try:
        yield
    finally:
        _DENY.on = False


class _ToolDiverged(Exception):
    def __init__(self, path: str | None, detail: str) -> None:
        super().__init__(detail)
        self.path = path
        self.detail = detail


def tool_table(core: Core, recorded: tuple[ToolSpec, ...]) -> ToolTable:
    """The tool table whose tools are exactly those a step's model call offered.

    A step records the specs it sent, not which table ran them: ``strata agent``'s
    (:data:`strata.agent.tools.TOOLS`) or the Workshop's
    (:func:`strata.workshop.tools.workshop_tools`, whole or a phase's subset).
    :class:`TraceCorrupt` when none matches (a tool set this Strata does not have).
    """
    from strata.agent.tools import TOOLS
    from strata.workshop.tools import workshop_tools

    wanted = [spec.to_json() for spec in recorded]
    # the Workshop offers the style tools of the formats in play: those the call offered
    styles = [
        k for k in ("docx", "xlsx", "pptx") if any(s.name == f"{k}_get_styles" for s in recorded)
    ]
    candidates: list[ToolTable] = [TOOLS]
    candidates += [
        workshop_tools(phase=p, rules=core.rules(), styles=styles)
        for p in (None, "research", "plan")
    ]
    for table in candidates:
        if [spec.to_json() for spec, _ in table.values()] == wanted:
            return table
    # the same tools described differently (Strata changed since the recording): replayed,
    # so the model call's difference is reported where it is (an unrecorded call)
    names = [spec.name for spec in recorded]
    for table in candidates:
        if list(table) == names:
            return table
    names_shown = ", ".join(names) or "none"
    raise TraceCorrupt(
        "(step)", f"its model call offered tools this Strata does not have ({names_shown})"
    )


def _replay_step(
    traces: list[Trace],
    folder: Path,
    messages: list[Message] | None,
    *,
    tables: dict[str, ToolTable],
    session: str,
    core: Core,
) -> tuple[StepOutcome, list[Message]]:
    """Run one recorded step again; return its outcome and the conversation after it.

    The tools run from the table the step offered the model (:func:`tool_table`),
    one per session, so a tool that reads an earlier call's result finds it.
    """
    llm = [t for t in traces if t.event_type == LLM_CALL]
    recorded_tools = [t for t in traces if t.event_type == TOOL_CALL]
    if not llm:
        raise TraceCorrupt("(step)", "an agent step without its model call")
    first = Request.from_json(llm[0].request)
    if messages is None:
        messages = list(first.messages)
    if session not in tables:
        tables[session] = tool_table(core, first.tools)
    table = tables[session]
    request = Request(
        model=first.model,
        messages=tuple(messages),
        tools=tuple(spec for spec, _ in table.values()),
        tool_choice=first.tool_choice,
        reasoning_effort=first.reasoning_effort,
        max_output_tokens=first.max_output_tokens,
        input_budget=first.input_budget,
    )
    provider = ReplayProvider(llm, name=f"replay of {llm[0].provider or llm[0].adapter}")
    observed = Recorder(
        put=lambda data: blake3.blake3(data).hexdigest(), agent_id=provider.agent_id
    )
    with no_network():
        outcome = run_step(provider, request, folder, observed, tools=table)
    if len(observed.traces) != len(recorded_tools):
        raise _ToolDiverged(
            None,
            f"{len(observed.traces)} tool calls ran, {len(recorded_tools)} were recorded",
        )
    for then, now in zip(recorded_tools, observed.traces, strict=True):
        if then.response != now.response or then.fingerprint != now.fingerprint:
            path = then.request.get("arguments", {}).get("path")
            where = (
                first_difference(
                    {"request": then.request, "response": then.response},
                    {"request": now.request, "response": now.response},
                )
                or "their canonical forms differ"
            )
            result = str((now.response or {}).get("result", ""))
            shown = result if len(result) <= 160 else result[:157] + "..."
            raise _ToolDiverged(
                path if isinstance(path, str) else None,
                f"tool {then.tool} (call {then.call_index}) returned something else: {where}"
                + ("" if shown in where else f"; it returned {shown!r}"),
            )
    return outcome, outcome.conversation()


def _tree_divergence(core: Core, event_id: str, expected: ObjectId, scan: Any) -> Divergence:
    diff = core.diff_trees(expected, scan.tree, scan.store)
    if not diff.files:
        return Divergence(event_id, "tree", None, "the trees differ")
    first = diff.files[0]
    one = core.diff_trees(expected, scan.tree, scan.store, paths=[first.path])
    text = one.patch().decode("utf-8", "replace")
    if len(text) > DIFF_LIMIT:
        text = text[:DIFF_LIMIT] + "\n[diff truncated]\n"
    return Divergence(
        event_id,
        "tree",
        first.path,
        f"{first.path} is {first.status} in the replay"
        + (f" ({len(diff.files)} paths differ)" if len(diff.files) > 1 else ""),
        text,
    )
