"""How many tokens a provider's model reads at once: its context window.

A Workshop prompt must fit the model's context with room for the answer; a
local model served with a small context (llama.cpp's ``--ctx-size``) refuses
a longer prompt outright. :func:`context_window` says how large it is:

1. ``context_window`` of the provider's ``[providers.NAME]`` table, when set;
2. else, for an OpenAI-compatible server other than OpenAI's own, what the
   server reports: llama.cpp's ``GET /props``
   (``default_generation_settings.n_ctx``), its ``GET /slots`` (``n_ctx`` of a
   slot), or vLLM's ``GET /v1/models`` (``max_model_len`` of the model);
3. else None (unknown: the prompt keeps to its fixed character limits).

A server is asked once per process (its answer, or the lack of one, is kept
by base URL and model), with a short time-out: a server that does not answer
in time is treated as one that does not say.

Tokens are estimated, never counted (:func:`tokens`: :data:`CHARS_PER_TOKEN`
characters a token, on the safe side of every tokenizer's average).
:func:`input_budget` is what a request's messages and tools may take: the
window less the answer's room (:func:`output_room`) and a margin. A loop
that sends a request once per step (:func:`strata.agent.step.take_step`)
keeps each within it with :func:`fit_request`: the results of tool calls
accumulate across a turn's steps, so the second step of a turn can pass a
small window the first fitted.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from strata.providers.base import Message, Provider, Request, ToolCall

#: seconds a server gets to answer one of the questions above
PROBE_TIMEOUT = 2.0

#: characters counted as one token (on the safe side of every tokenizer's average)
CHARS_PER_TOKEN = 3
#: tokens counted for each message's framing (role markers, separators)
MESSAGE_TOKENS = 8
#: tokens kept free besides the answer's room: the estimate's error
MARGIN_TOKENS = 128
#: the answer's room when the provider sets no output limit: this share of the window
OUTPUT_SHARE = 4
#: the characters of a tool result kept when the newest results are cut to fit
KEEP_CHARS = 400
#: a tool call's string argument longer than this is left out of an earlier answer to fit
ARGUMENT_CHARS = 200

_known: dict[tuple[str, str], int | None] = {}
_CUT = "[cut to fit the model's context:"
_LEFT_OUT = "[left out to fit the model's context:"
_CUT_MARK = re.compile(r"\n\[cut to fit the model's context: (\d+) more characters\]$")
_lock = threading.Lock()


def context_window(provider: Provider, *, timeout: float = PROBE_TIMEOUT) -> int | None:
    """The context window of ``provider``'s model in tokens, or None when it is unknown."""
    configured = getattr(provider, "context_window", None)
    if isinstance(configured, int) and configured > 0:
        return configured
    base_url = getattr(provider, "base_url", None)
    if not isinstance(base_url, str) or not provider.adapter.startswith("openai"):
        return None
    from strata.providers.openai import OPENAI_BASE_URL

    if base_url.rstrip("/") == OPENAI_BASE_URL:
        return None
    key = (base_url.rstrip("/"), provider.model)
    with _lock:
        if key in _known:
            return _known[key]
    found = server_context_window(key[0], provider.model, timeout=timeout)
    with _lock:
        _known[key] = found
    return found


def server_context_window(base_url: str, model: str, *, timeout: float) -> int | None:
    """What the server at ``base_url`` reports as ``model``'s context (None: it does not say)."""
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    props = _get(root + "/props", timeout)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        for where in (settings, props):
            if isinstance(where, dict) and _tokens(where.get("n_ctx")):
                return int(where["n_ctx"])
    slots = _get(root + "/slots", timeout)
    if isinstance(slots, list):
        sizes = [int(s["n_ctx"]) for s in slots if isinstance(s, dict) and _tokens(s.get("n_ctx"))]
        if sizes:
            return min(sizes)
    models = _get(base_url + "/models", timeout)
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list):
        for entry in data:
            wanted = isinstance(entry, dict) and entry.get("id") in (model, None)
            if wanted and _tokens(entry.get("max_model_len")):
                return int(entry["max_model_len"])
    return None


def forget() -> None:
    """Forget what servers reported (the next call asks again)."""
    with _lock:
        _known.clear()


def _tokens(value: Any) -> bool:
    return type(value) is int and value > 0


def _get(url: str, timeout: float) -> Any:
    """The JSON of ``GET url``, or None when it fails in any way."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            if answer.status != 200:
                return None
            return json.loads(answer.read(1_000_000))
    except urllib.error.HTTPError as refused:  # 404: the server has no such route
        refused.close()
        return None
    except (OSError, ValueError):
        return None


# -- fitting a request into the window -----------------------------------------------------


def tokens(text: str) -> int:
    """The estimated tokens of ``text``."""
    return -(-len(text) // CHARS_PER_TOKEN)


def output_room(provider: Provider, window: int) -> int:
    """The tokens kept for the answer: the provider's output limit, else a quarter of the window."""
    limit = getattr(provider, "max_tokens", None)
    if isinstance(limit, int) and limit > 0:
        return limit
    return window // OUTPUT_SHARE


def input_budget(provider: Provider, window: int | None) -> int | None:
    """The tokens a request's messages and tools may take in ``window`` (None: unknown)."""
    if window is None:
        return None
    return max(0, window - output_room(provider, window) - MARGIN_TOKENS)


