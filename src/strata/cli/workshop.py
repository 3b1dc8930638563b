"""The Workshop's commands: ``strata ask`` (one headless turn) and ``strata chat …``.

``strata chat`` alone opens the terminal UI (:mod:`strata.workshop.tui`);
its subcommands read and move the conversation: ``log``, ``rewind``,
``regenerate``, ``model``, ``new``, ``list``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from strata.cli.common import (
    emit_json,
    json_option,
    make_author,
    model_option,
    open_repo,
    short,
)
from strata.diff.display import printable, printable_lines
from strata.errors import ProviderUnavailable

if TYPE_CHECKING:
    from strata.repo import Repository
    from strata.workshop.conversation import ChatMessage
    from strata.workshop.session import Turn, Workshop


def _conversation_option(func: Any) -> Any:
    return click.option(
        "--conversation",
        "conversation",
        default=None,
        metavar="ID",
        help="The conversation (an id or prefix, 'strata chat list'); default: the latest.",
    )(func)


def _open(repo: Repository, conversation: str | None, model: str | None = None) -> Workshop:
    """The Workshop of ``repo``, its models opened with this process's API keys."""
    return repo.workshop(
        conversation, model=model, author=make_author(None, None), environ=dict(os.environ)
    )


def _streamer(as_json: bool) -> Callable[[object], None]:
    """Print the answer's text as it streams, and one line per tool call (not with --json)."""
    from strata.providers.base import TextDelta
    from strata.workshop.events import StepFinished, ToolResultEvent
    from strata.workshop.rpi import ImplementProgress, PhaseStarted

    state = {"text": False}

    def on_event(event: object) -> None:
        if as_json:
            return
        if isinstance(event, PhaseStarted | ImplementProgress):
            if state["text"]:
                click.echo()
                state["text"] = False
            if isinstance(event, PhaseStarted):
                click.echo(f"[{event.phase}]", err=True)
            else:
                label = printable(" ".join(event.item_label.split()))[:80]
                click.echo(
                    f"[implement {event.current_item}/{event.total_items}: {label}]", err=True
                )
        elif isinstance(event, TextDelta):
            # the model's text, shown and never obeyed: no escape sequence reaches the terminal
            # (a clipboard write, a hidden link, a line redrawn), no bidi override reorders it
            click.echo(printable_lines(event.text), nl=False)
            sys.stdout.flush()
            state["text"] = True
        elif isinstance(event, ToolResultEvent):
            if state["text"]:
                click.echo()
                state["text"] = False
            mark = "error" if event.is_error else "ok"
            click.echo(f"  [{event.tool}: {mark}]", err=True)
        elif isinstance(event, StepFinished) and state["text"]:
            click.echo()
            state["text"] = False

    return on_event


def _echo_draft(repo: Repository) -> None:
    """The open Draft on stderr (date, age, source), and the day-old reminder with its actions."""
    from strata.workbench.draft import REMINDER_ACTIONS, draft_banner, draft_reminder

    now = repo.now_ms()
    banner = draft_banner(repo, now_ms=now)
    if banner is None:
        return
    click.echo(f"[{printable(banner)}]", err=True)
    reminder = draft_reminder(repo, now_ms=now)
    if reminder is not None:
        click.echo(f"{reminder} {REMINDER_ACTIONS}", err=True)


def _echo_turn(turn: Turn) -> None:
    revision = turn.draft_revision
    where = f"Draft revision {short(revision)}" if revision else "no Draft"
    click.echo(
        f"[message {short(turn.assistant_message.id)}; {where}; "
        "'strata review' shows the Draft, 'strata chat rewind MSG' goes back]",
        err=True,
    )


def _echo_notices(workshop: Workshop, turn: Turn) -> None:
    """The turn's context notice (a skill not used, a style merge that fell back...), if any."""
    parent = turn.assistant_message.parent
    card = next((m for m in workshop.messages() if m.id == parent), None)
    if card is not None and card.system_kind == "context_notice":
        for notice in card.data.get("notices", []):
            click.echo(f"note: {printable(str(notice))}", err=True)


