"""A Workshop prompt fits the model's context; a long conversation is compressed into a summary.

Against a real HTTP server on 127.0.0.1 (tests/wire_server.py) that holds a
model context as llama.cpp's does: ``GET /props`` reports its ``n_ctx``, and
a prompt of that many tokens or more is refused with HTTP 400 and llama.cpp's
message, before any answer is generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata import Repository
from strata.errors import ProviderError, ProviderNotConfigured, WorkshopError
from strata.providers.config import open_provider
from strata.providers.openai import OpenAIChat
from strata.providers.transport import Retry
from strata.providers.window import context_window, forget
from strata.workshop.fit import SUMMARY_INSTRUCTIONS
from wire_server import WireServer, prompt_tokens, text, tools

N_CTX = 4096


@pytest.fixture(autouse=True)
def _fresh_windows() -> Iterator[None]:
    forget()
    yield
    forget()


def local(wire: WireServer, **options: Any) -> OpenAIChat:
    """A llama.cpp-like server on this machine (output limit 1024 by default)."""
    return OpenAIChat(
        name="local",
        model="m",
        base_url=wire.openai_url,
        retry=Retry(delays=()),
        tool_choice_required=False,
        **options,
    )


def eight_files(repo: Repository) -> None:
    """Eight text files: about 22 KB, a prompt of ~6,000 tokens with the fixed limits."""
    for i in range(8):
        (repo.root / f"notes{i}.txt").write_text(f"line of notes {i} about the project\n" * 80)


def test_a_prompt_longer_than_the_context_fails_the_turn_when_the_context_is_unknown(
    repo: Repository, wire: WireServer
) -> None:
    eight_files(repo)
    wire.n_ctx, wire.reports_n_ctx = N_CTX, False
    wire.queue(text("Eight files of notes."))
    w = repo.workshop(provider=local(wire))
    with pytest.raises(ProviderError, match="does not fit the model's context window") as caught:
        w.send("what is in the notes?")
    assert prompt_tokens(wire.bodies[0]) >= N_CTX
    assert "context_window of [providers.local]" in (caught.value.hint or "")


def test_the_prompt_fits_the_context_the_server_reports_and_notes_what_was_cut(
    repo: Repository, wire: WireServer
) -> None:
    eight_files(repo)
    wire.n_ctx = N_CTX
    wire.queue(text("Eight files of notes."))
    turn = repo.workshop(provider=local(wire)).send("what is in notes3.txt?")
    assert turn.assistant_message.text == "Eight files of notes."
    [body] = wire.bodies
    assert body["max_tokens"] == 1024
    assert prompt_tokens(body) + body["max_tokens"] < N_CTX  # room left for the answer
    system = body["messages"][0]["content"]
    assert "notes7.txt" in system and "### notes3.txt" in system  # manifest, the file asked about
    notes = turn.assistant_message.data["context_notes"]
    assert any("not shown" in n for n in notes), notes


def test_a_context_window_of_the_config_is_used_and_checked(wire: WireServer) -> None:
    wire.n_ctx = 8192
    table = {"adapter": "openai-chat", "model": "m", "base_url": wire.openai_url}
    asked = open_provider("local", config={"providers": {"local": table}}, environ={})
    assert context_window(asked) == 8192  # what the server reports
    config = {"providers": {"local": {**table, "context_window": 3000}}}
    assert context_window(open_provider("local", config=config, environ={})) == 3000
    config = {"providers": {"local": {**table, "context_window": 10}}}
    with pytest.raises(ProviderNotConfigured, match="256 or more"):
        open_provider("local", config=config, environ={})


def test_a_context_too_small_for_the_tools_and_message_fails_clearly(
    repo: Repository, wire: WireServer
) -> None:
    wire.n_ctx = 1500
    w = repo.workshop(provider=local(wire))
    with pytest.raises(WorkshopError, match="context of 1500 tokens cannot hold this turn"):
        w.send("hello")
    assert wire.requests == [] and w.messages() == []  # nothing sent, nothing recorded


def test_a_conversation_past_its_budget_is_compressed_into_a_summary(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("hello\n")
    wire.n_ctx = 5000
    rule = "Remember: the report must use metric units. " * 48  # ~2,100 characters
    w = repo.workshop(provider=local(wire))
    wire.queue(text("Noted."))
    w.send("First: " + rule)
    wire.queue(text("The user wants metric units in the report."), text("Done twice."))
    turn = w.send("Second: write the report.")
    assert turn.assistant_message.text == "Done twice."
    _, summary_call, second = wire.bodies
    assert "tools" not in summary_call
    assert summary_call["messages"][0]["content"] == SUMMARY_INSTRUCTIONS
    assert "First: Remember" in summary_call["messages"][1]["content"]
    sent = [m.get("content") or "" for m in second["messages"]]
    assert "Summary of the conversation so far:\nThe user wants metric units" in sent[1]
    assert not any(s.startswith("First:") for s in sent)  # the old message is not sent again
    assert prompt_tokens(second) < 5000
    kinds = [(m.kind, m.system_kind) for m in w.messages() if m.system_kind != "draft_created"]
    assert kinds == [
        ("user_message", None),
        ("assistant_message", None),
        ("summary_message", None),
        ("system_event", "context_compressed"),
        ("user_message", None),
        ("assistant_message", None),
    ]
    [summary] = [m for m in w.messages() if m.kind == "summary_message"]
    assert summary.text == "The user wants metric units in the report."
    assert summary.data["automatic"] is True and summary.data["by_model"] is True
    assert w.messages()[0].text.startswith("First:")  # still in the transcript and the log
    notes = turn.assistant_message.data["context_notes"]
    assert any("compressed into a summary" in n for n in notes)
    repo.undo()  # the second turn, its summary with it
    assert [m.kind for m in w.messages() if m.kind != "system_event"] == [
        "user_message",
        "assistant_message",
    ]


def test_every_step_of_a_turn_fits_the_context_as_tool_results_pile_up(
    repo: Repository, wire: WireServer
) -> None:
    """Step 2 of a turn carries step 1's tool results: each request is fitted, not only the first.

    Three files of ~10 KB each are read one a step: unfitted, the second
    request alone is past the 4,096-token context (llama.cpp refuses it).
    """
    for name in ("a", "b", "c"):
        (repo.root / f"{name}.txt").write_text(f"{name} line of the long notes\n" * 400)
    repo.snapshot("base")
    wire.n_ctx = N_CTX
    wire.queue(
        tools(("read_file", {"path": "a.txt"})),
        tools(("read_file", {"path": "b.txt"})),
        tools(("read_file", {"path": "c.txt"}), ("write_file", {"path": "d.txt", "content": "d"})),
        text("Read them all."),
    )
    w = repo.workshop(provider=local(wire))
    message = "Read a.txt, b.txt and c.txt, then write d.txt. " + "Keep every word. " * 40
    turn = w.send(message)
    assert turn.assistant_message.text == "Read them all."
    bodies = wire.bodies
    assert len(bodies) == 4  # no request refused, none sent twice
    for body in bodies:
        assert prompt_tokens(body) + body["max_tokens"] < N_CTX
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        assert users[-1] == message  # the user's message is sent whole at every step
    results = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("[left out to fit the model's context: the result of read_file")
    assert "[cut to fit the model's context:" in results[2]  # the newest, cut at its end
    assert results[3].startswith("wrote") or "d.txt" in results[3]  # a short result stays whole
    notes = turn.assistant_message.data["context_notes"]
    assert any("tool results left out" in n for n in notes), notes
    assert any("tool results cut at their end" in n for n in notes), notes
    # the fitted requests are what was recorded: the turn replays offline, step for step
    draft = repo.draft(create=False)
    assert (draft.path / "d.txt").read_text() == "d"
    with Repository.open(repo.root) as again:
        report = again.replay(f"{draft.base.id}..{draft.tip().id}")
    assert report.ok, report.divergence
    assert [s.status for s in report.steps if s.kind == "agent"] == ["same", "same"]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6_000), min_size=1, max_size=8),
    system=st.integers(0, 8_000),
    budget=st.integers(200, 4_000),
)
def test_a_fitted_request_keeps_the_user_message_and_fits_again_unchanged(
    sizes: list[int], system: int, budget: int
) -> None:
    """Fitting depends on the messages and the budget alone, and a fitted request is a fixed point.

    (A replay carries the sent messages on and fits the next step again: it must get the same.)
    """
    from strata.providers.base import Message, Request, ToolCall
    from strata.providers.window import fit_request, request_tokens

    user = Message("user", "do the thing " * 50)
    messages = [Message("system", "s" * system), user]
    for n, size in enumerate(sizes):
        call = ToolCall(f"call_{n}", "read_file", {"path": f"f{n}.txt", "body": "x" * (size // 4)})
        messages.append(Message("assistant", "reading", tool_calls=(call,)))
        messages.append(Message("tool", "r" * size, tool_call_id=call.id, name="read_file"))
    request = Request("m", tuple(messages), input_budget=budget)
    fitted, notes = fit_request(request)
    assert [m for m in fitted.messages if m.role == "user"] == [user]
    assert [(m.role, m.tool_call_id) for m in fitted.messages] == [
        (m.role, m.tool_call_id) for m in messages
    ]
    if request_tokens(fitted) > budget:
        assert any("still about" in n for n in notes)
    assert fit_request(fitted)[0] == fitted
    assert fit_request(request) == (fitted, notes)
