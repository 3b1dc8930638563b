"""``strata chat``: the Workshop in a terminal (prompt_toolkit for input, rich for output).

Not a full-screen application: the conversation scrolls like a shell session.
The composer is a :class:`prompt_toolkit.PromptSession` (line editing and
history; the bottom bar names the model and the keys); everything else is
printed with :mod:`rich`:

- the assistant's answer streams as it arrives;
- each tool call is one line (``→ read_file path=notes.txt``), a failed one
  is followed by ``✗`` and its error;
- system events (model switch, publish, discard, rewind, errors) are cards
  that say in words what happened (no colour-only cues);
- an RPI turn (``/rpi …``) shows its phases and plan items as they start.

Keys: Enter sends, Ctrl-C during a turn cancels it (at the next model or tool
call; what the turn recorded so far is kept), Ctrl-C at the prompt clears the
line, Ctrl-R regenerates the last answer (or answers the head after a rewind),
Ctrl-D on an empty line quits; F2 shows the review, F3 the history; Alt-P and
Alt-D write ``/publish`` and ``/discard`` into the composer, for Enter to
confirm (a destructive action is never one key).

Commands: ``/rewind MSG``, ``/regenerate``, ``/model NAME``, ``/review``,
``/publish``, ``/discard``, ``/restore CARD``, ``/dismiss``, ``/new [TITLE]``,
``/history``, ``/rpi TEXT``, ``/help``, ``/quit``.

The Draft stays in view: on start and after each turn a line says which
Draft is open, from when and what opened it; the review opens by itself when
a turn opens a Draft and on start when one is open; a Draft open longer than
a day brings the reminder, whose actions are ``/review``, ``/discard`` and
``/dismiss`` (back a day later). Every action that moves Published (a
publish, a checkpoint restore, a rewind or regenerate across a publish) asks
``[y/N]`` first, and ``/rewind`` always does (it discards later messages);
``/new`` with a Draft open asks Publish / Discard / Cancel.

A turn runs in a worker thread while the main thread waits, so that Ctrl-C
(delivered to the main thread) only sets the turn's
:class:`~strata.providers.base.CancelToken` and never interrupts the
Workshop in the middle of writing its records.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

from strata.errors import ProviderCancelled, ProviderUnavailable, StrataError
from strata.providers.base import CancelToken

if TYPE_CHECKING:
    from prompt_toolkit.input import Input
    from prompt_toolkit.output import Output
    from rich.console import Console


class ChatMessageLike(Protocol):
    """What the terminal reads of a conversation message."""

    @property
    def id(self) -> str:
        """The message's id (what ``/rewind`` takes)."""
        ...

    @property
    def kind(self) -> str:
        """``user_message``, ``assistant_message``, ``system_event``, ``summary_message``."""
        ...

    @property
    def text(self) -> str:
        """What it says."""
        ...


