"""Traces: the canonical form a replay recognises a request by, redaction, the stored format."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.errors import ProviderUnavailable, TraceCorrupt, UnrecordedCall
from strata.providers.base import (
    Message,
    Request,
    Response,
    ToolCall,
    complete,
)
from strata.providers.replay import ReplayProvider
from strata.providers.scripted import Scripted
from strata.providers.trace import (
    Recorder,
    RecordingProvider,
    Trace,
    canonical_json,
    fingerprint,
    redact,
)


def test_the_canonical_form_ignores_key_order_float_noise_line_endings_and_inner_spaces():
    a = {"b": 1.0000001, "a": "two  words\r\nand\ta tab", "c": [0.1234564]}
    b = {"a": "two words\nand a tab", "c": [0.123456], "b": 1}
    assert canonical_json(a) == canonical_json(b)
    assert fingerprint(a) == fingerprint(b)


def test_the_canonical_form_keeps_what_changes_meaning():
    base = {"messages": [{"role": "user", "content": "write hello"}]}
    assert fingerprint(base) != fingerprint({"messages": [{"role": "user", "content": "write"}]})
    assert fingerprint({"x": 0.1234}) != fingerprint({"x": 0.1235})
    assert fingerprint({"x": "a\nb"}) != fingerprint({"x": "a b"})  # a newline is not a space
    assert fingerprint({"x": 1}) != fingerprint({"x": "1"})


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids),
    )
)
def test_canonical_form_is_idempotent(value):
    once = json.loads(canonical_json(value))
    assert canonical_json(once) == canonical_json(value)


SECRETS = {
    "openai key": "sk-proj-abcdefghijklmnop1234567890",
    "anthropic key": "sk-ant-api03-abcdefghijklmnopqrstuvwx",
    "github token": "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
    "github pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "email": "jane.doe+work@example.co.uk",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_redaction_removes_each_kind_of_secret_wherever_it_is(kind):
    secret = SECRETS[kind]
    value = {"messages": [{"content": f"use {secret} now"}], "headers": [f"x: {secret}"]}
    cleaned = json.dumps(redact(value))
    assert secret not in cleaned
    # a Bearer credential's token is gone too, not only the word
    assert secret.split()[-1] not in cleaned
    assert "[REDACTED:" in cleaned


def test_redaction_removes_values_of_secret_keys_and_given_secrets():
    value = {
        "api_key": "plainvalue123",
        "Authorization": "Basic Zm9vOmJhcg==",
        "note": "pw hunter2hunter2",
    }
    cleaned = redact(value, secrets=["hunter2hunter2"])
    assert cleaned["api_key"] == "[REDACTED:secret]"
    assert cleaned["Authorization"] == "[REDACTED:secret]"
    assert "hunter2hunter2" not in cleaned["note"]


def test_redaction_leaves_ordinary_text_alone():
    text = "sk- is a prefix; see docs at example.com; the task-runner key is short: sk-abc"
    assert redact(text) == text


class _Store:
    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        import blake3

        oid = blake3.blake3(data).hexdigest()
        self.objects[oid] = data
        return oid


def _answers(*responses: Response):
    """The scripted adapter serving ``responses`` in order."""
    return Scripted(
        [
            {
                "text": r.text,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in r.tool_calls
                ],
                "finish_reason": r.finish_reason,
            }
            for r in responses
        ]
    )


def _request(text: str) -> Request:
    return Request("m", (Message("system", "be brief"), Message("user", text)))


def test_a_recorded_call_stores_request_chunks_and_response_redacted_under_its_key():
    store = _Store()
    recorder = Recorder(put=store.put, agent_id="a1")
    provider = RecordingProvider(
        _answers(Response("mail me at bob@example.com", finish_reason="stop")), recorder
    )
    response = complete(provider, _request("key sk-abcdefghijklmnopqrstuvwx please"))
    assert response.text == "mail me at bob@example.com"  # the caller sees the real answer
    (oid,) = recorder.ids
    stored = store.objects[oid]
    assert b"bob@example.com" not in stored and b"sk-abcdefghijklmnopqrstuvwx" not in stored
    trace = Trace.decode(stored, name=oid)
    assert trace.key.startswith("llm_call:scripted:a1:-:0:")
    assert trace.key.endswith(trace.fingerprint)
    assert [c["kind"] for c in trace.chunks] == ["text", "finished"]
    # the key in the request and in the wire body; the address in the text chunk, the final
    # chunk and the response
    assert trace.redactions == 5


def test_a_failed_call_is_recorded_with_its_error():
    class Down:
        name, adapter, model = "down", "openai-chat", "m"

        def stream(self, request, *, cancel=None):
            raise ProviderUnavailable("down", "connection refused")
            yield  # a generator

    store = _Store()
    recorder = Recorder(put=store.put)
    with pytest.raises(ProviderUnavailable):
        complete(RecordingProvider(Down(), recorder), _request("hi"))
    trace = Trace.decode(store.objects[recorder.ids[0]], name="t")
    assert trace.response is None and trace.error["type"] == "ProviderUnavailable"


def _recorded(*responses: Response, prompts=("hi",)):
    store = _Store()
    recorder = Recorder(put=store.put)
    provider = RecordingProvider(_answers(*responses), recorder)
    for p in prompts:
        complete(provider, _request(p))
    return recorder.traces


def test_replay_serves_the_recorded_answer_for_the_same_request_spelled_differently():
    call = ToolCall("c1", "write_file", {"path": "a.txt", "content": "x"})
    traces = _recorded(Response("", (call,), "tool_calls"))
    replayed = complete(ReplayProvider(traces), _request("hi  \r\n"[:2]))
    assert replayed.tool_calls == (call,)


def test_replay_of_a_different_request_is_an_unrecorded_call_naming_the_field():
    traces = _recorded(Response("ok"), prompts=("write hello",))
    with pytest.raises(UnrecordedCall) as caught:
        complete(ReplayProvider(traces), _request("write goodbye"))
    assert "messages[1].content" in caught.value.observed
    assert "goodbye" in caught.value.observed and "hello" in caught.value.observed


def test_replay_past_the_recorded_calls_is_an_unrecorded_call():
    traces = _recorded(Response("ok"))
    provider = ReplayProvider(traces)
    complete(provider, _request("hi"))
    with pytest.raises(UnrecordedCall, match="the step made 1"):
        complete(provider, _request("hi"))


def test_a_trace_whose_request_does_not_match_its_key_is_corrupt():
    (trace,) = _recorded(Response("ok"))
    raw = trace.to_json()
    raw["request"]["messages"][1]["content"] = "tampered"
    with pytest.raises(TraceCorrupt, match="does not match its key"):
        Trace.decode(json.dumps(raw).encode(), name="t")
    with pytest.raises(TraceCorrupt, match="not JSON"):
        Trace.decode(b"\x00garbage", name="t")
    raw = trace.to_json() | {"version": 99}
    with pytest.raises(TraceCorrupt, match="version"):
        Trace.decode(json.dumps(raw).encode(), name="t")
