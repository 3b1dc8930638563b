"""Which providers exist: ``config.toml``'s ``[providers.NAME]`` tables, built-ins, environment.

A repository's ``config.toml`` names providers and the default one::

    [model]
    default = "local"

    [providers.local]
    adapter = "openai-chat"          # openai-responses, openai-chat, anthropic, scripted
    model = "qwen2.5:7b"
    base_url = "http://127.0.0.1:11434/v1"

Settings of a ``[providers.NAME]`` table: ``adapter``, ``model``,
``base_url``, ``api_key_env`` (the variable holding its key), ``timeout``
(seconds), ``script`` (the scripted adapter's file, relative to the
workspace), ``reasoning_effort`` (the default of requests that set none),
``research_effort``, ``plan_effort`` and ``implement_effort`` (the OpenAI
adapters' reasoning effort in each phase of a Workshop RPI turn; the summary
and other calls keep ``reasoning_effort``, else ``medium``),
``max_tokens`` (the output limit of requests that set none: Anthropic's
default 4096; the OpenAI adapters' 1024 for a server on this machine, none for
another), ``context_window`` (the model's context in tokens, for the OpenAI
adapters: the Workshop fits its prompts to it; without it a server that
reports its ``n_ctx`` is asked), ``stream`` (false asks for whole JSON answers) and ``tools``
(``native``, the default; ``none`` for a model without tool calling, which
then answers through the compatibility flow of :mod:`strata.providers.compat`;
``auto`` to switch to that flow when the server refuses tools). Any other key is
refused, as a misspelt one would otherwise be ignored.

Two providers exist without configuration: ``openai`` (Responses API, key in
``OPENAI_API_KEY``) and ``anthropic`` (key in ``ANTHROPIC_API_KEY``); a table
of the same name changes their settings. A provider with a ``base_url`` of
its own needs no key unless it names ``api_key_env``.

Which one is used: the spec given (``NAME`` or ``NAME:MODEL``), else
``STRATA_MODEL`` of the environment (same form), else ``[model] default``,
else ``openai`` when ``OPENAI_API_KEY`` is set, else ``anthropic`` when
``ANTHROPIC_API_KEY`` is. The environment is passed in, never read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from strata.errors import ProviderNotConfigured
from strata.providers.base import EFFORTS, Provider
from strata.providers.compat import TOOL_MODES
from strata.providers.transport import DEFAULT_TIMEOUT, Retry

ADAPTERS: tuple[str, ...] = ("openai-responses", "openai-chat", "anthropic", "scripted")

#: the keys of a ``[providers.NAME]`` table
SETTINGS: tuple[str, ...] = (
    "adapter",
    "model",
    "base_url",
    "api_key_env",
    "timeout",
    "script",
    "reasoning_effort",
    "max_tokens",
    "stream",
    "tool_choice_required",
    "retry_delays",
    "context_window",
    "tools",
    "research_effort",
    "plan_effort",
    "implement_effort",
)
#: the RPI phases that may have a reasoning effort of their own (``PHASE_effort``)
EFFORT_PHASES: tuple[str, ...] = ("research", "plan", "implement")

#: the keys of the ``[model]`` table
MODEL_SETTINGS: tuple[str, ...] = ("default",)

#: providers that exist without configuration
BUILTINS: dict[str, dict[str, str]] = {
    "openai": {"adapter": "openai-responses", "model": "gpt-5.2"},
    "anthropic": {"adapter": "anthropic", "model": "claude-sonnet-4-5"},
}

_OFFICIAL_KEYS = {
    "openai-responses": "OPENAI_API_KEY",
    "openai-chat": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}

_SNIPPET = (
    '[providers.{name}] adapter = "openai-chat", model = "MODEL", '
    'base_url = "http://127.0.0.1:8080/v1" (one setting per line; see docs/providers.md)'
)


@dataclass(frozen=True)
class ProviderSettings:
    """One provider's resolved settings (built-in defaults and its config table merged)."""

    name: str
    adapter: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    script: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    stream: bool = True
    tool_choice_required: bool = True
    context_window: int | None = None
    """The model's context in tokens (None: asked of the server, else unknown)."""
    retry_delays: tuple[float, ...] | None = None
    """Seconds between attempts (default 1, 2, 4, 8, 16, jittered); ``[]`` tries once."""
    tools: str = "native"
    """``native`` (tool calls), ``none`` (the compatibility flow), ``auto`` (detect)."""
    phase_efforts: tuple[tuple[str, str], ...] = ()
    """(phase, effort) of each RPI phase with its own reasoning effort (``research_effort``...)."""
    source: str = "config"
    """``built-in``, ``config``, or ``built-in+config`` (a built-in changed by a table)."""

    def shown_base_url(self) -> str | None:
        """The URL calls go to (the official API's when none is set; None for scripted)."""
        if self.adapter == "scripted":
            return None
        if self.base_url:
            return self.base_url
        from strata.providers.anthropic import ANTHROPIC_BASE_URL
        from strata.providers.openai import OPENAI_BASE_URL

        return ANTHROPIC_BASE_URL if self.adapter == "anthropic" else OPENAI_BASE_URL

    def key_state(self, environ: Mapping[str, str]) -> str:
        """``present``, ``missing`` or ``not needed`` (the key itself is never returned)."""
        if self.api_key_env is None:
            return "not needed"
        return "present" if environ.get(self.api_key_env) else "missing"

    def to_json(self, environ: Mapping[str, str]) -> dict[str, Any]:
        """The settings as JSON for ``strata models --json`` (no key, only whether it is set)."""
        return {
            "name": self.name,
            "adapter": self.adapter,
            "model": self.model,
            "base_url": self.shown_base_url(),
            "api_key_env": self.api_key_env,
            "key": self.key_state(environ),
            "timeout": self.timeout,
            "script": self.script,
            "tools": self.tools,
            "source": self.source,
        }