def _offer_switch(repo: Repository, exc: ProviderUnavailable, current: str) -> None:
    """Name, in ``exc``, the configured models a turn that failed after its retries may use."""
    from strata.providers.config import alternatives

    offered = alternatives(current, config=repo.config.raw, environ=os.environ)
    if not offered:
        return
    exc.alternatives = tuple(offered)
    switch = f"switch model: strata ask --model {offered[0].split(':')[0]} ... (configured: "
    switch += ", ".join(offered) + ")"
    exc.hint = f"{exc.hint}; {switch}" if exc.hint else switch


# -- strata ask ---------------------------------------------------------------------------


@click.command("ask")
@click.argument("message")
@_conversation_option
@model_option("The model for this turn (default: the Workshop's, 'strata chat model').")
@click.option("--rpi", is_flag=True, help="Run the Research -> Plan -> Implement loop.")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="The most model calls the turn may make; a turn that reaches it fails (exit 1).",
)
@json_option
def ask(
    message: str,
    conversation: str | None,
    model: str | None,
    rpi: bool,
    max_steps: int,
    as_json: bool,
) -> None:
    """Send MESSAGE to the Workshop's agent: one turn, headless (for scripts).

    The answer streams to stdout; the agent's file edits land in the Draft
    (one revision per step), linked to the answer. The conversation is kept
    in the ledger: 'strata chat log' shows it, 'strata chat rewind MSG' and
    'strata undo' go back.

    \b
    Example:
      strata ask "Add a greeting to README.md"
      strata ask --json --model local "Summarise notes.md"
    """
    with open_repo() as repo:
        workshop = _open(repo, conversation, model)
        workshop.max_steps = max_steps
        if not as_json:
            _echo_draft(repo)  # on start: a Draft already open, and how old
        try:
            turn = workshop.send(message, rpi=rpi, on_event=_streamer(as_json))
        except ProviderUnavailable as exc:
            _offer_switch(repo, exc, model or workshop.model or exc.provider)
            raise
        if as_json:
            emit_json(turn.to_json())
            return
        _echo_turn(turn)
        _echo_notices(workshop, turn)
        _echo_draft(repo)


# -- strata chat ----------------------------------------------------------------------------


@click.group("chat", invoke_without_command=True)
@_conversation_option
@click.pass_context
def chat(ctx: click.Context, conversation: str | None) -> None:
    """Chat with the Workshop's agent in the terminal; or read and move the conversation.

    Alone, 'strata chat' opens the terminal UI (slash commands: /rewind MSG,
    /regenerate, /model NAME, /review, /publish, /discard, /history).

    \b
    Example:
      strata chat
      strata chat log
      strata chat rewind 3f2a91c0
    """
    if ctx.invoked_subcommand is not None:
        return
    import importlib

    try:
        tui = importlib.import_module("strata.workshop.tui")  # ws-rpi's module, lazily
    except ModuleNotFoundError as exc:
        if exc.name != "strata.workshop.tui":
            raise  # the UI is there but a library it needs is not: not ours to hide
        from strata.errors import WorkshopError

        raise WorkshopError(
            "the Workshop's terminal UI is not installed in this build",
            hint="use 'strata ask \"...\"' and the 'strata chat' subcommands meanwhile",
        ) from None
    with open_repo() as repo:
        tui.run(_open(repo, conversation))


def _message_line(m: ChatMessage, head: str | None) -> str:
    marker = "*" if m.id == head else " "
    who = {
        "user_message": "you",
        "assistant_message": "assistant",
        "summary_message": "summary",
    }.get(m.kind, m.system_kind or "system")
    text = m.text.strip().replace("\n", " ")
    if len(text) > 100:
        text = text[:97] + "..."
    text = printable(text)  # a model's text may carry terminal controls: written out
    extra = ""
    if m.draft_revision:
        extra = f"  (Draft revision {short(m.draft_revision)})"
    if m.system_kind == "checkpoint_publish":  # the card's Restore
        extra = f"  (Restore: strata chat restore {short(m.id)})"
    error = m.data.get("error")
    if error:
        said = error.get("message") if isinstance(error, dict) else None
        said = printable(" ".join(str(said or "").split()))[:160]
        what = "interrupted" if m.data.get("interrupted") else "failed"
        extra += f"  [{what}: {said}]" if said else f"  [{what}]"
    return f"{marker} {short(m.id)} {m.ts[:19]} {who}: {text}{extra}"


