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

from strata import Repository
from strata.errors import ProviderError, ProviderNotConfigured, WorkshopError
from strata.providers.config import open_provider
from strata.providers.openai import OpenAIChat
from strata.providers.transport import Retry
from strata.providers.window import context_window, forget
from strata.workshop.fit import SUMMARY_INSTRUCTIONS
from wire_server import WireServer, prompt_tokens, text

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