class WorkshopLike(Protocol):
    """The part of :class:`strata.workshop.session.Workshop` the terminal drives."""

    @property
    def model(self) -> str:
        """The model the next turn uses."""
        ...

    def messages(self) -> Sequence[Any]:
        """The conversation up to its head."""
        ...

    def send(
        self,
        text: str,
        *,
        rpi: bool = False,
        on_event: Callable[[Any], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> Any:
        """Run one turn."""
        ...

    def regenerate(
        self,
        *,
        on_event: Callable[[Any], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> Any:
        """Answer the head's user message again."""
        ...

    def rewind(self, message_id: str) -> Any:
        """Move the head back to a message."""
        ...

    def set_model(self, spec: str) -> Any:
        """Switch the model."""
        ...

    def review(self) -> Any:
        """The Draft's changes."""
        ...

    def publish(self) -> Any:
        """Publish the Draft."""
        ...

    def discard(self) -> Any:
        """Discard the Draft."""
        ...


HELP = """\
Type a message and press Enter: the agent answers, and its edits land in the Draft.

  /rewind MSG     go back to message MSG (its Draft revision is restored)
  /regenerate     answer the last message again            (Ctrl-R)
  /model NAME     switch model (provider or provider:model)
  /review         the Draft's changes
  /publish        publish the Draft to the workspace
  /discard        throw the Draft away
  /restore CARD   a publish card's Restore: the files before that publish
  /dismiss        dismiss the open Draft's day-old reminder for a day
  /new [TITLE]    start a new conversation (asks what to do with an open Draft)
  /history        the conversation, with message ids
  /rpi TEXT       send TEXT as a research → plan → implement turn
  /help           this help
  /quit           leave (Ctrl-D)

Keys: Ctrl-R regenerate · F2 review · F3 history · Alt-P writes /publish and
Alt-D /discard into the composer (Enter confirms) · Ctrl-D quit.
Ctrl-C during a turn cancels it; Ctrl-C at the prompt clears the line."""

COMMANDS = (
    "/rewind",
    "/regenerate",
    "/model",
    "/review",
    "/publish",
    "/discard",
    "/restore",
    "/dismiss",
    "/new",
    "/history",
    "/rpi",
    "/help",
    "/quit",
)


class _OutputFile(io.TextIOBase):
    """A text file that writes through a prompt_toolkit output (so tests can capture it)."""

    def __init__(self, output: Output) -> None:
        self.output = output

    def write(self, text: str) -> int:
        self.output.write_raw(text)
        return len(text)

    def flush(self) -> None:
        self.output.flush()


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arguments(arguments: dict[str, Any]) -> str:
    return " ".join(f"{k}={_short(v, 40)}" for k, v in arguments.items())


def _who(kind: str) -> str:
    if "user" in kind:
        return "you"
    if "system" in kind:
        return "system"
    return "agent"


class _Renderer:
    """Turns a turn's events into terminal output."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.streamed = False
        self.at_line_start = True

    def text(self, text: str, *, style: str | None = None) -> None:
        self.console.print(text, end="", markup=False, highlight=False, style=style, soft_wrap=True)
        self.console.file.flush()
        if text:
            self.at_line_start = text.endswith("\n")

    def line(self, text: str, *, style: str | None = None) -> None:
        if not self.at_line_start:
            self.text("\n")
        self.console.print(text, markup=False, highlight=False, style=style, soft_wrap=True)
        self.console.file.flush()
        self.at_line_start = True

    def card(self, title: str, body: str = "") -> None:
        from rich.panel import Panel
        from rich.text import Text

        if not self.at_line_start:
            self.text("\n")
        self.console.print(
            Panel(Text(body or title), title=title if body else None, expand=False),
            highlight=False,
        )
        self.console.file.flush()
        self.at_line_start = True

    def event(self, event: Any) -> None:
        kind = getattr(event, "kind", "")
        if kind == "text":
            if not self.streamed:
                self.line("agent:", style="bold")
                self.streamed = True
            self.text(event.text)
        elif kind == "tool_call":
            call = event.call
            self.line(f"  → {call.name} {_arguments(call.arguments)}".rstrip(), style="cyan")
        elif kind == "tool_result" and getattr(event, "is_error", False):
            self.line(f"    ✗ {_short(event.text, 100)}", style="red")
        elif kind == "tool_completed" and getattr(event, "is_error", False):
            self.line(f"    ✗ {event.name} failed", style="red")
        elif kind == "phase_started":
            self.line(f"· {event.phase}…", style="dim")
        elif kind == "implement_progress":
            self.line(
                f"· item {event.current_item}/{event.total_items}: {_short(event.item_label)}",
                style="dim",
            )

    def finish(self, turn: Any) -> None:
        if not self.streamed:
            text = _turn_text(turn)
            if text:
                self.line("agent:", style="bold")
                self.text(text)
        if not self.at_line_start:
            self.text("\n")


def _turn_text(turn: Any) -> str:
    for name in ("text", "assistant_message", "message"):
        value = getattr(turn, name, None)
        if isinstance(value, str):
            return value
        if value is not None and isinstance(getattr(value, "text", None), str):
            return str(value.text)
    return ""


class Chat:
    """One terminal session on a Workshop."""

    def __init__(
        self,
        workshop: WorkshopLike,
        *,
        input: Input | None = None,
        output: Output | None = None,
        history_file: Path | None = None,
    ) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory
        from rich.console import Console

        self.workshop = workshop
        history: History = (
            FileHistory(str(history_file)) if history_file is not None else InMemoryHistory()
        )
        self.session: PromptSession[str] = PromptSession(
            history=history,
            input=input,
            output=output,
            key_bindings=self._keys(),
            bottom_toolbar=self._toolbar,
        )
        if output is not None:
            size = output.get_size()
            self.console = Console(
                file=cast("IO[str]", _OutputFile(output)),
                width=size.columns,
                color_system=None,
                force_terminal=False,
            )
        else:
            self.console = Console(highlight=False)
        self.out = _Renderer(self.console)

    def _model(self) -> str:
        if self.workshop.model:
            return self.workshop.model
        from strata.errors import StrataError
        from strata.providers.config import default_spec

        core = getattr(self.workshop, "core", None)
        try:  # config.toml's [model] default, by name (STRATA_MODEL is the CLI's to read)
            named = default_spec(core.config.raw, {}) if core is not None else None
        except StrataError:
            named = None
        return f"{named} (the default)" if named else "the workspace's default"

    def _toolbar(self) -> str:
        return f" model: {self._model()}  │  Ctrl-R regenerate · Ctrl-D quit · /help"

    def _keys(self) -> Any:
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

        keys = KeyBindings()

        @keys.add("c-r")
        def _regenerate(event: KeyPressEvent) -> None:
            event.app.exit(result="/regenerate")

        @keys.add("f2")
        def _review(event: KeyPressEvent) -> None:
            event.app.exit(result="/review")

        @keys.add("f3")
        def _history(event: KeyPressEvent) -> None:
            event.app.exit(result="/history")

        # publish and discard are only written into the composer: Enter confirms them
        @keys.add("escape", "p")
        def _publish(event: KeyPressEvent) -> None:
            event.current_buffer.text = "/publish"
            event.current_buffer.cursor_position = len("/publish")

        @keys.add("escape", "d")
        def _discard(event: KeyPressEvent) -> None:
            event.current_buffer.text = "/discard"
            event.current_buffer.cursor_position = len("/discard")

        return keys

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Read and answer until /quit or Ctrl-D; the exit status."""
        self.out.line(f"Strata Workshop · model: {self._model()} · /help for commands")
        self.show_history(limit=10, header=False)
        self.show_draft(review=True, remind=True)
        while True:
            try:
                text = self.session.prompt("you> ")
            except KeyboardInterrupt:
                continue
            except EOFError:
                self.out.line("bye")
                return 0
            text = text.strip()
            if not text:
                continue
            if text.startswith("/"):
                if self.command(text) == "quit":
                    self.out.line("bye")
                    return 0
            else:
                self.send(text)

    def send(self, text: str, *, rpi: bool = False) -> None:
        """Send a message and show the answer as it streams."""
        w = self.workshop
        self.turn(lambda on, c: w.send(text, rpi=rpi, on_event=on, cancel=c))

    def turn(self, start: Callable[[Callable[[Any], None], CancelToken], Any]) -> None:
        """Run a turn in a worker thread; Ctrl-C cancels it; then the turn's system events."""
        seen = {m.id for m in self.workshop.messages()}
        try:
            self._turn(start)
        finally:
            created = False
            for m in self.workshop.messages():
                if m.id not in seen and "system" in m.kind and m.text:
                    self.out.card("Event", m.text)
                    created = created or getattr(m, "system_kind", None) == "draft_created"
            self.show_draft(review=created)

    def show_draft(self, *, review: bool = False, remind: bool = False) -> None:
        """The open Draft's line; its review (``review``); the day-old reminder (``remind``)."""
        w = self.workshop
        banner = getattr(w, "draft_banner", None)
        line = banner() if banner is not None else None
        if line is None:
            return
        self.out.line(line, style="yellow")
        reminder = getattr(w, "draft_reminder", None)
        due = reminder() if remind and reminder is not None else None
        if due:
            self.out.card(
                "Old Draft",
                f"{due}\n/review shows it · /discard throws it away · /dismiss reminds you "
                "again in a day",
            )
        if review:
            try:
                self.out.card("Review", _review_text(w.review()))
            except StrataError as exc:
                self.error(exc)

    def confirm(self, question: str) -> bool:
        """Ask ``question`` and wait for y or n (anything else, Ctrl-C or Ctrl-D: no)."""
        try:
            answer = self.session.prompt(f"{question} [y/N] ")
        except (KeyboardInterrupt, EOFError):
            answer = ""
        if answer.strip().lower() in ("y", "yes"):
            return True
        self.out.line("(cancelled: nothing changed)", style="dim")
        return False

    def _moves(self, message_id: str | None) -> str | None:
        moves = getattr(self.workshop, "moves_published", None)
        return moves(message_id) if moves is not None else None

    def _turn(self, start: Callable[[Callable[[Any], None], CancelToken], Any]) -> None:
        cancel = CancelToken()
        renderer = _Renderer(self.console)
        self.out = renderer
        outcome: dict[str, Any] = {}

        done = threading.Event()

        def work() -> None:
            try:
                outcome["turn"] = start(renderer.event, cancel)
            except BaseException as exc:  # reported by the main thread
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name="workshop-turn", daemon=True)
        worker.start()
        # an Event, not Thread.join: a join interrupted by Ctrl-C may report a thread that
        # still runs as ended (Python 3.11)
        while not done.is_set():
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                if not cancel.cancelled:
                    cancel.cancel()
                    renderer.line("(cancelling the turn…)", style="yellow")
        error = outcome.get("error")
        if isinstance(error, ProviderCancelled):
            renderer.card("Turn cancelled", "Cancelled: what the turn recorded so far is kept.")
        elif isinstance(error, StrataError):
            self.error(error)
            if isinstance(error, ProviderUnavailable):
                self.offer_switch()
        elif error is not None:
            raise error
        else:
            renderer.finish(outcome.get("turn"))

    def offer_switch(self) -> None:
        """After a provider that stayed down: list the configured models, switch to the chosen."""
        import os

        from strata.providers.config import alternatives

        core = getattr(self.workshop, "core", None)
        if core is None:
            return
        current = self.workshop.model or self._model().split(" ")[0]
        offered = alternatives(current, config=core.config.raw, environ=os.environ)
        if not offered:
            return
        listed = "\n".join(f"  {n}) {spec}" for n, spec in enumerate(offered, 1))
        self.out.card("Switch model?", f"The model stayed down. Configured models:\n{listed}")
        try:
            answer = self.session.prompt(f"Switch to [1-{len(offered)}, Enter keeps it] ")
        except (KeyboardInterrupt, EOFError):
            answer = ""
        choice = answer.strip()
        if not choice.isdigit() or not 1 <= int(choice) <= len(offered):
            self.out.line("(model kept)", style="dim")
            return
        self.workshop.set_model(offered[int(choice) - 1])
        self.out.card(
            "Model switched",
            f"Model switched to {self.workshop.model}. Ctrl-R or /regenerate asks it again.",
        )

    def error(self, error: StrataError) -> None:
        """Show an error card (message and hint)."""
        body = f"error: {error.message}"
        if error.hint:
            body += f"\nhint: {error.hint}"
        self.out.card("Error", body)

    # -- commands --------------------------------------------------------------------------

    def command(self, text: str) -> str | None:
        """Run a slash command; ``"quit"`` ends the session."""
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        try:
            return self._command(name, argument)
        except StrataError as exc:
            self.error(exc)
            return None

    def _command(self, name: str, argument: str) -> str | None:
        w = self.workshop
        if name in ("/quit", "/exit"):
            return "quit"
        if name == "/help":
            self.out.card("Help", HELP)
        elif name == "/regenerate":
            checkpoint = self._moves(None)
            if checkpoint and not self.confirm(
                f"Regenerating goes back across a publish: the workspace's files are restored "
                f"from checkpoint {checkpoint}. Go on?"
            ):
                return None
            self.turn(lambda on, c: w.regenerate(on_event=on, cancel=c))
        elif name == "/rpi":
            if not argument:
                self.out.card("Usage", "usage: /rpi TEXT (send TEXT as an RPI turn)")
            else:
                self.send(argument, rpi=True)
        elif name == "/rewind":
            if not argument:
                self.out.card("Usage", "usage: /rewind MSG (see /history for the ids)")
                return None
            checkpoint = self._moves(argument)
            question = (
                "Rewinding will discard all messages after this point and revert Draft "
                "changes made after this point."
            )
            if checkpoint:
                question += (
                    f" It goes back across a publish: the workspace's files are restored from "
                    f"checkpoint {checkpoint}."
                )
            if not self.confirm(question + " Rewind?"):
                return None
            w.rewind(argument)
            head = w.messages()
            last = head[-1] if head else None
            tail = ""
            if last is not None and "user" in last.kind:
                tail = "\nThe head is your message: Ctrl-R or /regenerate answers it again."
            self.out.card("Rewound", f"Rewound to {argument}.{tail}")
        elif name == "/model":
            if not argument:
                self.out.card("Model", f"The model is {self._model()}. Switch with /model NAME.")
                return None
            w.set_model(argument)
            self.out.card("Model switched", f"Model switched to {w.model}.")
        elif name == "/review":
            self.out.card("Review", _review_text(w.review()))
        elif name == "/publish":
            if self.confirm("Publish the Draft: its changes replace the workspace's files?"):
                self.out.card("Published", _publish_text(w.publish()))
        elif name == "/restore":
            self._restore(argument)
        elif name == "/dismiss":
            dismiss = getattr(w, "dismiss_reminder", None)
            if dismiss is not None:
                dismiss()
                self.out.card("Reminder dismissed", "The Draft reminder comes back in a day.")
        elif name == "/new":
            self._new(argument)
        elif name == "/discard":
            w.discard()
            self.out.card("Discarded", "The Draft was discarded; the workspace is unchanged.")
        elif name == "/history":
            self.show_history()
        else:
            known = ", ".join(COMMANDS)
            self.out.card("Unknown command", f"unknown command {name}; try one of {known}")
        return None

    def _restore(self, argument: str) -> None:
        w: Any = self.workshop
        if not argument:
            self.out.card("Usage", "usage: /restore CARD (a publish card's id, see /history)")
            return
        checkpoint = w.checkpoint_of(argument)
        if self.confirm(
            f"Restore the workspace's files from checkpoint {checkpoint} (the files before "
            "that publish)? 'strata undo' reverses it."
        ):
            card = w.restore(checkpoint)
            self.out.card("Restored", str(card.text))

    def _new(self, title: str) -> None:
        w: Any = self.workshop
        if w.has_draft():
            self.show_draft()
            try:
                answer = self.session.prompt(
                    "A Draft is open: [p]ublish it, [d]iscard it, or [c]ancel? "
                )
            except (KeyboardInterrupt, EOFError):
                answer = "c"
            choice = answer.strip().lower()[:1]
            if choice == "p":
                self.out.card("Published", _publish_text(w.publish()))
            elif choice == "d":
                w.discard()
                self.out.card("Discarded", "The Draft was discarded; the workspace is unchanged.")
            else:
                self.out.line("(cancelled: no new conversation)", style="dim")
                return
        self.workshop = w.new_conversation(title or None)
        self.out.card("New conversation", f"Started conversation {self.workshop_id()}.")

    def workshop_id(self) -> str:
        """The current conversation's id."""
        return str(getattr(self.workshop, "conversation_id", ""))

    def show_history(self, *, limit: int | None = None, header: bool = True) -> None:
        """Print the conversation (the last ``limit`` messages), with ids."""
        messages = list(self.workshop.messages())
        if limit is not None:
            messages = messages[-limit:]
        if header:
            self.out.line(f"{len(messages)} messages" if messages else "no messages yet")
        for m in messages:
            first = m.text.strip().splitlines()[0] if m.text.strip() else ""
            self.out.line(f"[{m.id}] {_who(m.kind)}: {_short(first, 70)}", style="dim")


def _review_text(review: Any) -> str:
    diff = getattr(review, "diff", review)
    files = getattr(diff, "files", None)
    if files is None:
        return str(review)
    if not files:
        return "The Draft has no changes."
    lines = [f"{len(files)} file(s) changed in the Draft:"]
    for f in files:
        lines.append(f"  {f.status:<9} {f.path}  +{f.insertions} -{f.deletions}")
    lines.append("Publish with /publish, or throw the Draft away with /discard.")
    return "\n".join(lines)


def _publish_text(result: Any) -> str:
    files = getattr(result, "files_changed", None)
    checkpoint = getattr(getattr(result, "checkpoint", None), "id", None)
    text = "The Draft was published to the workspace"
    if files is not None:
        text += f" ({files} file(s) changed)"
    if checkpoint:
        text += f"; checkpoint {checkpoint} can bring the workspace back"
    return text + "."


def run(
    workshop: WorkshopLike,
    *,
    input: Input | None = None,
    output: Output | None = None,
    history_file: Path | None = None,
) -> int:
    """Chat with ``workshop`` in the terminal until /quit or Ctrl-D; the exit status.

    ``input`` and ``output`` default to the terminal (tests pass a pipe input
    and an output over a buffer); ``history_file`` keeps the typed lines
    across sessions.
    """
    return Chat(workshop, input=input, output=output, history_file=history_file).run()
