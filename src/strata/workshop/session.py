"""The Workshop session: send a message, the agent's edits land in the Draft; rewind, regenerate.

A :class:`Workshop` is one conversation of a workspace (see
:mod:`strata.workshop.conversation` for how it is stored). A *turn* records
the user's message, runs the agent loop (:func:`strata.agent.loop.run_agent`)
on the Draft with the conversation so far, then records the assistant's
message naming the Draft revision the turn left. Only one turn runs at a
time per workspace: a lock file (``REPO/workshop/turn.lock``) is held for the
turn, so a second ``send`` (in this process or another) fails at once with
:class:`~strata.errors.WorkshopBusy`, and a lease of the core's says which
turn runs (:func:`strata.core.groups.open_group`). A lease whose process was
killed is found by the next write, whose recovery calls :func:`finish_turn`:
it records the turn's assistant message as interrupted (the Draft's half-done
step is put back before, by
:func:`strata.workbench.recovery.recover_draft_steps`), then the core closes
the turn's group, marked interrupted.

Every Workshop operation that changes state ends with one ledger operation
named ``chat …`` (``chat turn``, ``chat rewind``, ``chat regenerate``,
``chat publish``, ``chat discard``, ``chat restore``, ``chat model``) whose
details keep the state before it (the conversation's head, the Draft's
revision, the model, a checkpoint of Published when it moved) and the ids of
the operations it was made of. ``strata undo`` of such an operation
(:func:`undo_workshop`) brings the whole state back: Published from the
checkpoint, the Draft to its revision (reopened if it had ended), the head
where it was.

Rewind to a message (:meth:`Workshop.rewind`): the head moves to it; the
Draft becomes what it was at that message (the revision of the last
assistant message at or before it, or no Draft when there was none or it had
been published or discarded since); when a publish (or a checkpoint restore)
lies between the message and the head, Published is restored from the
checkpoint taken by the FIRST such publish after the message (for a restore:
its ``pre_restore`` checkpoint); a missing checkpoint fails with nothing
changed.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.core.groups import open_group
from strata.core.lease import Lease, active_leases, stale_leases
from strata.errors import (
    ProviderCancelled,
    ProviderError,
    StrataError,
    UnknownRef,
    UsageError,
    WorkshopBusy,
    WorkshopError,
    WorkshopStepLimit,
)
from strata.ids import ObjectId
from strata.layout import WORKSHOP_FOLDER as FOLDER  # the turn lock
from strata.layout import WORKSHOP_LEASE as TURN_LEASE
from strata.ledger.events import Author, Event, EventType
from strata.workshop.conversation import (
    ChatMessage,
    ConversationInfo,
    ConversationLog,
    active_model,
    all_records,
    append,
    conversations,
    latest_conversation,
)

if TYPE_CHECKING:
    from strata.agent.loop import ToolTable
    from strata.agent.tools import ToolResult, WriteLimits
    from strata.core import Core, OperationRecord, Transaction
    from strata.core.groups import Group
    from strata.providers.base import CancelToken, Message, Provider
    from strata.workbench.publish import PublishResult, ReviewResult
    from strata.workshop.fit import Assembled

#: ``prompt(folder, history, user_text, provider) -> (system text, messages before the user's)``
#: or an :class:`~strata.workshop.fit.Assembled` (with what was cut, and older messages to
#: compress)
PromptHook = Callable[
    [Path, "list[Message]", str, "Provider"], "tuple[str, Sequence[Message]] | Assembled"
]
#: a conversation id (``conv_`` and 12 letters)
_NEW_ID = re.compile(r"conv_[a-z0-9]{12}")
LOCK = "turn.lock"

WORKSHOP_SYSTEM_PROMPT = (
    "You are the assistant of a workspace's Workshop: you talk with the user and, when a "
    "task needs it, edit the workspace's files through your tools (list_files, read_file, "
    "write_file, edit_file). The listed files are already present: never ask the user to "
    "upload them. Your edits land in a Draft the user reviews, then publishes or discards. "
    "When you are done, answer with a short summary and no tool call."
)

#: system events that end the Draft (the Draft state before them is gone)
_DRAFT_ENDS = ("draft_published", "checkpoint_publish", "draft_discarded")
#: system events that moved Published, and the data key of the checkpoint taken before
_PUBLISHED_MOVES = {
    "checkpoint_publish": "checkpoint_id",
    "draft_published": "checkpoint_id",
    "checkpoint_restore": "pre_restore_checkpoint_id",
}


@dataclass(frozen=True)
class Turn:
    """One exchange: the user's message and the assistant's answer (and its Draft revision)."""

    user_message: ChatMessage
    assistant_message: ChatMessage
    draft_revision: str | None

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata ask --json`` and ``strata chat regenerate --json`` print."""
        return {
            "conversation": self.assistant_message.conversation,
            "user_message": self.user_message.to_json(),
            "assistant_message": self.assistant_message.to_json(),
            "draft_revision": self.draft_revision,
        }


