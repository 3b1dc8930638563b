"""``strata models``: the model providers configured here, and which one is the default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from strata.cli.common import emit_json, json_option
from strata.errors import NotARepository, ProviderNotConfigured


def _config() -> dict[str, Any]:
    """The repository's parsed config.toml, or nothing outside a workspace."""
    from strata.layout import find_layout, load_config

    try:
        layout = find_layout(Path.cwd())
    except NotARepository:
        return {}
    return load_config(layout).raw


@click.command("models")
@json_option
def models(as_json: bool) -> None:
    """List the model providers: built-in, from config.toml, and the default.

    Each provider's adapter, model and server, and whether its API key is
    set (the key itself is never shown). 'openai' and 'anthropic' exist
    without configuration; more are [providers.NAME] tables of config.toml
    (see docs/providers.md). The default is STRATA_MODEL ("NAME" or
    "NAME:MODEL"), else [model] default, else openai or anthropic when its
    key is set. Works outside a workspace too (built-ins and environment).

    \b
    Example:
      strata models
      strata models --json | jq .default   # STRATA_MODEL=local:qwen2.5:7b sets it
    """
    from strata.providers.config import default_choice, providers, resolve

    config = _config()
    environ = dict(os.environ)
    known = providers(config)
    default: dict[str, Any] | None = None
    problem: str | None = None
    try:
        choice = default_choice(config, environ)
        if choice is not None:
            settings = resolve(choice[0], config=config, environ=environ)
            default = {"name": settings.name, "model": settings.model, "from": choice[1]}
        else:
            problem = "none is chosen (set STRATA_MODEL or [model] default)"
    except ProviderNotConfigured as exc:
        problem = exc.message
    rows = [
        {**s.to_json(environ), "default": default is not None and default["name"] == name}
        for name, s in known.items()
    ]
    if as_json:
        emit_json({"providers": rows, "default": default, "problem": problem})
        return
    header = {"name": "NAME", "adapter": "ADAPTER", "model": "MODEL", "base_url": "BASE URL"}
    table = [header] + [
        {
            "name": ("* " if r["default"] else "  ") + r["name"],
            "adapter": r["adapter"],
            "model": r["model"],
            "base_url": r["base_url"] or (f"script {r['script']}" if r["script"] else "-"),
            "key": _key(r),
        }
        for r in rows
    ]
    table[0] = {**header, "name": "  NAME", "key": "KEY"}
    widths = {k: max(len(str(row[k])) for row in table) for k in header}
    for row in table:
        click.echo("  ".join(str(row[k]).ljust(widths[k]) for k in header) + "  " + str(row["key"]))
    if default is not None:
        shown = {"STRATA_MODEL": "from STRATA_MODEL", "config": "from [model] default"}
        source = shown.get(default["from"], f"{default['from']} is set")
        click.echo(f"default: {default['name']} (model {default['model']}; {source})")
    else:
        click.echo(f"default: {problem}")


def _key(row: dict[str, Any]) -> str:
    if row["key"] == "not needed":
        return "not needed"
    return f"{row['api_key_env']} {'set' if row['key'] == 'present' else 'missing'}"


COMMANDS = [models]
