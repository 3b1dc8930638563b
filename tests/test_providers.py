"""Model providers through the official SDKs against a real local HTTP server.

Every call here goes over a socket to ``tests/wire_server.py``, which speaks
OpenAI's Responses API, Chat Completions and Anthropic's Messages API; the
bodies it received are what the request profile put on the wire.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strata.errors import (
    ProviderAuthFailed,
    ProviderCancelled,
    ProviderError,
    ProviderProtocolError,
    ProviderUnavailable,
    ToolArgumentsInvalid,
)
from strata.providers import (
    CancelToken,
    Finished,
    Message,
    Request,
    Retry,
    TextDelta,
    ToolCallEvent,
    ToolSpec,
    complete,
)
from strata.providers.anthropic import Anthropic
from strata.providers.openai import DEFAULT_LOCAL_MAX_TOKENS, OpenAIChat, OpenAIResponses
from strata.providers.transport import Transient, with_retries
from wire_server import Reply, WireServer, status, text, tools

ADAPTERS = ["openai-responses", "openai-chat", "anthropic"]

WRITE = ToolSpec(
    "write_file",
    "Write a file of the Draft.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "mode": {"type": "string", "enum": ["w", "a"]},
        },
        "required": ["path", "content"],
    },
)
ARGS = {"path": "notes/a.txt", "content": 'line one\nline "two"'}


def ask(content: str = "Write the notes.", **options: Any) -> Request:
    return Request(
        model="", messages=(Message("system", "Be brief."), Message("user", content)), **options
    )


Make = Callable[..., Any]


@pytest.fixture
def make(wire: WireServer) -> Iterator[Make]:
    """``make(adapter, **settings)``: an adapter pointed at the wire server (closed afterwards)."""
    made: list[Any] = []

    def factory(adapter: str, **settings: Any) -> Any:
        settings.setdefault("name", "local")
        settings.setdefault("api_key", "sk-test-key")
        settings.setdefault("retry", Retry(sleep=lambda s: None))
        if adapter == "anthropic":
            settings.setdefault("model", "claude-test")
            provider: Any = Anthropic(base_url=wire.url, **settings)
        else:
            settings.setdefault("model", "gpt-5.2")
            cls = OpenAIResponses if adapter == "openai-responses" else OpenAIChat
            provider = cls(base_url=wire.openai_url, **settings)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def sleeps() -> tuple[list[float], Retry]:
    waited: list[float] = []
    return waited, Retry(sleep=waited.append)


# -- turns --------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_plain_turn_returns_the_whole_answer(adapter: str, wire: WireServer, make: Make) -> None:
    provider = make(adapter, stream=False)
    wire.queue(text("The notes are written."))
    response = complete(provider, ask())
    assert response.text == "The notes are written."
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 7)
    [received] = wire.requests
    assert received.body["stream"] is False
    assert received.body == provider.wire_request(ask())  # the recorded body is the sent one


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_streamed_turn_yields_deltas_in_order(adapter: str, wire: WireServer, make: Make) -> None:
    provider = make(adapter)
    answer = "Streaming, piece by piece: ok."
    wire.queue(text(answer, chunk=2))
    events = list(provider.stream(ask()))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == [answer[i : i + 2] for i in range(0, len(answer), 2)]
    assert "".join(deltas) == answer
    assert isinstance(events[-1], Finished)
    assert sum(isinstance(e, Finished) for e in events) == 1
    assert events[-1].response.text == answer
    assert wire.bodies == [provider.wire_request(ask())]
    assert wire.bodies[0]["stream"] is True


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_tool_call_with_fragmented_arguments_is_assembled(
    adapter: str, wire: WireServer, make: Make
) -> None:
    provider = make(adapter)
    wire.queue(tools(("write_file", ARGS), answer="Writing it.", chunk=3))
    events = list(provider.stream(ask(tools=(WRITE,))))
    [call_event] = [e for e in events if isinstance(e, ToolCallEvent)]
    assert call_event.call.name == "write_file"
    assert call_event.call.arguments == ARGS
    assert call_event.call.id
    assert events.index(call_event) < len(events) - 1  # before Finished
    response = events[-1].response
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == (call_event.call,)
    assert response.text == "Writing it."


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_answer_cut_by_the_token_limit_finishes_with_length(
    adapter: str, wire: WireServer, make: Make
) -> None:
    wire.queue(text("half an ans", finish="length"))
    assert complete(make(adapter), ask()).finish_reason == "length"


def test_wire_request_is_pure(wire: WireServer, make: Make) -> None:
    provider = make("openai-responses")
    request = ask(tools=(WRITE,))
    assert provider.wire_request(request) == provider.wire_request(request)
    assert wire.requests == []


# -- seed 000's profile, as seen on the wire ------------------------------------------


def two_turns(provider: Any, wire: WireServer, request: Request) -> list[dict[str, Any]]:
    """A tool call, its result sent back, the final answer; the two bodies the server got."""
    wire.queue(tools(("write_file", ARGS)), text("Done."))
    first = complete(provider, request)
    [call] = first.tool_calls
    follow = Request(
        model=request.model,
        messages=(
            *request.messages,
            first.message(),
            Message("tool", "wrote 2 lines", tool_call_id=call.id, name=call.name),
        ),
        tools=request.tools,
    )
    assert complete(provider, follow).text == "Done."
    return wire.bodies


def test_the_responses_profile_on_the_wire(wire: WireServer, make: Make) -> None:
    provider = make("openai-responses", model="gpt-5.2")
    first, second = two_turns(provider, wire, ask(tools=(WRITE,)))
    assert first["truncation"] == "disabled"
    assert first["tool_choice"] == "required"  # no tool result yet
    assert second["tool_choice"] == "auto"  # after one
    assert first["parallel_tool_calls"] is False
    assert first["reasoning"] == {"effort": "medium"}
    assert "temperature" not in first and "top_p" not in first  # GPT-5 family
    [tool] = first["tools"]
    assert tool["strict"] is True and tool["type"] == "function"
    params = tool["parameters"]
    assert params["additionalProperties"] is False
    assert params["required"] == ["path", "content", "mode"]
    assert params["properties"]["mode"] == {"type": ["string", "null"], "enum": ["w", "a", None]}
    assert params["properties"]["path"] == {"type": "string"}
    call_item, output_item = second["input"][-2:]
    assert call_item["type"] == "function_call" and json.loads(call_item["arguments"]) == ARGS
    assert output_item == {
        "type": "function_call_output",
        "call_id": call_item["call_id"],
        "output": "wrote 2 lines",
    }


def test_the_chat_profile_on_the_wire_for_a_local_model(wire: WireServer, make: Make) -> None:
    provider = make("openai-chat", model="smollm2-135m")
    first, second = two_turns(provider, wire, ask(tools=(WRITE,)))
    assert (first["temperature"], first["top_p"]) == (0, 1)  # not GPT-5: deterministic
    assert "reasoning_effort" not in first and "truncation" not in first
    assert first["tool_choice"] == "required" and second["tool_choice"] == "auto"
    assert first["parallel_tool_calls"] is False
    function = first["tools"][0]["function"]
    assert function["strict"] is True and function["parameters"]["additionalProperties"] is False
    assert first["stream_options"] == {"include_usage": True}
    assistant, tool = second["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == ARGS
    assert tool == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": "wrote 2 lines",
    }


def test_effort_none_on_gpt_5_2_sends_sampling_and_bad_effort_is_medium(
    wire: WireServer, make: Make
) -> None:
    provider = make("openai-chat", model="gpt-5.2")
    wire.queue(text("a"), text("b"))
    complete(provider, ask(reasoning_effort="none"))
    complete(provider, ask(reasoning_effort="extreme"))
    none, bad = wire.bodies
    assert none["reasoning_effort"] == "none" and (none["temperature"], none["top_p"]) == (0, 1)
    assert bad["reasoning_effort"] == "medium" and "temperature" not in bad


def test_an_explicit_tool_choice_wins_over_the_profile(wire: WireServer, make: Make) -> None:
    provider = make("openai-responses")
    wire.queue(text("no tools needed"))
    complete(provider, ask(tools=(WRITE,), tool_choice="auto"))
    assert wire.bodies[0]["tool_choice"] == "auto"


def test_anthropic_tool_use_round_trip(wire: WireServer, make: Make) -> None:
    provider = make("anthropic")
    first, second = two_turns(provider, wire, ask(tools=(WRITE,)))
    assert first["system"] == "Be brief."
    assert first["max_tokens"] == 4096
    assert first["messages"] == [{"role": "user", "content": "Write the notes."}]
    assert first["tools"] == [
        {"name": "write_file", "description": WRITE.description, "input_schema": WRITE.parameters}
    ]
    assert "tool_choice" not in first  # the profile is OpenAI's
    assistant, result = second["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": ARGS}],
    }
    assert result == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "wrote 2 lines"}],
    }


# -- failures -------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_server_errors_are_retried_with_backoff(adapter: str, wire: WireServer, make: Make) -> None:
    waited, retry = sleeps()
    wire.queue(status(500), status(500), text("third time lucky"))
    assert complete(make(adapter, retry=retry), ask()).text == "third time lucky"
    assert waited == [1, 2]
    assert len(wire.requests) == 3


def test_a_rate_limit_is_retried(wire: WireServer, make: Make) -> None:
    waited, retry = sleeps()
    wire.queue(status(429, "slow down"), text("ok"))
    assert complete(make("openai-chat", retry=retry), ask()).text == "ok"
    assert waited == [1]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_retry_after_is_the_wait_the_server_asks_for(
    adapter: str, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    later = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30), usegmt=True
    )
    wire.queue(
        status(429, "slow down", retry_after="3"),
        status(503, "busy", retry_after=later),
        status(503, "busy"),
        text("ok"),
    )
    assert complete(make(adapter, retry=retry), ask()).text == "ok"
    assert waited[0] == 3 and 25 <= waited[1] <= 31  # the server's waits, not 1 and 2
    assert waited[2] == 4  # no header: the schedule again


def test_a_retry_after_past_the_limit_is_not_waited_for(wire: WireServer, make: Make) -> None:
    waited, retry = sleeps()
    wire.queue(status(429, "come back tomorrow", retry_after="86400"), text("never reached"))
    with pytest.raises(ProviderUnavailable, match="asks to wait 86400 s") as caught:
        complete(make("openai-chat", retry=retry), ask())
    assert caught.value.attempts == 1 and waited == [] and wire.pending == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_retries_exhausted_is_provider_unavailable(
    adapter: str, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    wire.queue(*[status(503, "overloaded")] * 6, text("never reached"))
    with pytest.raises(ProviderUnavailable) as caught:
        complete(make(adapter, retry=retry), ask())
    assert caught.value.attempts == 6
    assert waited == [1, 2, 4, 8, 16]
    assert len(wire.requests) == 6 and wire.pending == 1
    message = caught.value.message
    assert message.startswith("local: ") and "503" in message and "6 attempts" in message
    assert "\n" not in message and caught.value.hint


@pytest.mark.parametrize("code", [401, 403])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_refused_credentials_fail_at_once(
    adapter: str, code: int, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    wire.queue(status(code, "invalid key"), text("never reached"))
    with pytest.raises(ProviderAuthFailed) as caught:
        complete(make(adapter, retry=retry, api_key_env="LOCAL_KEY"), ask())
    assert waited == [] and len(wire.requests) == 1
    assert caught.value.message.startswith("local: ") and f"HTTP {code}" in caught.value.message
    assert "LOCAL_KEY" in (caught.value.hint or "")


def test_a_bad_request_is_not_retried(wire: WireServer, make: Make) -> None:
    waited, retry = sleeps()
    wire.queue(status(404, "model 'nope' not found"), text("never reached"))
    with pytest.raises(ProviderError, match="model 'nope' not found") as caught:
        complete(make("openai-chat", retry=retry), ask())
    assert type(caught.value) is ProviderError
    assert waited == [] and len(wire.requests) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_malformed_stream_is_a_protocol_error(adapter: str, wire: WireServer, make: Make) -> None:
    wire.queue(text("this stream breaks its format", malformed=True), text("never reached"))
    with pytest.raises(ProviderProtocolError, match=r"^local: .*not JSON"):
        complete(make(adapter), ask())
    assert len(wire.requests) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_stream_cut_after_text_arrived_is_not_retried(
    adapter: str, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    provider = make(adapter, retry=retry)
    wire.queue(text("a long answer that is cut", chunk=2, cut_after=6), text("never reached"))
    seen: list[str] = []
    with pytest.raises(ProviderUnavailable, match="not retried") as caught:
        for event in provider.stream(ask()):
            if isinstance(event, TextDelta):
                seen.append(event.text)
    assert seen  # part of the answer arrived before the cut
    assert caught.value.attempts == 1 and waited == [] and wire.pending == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_stream_that_ends_before_its_last_event(
    adapter: str, wire: WireServer, make: Make
) -> None:
    """A clean end of the connection halfway is no answer: the final event never came."""
    wire.queue(text("an answer that stops halfway", chunk=2, end_early=True), text("never"))
    with pytest.raises(ProviderUnavailable, match="ended before the answer was complete"):
        complete(make(adapter), ask())
    assert wire.pending == 1  # text had arrived: not retried


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_stream_cut_before_any_text_is_retried(
    adapter: str, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    wire.queue(text("cut at once", cut_after=1), text("whole"))
    assert complete(make(adapter, retry=retry), ask()).text == "whole"
    assert waited == [1]


@pytest.mark.parametrize("arguments", ['{"path": "a.txt", "content": ', "[1, 2]"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_tool_arguments_that_are_not_a_json_object(
    adapter: str, arguments: str, wire: WireServer, make: Make
) -> None:
    wire.queue(tools(("write_file", arguments)))
    with pytest.raises(ToolArgumentsInvalid) as caught:
        complete(make(adapter), ask(tools=(WRITE,)))
    assert caught.value.tool == "write_file"
    assert caught.value.arguments == arguments
    assert caught.value.message.startswith("local: ")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("adapter", ["openai-chat", "anthropic"])
def test_a_local_server_that_is_not_running_is_provider_unavailable_at_once(adapter: str) -> None:
    waited, retry = sleeps()
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    cls: Any = Anthropic if adapter == "anthropic" else OpenAIChat
    provider = cls(name="offline", model="m", base_url=url, retry=retry)
    with pytest.raises(ProviderUnavailable) as caught:
        complete(provider, ask())
    provider.close()
    # nothing listens on this machine's port: waiting minutes would not start a server
    assert caught.value.attempts == 1 and waited == []
    assert caught.value.message.startswith("offline: cannot connect to " + url)
    assert "refused" in caught.value.message.lower()
    assert f"nothing listens at 127.0.0.1:{port} (not retried)" in caught.value.message
    assert url in (caught.value.hint or "")


# a model server that takes one request and dies before answering (as llama.cpp's did on SIGILL)
DYING_SERVER = """
import os, socket, sys
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
connection, _ = listener.accept()
connection.recv(65536)
os._exit(132)
"""


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_local_server_whose_process_dies_mid_call_is_not_waited_for(adapter: str) -> None:
    import subprocess
    import sys

    waited, retry = sleeps()
    with subprocess.Popen(
        [sys.executable, "-c", DYING_SERVER], stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        if adapter == "anthropic":
            provider: Any = Anthropic(name="local", model="m", base_url=url, retry=retry)
        else:
            cls = OpenAIResponses if adapter == "openai-responses" else OpenAIChat
            provider = cls(name="local", model="m", base_url=url + "/v1", retry=retry)
        started = time.monotonic()
        with pytest.raises(ProviderUnavailable) as caught:
            complete(provider, ask())
        provider.close()
        assert server.wait(10) == 132
    assert caught.value.attempts == 1 and waited == []
    assert f"nothing listens at 127.0.0.1:{port} (not retried)" in caught.value.message
    assert time.monotonic() - started < 5


def test_only_a_local_port_that_refuses_is_gone() -> None:
    from strata.providers.transport import local_server_gone

    port = closed_port()
    gone = local_server_gone(f"http://127.0.0.1:{port}/v1")
    assert gone == f"nothing listens at 127.0.0.1:{port}"
    assert local_server_gone(f"http://localhost:{port}") == f"nothing listens at localhost:{port}"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        live = listener.getsockname()[1]
        assert local_server_gone(f"http://127.0.0.1:{live}/v1") is None  # busy, not gone
    # a remote server may come back: it is never probed, and keeps its retries
    assert local_server_gone("https://api.openai.com/v1") is None
    assert local_server_gone(f"http://192.0.2.1:{port}") is None
    assert local_server_gone("http://[::1]:not-a-port") is None


def test_a_local_server_that_does_not_answer_in_time_is_not_asked_again(
    wire: WireServer, make: Make
) -> None:
    # the server on this machine is still generating: a second attempt would queue another
    # full generation behind the first, so the time-out ends the call with what to change
    provider = make("openai-chat", timeout=0.3, retry=Retry(delays=(0,), sleep=lambda s: None))
    wire.queue(text("late", headers_delay=3), text("late again", headers_delay=3))
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable, match=r"did not answer within 0\.3 s") as caught:
        complete(provider, ask())
    assert caught.value.attempts == 1 and "not retried" in caught.value.message
    assert "timeout" in (caught.value.hint or "")
    assert time.monotonic() - started < 2.5


def test_a_time_out_of_a_remote_server_is_retried() -> None:
    attempts: list[int] = []

    def attempt() -> Iterator[Any]:
        attempts.append(1)
        raise Transient("https://api.example/v1 did not answer within 600 s", timed_out=True)
        yield  # a generator, as an adapter's attempt is

    with pytest.raises(ProviderUnavailable, match="2 attempts"):
        list(
            with_retries(
                "remote",
                attempt,
                retry=Retry(delays=(0,), sleep=lambda s: None),
                cancel=None,
                hint="",
                local=False,
            )
        )
    assert len(attempts) == 2


@pytest.mark.parametrize(
    "said",
    [
        "the request exceeds the available context size, try increasing it",  # llama.cpp
        "Requested tokens (5210) exceed context window of 4096",  # llama-cpp-python
        "This model's maximum context length is 8192 tokens. However, you requested 9000",
    ],
)
def test_a_prompt_longer_than_the_context_is_named_and_not_retried(
    said: str, wire: WireServer, make: Make
) -> None:
    waited, retry = sleeps()
    wire.queue(status(400, said), text("never reached"))
    with pytest.raises(ProviderError, match="does not fit the model's context window") as caught:
        complete(make("openai-chat", retry=retry), ask())
    assert said[:30] in caught.value.message and "base_url" not in (caught.value.hint or "")
    assert waited == [] and len(wire.requests) == 1


@pytest.mark.parametrize("adapter", ["openai-responses", "openai-chat"])
def test_a_local_server_always_gets_an_output_limit(
    adapter: str, wire: WireServer, make: Make
) -> None:
    key = "max_output_tokens" if adapter == "openai-responses" else "max_completion_tokens"
    wire.queue(text("one"), text("two"), text("three"))
    complete(make(adapter), ask())
    complete(make(adapter, max_tokens=64), ask())
    complete(make(adapter, max_tokens=64), ask(max_output_tokens=8))
    limits = [body.get(key) for body in wire.bodies]
    assert limits == [DEFAULT_LOCAL_MAX_TOKENS, 64, 8]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_cancel_stops_the_stream_and_closes_it(adapter: str, wire: WireServer, make: Make) -> None:
    provider = make(adapter)
    cancel = CancelToken()
    wire.queue(Reply(text="x" * 40, chunk=2, chunk_delay=0.05))
    got: list[str] = []
    with pytest.raises(ProviderCancelled, match=r"^local: "):
        for event in provider.stream(ask(), cancel=cancel):
            if isinstance(event, TextDelta):
                got.append(event.text)
                cancel.cancel()
    assert got == ["xx"]  # nothing was yielded after the cancel
    deadline = time.monotonic() + 3
    while wire.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert wire.disconnects == 1  # the server saw the stream closed mid-answer


def test_a_cancelled_token_sends_nothing(wire: WireServer, make: Make) -> None:
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(ProviderCancelled):
        complete(make("openai-responses"), ask(), cancel=cancel)
    assert wire.requests == []


@pytest.mark.parametrize("streamed", [True, False])
def test_cancel_returns_at_once_while_the_server_has_not_answered(
    streamed: bool, wire: WireServer, make: Make
) -> None:
    # a local model reading a long prompt sends nothing for minutes; with stream = false
    # nothing at all until the whole answer: Ctrl-C must not wait for it
    provider = make("openai-chat", stream=streamed)
    wire.queue(text("late", headers_delay=5), text("the next call"))
    cancel = CancelToken()
    timer = threading.Timer(0.2, cancel.cancel)
    timer.start()
    started = time.monotonic()
    with pytest.raises(ProviderCancelled, match=r"^local: "):
        complete(provider, ask(), cancel=cancel)
    assert time.monotonic() - started < 1.5  # not the server's 5 s
    assert complete(provider, ask()).text == "the next call"  # the adapter still works


def test_cancel_ends_the_wait_between_retries(wire: WireServer, make: Make) -> None:
    provider = make("openai-chat", retry=Retry(delays=(30.0,)))  # waits in real time
    cancel = CancelToken()
    wire.queue(status(500), text("never reached"))
    timer = threading.Timer(0.2, cancel.cancel)
    timer.start()
    started = time.monotonic()
    with pytest.raises(ProviderCancelled):
        complete(provider, ask(), cancel=cancel)
    assert time.monotonic() - started < 2  # not the 30 s backoff
    assert len(wire.requests) == 1
