"""Choosing and configuring providers, the scripted adapter, and ``strata models``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner, as_json, assert_user_error, ok
from strata.errors import ProviderError, ProviderNotConfigured, ToolArgumentsInvalid
from strata.providers import (
    CancelToken,
    Message,
    Provider,
    Request,
    TextDelta,
    ToolCallEvent,
    complete,
    open_provider,
)
from strata.providers.anthropic import Anthropic
from strata.providers.openai import OpenAIChat, OpenAIResponses
from strata.providers.scripted import Scripted
from wire_server import WireServer, text

NO_KEYS: dict[str, str] = {}


def config(text_: str) -> dict[str, Any]:
    return tomllib.loads(text_)


def ask(content: str = "hello") -> Request:
    return Request("", (Message("user", content),))


# -- choosing a provider ----------------------------------------------------------------


def test_builtin_openai_needs_its_key() -> None:
    with pytest.raises(ProviderNotConfigured, match=r"^openai: OPENAI_API_KEY is not set") as e:
        open_provider("openai", config={}, environ=NO_KEYS)
    assert "export OPENAI_API_KEY=" in (e.value.hint or "")
    provider = open_provider("openai", config={}, environ={"OPENAI_API_KEY": "sk-x"})
    assert isinstance(provider, OpenAIResponses) and isinstance(provider, Provider)
    assert (provider.name, provider.adapter, provider.model) == (
        "openai",
        "openai-responses",
        "gpt-5.2",
    )
    assert provider.base_url == "https://api.openai.com/v1"


def test_builtin_anthropic_and_a_model_in_the_spec() -> None:
    provider = open_provider(
        "anthropic:claude-opus-4-1", config={}, environ={"ANTHROPIC_API_KEY": "k"}
    )
    assert isinstance(provider, Anthropic) and isinstance(provider, Provider)
    assert provider.model == "claude-opus-4-1"


def test_the_default_comes_from_strata_model_then_config_then_a_key() -> None:
    cfg = config(
        """
        [model]
        default = "local"
        [providers.local]
        adapter = "openai-chat"
        model = "qwen2.5:7b"
        base_url = "http://127.0.0.1:11434/v1"
        """
    )
    env = {"OPENAI_API_KEY": "sk-x", "STRATA_MODEL": "local:llama3.2:1b"}
    chosen = open_provider(None, config=cfg, environ=env)
    assert isinstance(chosen, OpenAIChat) and chosen.model == "llama3.2:1b"  # colons kept
    chosen = open_provider(None, config=cfg, environ={"OPENAI_API_KEY": "sk-x"})
    assert (chosen.name, chosen.model) == ("local", "qwen2.5:7b")  # no key needed
    assert open_provider(None, config={}, environ={"OPENAI_API_KEY": "sk-x"}).name == "openai"
    assert open_provider(None, config={}, environ={"ANTHROPIC_API_KEY": "k"}).name == "anthropic"
    with pytest.raises(ProviderNotConfigured, match="none is chosen"):
        open_provider(None, config={}, environ=NO_KEYS)


def test_an_unknown_provider_shows_the_config_snippet() -> None:
    with pytest.raises(ProviderNotConfigured) as caught:
        open_provider("ollama", config={}, environ=NO_KEYS)
    assert caught.value.message == (
        "ollama: no provider of that name is configured (known: openai, anthropic)"
    )
    assert '[providers.ollama] adapter = "openai-chat"' in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('adapter = "openai-chat"\nmodle = "x"', "'modle' in [providers.bad] is not a setting"),
        ('adapter = "gemini"\nmodel = "x"', "names no known adapter ('gemini')"),
        ('adapter = "openai-chat"', "[providers.bad] has no model"),
        ('adapter = "openai-chat"\nmodel = "m"\ntimeout = 0', "timeout of [providers.bad]"),
        ('adapter = "openai-chat"\nmodel = "m"\nbase_url = "localhost:8080"', "not an http"),
        ('adapter = "openai-chat"\nmodel = "m"\nreasoning_effort = "max"', "not one of none"),
        ('adapter = "openai-chat"\nmodel = "m"\nscript = "s.yaml"', 'only for adapter = "scr'),
        ('adapter = "scripted"', "names no script"),
        ('adapter = "scripted"\nscript = "s.yaml"\nmax_tokens = 9', "means nothing to a script"),
        ('adapter = "openai-chat"\nmodel = "m"\nmax_tokens = 0', "max_tokens of [providers.bad]"),
    ],
)
def test_bad_provider_settings_are_refused(table: str, says: str) -> None:
    cfg = config(f"[providers.bad]\n{table}\n")
    with pytest.raises(ProviderNotConfigured, match=r"^bad: ") as caught:
        open_provider("openai", config=cfg, environ={"OPENAI_API_KEY": "k"})
    assert says in caught.value.message
    assert "\n" not in caught.value.message


def test_an_unknown_model_setting_is_refused() -> None:
    with pytest.raises(ProviderNotConfigured, match=r"model\.defualt is not a setting"):
        open_provider("openai", config=config('[model]\ndefualt = "x"'), environ=NO_KEYS)


def test_a_configured_provider_reaches_its_server(wire: WireServer) -> None:
    cfg = config(
        f"""
        [providers.local]
        adapter = "openai-chat"
        model = "smollm2"
        base_url = "{wire.openai_url}"
        api_key_env = "LOCAL_KEY"
        timeout = 5
        max_tokens = 300
        """
    )
    with pytest.raises(ProviderNotConfigured, match=r"^local: LOCAL_KEY is not set"):
        open_provider("local", config=cfg, environ=NO_KEYS)
    provider = open_provider("local", config=cfg, environ={"LOCAL_KEY": "sk-local"})
    wire.queue(text("hi from the server"))
    assert complete(provider, ask()).text == "hi from the server"
    [received] = wire.requests
    assert received.headers["authorization"] == "Bearer sk-local"
    assert received.body["model"] == "smollm2"
    assert received.body["max_tokens"] == 300  # the output limit of config.toml
    assert isinstance(provider, OpenAIChat)
    provider.close()


# -- the scripted adapter ----------------------------------------------------------------

SCRIPT = """\
responses:
  - expect: "fix the test"
    text: "Reading it."
    tool_calls:
      - name: read_file
        arguments: {path: tests/test_a.py}
  - text: "Done: it passes now."
    stream: 5
    usage: {input_tokens: 30, output_tokens: 6}
