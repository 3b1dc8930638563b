"""A Workshop prompt that fits the model's context, and its compression when it does not.

:func:`fit_prompt` assembles a turn's prompt (:func:`~strata.workshop.context.build_prompt`)
within the model's context window (:func:`strata.providers.window.context_window`):
the window, less the answer's room (the provider's ``max_tokens``), the tool
specifications and a margin, is the prompt's budget, counted at
:data:`~strata.providers.window.CHARS_PER_TOKEN` characters a token (an
estimate on the safe side: English prose runs near four). Each later step of
the turn is kept within the same budget by the step loop
(:func:`strata.providers.window.fit_request`). The user's new message is always sent whole;
the conversation's newest messages take at most :data:`HISTORY_SHARE` of the
rest; the system text gets what is left, and
:func:`~strata.workshop.context.build_prompt` cuts its least important parts
first (file sections, then context items, then the manifest), each cut
named by a ``[truncated: ...]`` marker and a note. When the window is
unknown the prompt keeps to :data:`~strata.workshop.context.LIMITS` and
:data:`HISTORY_CHARS` characters of history.

Older messages the history's budget leaves out are :attr:`Assembled.dropped`:
the Workshop compresses them (seed 000, "Context Building" step 3) into a
``summary_message`` made by :func:`summarize`, recorded with a
``context_compressed`` system event, and sent from then on instead of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from strata.errors import ProviderCancelled, ProviderError, WorkshopError
from strata.providers.base import CancelToken, Message, Provider, Request, ToolSpec, complete
from strata.providers.window import CHARS_PER_TOKEN, MARGIN_TOKENS, MESSAGE_TOKENS, tokens
from strata.store.ignore import IgnoreRules
from strata.workshop.context import INSTRUCTIONS, LIMITS, Limits, Manifest, build_prompt

#: the share of the budget (less the user's message) the conversation's history may take
HISTORY_SHARE = 0.4
#: characters of history sent when the model's context is unknown
HISTORY_CHARS = 24_000
#: the longest summary asked for, in tokens
SUMMARY_TOKENS = 400

SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below for the assistant that continues it. Keep the user's "
    "goals and constraints, the decisions taken, the files named and what was done to them, "
    "and what is still open. Write at most 200 words, plain text, no preamble."
)


@dataclass(frozen=True)
class Assembled:
    """A turn's prompt: the system text, the messages before the user's, what was cut."""

    system: str
    messages: tuple[Message, ...]
    #: one line per section, file or message cut or left out
    notes: tuple[str, ...] = ()
    #: older messages left out for the budget (to be compressed into a summary)
    dropped: tuple[Message, ...] = ()
    #: the model's context in tokens (None: unknown)
    window: int | None = None
    #: context sources missing, unusable or cut (recorded as a ``context_notice`` card)
    notices: tuple[str, ...] = ()


def fit_prompt(
    folder: Path,
    history: Sequence[Message],
    text: str,
    *,
    window: int | None,
    output: int = 0,
    tool_specs: Sequence[ToolSpec] = (),
    context_items: Sequence[tuple[str, str]] = (),
    rules: IgnoreRules | None = None,
    limits: Limits = LIMITS,
    manifest: Manifest | None = None,
) -> Assembled:
    """The prompt of a turn on ``folder`` within ``window`` tokens (see the module's docstring).

    ``output`` is the answer's room in tokens; ``manifest`` is the folder's,
    when built already. :class:`WorkshopError` when
    the window cannot hold the instructions and the user's message.
    """
    specs = json.dumps([s.to_json() for s in tool_specs]) if tool_specs else ""
    if window is None:
        chars: int | None = None
        history_chars = HISTORY_CHARS
    else:
        room = window - output - tokens(specs) - MARGIN_TOKENS - 2 * MESSAGE_TOKENS
        chars = room * CHARS_PER_TOKEN
        needed = len(INSTRUCTIONS) + 600 + len(text)
        if chars < needed:
            need = tokens(specs) + tokens(INSTRUCTIONS) + tokens(text) + 200 + MARGIN_TOKENS
            raise WorkshopError(
                f"the model's context of {window} tokens cannot hold this turn: the "
                f"instructions, the tools and the message need about {need} tokens besides "
                f"the {output} kept for the answer",
                hint="run the model with a larger context (llama.cpp: --ctx-size), lower "
                "max_tokens of the provider, or send a shorter message",
            )
        history_chars = int((chars - len(text)) * HISTORY_SHARE)
    older = list(history)
    kept: list[Message] = []
    used = 0
    budget_cut = False
    while older and len(kept) < limits.messages - 1:
        message = older[-1]
        size = len(message.content) + MESSAGE_TOKENS * CHARS_PER_TOKEN
        if used + size > history_chars:
            budget_cut = True
            break
        kept.insert(0, older.pop())
        used += size
    while kept and kept[0].role == "tool":  # a window never starts with a cut-off call's result
        older.append(kept.pop(0))
    notes: list[str] = []
    if chars is not None:
        system_chars = min(limits.total_chars, chars - len(text) - used)
        limits = Limits(
            total_chars=system_chars,
            file_chars=min(limits.file_chars, max(400, system_chars // 3)),
            file_lines=limits.file_lines,
            messages=limits.messages,
        )
    prompt = build_prompt(
        folder,
        kept,
        user_text=text,
        context_items=context_items,
        rules=rules,
        limits=limits,
        manifest=manifest,
    )
    notes.extend(prompt.truncated)
    dropped = tuple(older) if budget_cut else ()
    if dropped:
        where = f"the model's context is {window} tokens" if window else "the history's limit"
        notes.append(f"history: {len(dropped)} older messages not sent ({where})")
    messages = tuple(m for m in prompt.messages[1:-1])
    return Assembled(prompt.system, messages, tuple(notes), dropped, window)


def summarize(
    provider: Provider,
    messages: Sequence[Message],
    *,
    window: int | None,
    cancel: CancelToken | None = None,
) -> tuple[str, bool]:
    """A summary of ``messages`` and whether the model made it.

    The model is asked (no tools, at most :data:`SUMMARY_TOKENS` tokens) with
    the messages cut from the oldest end to fit ``window``; when it fails or
    answers nothing, the summary is an extract of the messages' first lines
    (a turn is never lost to its compression). A cancel is raised.
    """
    transcript = "\n\n".join(f"{m.role}: {m.content.strip()}" for m in messages if m.content)
    limit = HISTORY_CHARS
    if window is not None:
        room = window - SUMMARY_TOKENS - tokens(SUMMARY_INSTRUCTIONS) - MARGIN_TOKENS - 32
        limit = min(limit, max(0, room) * CHARS_PER_TOKEN)
    if len(transcript) > limit:
        transcript = "[earlier messages cut]\n" + transcript[len(transcript) - limit :]
    request = Request(
        provider.model,
        (Message("system", SUMMARY_INSTRUCTIONS), Message("user", transcript)),
        max_output_tokens=SUMMARY_TOKENS,
    )
    try:
        answer = complete(provider, request, cancel=cancel).text.strip()
    except ProviderCancelled:
        raise
    except ProviderError:
        answer = ""
    if answer:
        return answer, True
    return extract(messages), False


def extract(messages: Sequence[Message], *, chars: int = 2_000) -> str:
    """The first line of each message (the newest kept when they exceed ``chars``)."""
    lines: list[str] = []
    size = 0
    for m in reversed(messages):
        first = (m.content.strip().splitlines() or [""])[0][:200]
        if not first:
            continue
        line = f"- {m.role}: {first}"
        if size + len(line) > chars:
            break
        lines.insert(0, line)
        size += len(line) + 1
    return "Earlier in this conversation (first lines, cut to fit):\n" + "\n".join(lines)