@chat.command("log")
@_conversation_option
@click.option("--all", "everything", is_flag=True, help="Also inactive records (after rewinds).")
@json_option
def chat_log(conversation: str | None, everything: bool, as_json: bool) -> None:
    """Show the conversation, first message to head (the head is marked *).

    \b
    Example:
      strata chat log
      strata chat log --all --json
    """
    with open_repo() as repo:
        workshop = _open(repo, conversation)
        log = workshop.log()
        records = log.records if everything else log.transcript()
        head = log.head
    if as_json:
        emit_json(
            {
                "conversation": workshop.conversation_id,
                "head": head,
                "messages": [m.to_json() for m in records],
            }
        )
        return
    if not records:
        click.echo("The conversation is empty ('strata ask \"...\"' starts it).")
        return
    for m in records:
        click.echo(_message_line(m, head))


@chat.command("rewind")
@click.argument("message_id", metavar="MSG")
@_conversation_option
@json_option
def chat_rewind(message_id: str, conversation: str | None, as_json: bool) -> None:
    """Go back to message MSG: later messages become inactive, the Draft is as it was then.

    Rewinding to an assistant message restores the Draft revision it made;
    to the first message, discards the Draft; across a publish, restores
    Published from that publish's checkpoint. 'strata undo' reverses it.

    \b
    Example:
      strata chat rewind 3f2a91c0
    """
    with open_repo() as repo:
        result = _open(repo, conversation).rewind(message_id)
    if as_json:
        emit_json(result.to_json())
        return
    where = (
        f"the Draft at revision {short(result.draft_revision)}"
        if result.draft_revision
        else "no Draft"
    )
    published = (
        f"; Published restored from checkpoint {short(result.published_from_checkpoint)}"
        if result.published_from_checkpoint
        else ""
    )
    click.echo(
        f"Rewound to {short(result.message_id)}: {where}{published} ('strata undo' reverses it)"
    )


@chat.command("regenerate")
@_conversation_option
@model_option(
    "The model for the new answer (default: the Workshop's, else the one that gave the "
    "answer being replaced)."
)
@json_option
def chat_regenerate(conversation: str | None, model: str | None, as_json: bool) -> None:
    """Answer the last user message again, replacing the last answer and its Draft revision.

    \b
    Example:
      strata chat regenerate
      strata chat regenerate --model local   # ask another model this time
    """
    with open_repo() as repo:
        turn = _open(repo, conversation, model).regenerate(on_event=_streamer(as_json))
    if as_json:
        emit_json(turn.to_json())
        return
    _echo_turn(turn)


@chat.command("model")
@click.argument("spec", metavar="PROVIDER[:MODEL]")
@_conversation_option
@json_option
def chat_model(spec: str, conversation: str | None, as_json: bool) -> None:
    """Switch the Workshop's model (the workspace's default from now on).

    \b
    Example:
      strata chat model local
    """
    with open_repo() as repo:
        card = _open(repo, conversation).set_model(spec)
    if as_json:
        emit_json(card.to_json())
        return
    click.echo(f"Switched the model to {spec}.")


@chat.command("restore")
@click.argument("target", metavar="CARD|CHECKPOINT")
@_conversation_option
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation (scripts).")
@json_option
def chat_restore(target: str, conversation: str | None, yes: bool, as_json: bool) -> None:
    """Restore Published from a publish card's checkpoint (the card's Restore action).

    CARD is the id of a checkpoint card in 'strata chat log' (a publish's),
    or give a checkpoint id. The files the publish replaced come back; a
    'checkpoint_restore' card says so, and 'strata undo' reverses it. Refused
    while a Draft is open (publish or discard it first). Asks first on a terminal.

    \b
    Example:
      strata chat restore 3f2a91c0
      strata chat restore --yes --json cp_7h2k
    """
    with open_repo() as repo:
        workshop = _open(repo, conversation)
        checkpoint = workshop.checkpoint_of(target)
        if not yes and not as_json and sys.stdin.isatty():
            click.confirm(
                f"Restore Published to checkpoint {checkpoint}? The files it holds replace "
                "the workspace's ('strata undo' reverses it).",
                abort=True,
            )
        card = workshop.restore(checkpoint)
    if as_json:
        emit_json(card.to_json())
        return
    click.echo(f"{printable(card.text)} ('strata undo' reverses it).")


