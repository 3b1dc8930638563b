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
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

from strata.providers.base import Provider

#: seconds a server gets to answer one of the questions above
PROBE_TIMEOUT = 2.0

_known: dict[tuple[str, str], int | None] = {}
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
