"""Seed 000's OpenAI request profile as pure functions (the wire tests check it end to end)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.providers import Message, Request, ToolCall, ToolSpec, profile


@pytest.mark.parametrize(
    ("given_effort", "sent"),
    [
        (None, "medium"),
        ("none", "none"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("xhigh", "xhigh"),
        ("minimal", "medium"),
        ("HIGH", "medium"),
        ("", "medium"),
    ],
)
def test_effort_allowed_values_and_medium_for_anything_else(
    given_effort: str | None, sent: str
) -> None:
    assert profile.effort(given_effort) == sent


@pytest.mark.parametrize(
    ("model", "effort", "sampling"),
    [
        ("gpt-5", "medium", {}),
        ("gpt-5-mini", "none", {}),  # 'none' only unlocks sampling on 5.1 and 5.2
        ("gpt-5.1", "medium", {}),
        ("gpt-5.1", "none", {"temperature": 0, "top_p": 1}),
        ("gpt-5.2", "none", {"temperature": 0, "top_p": 1}),
        ("gpt-5.2-pro", "none", {"temperature": 0, "top_p": 1}),
        ("gpt-5.2", "low", {}),
        ("gpt-5.3-codex", "none", {}),
        ("gpt-5.10", "none", {}),  # not 5.1
        ("o3", "medium", {}),  # the o-series rejects sampling fields too
        ("gpt-4.1", "medium", {"temperature": 0, "top_p": 1}),
        ("smollm2-135m", "medium", {"temperature": 0, "top_p": 1}),
        ("qwen2.5:7b", "none", {"temperature": 0, "top_p": 1}),
    ],
)
def test_sampling_by_model_and_effort(model: str, effort: str, sampling: dict[str, Any]) -> None:
    assert profile.sampling(model, effort) == sampling


@pytest.mark.parametrize(
    ("model", "reasons"),
    [
        ("gpt-5", True),
        ("gpt-5.2", True),
        ("GPT-5-mini", True),
        ("gpt-5-chat-latest", False),
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini", True),
        ("gpt-4o", False),
        ("omni-local", False),
        ("llama3.2", False),
    ],
)
def test_which_models_take_a_reasoning_effort(model: str, reasons: bool) -> None:
    assert profile.reasons(model) is reasons


def conversation(*, tool_result: bool) -> Request:
    messages = [Message("user", "fix it")]
    if tool_result:
        call = ToolCall("c1", "read", {"path": "a"})
        messages += [Message("assistant", tool_calls=(call,)), Message("tool", "x", "c1")]
    return Request("gpt-5.2", tuple(messages), tools=(ToolSpec("read", "", {"type": "object"}),))


def test_tool_choice_required_until_a_tool_result_then_auto() -> None:
    assert profile.tool_choice(conversation(tool_result=False)) == "required"
    assert profile.tool_choice(conversation(tool_result=True)) == "auto"
    request = conversation(tool_result=False)
    explicit = Request(request.model, request.messages, request.tools, tool_choice="none")
    assert profile.tool_choice(explicit) == "none"


def test_settings_without_tools_send_no_tool_fields() -> None:
    request = Request("gpt-4.1", (Message("user", "hi"),))
    assert profile.responses_settings(request) == {
        "truncation": "disabled",
        "temperature": 0,
        "top_p": 1,
    }
    assert profile.chat_settings(request) == {"temperature": 0, "top_p": 1}


def test_settings_with_tools_and_a_limit() -> None:
    request = Request(
        "o3",
        (Message("user", "hi"),),
        tools=(ToolSpec("read", "Read", {"type": "object", "properties": {}}),),
        reasoning_effort="high",
        max_output_tokens=100,
    )
    chat = profile.chat_settings(request)
    assert chat["reasoning_effort"] == "high" and chat["max_completion_tokens"] == 100
    assert chat["parallel_tool_calls"] is False and chat["tool_choice"] == "required"
    responses = profile.responses_settings(request, default_effort="low")
    assert responses["reasoning"] == {"effort": "high"}  # the request's own effort wins
    assert responses["max_output_tokens"] == 100
    local = Request("llama3.2", request.messages, max_output_tokens=50)
    assert profile.chat_settings(local)["max_tokens"] == 50
    default = Request("gpt-5", request.messages)
    assert profile.responses_settings(default, default_effort="low")["reasoning"] == {
        "effort": "low"
    }


NESTED = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "options": {
            "type": "object",
            "properties": {"overwrite": {"type": "boolean"}, "encoding": {"type": "string"}},
            "required": ["overwrite"],
        },
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"line": {"type": "integer"}, "text": {"type": "string"}},
                "required": ["line"],
            },
        },
        "kind": {"enum": ["a", "b"]},
        "target": {"$ref": "#/$defs/target"},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "already": {"type": ["string", "null"]},
    },
    "required": ["path"],
    "$defs": {"target": {"type": "object", "properties": {"name": {"type": "string"}}}},
}


def test_strict_schema_of_nested_objects_and_arrays() -> None:
    before = copy.deepcopy(NESTED)
    strict = profile.strict_schema(NESTED)
    assert before == NESTED  # the argument is not changed
    assert strict["additionalProperties"] is False
    assert strict["required"] == list(NESTED["properties"])
    props = strict["properties"]
    assert props["path"] == {"type": "string"}  # was required: not nullable
    options = props["options"]
    assert options["type"] == ["object", "null"]
    assert options["additionalProperties"] is False
    assert options["required"] == ["overwrite", "encoding"]
    assert options["properties"]["overwrite"] == {"type": "boolean"}
    assert options["properties"]["encoding"] == {"type": ["string", "null"]}
    item = props["edits"]["items"]
    assert props["edits"]["type"] == ["array", "null"]
    assert item["additionalProperties"] is False and item["required"] == ["line", "text"]
    assert item["properties"]["text"] == {"type": ["string", "null"]}
    assert props["kind"] == {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]}
    assert props["target"] == {"anyOf": [{"$ref": "#/$defs/target"}, {"type": "null"}]}
    assert props["either"]["anyOf"][-1] == {"type": "null"}
    assert props["already"] == {"type": ["string", "null"]}
    target = strict["$defs"]["target"]
    assert target["additionalProperties"] is False and target["required"] == ["name"]


def test_strict_schema_accepts_what_the_model_now_sends() -> None:
    """Null stands for a left-out optional; an unknown property is refused."""
    strict = profile.strict_schema(NESTED)
    validator = jsonschema.Draft202012Validator(strict)
    full = {
        "path": "a.txt",
        "options": None,
        "edits": [{"line": 1, "text": None}],
        "kind": None,
        "target": None,
        "either": 3,
        "already": None,
    }
    validator.validate(full)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**full, "extra": 1})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({k: v for k, v in full.items() if k != "kind"})


def test_an_empty_object_schema_is_made_strict() -> None:
    assert profile.strict_schema({"type": "object"}) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


schemas = st.recursive(
    st.sampled_from([{"type": "string"}, {"type": "integer"}, {"enum": [1, 2]}]),
    lambda inner: st.one_of(
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(
            lambda props, required: {
                "type": "object",
                "properties": props,
                "required": [k for k in props if k in required],
            },
            st.dictionaries(st.sampled_from("abcde"), inner, max_size=4),
            st.sets(st.sampled_from("abcde")),
        ),
    ),
    max_leaves=12,
)


@given(schemas)
def test_every_object_of_a_strict_schema_is_closed_and_fully_required(
    schema: dict[str, Any],
) -> None:
    strict = profile.strict_schema(schema)
    jsonschema.Draft202012Validator.check_schema(strict)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                assert node["additionalProperties"] is False
                assert node["required"] == list(node["properties"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(strict)
    assert profile.strict_schema(strict) == strict  # strict twice is strict once