def message_tokens(message: Message) -> int:
    """The estimated tokens of one message: its text, its calls' arguments, its framing."""
    calls = json.dumps([c.to_json() for c in message.tool_calls]) if message.tool_calls else ""
    return tokens(message.content) + tokens(calls) + MESSAGE_TOKENS


def request_tokens(request: Request) -> int:
    """The estimated tokens of what ``request`` sends: its messages and its tools."""
    specs = json.dumps([t.to_json() for t in request.tools]) if request.tools else ""
    return sum(message_tokens(m) for m in request.messages) + tokens(specs)


def fit_request(request: Request) -> tuple[Request, tuple[str, ...]]:
    """``request`` within its :attr:`~strata.providers.base.Request.input_budget`, and what was cut.

    Without a budget, or when the request fits, it is returned as it is.
    Otherwise, in this order and only as far as needed:

    1. the results of tool calls older than the newest answer's, oldest
       first, each replaced whole by a one-line marker;
    2. the text of the assistant's earlier answers and their calls' long
       string arguments (a file written), oldest first;
    3. the newest answer's results, the longest first, cut at their end
       (at least :data:`KEEP_CHARS` characters kept each);
    4. the end of the system message (the context sections come last in
       it), down to :data:`KEEP_CHARS` characters;
    5. the newest answer's results, replaced whole by the marker.

    Every user message (the request itself) is sent whole. The result
    depends on the messages and the budget alone, and fitting it again
    changes nothing: a replay that carries the sent messages on fits the next
    step as the recording did. The notes say, one line each, what was left
    out; a request still over the budget says so too.
    """
    budget = request.input_budget
    if budget is None or request_tokens(request) <= budget:
        return request, ()
    messages = list(request.messages)
    over = request_tokens(request) - budget
    newest = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    counts = dict.fromkeys(("left", "short", "cut", "system"), 0)

    def put(i: int, message: Message, what: str) -> None:
        nonlocal over
        over -= message_tokens(messages[i]) - message_tokens(message)
        messages[i] = message
        counts[what] += 1

    older = [i for i, m in enumerate(messages) if m.role == "tool" and i < newest]
    latest = [i for i, m in enumerate(messages) if m.role == "tool" and i > newest]
    for i in older:
        if over > 0 and (left := _left_out(messages[i])) is not None:
            put(i, left, "left")
    for i, m in enumerate(messages[: max(newest, 0)]):
        if over > 0 and m.role == "assistant" and (short := _shortened(m)) != m:
            put(i, short, "short")
    for i in sorted(latest, key=lambda i: (-len(messages[i].content), i)):
        if over > 0 and (cut := _cut(messages[i], over)) is not None:
            put(i, cut, "cut")
    system = messages[0] if messages and messages[0].role == "system" else None
    if over > 0 and system is not None and (cut := _cut(system, over)) is not None:
        put(0, cut, "system")
    for i in latest:
        if over > 0 and (left := _left_out(messages[i])) is not None:
            put(i, left, "left")
    where = f"the prompt's {budget} tokens"
    notes = [
        f"{counts[what]} {label} to fit {where}"
        for what, label in (
            ("left", "tool results left out"),
            ("short", "earlier answers shortened"),
            ("cut", "tool results cut at their end"),
            ("system", "system message cut at its end"),
        )
        if counts[what]
    ]
    if over > 0:
        notes.append(f"the request is still about {over} tokens over {where}")
    return replace(request, messages=tuple(messages)), tuple(notes)


def _left_out(message: Message) -> Message | None:
    """A tool result replaced by a marker (None: the marker would not be shorter)."""
    marker = (
        f"{_LEFT_OUT} the result of {message.name or 'a tool'} ({len(message.content)} "
        "characters); call the tool again if you need it]"
    )
    if len(marker) >= len(message.content) or message.content.startswith(_LEFT_OUT):
        return None
    return replace(message, content=marker)


def _cut(message: Message, over: int) -> Message | None:
    """``message`` cut at its end by about ``over`` tokens (None: nothing to gain).

    A message cut before is cut further, its marker counting every character
    left out; one at :data:`KEEP_CHARS` stays as it is.
    """
    text, more = message.content, 0
    marked = _CUT_MARK.search(text)
    if marked is not None:
        text, more = text[: marked.start()], int(marked.group(1))
    keep = max(KEEP_CHARS, len(text) - over * CHARS_PER_TOKEN - 120)
    if keep + 80 >= len(text):
        return None
    more += len(text) - keep
    return replace(message, content=f"{text[:keep]}\n{_CUT} {more} more characters]")


def _shortened(message: Message) -> Message:
    """An earlier answer without its text and with its calls' long strings left out."""
    calls = tuple(
        ToolCall(c.id, c.name, {k: _short(v) for k, v in c.arguments.items()})
        for c in message.tool_calls
    )
    text = message.content
    if len(text) > ARGUMENT_CHARS:
        text = f"[left out to fit the model's context: {len(text)} characters]"
    return replace(message, content=text, tool_calls=calls)


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ARGUMENT_CHARS:
        return f"[left out to fit the model's context: {len(value)} characters]"
    return value