@chat.command("new")
@click.argument("title", required=False, default=None)
@click.option(
    "--draft",
    "with_draft",
    type=click.Choice(["ask", "publish", "discard", "keep"]),
    default="ask",
    show_default=True,
    help="What to do with an open Draft first: ask (on a terminal: Publish / Discard / "
    "Cancel; elsewhere it is kept), publish it, discard it, or keep it open.",
)
@json_option
def chat_new(title: str | None, with_draft: str, as_json: bool) -> None:
    """Start a new conversation (the next 'strata ask' continues it).

    With a Draft open, it first asks: Publish it, Discard it, or Cancel (the
    new conversation is not started). --draft answers for scripts.

    \b
    Example:
      strata chat new "quarterly report"
      strata chat new --draft publish "next topic"
    """
    from strata.workbench.draft import open_draft

    with open_repo() as repo:
        current = _open(repo, None)
        if open_draft(repo) is not None and with_draft == "ask":
            with_draft = "keep"
            if not as_json and sys.stdin.isatty():
                _echo_draft(repo)
                choice = click.prompt(
                    "A Draft is open: [p]ublish it, [d]iscard it, or [c]ancel?",
                    type=click.Choice(["p", "d", "c"]),
                    show_choices=False,
                    default="c",
                )
                if choice == "c":
                    click.echo("Cancelled: no new conversation; the Draft stays open.", err=True)
                    return
                with_draft = {"p": "publish", "d": "discard"}[choice]
        if with_draft == "publish" and open_draft(repo) is not None:
            current.publish()
        elif with_draft == "discard" and open_draft(repo) is not None:
            current.discard()
        workshop = current.new_conversation(title)
    if as_json:
        emit_json({"conversation": workshop.conversation_id, "title": title or ""})
        return
    click.echo(f"Started conversation {workshop.conversation_id}.")


@chat.command("list")
@json_option
def chat_list(as_json: bool) -> None:
    """List the workspace's conversations, the most recent first.

    \b
    Example:
      strata chat list --json
    """
    with open_repo() as repo:
        infos = _open(repo, None).conversations()
    if as_json:
        emit_json({"conversations": [i.to_json() for i in infos]})
        return
    if not infos:
        click.echo("No conversation yet ('strata ask \"...\"' starts one).")
        return
    for i in infos:
        click.echo(f"{i.id}  {i.updated_ts[:19]}  {i.records:4} records  {i.title}")


@click.command("stats")
@json_option
def stats(as_json: bool) -> None:
    """Show the Workshop's local telemetry, computed from the ledger (nothing is sent anywhere).

    Turns (failed ones by reason: provider, validation, step_limit, loop,
    cancelled, killed, disk), Draft changes generated and applied, Drafts
    started, published and discarded, rewinds and how many answers each took
    back, regenerates, undo use and model switches.

    \b
    Example:
      strata stats
      strata stats --json
    """
    from strata.workshop.stats import workshop_stats

    with open_repo() as repo:
        found = workshop_stats(repo).to_json()
    if as_json:
        emit_json(found)
        return
    turns, drafts = found["turns"], found["drafts"]
    reasons = ", ".join(f"{k} {v}" for k, v in turns["failure_reasons"].items()) or "none"
    distances = (
        ", ".join(f"{k} answer(s): {v}" for k, v in found["rewinds"]["distances"].items()) or "none"
    )
    lines = [
        f"conversations     {found['conversations']}",
        f"turns             {turns['total']} ({turns['failed']} failed: {reasons})",
        f"draft changes     {found['draft_changes']['generated']} revision(s) generated, "
        f"{found['draft_changes']['applied']} turn(s) applied edits",
        f"drafts            {drafts['started']} started, {drafts['published']} published, "
        f"{drafts['discarded']} discarded",
        f"rewinds           {found['rewinds']['total']} (distances: {distances})",
        f"regenerates       {found['regenerates']}",
        f"undo              {found['undo']['total']} ({found['undo']['of_workshop']} of the "
        "Workshop)",
        f"model switches    {found['model_switches']}",
    ]
    for line in lines:
        click.echo(line)


COMMANDS = [ask, chat, stats]