@dataclass(frozen=True)
class RewindResult:
    """What :meth:`Workshop.rewind` did."""

    conversation: str
    message_id: str
    head_before: str | None
    draft_id: str | None
    draft_revision: str | None
    published_from_checkpoint: str | None
    system_event: str
    operation_id: str

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata chat rewind --json`` prints."""
        return {
            "conversation": self.conversation,
            "message_id": self.message_id,
            "head": self.message_id,
            "head_before": self.head_before,
            "draft_id": self.draft_id,
            "draft_revision": self.draft_revision,
            "published_from_checkpoint": self.published_from_checkpoint,
            "system_event": self.system_event,
            "operation_id": self.operation_id,
        }


class Workshop:
    """One conversation of a workspace with an agent whose edits land in the Draft.

    Get one with :meth:`strata.Repository.workshop`. ``provider`` answers the
    turns; without it, ``open_model`` opens the provider the current model
    names (``Repository.workshop`` passes one reading ``config.toml``).
    ``system`` is the system prompt (the default: :data:`WORKSHOP_SYSTEM_PROMPT`),
    or a function called at the start of every turn that returns it (a prompt
    assembled from the workspace's files: if it raises, the turn fails with
    nothing recorded); ``tools`` is the tool table (default:
    :data:`strata.agent.tools.TOOLS`), or a function called once per turn that
    returns one (:meth:`strata.Repository.workshop` passes the Workshop's tools,
    :func:`strata.workshop.tools.workshop_tools`, and a ``prompt`` built by
    :func:`strata.workshop.context.build_prompt` with the workspace digest).
    ``prompt`` (:data:`PromptHook`), when
    given, assembles both the system text and the history sent: it gets the
    folder the agent works on (the Draft's, else the workspace's), the
    conversation so far as messages, the user's text and the turn's provider,
    and returns the system text and the messages to send before the user's
    (e.g. the last eight, from ``strata.workshop.context.build_prompt``), or
    an :class:`~strata.workshop.fit.Assembled`: its notes are recorded with
    the answer, and its ``dropped`` messages are compressed into a
    ``summary_message`` (with a ``context_compressed`` card) before the
    user's message is recorded.
    """

    def __init__(
        self,
        core: Core,
        conversation: str | None = None,
        *,
        provider: Provider | None = None,
        model: str | None = None,
        author: Author | None = None,
        open_model: Callable[[str | None], Provider] | None = None,
        system: str | Callable[[], str] | None = None,
        tools: ToolTable | Callable[[], ToolTable] | None = None,
        max_steps: int = 8,
        prompt: PromptHook | None = None,
    ) -> None:
        self.core = core
        self.provider = provider
        self.author = author or core.author
        self.open_model = open_model
        self.system = system or WORKSHOP_SYSTEM_PROMPT
        self.tools = tools
        self.max_steps = max_steps
        self.prompt = prompt
        self._model = model
        self.conversation_id = self._find_conversation(conversation)

    def recover(self) -> None:
        """Finish what a killed turn left (its answer recorded as interrupted, its step undone).

        Every write does this first; call it to see a whole conversation before writing.
        """
        with self.core.writing():
            pass

    # -- which conversation ------------------------------------------------------------

    def _find_conversation(self, wanted: str | None) -> str:
        if wanted is None:
            return latest_conversation(self.core) or self._new_id()
        known = [c.id for c in conversations(self.core)]
        found = [c for c in known if c == wanted or c.startswith(wanted.strip())]
        if not found and _NEW_ID.fullmatch(wanted):
            return wanted  # a conversation with no record yet
        if not wanted.strip() or not found:
            raise UnknownRef(wanted, hint="see 'strata chat list', or 'strata chat new'")
        if len(found) > 1 and wanted not in found:
            from strata.errors import AmbiguousRef

            raise AmbiguousRef(wanted, found)
        return wanted if wanted in found else found[0]

    def _new_id(self) -> str:
        return f"conv_{self.core.new_event_id().removeprefix('evt_')[:12]}"

    def conversations(self) -> list[ConversationInfo]:
        """Every conversation of the workspace, the most recently active first."""
        return conversations(self.core)

    def new_conversation(self, title: str | None = None) -> Workshop:
        """Start another conversation (recorded at once); return its Workshop."""
        conversation = self._new_id()
        with self.core.transaction("chat new", self.author) as tx:
            append(
                tx,
                EventType.SYSTEM_EVENT,
                conversation,
                text=title or "",
                chain=False,
                head=None,
                data={"kind": "conversation_created", "title": title or ""},
            )
        return Workshop(
            self.core,
            conversation,
            provider=self.provider,
            model=self._model,
            author=self.author,
            open_model=self.open_model,
            system=self.system,
            tools=self.tools,
            max_steps=self.max_steps,
            prompt=self.prompt,
        )

    # -- reading -------------------------------------------------------------------------

    def log(self) -> ConversationLog:
        """Every record of the conversation (the inactive ones after a rewind too)."""
        return ConversationLog.load(self.core, self.conversation_id)

    def messages(self) -> list[ChatMessage]:
        """The active transcript, first message to head (system event cards included)."""
        return self.log().transcript()

    @property
    def head(self) -> str | None:
        """The id of the conversation's head (its last active record), or None."""
        return self.log().head

    @property
    def model(self) -> str:
        """The model turns use: the one given, else the last switched to, else the provider's."""
        if self._model:
            return self._model
        switched = active_model(self.core)
        if switched:
            return switched
        if self.provider is not None:
            return self.provider.name
        return ""

    @property
    def busy(self) -> bool:
        """True while a turn (or a rewind, or an agent step) runs in this workspace."""
        from strata.workbench.timetravel import busy_steps

        return bool(_turns(self.core, held=True) or busy_steps(self.core))

    # -- turns ---------------------------------------------------------------------------

    def send(
        self,
        text: str,
        *,
        rpi: bool = False,
        on_event: Callable[[object], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> Turn:
        """Send ``text``: record it, run the agent on the Draft, record its answer.

        ``on_event`` gets the provider's stream events and the step events of
        :mod:`strata.workshop.events`. A turn that fails (the provider, a
        cancel) is recorded with an assistant message marked ``error`` (its
        partial text kept, the Draft as its last whole step left it), then
        the error is raised. :class:`~strata.errors.WorkshopBusy` when a turn
        already runs.
        """
        if not text.strip():
            raise UsageError("the message is empty")
        with self._turn("send a message") as lease:
            provider = self._provider()  # an unknown model fails before anything is recorded
            self._limits()  # as does a bad [edits] setting
            log = self.log()
            # a prompt that cannot be assembled (no manifest) fails before anything is recorded
            history = _history(log.transcript())
            assembled = self._assemble(history, text, provider)
            summary: tuple[str, bool, int] | None = None
            if assembled.dropped:  # the history passed its budget: compressed into a summary
                from strata.providers.base import Message
                from strata.workshop.fit import summarize

                made, by_model = summarize(
                    provider, assembled.dropped, window=assembled.window, cancel=cancel
                )
                summary = (made, by_model, len(assembled.dropped))
                kept = [Message("user", SUMMARY_PREFIX + made), *assembled.messages]
                again = self._assemble(kept, text, provider)
                notes = (
                    *again.notes,
                    f"history: {len(assembled.dropped)} older messages compressed into a summary",
                )
                assembled = replace(again, notes=notes, dropped=())
            state = self._state(log)
            marker = _last_seq(self.core)
            group = self._group(text, lease)
            with self.core.grouped(group):
                if summary is not None:  # a step of the turn: its undo takes the summary back
                    with self.core.transaction("chat summary", self.author) as tx:
                        _record_compression(tx, self.conversation_id, log.head, *summary)
                    log = self.log()
                with self.core.transaction("chat message", self.author) as tx:
                    drafted = state["draft"]
                    event = append(
                        tx,
                        EventType.USER_MESSAGE,
                        self.conversation_id,
                        text=text,
                        parent=log.head,
                        # the Draft as the message found it: a rewind to the message puts
                        # it back (a Draft opened before the conversation too)
                        data={
                            "draft_before": {"id": drafted["id"], "event": drafted["event"]}
                            if drafted
                            else None
                        },
                    )
                user = ChatMessage.from_event(event)
                lease.update(user_message=user.id, state_before=state, marker=marker)
                return self._answer(
                    user,
                    state,
                    marker,
                    provider=provider,
                    assembled=assembled,
                    on_event=on_event,
                    cancel=cancel,
                    rpi=rpi,
                )

    def regenerate(
        self,
        *,
        on_event: Callable[[object], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> Turn:
        """Replace the last assistant answer (and its Draft revision) with a new one.

        From a head that is a user message (after a rewind) it answers that
        message. A ``regenerate`` system event names the replaced and the new
        message.
        """
        with self._turn("regenerate") as lease:
            log = self.log()
            chain = log.transcript()
            users = [i for i, r in enumerate(chain) if r.kind == EventType.USER_MESSAGE]
            if not users:
                raise WorkshopError(
                    "nothing to regenerate: the conversation has no user message yet",
                    hint="send one first ('strata ask')",
                )
            at = users[-1]
            user = chain[at]
            replaced = next(
                (r.id for r in reversed(chain[at + 1 :]) if r.kind == EventType.ASSISTANT_MESSAGE),
                None,
            )
            answers = [r for r in chain[at + 1 :] if r.kind == EventType.ASSISTANT_MESSAGE]
            # without a model chosen, the one that gave the answer being replaced
            used = str(answers[-1].data.get("model") or "") if answers else ""
            provider = self._provider(fallback=used or None)
            was_rpi = any(r.data.get("rpi") for r in answers)
            # an RPI answer cut short (a crash, a cancel, a provider error) resumes from its
            # first unfinished phase; any other answer's progress is void
            if not (was_rpi and answers and answers[-1].data.get("error")):
                self._clear_rpi()
            checkpoint = _checkpoint_across(self.core, chain[at + 1 :])
            state = self._state(log)
            marker = _last_seq(self.core)
            draft = _draft_at(self.core, chain[: at + 1])
            lease.update(
                pending={
                    "command": "chat regenerate",
                    "user_message": user.id,
                    "replaced": replaced,
                    "draft": draft,
                    "checkpoint": checkpoint,
                },
                state_before=state,
                marker=marker,
            )
            with self.core.grouped(self._group(f"regenerate: {user.text}", lease)):
                published_before = transition(
                    self.core, draft=draft, checkpoint=checkpoint, author=self.author
                )
                lease.update(transitioned=True, published_before=published_before)
                return self._answer(
                    user,
                    state,
                    marker,
                    provider=provider,
                    assembled=None,  # assembled once the files are back as at the message
                    on_event=on_event,
                    cancel=cancel,
                    replaced=replaced or "",
                    published_before=published_before,
                    rpi=was_rpi,
                )

    def _group(self, title: str, lease: Lease) -> Group:
        """The operation group of one turn (kind ``workshop``), named in the turn's lease.

        Every operation of the turn (the user's message, the Draft's start and
        revisions, the ``chat …`` operation) is a step of it: ``strata op log``
        shows the turn as one line, and one ``strata undo`` reverses it
        (:func:`undo_workshop`, on the ``chat …`` step that names the others).
        A turn killed midway is finished in its group (:func:`finish_turn`), then the
        core closes the group, marked interrupted.
        """
        group = self.core.new_group(
            "workshop", title, self.author, conversation=self.conversation_id, undo="handler"
        )
        lease.update(group=group.to_json())
        return group

    def _clear_rpi(self) -> None:
        """Forget the Research -> Plan -> Implement progress (a rewind or regenerate voids it)."""
        from strata.workshop.rpi import clear, rpi_folder

        clear(rpi_folder(self.core.layout.repo, self.conversation_id))

    def _answer(
        self,
        user: ChatMessage,
        state: dict[str, Any],
        marker: int,
        *,
        provider: Provider,
        assembled: Assembled | None,
        on_event: Callable[[object], None] | None,
        cancel: CancelToken | None,
        replaced: str | None = None,
        published_before: str | None = None,
        rpi: bool = False,
    ) -> Turn:
        """Run the agent on ``user``'s message and record the answer (one ``chat …`` operation).

        With ``rpi`` the Research -> Plan -> Implement loop answers
        (:func:`strata.workshop.rpi.run_rpi_agent`), resumable by the message's id.
        """
        from strata.agent.loop import AgentResult, StepRecord, run_agent
        from strata.providers.base import TextDelta
        from strata.providers.compat import CompatProvider, fallback, proposal_data
        from strata.workbench.draft import open_draft
        from strata.workshop.events import StepFinished, StepStarted, ToolResultEvent

        core = self.core
        log = self.log()
        draft_before = open_draft(core)
        partial: list[str] = []
        steps: list[StepRecord] = []

        def emit(event: object) -> None:
            if on_event is not None:
                on_event(event)

        def stream(event: object) -> None:
            if isinstance(event, TextDelta):
                partial.append(event.text)
            emit(event)

        def step_started(n: int) -> None:
            partial.clear()
            emit(StepStarted(n))

        def tool_done(n: int, call_id: str, tool: str, result: ToolResult) -> None:
            emit(ToolResultEvent(n, call_id, tool, result.text, result.is_error))

        def step_done(record: StepRecord) -> None:
            steps.append(record)
            emit(StepFinished(record.step, record.event_id, record.finish_reason))

        error: BaseException | None = None
        result: AgentResult | None = None
        try:
            if assembled is None:
                assembled = self._assemble(
                    _history(log.transcript(user.parent)), user.text, provider
                )
            system, history = assembled.system, list(assembled.messages)
            tools = self.tools() if callable(self.tools) else self.tools
            from strata.providers.window import input_budget

            common: dict[str, Any] = {
                "system": system,
                "max_steps": self.max_steps,
                "history": history,
                "tools": tools,
                "cancel": cancel,
                "on_event": stream,
                "on_step_start": step_started,
                "on_tool_result": tool_done,
                "on_step": step_done,
                "data": {"workshop": {"conversation": self.conversation_id, "message": user.id}},
                "limits": self._limits(),
                "draft_on_write": True,
                # every step's request within the model's context, as the first prompt is
                "input_budget": input_budget(provider, assembled.window),
                "source": {
                    "kind": "workshop",
                    "conversation": self.conversation_id,
                    "message": user.id,
                },
            }
            from strata.workshop.rpi import loop_detector, rpi_folder, run_rpi_agent

            def answer(provider: Provider) -> AgentResult:
                if rpi:
                    return run_rpi_agent(
                        core,
                        provider,
                        user.text,
                        state=rpi_folder(core.layout.repo, self.conversation_id),
                        key=user.id,
                        **common,
                    )
                return run_agent(core, provider, user.text, loop=loop_detector(), **common)

            try:
                result = answer(provider)
            except ProviderError as exc:
                compat = fallback(provider, exc) if not steps else None
                if compat is None:
                    raise
                provider = compat  # the server refuses tools: the compatibility flow
                result = answer(provider)
            if result.stopped == "max_steps":
                raise WorkshopStepLimit(result.max_steps)
        except (StrataError, KeyboardInterrupt) as exc:
            error = exc
        draft = open_draft(core)
        revision = draft.tip().id if draft is not None else None
        text = steps[-1].text if steps and error is None else "".join(partial)
        if isinstance(error, WorkshopStepLimit) and steps:
            text = steps[-1].text
        data: dict[str, Any] = {
            "rpi": rpi,
            "model": self.model or provider.name,
            "provider": provider.name,
            "draft_revision": revision,
            "draft_id": draft.id if draft is not None else None,
            "tool_calls": [list(s.tool_calls) for s in steps],
            "steps": [s.event_id for s in steps],
            "traces": [t for s in steps for t in s.traces],
        }
        # what was cut to fit the prompt, and each step's request
        notes = [*(assembled.notes if assembled is not None else ())]
        notes += result.notes if result is not None else []
        if notes:
            data["context_notes"] = notes
        if isinstance(provider, CompatProvider):
            data["compat"] = proposal_data(provider)
        if error is not None:
            data["error"] = {"type": type(error).__name__, "message": str(error)}
            data["interrupted"] = isinstance(error, ProviderCancelled | KeyboardInterrupt)
        ops = _ops_since(core, marker)
        command = "chat turn" if replaced is None else "chat regenerate"
        with core.transaction(command, self.author) as tx:
            parent = user.id
            if assembled is not None and assembled.notices:  # seed 000's fallback notice
                card = append(
                    tx,
                    EventType.SYSTEM_EVENT,
                    self.conversation_id,
                    text="context: " + "; ".join(assembled.notices),
                    parent=parent,
                    data={"kind": "context_notice", "notices": list(assembled.notices)},
                )
                parent = card.id
            if draft_before is None and draft is not None:
                card = append(
                    tx,
                    EventType.SYSTEM_EVENT,
                    self.conversation_id,
                    text=f"Draft {draft.id} created",
                    parent=parent,
                    data={"kind": "draft_created", "draft_id": draft.id},
                )
                parent = card.id
            event = append(
                tx,
                EventType.ASSISTANT_MESSAGE,
                self.conversation_id,
                text=text,
                parent=parent,
                data=data,
                author=Author("workshop", "agent", provider.model or None),
                # the traces no Draft revision links (steps before the first write)
                artifacts=tuple(t for s in steps if s.event_id is None for t in s.traces),
            )
            if replaced is not None:
                append(
                    tx,
                    EventType.SYSTEM_EVENT,
                    self.conversation_id,
                    text="regenerated the answer",
                    chain=False,
                    head=event.id,
                    data={
                        "kind": "regenerate",
                        "replaced_message_id": replaced or None,
                        "new_message_id": event.id,
                    },
                )
            tx.details.update(
                workshop={
                    "conversation": self.conversation_id,
                    "state_before": state,
                    "published_before": published_before,
                    "ops": ops,
                }
            )
        if error is not None:
            raise error
        return Turn(user, ChatMessage.from_event(event), revision)

    def _assemble(self, history: list[Message], text: str, provider: Provider) -> Assembled:
        """The system text and the history a turn sends (the ``prompt`` hook's, if any)."""
        from strata.workshop.fit import Assembled

        if self.prompt is not None:
            from strata.workbench.draft import open_draft

            draft = open_draft(self.core)
            folder = draft.path if draft is not None else self.core.root
            made = self.prompt(folder, history, text, provider)
            if isinstance(made, Assembled):
                return made
            return Assembled(made[0], tuple(made[1]))
        system = self.system() if callable(self.system) else self.system
        return Assembled(system, tuple(history))

    def _limits(self) -> WriteLimits:
        """The bounds on one turn's writes (``[edits]`` of ``config.toml``)."""
        from strata.agent.tools import WriteLimits

        return WriteLimits.from_config(self.core.config.raw)

    def _provider(self, *, fallback: str | None = None) -> Provider:
        """The provider of this turn: the one given, else the model's (else ``fallback``)."""
        if self.provider is not None:
            return self.provider
        if self.open_model is None:
            raise WorkshopError(
                "no model to answer with",
                hint="pass provider= or open_model= to Repository.workshop()",
            )
        return self.open_model(self.model or fallback or None)

    # -- rewind, model, Draft and checkpoints --------------------------------------------

    def rewind(self, message_id: str) -> RewindResult:
        """Go back to ``message_id``: the head, the Draft (and Published across a publish).

        Later records stay in the log, inactive. Nothing changes when the
        message is not in the active transcript or a checkpoint it needs is gone.
        """
        core = self.core
        with self._turn(f"rewind to {message_id}") as lease:
            log = self.log()
            target = log.find(message_id)
            chain = log.transcript()
            ids = [r.id for r in chain]
            if target.id not in ids:
                raise WorkshopError(
                    f"message {target.id} is not in the active transcript",
                    hint="see 'strata chat log'; rewind moves only back along it",
                )
            at = ids.index(target.id)
            checkpoint = _checkpoint_across(core, chain[at + 1 :])
            draft = _draft_at(core, chain[: at + 1])
            state = self._state(log)
            marker = _last_seq(core)
            pending = {
                "command": "chat rewind",
                "target": target.id,
                "head_before": log.head,
                "draft": draft,
                "checkpoint": checkpoint,
            }
            # a rewind killed midway is finished by the next writer (finish_turn)
            lease.update(pending=pending, state_before=state, marker=marker)
            published_before = transition(
                core, draft=draft, checkpoint=checkpoint, author=self.author
            )
            lease.update(transitioned=True, published_before=published_before)
            self._clear_rpi()
            event, op_id = _record_rewind(
                core, self.conversation_id, pending, state, published_before, marker, self.author
            )
        return RewindResult(
            self.conversation_id,
            target.id,
            log.head,
            draft["id"] if draft else None,
            draft["event"] if draft else None,
            checkpoint,
            event.id,
            op_id,
        )

    def _record_one(
        self,
        what: str,
        command: str,
        kind: EventType,
        text: str,
        data: dict[str, Any] | None = None,
    ) -> Event:
        """Append one record after the head, as one undoable ``command`` operation."""
        with self._turn(what):
            log = self.log()
            state = self._state(log)
            with self.core.transaction(command, self.author) as tx:
                event = append(
                    tx, kind, self.conversation_id, text=text, parent=log.head, data=data
                )
                tx.details.update(
                    workshop={"conversation": self.conversation_id, "state_before": state}
                )
        return event

    def set_model(self, spec: str) -> ChatMessage:
        """Switch the model (it becomes the workspace's default); a ``model_switch`` card."""
        spec = spec.strip()
        if not spec:
            raise UsageError("name a model: PROVIDER or PROVIDER:MODEL ('strata models')")
        from strata.providers.config import resolve

        resolve(spec, config=self.core.config.raw, environ={})  # an unknown name fails here
        before = self.model
        event = self._record_one(
            "switch the model",
            "chat model",
            EventType.SYSTEM_EVENT,
            f"switched model to {spec}",
            {"kind": "model_switch", "model": spec, "from": before or None},
        )
        self._model = None
        if self.provider is not None and self.open_model is not None:
            self.provider = None  # the next turn opens the new model
        return ChatMessage.from_event(event)

    def summarize(self, text: str) -> ChatMessage:
        """Append a ``summary_message``: the model is sent it instead of the messages before it.

        Context compression: the messages it summarises stay in the transcript
        (and the log) but are no longer sent to the model.
        """
        if not text.strip():
            raise UsageError("the summary is empty")
        event = self._record_one(
            "summarize the conversation", "chat summary", EventType.SUMMARY_MESSAGE, text
        )
        return ChatMessage.from_event(event)

    def review(self) -> ReviewResult:
        """The Draft's change set against its base (the Draft's own review)."""
        from strata.workbench.draft import current_draft

        return current_draft(self.core).review(author=self.author)

    def publish(self, message: str = "", *, expect: str | None = None) -> PublishResult:
        """Publish the Draft; a ``checkpoint_publish`` card names the checkpoint taken."""
        from strata.workbench.draft import current_draft

        with self._turn("publish the Draft") as lease:
            pending = self._pending(lease, "chat publish")
            token = _PUBLISHING.set(self.conversation_id)  # its own card comes next
            try:
                result = current_draft(self.core).publish(
                    message, expect=expect, author=self.author
                )
            finally:
                _PUBLISHING.reset(token)
            _record_card(self.core, lease.info, pending, self.author)
        return result

    def discard(self) -> ChatMessage:
        """Discard the Draft; a ``draft_discarded`` card."""
        from strata.workbench.draft import current_draft

        with self._turn("discard the Draft") as lease:
            draft = current_draft(self.core)
            pending = self._pending(lease, "chat discard", draft_id=draft.id)
            draft.discard(author=self.author)
            return _record_card(self.core, lease.info, pending, self.author)

    def draft_banner(self) -> str | None:
        """One line on the open Draft (date, age, source), or None: what the chat shows."""
        from strata.workbench.draft import draft_banner

        return draft_banner(self.core, now_ms=self.core.now_ms())

    def draft_reminder(self) -> str | None:
        """The reminder of a Draft open longer than a day (None: not due or dismissed)."""
        from strata.workbench.draft import draft_reminder

        return draft_reminder(self.core, now_ms=self.core.now_ms())

    def dismiss_reminder(self) -> None:
        """Dismiss the Draft's reminder for a day (recorded in ``draft.json``)."""
        from strata.workbench.draft import dismiss_reminder

        dismiss_reminder(self.core, now_ms=self.core.now_ms())

    def has_draft(self) -> bool:
        """True while a Draft is open."""
        return self.core.layout.draft_state.exists()

    def moves_published(self, message_id: str | None = None) -> str | None:
        """The checkpoint a rewind to ``message_id`` (None: a regenerate) restores Published from.

        None when it would leave Published as it is (no publish or restore
        lies after the message): what a front end asks confirmation for.
        """
        log = self.log()
        chain = log.transcript()
        if message_id is None:
            users = [i for i, r in enumerate(chain) if r.kind == EventType.USER_MESSAGE]
            if not users:
                return None
            at = users[-1]
        else:
            target = log.find(message_id)
            ids = [r.id for r in chain]
            if target.id not in ids:
                return None
            at = ids.index(target.id)
        return _checkpoint_across(self.core, chain[at + 1 :])

    def checkpoint_of(self, target: str) -> str:
        """The checkpoint ``target`` names: a card of this conversation (its Restore), or an id.

        A publish card's checkpoint (the files before that publish), a
        restore card's ``pre_restore`` checkpoint; else ``target`` as a checkpoint id.
        """
        wanted = target.strip()
        if len(wanted) >= 4:
            cards = [r for r in self.log().records if r.id.startswith(wanted)]
            if len(cards) == 1:
                taken = [r for r in self.log().records if r.data.get("card") == cards[0].id]
                if taken:
                    raise WorkshopError(
                        f"the publish of card {cards[0].id} was undone: its checkpoint is not "
                        "offered",
                        hint="give a checkpoint id ('strata checkpoint list')",
                    )
                key = _PUBLISHED_MOVES.get(cards[0].system_kind or "")
                if key is None or not cards[0].data.get(key):
                    raise WorkshopError(
                        f"message {cards[0].id} is not a checkpoint card",
                        hint="give a publish card's id from 'strata chat log', or a checkpoint "
                        "id ('strata checkpoint list')",
                    )
                return str(cards[0].data[key])
        from strata.workbench.checkpoints import Checkpoints

        return Checkpoints(self.core).get(wanted).id

    def restore(self, checkpoint_id: str) -> ChatMessage:
        """Restore Published from a checkpoint (no Draft open); a ``checkpoint_restore`` card."""
        from strata.workbench.checkpoints import Checkpoints

        with self._turn("restore a checkpoint") as lease:
            checkpoints = Checkpoints(self.core)
            checkpoint = checkpoints.get(checkpoint_id)
            pending = self._pending(lease, "chat restore", checkpoint_id=checkpoint.id)
            checkpoints.restore(checkpoint.id, author=self.author)
            return _record_card(self.core, lease.info, pending, self.author)

    def _pending(self, lease: Lease, command: str, **extra: Any) -> dict[str, Any]:
        """Keep in the lease what the next writer needs to finish ``command`` if it is killed."""
        log = self.log()
        pending = {"command": command, "parent": log.head, **extra}
        lease.update(
            pending=pending,
            conversation=self.conversation_id,
            state_before=self._state(log),
            marker=_last_seq(self.core),
        )
        return pending

    # -- helpers ---------------------------------------------------------------------------

    def _state(self, log: ConversationLog) -> dict[str, Any]:
        """What ``strata undo`` of the next operation brings back."""
        from strata.workbench.draft import open_draft

        draft = open_draft(self.core)
        drafted: dict[str, Any] | None = None
        if draft is not None:
            tip = draft.tip()
            drafted = {"id": draft.id, "event": tip.id, "tree": self.core.tree_of(tip)}
        return {
            "conversation": self.conversation_id,
            "head": log.head,
            "draft": drafted,
            "model": active_model(self.core),
        }

    @contextlib.contextmanager
    def _turn(self, what: str) -> Iterator[Lease]:
        """Hold the turn lock (else :class:`WorkshopBusy`) and a lease naming the turn.

        Whatever the block records is one operation group (kind ``workshop``,
        titled ``what``; a turn's own, titled by its message, replaces it):
        a rewind's Draft and Published moves and its ``chat rewind`` are one
        line of ``strata op log`` and one undo, as a turn is.
        """
        folder = self.core.layout.repo / FOLDER
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = _turns(self.core, held=True)
                raise WorkshopBusy(
                    what, [str(h.get("what") or h.get("run_id")) for h in held] or ["a turn"]
                ) from None
            with self.core.writing():
                pass  # finish what a killed turn left first
            from strata.workbench.timetravel import busy_steps

            stepping = busy_steps(self.core)  # an agent outside the Workshop ('strata agent')
            if stepping:
                raise WorkshopBusy(what, [str(h.get("what")) for h in stepping])
            lease_id = f"turn_{self.core.new_event_id().removeprefix('evt_')}"
            # the core's lease of an action in progress: should this process die, the next
            # writer finishes it (finish_turn) and closes its group
            group = self.core.new_group(
                "workshop", what, self.author, conversation=self.conversation_id, undo="handler"
            )
            with open_group(
                self.core, group, TURN_LEASE, lease_id, what=what, conversation=self.conversation_id
            ) as lease:
                yield lease
        finally:
            os.close(fd)


def workshop(
    core: Core,
    conversation: str | None = None,
    *,
    provider: Provider | None = None,
    model: str | None = None,
    author: Author | None = None,
    environ: Mapping[str, str] | None = None,
) -> Workshop:
    """A :class:`Workshop` whose models open from the repository's ``config.toml``.

    ``environ`` is where API keys are read (the library reads no environment
    itself; the CLI passes its own).
    """
    from strata.providers.config import open_provider

    env = dict(environ or {})

    def open_model(spec: str | None) -> Provider:
        return open_provider(spec, config=core.config.raw, environ=env, root=core.root)

    def prompt(folder: Path, history: list[Message], text: str, provider: Provider) -> Assembled:
        # the files the agent works on (manifest, maps, small files inlined), the workspace
        # digest, the situation and the skills as context items, the last messages, within
        # the model's context; see strata.workshop.context, .skills and .fit
        from strata.digest import digest_context_item
        from strata.providers.window import context_window, output_room
        from strata.workshop.context import build_manifest
        from strata.workshop.fit import fit_prompt
        from strata.workshop.skills import context_folder, cut_notices, plan_context

        rules = core.rules()
        manifest = build_manifest(folder, rules=rules)
        item = digest_context_item(core)
        plan = plan_context(context_folder(core.layout.repo), text, manifest)
        formats[:] = plan.formats  # the *_get_styles tools of this turn
        items = [*([item] if item is not None else []), *plan.items]
        window = context_window(provider)
        made = fit_prompt(
            folder,
            history,
            text,
            window=window,
            output=output_room(provider, window) if window is not None else 0,
            tool_specs=[spec for spec, _ in tools().values()],
            context_items=items,
            rules=rules,
            manifest=manifest,
        )
        notices = (*plan.notices, *cut_notices(made.notes, [t for t, _ in plan.items]))
        return replace(made, notices=notices) if notices else made

    formats: list[str] = []  # the Office formats of the last prompt (gating the style tools)

    def tools() -> ToolTable:
        from strata.workshop.tools import workshop_tools

        # one per turn: recall_tool_result's memory
        return workshop_tools(rules=core.rules(), styles=formats)

    return Workshop(
        core,
        conversation,
        provider=provider,
        model=model,
        author=author,
        open_model=open_model,
        prompt=prompt,
        tools=tools,
    )


# -- the state a rewind or an undo goes to -----------------------------------------------


def _draft_at(core: Core, chain: list[ChatMessage]) -> dict[str, Any] | None:
    """The Draft as it was at the last record of ``chain`` (None: no Draft was open).

    The last answer's revision; else, back to a publish or discard, the
    Draft a user message found when it was sent (one opened before the
    conversation, or by hand between turns).
    """
    for record in reversed(chain):
        if record.kind == EventType.ASSISTANT_MESSAGE and record.draft_revision:
            event = core.event(record.draft_revision)
            return {
                "id": record.data.get("draft_id"),
                "event": event.id,
                "tree": core.tree_of(event),
            }
        if record.system_kind in _DRAFT_ENDS:
            return None
        before = record.data.get("draft_before") if record.kind == EventType.USER_MESSAGE else None
        if isinstance(before, dict) and before.get("event"):
            event = core.event(str(before["event"]))
            return {"id": before.get("id"), "event": event.id, "tree": core.tree_of(event)}
    return None


def _checkpoint_across(core: Core, later: list[ChatMessage]) -> str | None:
    """The checkpoint that puts Published back before ``later``: the first move's own.

    A publish card names the checkpoint its publish took; a restore card its
    ``pre_restore`` checkpoint. :class:`WorkshopError` when it is gone.
    """
    from strata.workbench.checkpoints import Checkpoints

    for record in later:
        key = _PUBLISHED_MOVES.get(record.system_kind or "")
        if key is None:
            continue
        checkpoint = record.data.get(key)
        try:
            if not checkpoint:
                raise UnknownRef(str(checkpoint))
            return Checkpoints(core).get(str(checkpoint)).id
        except StrataError:
            raise WorkshopError(
                f"cannot rewind across {record.system_kind} {record.id}: its checkpoint "
                f"{checkpoint or '(none recorded)'} is missing; nothing was changed",
                hint="rewind to a message after it, or restore a checkpoint by hand "
                "('strata checkpoint list')",
            ) from None
    return None


def transition(
    core: Core,
    *,
    draft: Mapping[str, Any] | None,
    checkpoint: str | None,
    author: Author | None = None,
) -> str | None:
    """Bring Published to ``checkpoint`` (when given) and the Draft to ``draft`` (None: no Draft).

    Returns the ``pre_restore`` checkpoint taken when Published moved (what
    puts it back), else None. Each change is an operation of its own; the
    caller records the ``chat …`` operation that groups them.
    """
    from strata.workbench.checkpoints import Checkpoints
    from strata.workbench.draft import open_draft, start_draft
    from strata.workbench.timetravel import rewind_in, step

    pre: str | None = None
    current = open_draft(core)
    if checkpoint is not None:
        if current is not None:
            current.discard(author=author)
            current = None
        Checkpoints(core).restore(checkpoint, author=author)
        pre = _newest_pre_restore(core)
    if draft is None:
        if current is not None:
            current.discard(author=author)
        return pre
    tree = ObjectId(str(draft["tree"]))
    if current is not None and core.tree_of(current.tip()) == tree:
        return pre
    if current is None:  # the Draft had ended: a new one, its first revision at the tree
        start_draft(
            core,
            author=author,
            tree=tree,
            data={"reopened": str(draft["event"])},
            source={"kind": "workshop", "reopened": str(draft["event"])},
        )
        return pre
    current.record("before rewind", author=author)
    target = core.event(str(draft["event"]))
    with step(current, "rewind the Draft"), core.transaction("draft rewind", author) as tx:
        rewind_in(tx, current, target, author=author)
    return pre


def _newest_pre_restore(core: Core) -> str | None:
    from strata.workbench.checkpoints import Checkpoints

    return next((c.id for c in Checkpoints(core).list() if c.kind == "pre_restore"), None)


#: how a summary is put to the model
SUMMARY_PREFIX = "Summary of the conversation so far:\n"


def _record_compression(
    tx: Transaction, conversation: str, parent: str | None, text: str, by_model: bool, count: int
) -> str:
    """Record a ``summary_message`` and its ``context_compressed`` card; the card's id."""
    made = append(
        tx,
        EventType.SUMMARY_MESSAGE,
        conversation,
        text=text,
        parent=parent,
        data={"automatic": True, "messages": count, "by_model": by_model},
    )
    card = append(
        tx,
        EventType.SYSTEM_EVENT,
        conversation,
        text=f"context compressed: {count} earlier messages summarised to fit the model",
        parent=made.id,
        data={"kind": "context_compressed", "summary_id": made.id, "messages": count},
    )
    return card.id


def _history(chain: list[ChatMessage]) -> list[Message]:
    """The transcript as the model reads it: user and assistant messages, summaries.

    A failed turn (its answer marked ``error``: a provider failure, a cancel,
    a crash) is left out, its user message with it: a failed request is not
    sent again with the next one (``strata chat regenerate`` asks it again).
    """
    from strata.providers.base import Message

    out: list[Message] = []
    summaries = [i for i, r in enumerate(chain) if r.kind == EventType.SUMMARY_MESSAGE]
    if summaries:  # the last summary stands for everything before it
        chain = chain[summaries[-1] :]
    failed: set[str] = set()
    asked: str | None = None
    for record in chain:
        if record.kind == EventType.USER_MESSAGE:
            asked = record.id
        elif record.kind == EventType.ASSISTANT_MESSAGE and _failed(record):
            failed.add(record.id)
            if asked is not None:
                failed.add(asked)
    for record in chain:
        if record.id in failed:
            continue
        if record.kind == EventType.USER_MESSAGE:
            out.append(Message("user", record.text))
        elif record.kind == EventType.ASSISTANT_MESSAGE and record.text:
            out.append(Message("assistant", record.text))
        elif record.kind == EventType.SUMMARY_MESSAGE:
            out.append(Message("user", SUMMARY_PREFIX + record.text))
    return out


def _failed(answer: ChatMessage) -> bool:
    """True for the answer of a turn that failed (a turn stopped at its step limit did not)."""
    error = answer.data.get("error")
    return bool(error) and not (
        isinstance(error, dict) and error.get("type") == WorkshopStepLimit.__name__
    )


def _last_seq(core: Core) -> int:
    ops = core.ledger.operations(limit=1)
    return int(ops[0]["seq"]) if ops else 0


def _ops_since(core: Core, seq: int) -> list[str]:
    """The ids of the operations committed after the record ``seq``, oldest first."""
    found: list[str] = []
    for record in core.ledger.driver.scan(kind="operation", reverse=True):
        if record.seq <= seq:
            break
        found.append(str(record.body["id"]))
    found.reverse()
    return found


def _record_rewind(
    core: Core,
    conversation: str,
    pending: Mapping[str, Any],
    state: Mapping[str, Any],
    published_before: str | None,
    marker: int,
    author: Author | None,
    *,
    recovered: bool = False,
) -> tuple[ChatMessage, str]:
    """Record the ``chat rewind`` operation of a rewind whose changes are made."""
    draft = pending.get("draft")
    ops = _ops_since(core, marker)
    with core.transaction("chat rewind", author) as tx:
        event = append(
            tx,
            EventType.SYSTEM_EVENT,
            conversation,
            text=f"rewound to {pending['target']}",
            chain=False,
            head=str(pending["target"]),
            data={
                "kind": "rewind",
                "to": pending["target"],
                "from": pending.get("head_before"),
                "draft_revision": draft["event"] if draft else None,
                "checkpoint_id": pending.get("checkpoint"),
                **({"recovered": True} if recovered else {}),
            },
        )
        tx.details.update(
            workshop={
                "conversation": conversation,
                "state_before": dict(state),
                "published_before": published_before,
                "ops": ops,
            }
        )
    return ChatMessage.from_event(event), tx.id


#: a card's command -> the operation it follows (done when that one is in the ledger)
_CARD_AFTER = {
    "chat publish": "publish",
    "chat discard": "discard",
    "chat restore": "checkpoint restore",
}


def _record_card(
    core: Core,
    info: Mapping[str, Any],
    pending: Mapping[str, Any],
    author: Author | None,
    *,
    recovered: bool = False,
) -> ChatMessage:
    """Record the card of a publish, discard or restore (its ``chat …`` operation)."""
    from strata.ledger.driver import EventFilter

    command = str(pending["command"])
    conversation = str(info.get("conversation", ""))
    marker = int(info.get("marker") or 0)
    ops = _ops_since(core, marker)
    published_before: str | None = None
    data: dict[str, Any]
    if command == "chat publish":
        record = next(
            iter(core.ledger.driver.find_events(EventFilter(action_type="publish"), limit=1))
        )
        event = Event.from_json(record.body, seq=record.seq)
        published_before = str(event.data.get("checkpoint_id"))
        text, data = _publish_card(event)
    elif command == "chat discard":
        text = f"Discarded Draft {pending.get('draft_id')}"
        data = {"kind": "draft_discarded", "draft_id": pending.get("draft_id")}
    else:
        published_before = _newest_pre_restore(core)
        text = f"Restored checkpoint {pending.get('checkpoint_id')}"
        data = {
            "kind": "checkpoint_restore",
            "checkpoint_id": pending.get("checkpoint_id"),
            "pre_restore_checkpoint_id": published_before,
        }
    if recovered:
        data["recovered"] = True
    with core.transaction(command, author) as tx:
        card = append(
            tx,
            EventType.SYSTEM_EVENT,
            conversation,
            text=text,
            parent=pending.get("parent"),
            data=data,
        )
        tx.details.update(
            workshop={
                "conversation": conversation,
                "state_before": dict(info.get("state_before") or {}),
                "published_before": published_before,
                "ops": ops,
            }
        )
    return ChatMessage.from_event(card)


def _publish_card(event: Event) -> tuple[str, dict[str, Any]]:
    """The text and data of the checkpoint card of the ``publish`` event ``event``."""
    cp = str(event.data.get("checkpoint_id"))
    draft_id = event.data.get("draft_id")
    text = (
        f"Published Draft {draft_id} ({len(event.files)} file(s)); checkpoint {cp} holds "
        f"the files before ('strata chat restore {cp[:12]}' restores them)"
    )
    data = {
        "kind": "checkpoint_publish",
        "checkpoint_id": cp,
        "publish_event_id": event.id,
        "draft_id": draft_id,
        "files_changed": len(event.files),
    }
    return text, data


#: the conversation whose own ``chat publish`` is running (it records its card itself)
_PUBLISHING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "strata_workshop_publishing", default=None
)


def publish_cards(tx: Transaction, event: Event) -> list[str]:
    """Add the checkpoint card of a publish to each conversation that edited its Draft.

    A publish hook of :class:`~strata.core.Core` (called inside the publish's
    transaction, so the cards and the publish are one operation), whatever
    published: ``strata publish``, the API, the studio, another
    conversation. A conversation edited the Draft when one of its answers
    names the Draft (``data.draft_id``). Its card is chained after its head,
    so a later rewind to a message before it restores Published from the
    checkpoint the publish took. Returns the conversations told.
    """
    draft_id = event.data.get("draft_id")
    if not draft_id:
        return []
    skip = _PUBLISHING.get()
    records = [
        r
        for r in all_records(tx.core)
        if r.kind == EventType.ASSISTANT_MESSAGE and r.data.get("draft_id") == draft_id
    ]
    told: list[str] = []
    for conversation in dict.fromkeys(r.conversation for r in records):
        if conversation == skip:
            continue
        log = ConversationLog.load(tx.core, conversation)
        if any(r.data.get("publish_event_id") == event.id for r in log.records):
            continue
        text, data = _publish_card(event)
        append(
            tx,
            EventType.SYSTEM_EVENT,
            conversation,
            text=text,
            parent=log.head,
            data={**data, "via": str(tx.command)},
        )
        told.append(conversation)
    return told


def _finish_transition(core: Core, info: Mapping[str, Any]) -> str | None:
    """Finish the state change a killed rewind or regenerate began; the checkpoint before it."""
    from strata.core import SYSTEM

    if info.get("transitioned"):
        return info.get("published_before")
    pending = info["pending"]
    marker = int(info.get("marker") or 0)
    checkpoint = pending.get("checkpoint")
    published_before: str | None = None
    if checkpoint:
        done = [c for c in _ops_commands(core, marker) if c == "checkpoint restore"]
        if done:  # Published was restored already: not again
            published_before = _newest_pre_restore(core)
            checkpoint = None
    pre = transition(core, draft=pending.get("draft"), checkpoint=checkpoint, author=SYSTEM)
    return pre or published_before


def _ops_commands(core: Core, seq: int) -> list[str]:
    """The commands of the operations committed after the record ``seq``."""
    found: list[str] = []
    for record in core.ledger.driver.scan(kind="operation", reverse=True):
        if record.seq <= seq:
            break
        found.append(str(record.body.get("command")))
    return found


def _turns(core: Core, *, held: bool) -> list[dict[str, Any]]:
    folder = core.layout.groups
    leases = active_leases(folder) if held else stale_leases(folder)
    return [h for h in leases if h.get("kind") == TURN_LEASE]


# -- what the core calls -------------------------------------------------------------------


def finish_turn(core: Core, info: Mapping[str, Any]) -> None:
    """Record what a Workshop action whose process was killed left unrecorded.

    The finisher of the Workshop's leases (:data:`TURN_LEASE`), called by the
    core's :func:`~strata.core.groups.recover_groups` inside the turn's group
    with the write lock held; the core closes the group after it. A turn's
    answer is recorded as an interrupted message; a rewind, regenerate,
    publish, discard or restore is carried through and recorded. The Draft's
    half-done step was put back before (:func:`strata.workbench.recovery.recover_draft_steps`).
    """
    _recover_turn(core, info)


def _recover_turn(core: Core, info: Mapping[str, Any]) -> None:
    """Record what a killed turn left unrecorded (its ``chat …`` operation, in its group)."""
    from strata.workbench.draft import open_draft

    pending = info.get("pending")
    command = pending.get("command") if isinstance(pending, dict) else None
    if command is not None and command not in _ops_commands(core, int(info.get("marker") or 0)):
        _recover_pending(core, info, str(command))
        return
    user = info.get("user_message")
    conversation = str(info.get("conversation", ""))
    log = ConversationLog.load(core, conversation)
    if user and log.head == user:
        draft = open_draft(core)
        state = info.get("state_before") or {}
        revision = draft.tip().id if draft is not None else None
        ops = _ops_since(core, int(info.get("marker") or 0))
        with core.transaction("chat turn", Author("strata", "system")) as tx:
            append(
                tx,
                EventType.ASSISTANT_MESSAGE,
                conversation,
                text="",
                parent=str(user),
                data={
                    "draft_revision": revision,
                    "draft_id": draft.id if draft is not None else None,
                    "interrupted": True,
                    "error": {
                        "type": "Interrupted",
                        "message": "the turn was killed before it finished",
                    },
                },
            )
            tx.details.update(
                workshop={"conversation": conversation, "state_before": state, "ops": ops}
            )


def _recover_pending(core: Core, info: Mapping[str, Any], command: str) -> None:
    """Finish a rewind or a regenerate killed before its ``chat …`` operation was recorded.

    The state change is carried through (Published, the Draft), then the
    operation is recorded, so the conversation and the files agree and one
    ``strata undo`` reverses it all. A regenerate's answer is recorded as
    interrupted.
    """
    from strata.core import SYSTEM
    from strata.workbench.draft import open_draft

    pending: Mapping[str, Any] = info["pending"]
    conversation = str(info.get("conversation", ""))
    state: Mapping[str, Any] = info.get("state_before") or {}
    marker = int(info.get("marker") or 0)
    if command in _CARD_AFTER:  # the card, when what it follows is done
        if _CARD_AFTER[command] in _ops_commands(core, marker):
            _record_card(core, info, pending, SYSTEM, recovered=True)
        return
    published_before = _finish_transition(core, info)
    if command == "chat rewind":
        _record_rewind(
            core, conversation, pending, state, published_before, marker, SYSTEM, recovered=True
        )
        return
    draft = open_draft(core)
    ops = _ops_since(core, marker)
    with core.transaction("chat regenerate", SYSTEM) as tx:
        answer = append(
            tx,
            EventType.ASSISTANT_MESSAGE,
            conversation,
            text="",
            parent=str(pending["user_message"]),
            data={
                "draft_revision": draft.tip().id if draft is not None else None,
                "draft_id": draft.id if draft is not None else None,
                "interrupted": True,
                "error": {
                    "type": "Interrupted",
                    "message": "the turn was killed before it finished",
                },
            },
        )
        append(
            tx,
            EventType.SYSTEM_EVENT,
            conversation,
            text="regenerated the answer",
            chain=False,
            head=answer.id,
            data={
                "kind": "regenerate",
                "replaced_message_id": pending.get("replaced"),
                "new_message_id": answer.id,
                "recovered": True,
            },
        )
        tx.details.update(
            workshop={
                "conversation": conversation,
                "state_before": dict(state),
                "published_before": published_before,
                "ops": ops,
            }
        )


def take_cards_back(
    tx: Transaction, operation: str, command: str, *, skip: str | None = None
) -> list[str]:
    """Take back the checkpoint cards operation ``operation`` added (its publish is undone).

    Each card gets an off-chain ``undo`` note naming it (``data.card``); a
    card that is its conversation's head moves the head back to the card's
    parent, so ``chat log`` and the chat no longer show it or offer its
    Restore (:meth:`Workshop.checkpoint_of` refuses it). ``skip`` is a
    conversation left as it is. Returns the cards taken back.
    """
    from strata.ledger.driver import EventFilter

    found = tx.core.ledger.driver.find_events(
        EventFilter(operation_id=operation, action_type=EventType.SYSTEM_EVENT), limit=None
    )
    taken: list[str] = []
    for record in found:
        card = ChatMessage.from_event(Event.from_json(record.body, seq=record.seq))
        if card.system_kind != "checkpoint_publish" or card.conversation == skip:
            continue
        log = ConversationLog.load(tx.core, card.conversation)
        append(
            tx,
            EventType.SYSTEM_EVENT,
            card.conversation,
            text=f"undid {command}: its checkpoint card is taken back",
            chain=False,
            head=card.parent if log.head == card.id else log.head,
            data={"kind": "undo", "undid": operation, "command": command, "card": card.id},
        )
        taken.append(card.id)
    return taken


def undo_workshop(tx: Transaction, op: OperationRecord) -> bool:
    """``strata undo`` of a ``chat …`` operation: the state before it comes back whole.

    Published from the checkpoint taken before it moved, the Draft to the
    revision it had (reopened when it had ended, discarded when there was
    none), the conversation's head and the model where they were. False for
    any other operation, after taking back the checkpoint cards it added
    (:func:`take_cards_back`: a ``strata publish`` undone, the generic undo
    then reverses the publish itself).
    """
    info = op.details.get("workshop")
    if not op.command.startswith("chat ") or not isinstance(info, dict):
        take_cards_back(tx, op.id, op.command)
        return False
    state = info.get("state_before")
    if not isinstance(state, dict):
        return False
    core = tx.core
    from strata.workbench.timetravel import busy_steps

    busy = _turns(core, held=True) + busy_steps(core)
    if busy:
        raise WorkshopBusy(f"undo {op.command}", [str(h.get("what")) for h in busy])
    marker = _last_seq(core)
    transition(
        core,
        draft=state.get("draft"),
        checkpoint=info.get("published_before"),
        author=tx.author,
    )
    inner = _ops_since(core, marker)
    tx.set_view(core.view())
    conversation = str(info.get("conversation") or state.get("conversation") or "")
    append(
        tx,
        EventType.SYSTEM_EVENT,
        conversation,
        text=f"undid {op.command}",
        chain=False,
        head=state.get("head"),
        data={"kind": "undo", "undid": op.id, "command": op.command},
    )
    if "model" in state and state.get("model") != active_model(core):
        append(
            tx,
            EventType.SYSTEM_EVENT,
            conversation,
            text=f"model back to {state['model'] or 'the default'}",
            chain=False,
            head=state.get("head"),
            data={"kind": "model_switch", "model": state["model"]},
        )
    for inner_op in info.get("ops", []):  # a chat publish's cards in other conversations
        take_cards_back(tx, str(inner_op), op.command, skip=conversation)
    tx.details.update(
        undid=op.id,
        undid_also=[*info.get("ops", []), *inner],
        redo_refused=f"a Workshop operation ({op.command}) is not redone; do it again instead",
    )
    return True


__all__ = [
    "RewindResult",
    "Turn",
    "Workshop",
    "finish_turn",
    "transition",
    "undo_workshop",
    "workshop",
]