def _not_configured(name: str, problem: str, *, hint: str | None = None) -> ProviderNotConfigured:
    return ProviderNotConfigured(
        name,
        problem,
        hint=hint or "fix it in config.toml (see docs/providers.md for the settings)",
    )


def _refuse_near_misses(config: Mapping[str, Any]) -> None:
    """Refuse ``[provider.x]`` or ``[models]``: what the user wrote there would be dropped."""
    from strata.layout import misspelt_problem

    for name in ("providers", "model"):
        if (near := misspelt_problem(dict(config), name)) is not None:
            raise _not_configured("config.toml", near)


def _table(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise _not_configured("config.toml", f"[{key}] is not a table")
    return value


def providers(config: Mapping[str, Any]) -> dict[str, ProviderSettings]:
    """Every provider: the built-ins, then ``config``'s ``[providers.*]`` (checked), by name."""
    _refuse_near_misses(config)
    tables = _table(config, "providers")
    out: dict[str, ProviderSettings] = {}
    for name in [*BUILTINS, *(n for n in tables if n not in BUILTINS)]:
        table = tables.get(name)
        if table is not None and not isinstance(table, dict):
            raise _not_configured(name, f"[providers.{name}] in config.toml is not a table")
        out[name] = _settings(name, table)
    model = _table(config, "model")
    unknown = sorted(set(model) - set(MODEL_SETTINGS))
    if unknown:
        raise _not_configured(
            "config.toml", f"model.{unknown[0]} is not a setting (known: default)"
        )
    return out


def _settings(name: str, table: dict[str, Any] | None) -> ProviderSettings:
    builtin = BUILTINS.get(name, {})
    raw: dict[str, Any] = {**builtin, **(table or {})}
    where = f"[providers.{name}]"
    unknown = sorted(set(table or {}) - set(SETTINGS))
    if unknown:  # a misspelt setting would be ignored without a word
        raise _not_configured(
            name, f"{unknown[0]!r} in {where} is not a setting (known: {', '.join(SETTINGS)})"
        )
    adapter = raw.get("adapter")
    if adapter not in ADAPTERS:
        raise _not_configured(
            name,
            f"{where} names no known adapter ({adapter!r})",
            hint=f"set adapter to one of {', '.join(ADAPTERS)}",
        )
    for key in ("model", "base_url", "api_key_env", "script", "reasoning_effort"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key]):
            raise _not_configured(name, f"{key} of {where} is not a non-empty string")
    model = raw.get("model") or ("scripted" if adapter == "scripted" else None)
    if model is None:
        raise _not_configured(name, f"{where} has no model", hint='add model = "NAME" to it')
    base_url = raw.get("base_url")
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise _not_configured(name, f"base_url of {where} is not an http:// or https:// URL")
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise _not_configured(name, f"timeout of {where} is not a number of seconds above 0")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise _not_configured(name, f"max_tokens of {where} is not a whole number above 0")
    window = raw.get("context_window")
    if window is not None and (type(window) is not int or window < 256):
        raise _not_configured(
            name, f"context_window of {where} is not a whole number of tokens of 256 or more"
        )
    if window is not None and not adapter.startswith("openai"):
        raise _not_configured(name, f"context_window of {where} is only for the openai adapters")
    effort = raw.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS:
        raise _not_configured(
            name, f"reasoning_effort of {where} is {effort!r}, not one of {', '.join(EFFORTS)}"
        )
    phase_efforts: list[tuple[str, str]] = []
    for phase in EFFORT_PHASES:
        key = f"{phase}_effort"
        if key not in raw:
            continue
        if raw[key] not in EFFORTS:
            raise _not_configured(
                name, f"{key} of {where} is {raw[key]!r}, not one of {', '.join(EFFORTS)}"
            )
        if not adapter.startswith("openai"):
            raise _not_configured(name, f"{key} of {where} is only for the openai adapters")
        phase_efforts.append((phase, raw[key]))
    stream = raw.get("stream", True)
    if not isinstance(stream, bool):
        raise _not_configured(name, f"stream of {where} is not true or false")
    required = raw.get("tool_choice_required", True)
    if not isinstance(required, bool):
        raise _not_configured(name, f"tool_choice_required of {where} is not true or false")
    delays = raw.get("retry_delays")
    if delays is not None and (
        not isinstance(delays, list)
        or len(delays) > 10
        or any(isinstance(d, bool) or not isinstance(d, int | float) or d < 0 for d in delays)
    ):
        raise _not_configured(
            name, f"retry_delays of {where} is not a list of at most 10 numbers of seconds >= 0"
        )
    tools = raw.get("tools", "native")
    if tools not in TOOL_MODES:
        raise _not_configured(
            name, f"tools of {where} is {tools!r}, not one of {', '.join(TOOL_MODES)}"
        )
    if "tool_choice_required" in raw and not adapter.startswith("openai"):
        raise _not_configured(
            name, f"tool_choice_required of {where} is only for the openai adapters"
        )
    script = raw.get("script")
    if adapter == "scripted":
        if script is None:
            raise _not_configured(
                name,
                f"{where} uses the scripted adapter but names no script",
                hint='add script = "path/to/script.yaml" (relative to the workspace)',
            )
        for key in ("base_url", "api_key_env"):
            if key in raw:
                raise _not_configured(name, f"{key} of {where} means nothing to a script")
    if raw.get("script") is not None and adapter != "scripted":
        raise _not_configured(name, f'script of {where} is only for adapter = "scripted"')
    if max_tokens is not None and adapter == "scripted":
        raise _not_configured(name, f"max_tokens of {where} means nothing to a script")
    if effort is not None and not adapter.startswith("openai"):
        raise _not_configured(name, f"reasoning_effort of {where} is only for the openai adapters")
    key_env = raw.get("api_key_env")
    if key_env is None and base_url is None:
        key_env = _OFFICIAL_KEYS.get(adapter)
    source = "config"
    if builtin:
        source = "built-in+config" if table else "built-in"
    return ProviderSettings(
        name=name,
        adapter=adapter,
        model=model,
        base_url=base_url,
        api_key_env=key_env,
        timeout=float(timeout),
        script=script,
        reasoning_effort=effort,
        max_tokens=max_tokens,
        context_window=window,
        stream=stream,
        tool_choice_required=required,
        retry_delays=tuple(float(d) for d in delays) if delays is not None else None,
        tools=tools,
        phase_efforts=tuple(phase_efforts),
        source=source,
    )


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:MODEL`` as (name, model or None); the model may hold colons."""
    name, sep, model = spec.strip().partition(":")
    return name, (model if sep and model else None)


def default_spec(config: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """The provider used when none is named: ``STRATA_MODEL``, ``[model] default``, a key."""
    chosen = default_choice(config, environ)
    return chosen[0] if chosen else None


def default_choice(config: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The default spec and where it comes from (``STRATA_MODEL``, ``config``, a key's name)."""
    chosen = environ.get("STRATA_MODEL")
    if chosen:
        return chosen, "STRATA_MODEL"
    _refuse_near_misses(config)
    default = _table(config, "model").get("default")
    if default is not None:
        if not isinstance(default, str) or not default:
            raise _not_configured("config.toml", "model.default is not a provider name")
        return default, "config"
    for name, key in (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")):
        if environ.get(key):
            return name, key
    return None


def resolve(
    spec: str | None, *, config: Mapping[str, Any], environ: Mapping[str, str]
) -> ProviderSettings:
    """The settings of the provider ``spec`` names (or the default), its model applied."""
    known = providers(config)
    spec = spec or default_spec(config, environ)
    if not spec:
        raise ProviderNotConfigured(
            "provider",
            "none is chosen: name one (NAME or NAME:MODEL), set STRATA_MODEL, or set "
            "[model] default in config.toml",
            hint="e.g. STRATA_MODEL=openai (with OPENAI_API_KEY set), or in config.toml: "
            '[model] default = "local" and ' + _SNIPPET.format(name="local"),
        )
    name, model = parse_spec(spec)
    settings = known.get(name)
    if settings is None:
        raise ProviderNotConfigured(
            name or spec,
            f"no provider of that name is configured (known: {', '.join(known)})",
            hint="add it to config.toml: " + _SNIPPET.format(name=name or "NAME"),
        )
    if model:
        settings = replace(settings, model=model)
    return settings


def open_provider(
    spec: str | None,
    *,
    config: Mapping[str, Any],
    environ: Mapping[str, str],
    root: Path | None = None,
    retry: Retry | None = None,
) -> Provider:
    """The provider ``spec`` names (``NAME`` or ``NAME:MODEL``; None: the default).

    ``config`` is the parsed ``config.toml`` (or ``{}``), ``environ`` the
    environment to read keys and ``STRATA_MODEL`` from, ``root`` the folder a
    script path is relative to (the workspace). Raises
    :class:`ProviderNotConfigured` for an unknown name, a missing key or a
    bad setting.
    """
    settings = resolve(spec, config=config, environ=environ)
    return build(settings, environ=environ, root=root, retry=retry)


def build(
    settings: ProviderSettings,
    *,
    environ: Mapping[str, str],
    root: Path | None = None,
    retry: Retry | None = None,
) -> Provider:
    """The adapter for ``settings`` (its key read from ``environ``).

    With ``tools = "none"`` or ``"auto"`` it answers through the compatibility
    flow (:class:`strata.providers.compat.CompatProvider`).
    """
    from strata.providers.compat import wrap

    return wrap(_adapter(settings, environ=environ, root=root, retry=retry), settings.tools)


def _adapter(
    settings: ProviderSettings,
    *,
    environ: Mapping[str, str],
    root: Path | None = None,
    retry: Retry | None = None,
) -> Provider:
    key: str | None = None
    if settings.api_key_env is not None:
        key = environ.get(settings.api_key_env)
        if not key:
            raise ProviderNotConfigured(
                settings.name,
                f"{settings.api_key_env} is not set",
                hint=f"export {settings.api_key_env}=<your key>, or name another variable with "
                f'api_key_env = "VAR" in [providers.{settings.name}] of config.toml',
            )
    if settings.adapter == "scripted":
        from strata.providers.scripted import Scripted

        path = Path(settings.script or "")
        if not path.is_absolute() and root is not None:
            path = root / path
        return Scripted.from_file(path, name=settings.name, model=settings.model)
    if settings.retry_delays is not None:
        retry = replace(retry or Retry(), delays=settings.retry_delays)
    common: dict[str, Any] = {
        "name": settings.name,
        "model": settings.model,
        "base_url": settings.base_url,
        "api_key": key,
        "api_key_env": settings.api_key_env,
        "timeout": settings.timeout,
        "retry": retry,
        "stream": settings.stream,
        "max_tokens": settings.max_tokens,
    }
    if settings.adapter == "anthropic":
        from strata.providers.anthropic import Anthropic

        return Anthropic(**common)
    from strata.providers.openai import OpenAIChat, OpenAIResponses

    cls = OpenAIResponses if settings.adapter == "openai-responses" else OpenAIChat
    return cls(
        **common,
        reasoning_effort=settings.reasoning_effort,
        tool_choice_required=settings.tool_choice_required,
        context_window=settings.context_window,
        phase_efforts=dict(settings.phase_efforts),
    )


def alternatives(
    current: str, *, config: Mapping[str, Any], environ: Mapping[str, str]
) -> list[str]:
    """The providers one may switch to from ``current`` (a name or ``NAME:MODEL``).

    Those configured (or built in) other than ``current``'s, whose key is
    present or not needed, each as ``NAME:MODEL``; a bad table yields none.
    """
    name = parse_spec(current)[0]
    try:
        known = providers(config)
    except ProviderNotConfigured:
        return []
    return [
        f"{s.name}:{s.model}"
        for s in known.values()
        if s.name != name and s.key_state(environ) != "missing"
    ]
