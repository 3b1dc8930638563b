"""Seed 000's OpenAI request profile, as pure functions.

Every OpenAI call (Responses API and Chat Completions alike) is shaped by
the same deterministic profile, so early turns stay grounded in tool evidence
and a recorded request is reproducible:

- ``truncation`` is ``"disabled"`` (Responses API only: Chat has no such field);
- reasoning effort defaults to ``medium``; allowed are ``none``, ``low``,
  ``medium``, ``high`` and ``xhigh``, anything else is read as ``medium``
  (:func:`effort`). It is sent only to models that reason
  (:func:`reasons`): the GPT-5 family and the o-series. A chat model such
  as ``gpt-4.1`` or a local model refuses or ignores the field, so it is left
  out for them;
- sampling: the GPT-5 family gets neither ``temperature`` nor ``top_p``
  (OpenAI's guidance rejects them), except at effort ``none`` on gpt-5.1 and
  gpt-5.2, where they are allowed and are sent as ``temperature=0``,
  ``top_p=1``. The o-series rejects them too and is treated like the GPT-5
  family (the seed's rule, applied to the other reasoning models for the
  same reason). Every other model gets ``temperature=0``, ``top_p=1``
  (:func:`sampling`);
- tools are sent with ``strict: true`` and a strict schema
  (:func:`strict_schema`): every object schema has ``additionalProperties:
  false`` and lists all its properties in ``required``; a property that was
  optional becomes nullable, so the model says ``null`` where it would have
  left the property out;
- ``parallel_tool_calls`` is ``false`` whenever tools are sent;
- ``tool_choice`` is ``"required"`` until a tool result is part of the
  conversation, then ``"auto"`` (:func:`tool_choice`); a request that sets
  ``tool_choice`` itself keeps it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from strata.providers.base import EFFORTS, TOOL_CHOICES, Request

DEFAULT_EFFORT = "medium"

#: models whose sampling fields are allowed at effort ``none`` (OpenAI's GPT-5.1/5.2 guidance)
_SAMPLING_AT_NO_EFFORT = ("gpt-5.1", "gpt-5.2")


def effort(value: str | None) -> str:
    """The reasoning effort to send: ``value`` when it is one of :data:`EFFORTS`, else medium."""
    return value if value in EFFORTS else DEFAULT_EFFORT


def is_gpt5(model: str) -> bool:
    """True for the GPT-5 family (a model name starting with ``gpt-5``)."""
    return model.lower().startswith("gpt-5")


def is_o_series(model: str) -> bool:
    """True for OpenAI's o-series reasoning models (``o1``, ``o3-mini``, ``o4-mini``…)."""
    return re.match(r"o\d", model.lower()) is not None


def reasons(model: str) -> bool:
    """True when ``model`` takes a reasoning effort: the GPT-5 family and the o-series.

    ``gpt-5-chat-…`` models are GPT-5's non-reasoning chat variants and take none.
    """
    name = model.lower()
    if is_gpt5(name):
        return "-chat" not in name
    return is_o_series(name)


def _version_of(model: str, prefix: str) -> bool:
    """True when ``model`` is ``prefix`` itself or one of its variants (``gpt-5.2-pro``)."""
    name = model.lower()
    return name == prefix or name.startswith(prefix + "-")


def sampling(model: str, reasoning_effort: str) -> dict[str, Any]:
    """``temperature`` and ``top_p`` to send for ``model`` at ``reasoning_effort`` (maybe none)."""
    if is_gpt5(model):
        if reasoning_effort == "none" and any(
            _version_of(model, v) for v in _SAMPLING_AT_NO_EFFORT
        ):
            return {"temperature": 0, "top_p": 1}
        return {}
    if is_o_series(model):
        return {}
    return {"temperature": 0, "top_p": 1}


def tool_choice(request: Request, *, required: bool = True) -> str:
    """``required`` until a tool result exists in the messages, then ``auto``; explicit wins.

    With ``required`` false (a server that cannot force "some tool", such as
    llama.cpp's), the profile's ``required`` is sent as ``auto``. The result
    may be a tool's name: see :func:`responses_tool_choice` and
    :func:`chat_tool_choice` for how each API spells it.
    """
    if request.tool_choice is not None:
        return request.tool_choice
    if request.has_tool_result() or not required:
        return "auto"
    return "required"


def responses_tool_choice(choice: str) -> str | dict[str, Any]:
    """The Responses API's ``tool_choice``: a keyword, or one named function."""
    return choice if choice in TOOL_CHOICES else {"type": "function", "name": choice}