"""


def test_a_script_from_config_is_served_in_order(tmp_path: Path) -> None:
    (tmp_path / "demo.yaml").write_text(SCRIPT)
    cfg = config('[providers.demo]\nadapter = "scripted"\nscript = "demo.yaml"')
    provider = open_provider("demo", config=cfg, environ=NO_KEYS, root=tmp_path)
    assert isinstance(provider, Scripted) and isinstance(provider, Provider)
    assert provider.adapter == "scripted"

    first = list(provider.stream(ask("please fix the test")))
    [call] = [e.call for e in first if isinstance(e, ToolCallEvent)]
    assert (call.name, call.arguments, call.id) == (
        "read_file",
        {"path": "tests/test_a.py"},
        "call_1_1",
    )
    assert first[-1].response.finish_reason == "tool_calls"

    second = list(provider.stream(ask("here is the file")))
    assert [e.text for e in second if isinstance(e, TextDelta)] == [
        "Done:",
        " it p",
        "asses",
        " now.",
    ]
    assert second[-1].response.usage.output_tokens == 6

    with pytest.raises(ProviderError, match=r"demo\.yaml has 2 responses and all were served"):
        complete(provider, ask("more?"))


def test_a_script_checks_what_it_expects() -> None:
    provider = Scripted([{"expect": "fix the test", "text": "ok"}], source="demo.json")
    with pytest.raises(ProviderError, match=r"response 1 of demo\.json expects 'fix the test'"):
        complete(provider, ask("write a poem"))


def test_a_script_can_serve_broken_tool_arguments_and_be_cancelled() -> None:
    provider = Scripted([{"tool_calls": [{"name": "write", "arguments": "{oops"}]}])
    with pytest.raises(ToolArgumentsInvalid, match="'write'"):
        complete(provider, ask())
    cancel = CancelToken()
    slow = Scripted([{"text": "abcdef", "stream": 2}])
    got = []
    with pytest.raises(ProviderError, match="cancelled"):
        for event in slow.stream(ask(), cancel=cancel):
            got.append(event)
            cancel.cancel()
    assert got == [TextDelta("ab")]


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("- {txt: hi}", "'txt' is not a key"),
        ("- {text: hi, stream: [h]}", "do not join to text"),
        ("- {finish_reason: done, text: x}", "finish_reason 'done'"),
        ("- {}", "neither text nor tool_calls"),
        ("key: [unclosed", "not YAML or JSON"),
        ("just text", "not a list of responses"),
    ],
)
def test_a_bad_script_is_refused_naming_it(tmp_path: Path, script: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(script)
    with pytest.raises(ProviderNotConfigured, match=r"^demo: ") as caught:
        Scripted.from_file(path, name="demo")
    assert says in caught.value.message and "bad.yaml" in caught.value.message


# -- strata models ---------------------------------------------------------------------

ENV = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "STRATA_MODEL": ""}


def test_models_outside_a_workspace(run_cli: CliRunner, tmp_path: Path) -> None:
    out = as_json(
        run_cli("models", "--json", cwd=tmp_path, env={**ENV, "OPENAI_API_KEY": "sk-secret-1"})
    )
    assert [(p["name"], p["key"], p["default"]) for p in out["providers"]] == [
        ("openai", "present", True),
        ("anthropic", "missing", False),
    ]
    assert out["default"] == {"name": "openai", "model": "gpt-5.2", "from": "OPENAI_API_KEY"}
    assert "sk-secret-1" not in json.dumps(out)


def test_models_lists_the_workspace_config(run_cli: CliRunner, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ok(run_cli("init", cwd=ws))
    with (ws / ".strata" / "config.toml").open("a") as f:
        f.write(
            '\n[model]\ndefault = "local"\n\n'
            '[providers.local]\nadapter = "openai-chat"\nmodel = "smollm2"\n'
            'base_url = "http://127.0.0.1:8080/v1"\n\n'
            '[providers.demo]\nadapter = "scripted"\nscript = "demo.yaml"\n\n'
            '[providers.openai]\nmodel = "gpt-5-mini"\n'
        )
    env = {**ENV, "ANTHROPIC_API_KEY": "sk-ant-secret"}
    out = as_json(run_cli("models", "--json", cwd=ws, env=env))
    rows = {p["name"]: p for p in out["providers"]}
    assert list(rows) == ["openai", "anthropic", "local", "demo"]
    assert rows["openai"]["model"] == "gpt-5-mini"
    assert rows["openai"]["source"] == "built-in+config"
    assert rows["local"]["key"] == "not needed" and rows["local"]["default"] is True
    assert rows["demo"]["base_url"] is None and rows["demo"]["script"] == "demo.yaml"
    assert out["default"] == {"name": "local", "model": "smollm2", "from": "config"}

    shown = ok(run_cli("models", cwd=ws, env={**env, "STRATA_MODEL": "demo"}))
    assert "sk-ant-secret" not in shown
    lines = shown.splitlines()
    assert lines[0].split() == ["NAME", "ADAPTER", "MODEL", "BASE", "URL", "KEY"]
    assert lines[4].startswith("* demo ")
    assert "ANTHROPIC_API_KEY set" in lines[2] and "OPENAI_API_KEY missing" in lines[1]
    assert lines[-1] == "default: demo (model scripted; from STRATA_MODEL)"

    with (ws / ".strata" / "config.toml").open("a") as f:
        f.write('\n[providers.typo]\nadapter = "openai-chat"\nmodel = "m"\napi_key = "sk-1"\n')
    assert_user_error(
        run_cli("models", cwd=ws, env=env), says="'api_key' in [providers.typo] is not a setting"
    )