def chat_tool_choice(choice: str) -> str | dict[str, Any]:
    """Chat Completions' ``tool_choice``: a keyword, or one named function."""
    return choice if choice in TOOL_CHOICES else {"type": "function", "function": {"name": choice}}


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` made strict (a new dict; the argument is not changed).

    Every object schema (one with ``type: object`` or ``properties``) gets
    ``additionalProperties: false`` and all its properties in ``required``;
    the properties it did not require become nullable. Nested objects, array
    ``items``/``prefixItems``, ``anyOf``/``oneOf``/``allOf`` branches and
    ``$defs``/``definitions`` are made strict too.
    """
    out: dict[str, Any] = _strict(copy.deepcopy(schema))
    return out


def _is_object(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or ("properties" in schema)
    )


def _strict(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            schema[key] = {name: _strict(sub) for name, sub in schema[key].items()}
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(schema.get(key), list):
            schema[key] = [_strict(sub) for sub in schema[key]]
    if "items" in schema:
        items = schema["items"]
        schema["items"] = [_strict(s) for s in items] if isinstance(items, list) else _strict(items)
    if _is_object(schema):
        properties = schema.get("properties")
        properties = dict(properties) if isinstance(properties, dict) else {}
        required = schema.get("required")
        was_required = set(required) if isinstance(required, list) else set()
        for name, sub in properties.items():
            sub = _strict(sub)
            properties[name] = sub if name in was_required else nullable(sub)
        schema["properties"] = properties
        schema["required"] = list(properties)
        schema["additionalProperties"] = False
    return schema


def nullable(schema: Any) -> Any:
    """``schema`` that also admits ``null`` (already nullable schemas are returned as they are)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        if kind != "null":
            out["type"] = [kind, "null"]
    elif isinstance(kind, list):
        if "null" not in kind:
            out["type"] = [*kind, "null"]
    elif isinstance(out.get("anyOf"), list):
        if not any(isinstance(b, dict) and b.get("type") == "null" for b in out["anyOf"]):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        return out
    else:  # no type to widen (a $ref, a bare enum or const): wrap it
        return {"anyOf": [out, {"type": "null"}]}
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def responses_tools(request: Request) -> list[dict[str, Any]]:
    """The request's tools as Responses API function tools (strict)."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": strict_schema(t.parameters),
            "strict": True,
        }
        for t in request.tools
    ]


def chat_tools(request: Request) -> list[dict[str, Any]]:
    """The request's tools as Chat Completions function tools (strict)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": strict_schema(t.parameters),
                "strict": True,
            },
        }
        for t in request.tools
    ]


def _tool_settings(
    request: Request,
    tools: Callable[[Request], list[dict[str, Any]]],
    choice: Callable[[str], str | dict[str, Any]],
    *,
    required: bool,
) -> dict[str, Any]:
    """The tools of a body (in the API's form ``tools`` and ``choice`` give), one call at a time."""
    if not request.tools:
        return {}
    return {
        "tools": tools(request),
        "tool_choice": choice(tool_choice(request, required=required)),
        "parallel_tool_calls": False,
    }


def responses_settings(
    request: Request, *, default_effort: str | None = None, required: bool = True
) -> dict[str, Any]:
    """The profile's fields of a Responses API body (everything but model, input and stream)."""
    model = request.model
    chosen = effort(request.reasoning_effort or default_effort)
    out: dict[str, Any] = {"truncation": "disabled"}
    if reasons(model):
        out["reasoning"] = {"effort": chosen}
    out.update(sampling(model, chosen))
    out.update(_tool_settings(request, responses_tools, responses_tool_choice, required=required))
    if request.max_output_tokens is not None:
        out["max_output_tokens"] = request.max_output_tokens
    return out


def chat_settings(
    request: Request, *, default_effort: str | None = None, required: bool = True
) -> dict[str, Any]:
    """The profile's fields of a Chat Completions body (everything but model, messages, stream).

    The output limit is ``max_completion_tokens`` for reasoning models (they
    refuse ``max_tokens``) and ``max_tokens`` for the others (what
    OpenAI-compatible servers such as llama.cpp and Ollama read).
    """
    model = request.model
    chosen = effort(request.reasoning_effort or default_effort)
    out: dict[str, Any] = {}
    if reasons(model):
        out["reasoning_effort"] = chosen
    out.update(sampling(model, chosen))
    out.update(_tool_settings(request, chat_tools, chat_tool_choice, required=required))
    if request.max_output_tokens is not None:
        key = "max_completion_tokens" if reasons(model) else "max_tokens"
        out[key] = request.max_output_tokens
    return out
