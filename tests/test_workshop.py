"""The Workshop: a conversation in the ledger whose agent edits land in the Draft.

Every behaviour of the seed's "Message-Level Undo", "Regenerate", "Model
Switching" and "Publish Checkpoint Cards", one by one, against the scripted
provider.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strata import Repository
from strata.errors import ProviderNotConfigured, WorkshopBusy, WorkshopError
from strata.ledger.events import EventType
from strata.providers.base import (
    CancelToken,
    Finished,
    Request,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
)
from strata.providers.scripted import Scripted
from strata.workshop.conversation import append
from strata.workshop.events import StepFinished, StepStarted, ToolResultEvent
from strata.workshop.session import Workshop


def write(path: str, content: str) -> dict[str, Any]:
    """A scripted answer that writes one file."""
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]}


class Recording:
    """A provider that answers from a script and keeps every request it was sent."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.inner = Scripted(responses, name="demo")
        self.name = "demo"
        self.adapter = "scripted"
        self.model = "scripted"
        self.requests: list[Request] = []

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        self.requests.append(request)
        return self.inner.stream(request, cancel=cancel)

    def complete(self, request: Request, *, cancel: CancelToken | None = None) -> Any:
        self.requests.append(request)
        return self.inner.complete(request, cancel=cancel)


def turn(path: str, content: str, answer: str) -> list[dict[str, Any]]:
    """The script of one editing turn: write a file, then answer."""
    return [write(path, content), {"text": answer}]


@pytest.fixture
def ws_repo(repo: Repository) -> Repository:
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    return repo


def shop(repo: Repository, responses: list[dict[str, Any]]) -> Workshop:
    return repo.workshop(provider=Recording(responses))


def draft_file(repo: Repository, name: str = "a.txt") -> str | None:
    draft = repo.draft(create=False) if repo.layout.draft_state.exists() else None
    if draft is None:
        return None
    path = draft.path / name
    return path.read_text() if path.exists() else None


# -- a turn ------------------------------------------------------------------------------


def test_a_turn_records_both_messages_and_links_the_draft_revision(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Changed a.txt."))
    result = w.send("make a.txt say one")
    assert result.user_message.text == "make a.txt say one"
    assert result.assistant_message.text == "Changed a.txt."
    draft = ws_repo.draft(create=False)
    assert result.draft_revision == draft.tip().id
    assert (draft.path / "a.txt").read_text() == "one\n"
    assert (ws_repo.root / "a.txt").read_text() == "original\n"  # Published untouched
    kinds = [(m.kind, m.system_kind) for m in w.messages()]
    assert kinds == [
        ("user_message", None),
        ("system_event", "draft_created"),
        ("assistant_message", None),
    ]
    assert w.head == result.assistant_message.id
    assistant = w.messages()[-1]
    assert assistant.data["tool_calls"] == [["write_file"], []]
    assert len(assistant.data["traces"]) == 3  # two model calls, one tool call
    # in the ledger, as history shows it
    types = [e.action_type for e in ws_repo.history(limit=50)]
    assert EventType.USER_MESSAGE in types and EventType.ASSISTANT_MESSAGE in types
    # the revision names its message
    assert draft.tip().data["workshop"]["message"] == result.user_message.id


def test_the_next_turn_sends_the_conversation_so_far(ws_repo: Repository) -> None:
    provider = Recording([{"text": "Hello."}, {"text": "Again."}])
    w = ws_repo.workshop(provider=provider)
    w.send("hi")
    w.send("and again")
    last = provider.requests[-1]
    assert [(m.role, m.content) for m in last.messages[1:]] == [
        ("user", "hi"),
        ("assistant", "Hello."),
        ("user", "and again"),
    ]
    assert last.messages[0].role == "system"


def test_events_stream_to_the_caller(ws_repo: Repository) -> None:
    w = shop(ws_repo, [write("b.txt", "b\n"), {"text": "Done.", "stream": 2}])
    seen: list[object] = []
    w.send("add b", on_event=seen.append)
    kinds = [type(e) for e in seen]
    assert kinds[0] is StepStarted
    assert ToolCallEvent in kinds and ToolResultEvent in kinds and Finished in kinds
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["Do", "ne", "."]
    finished = [e for e in seen if isinstance(e, StepFinished)]
    assert len(finished) == 2 and finished[-1].draft_revision is not None


def test_conversation_survives_reopening_and_several_coexist(ws_repo: Repository) -> None:
    w = shop(ws_repo, [{"text": "One."}])
    w.send("first")
    other = w.new_conversation("second topic")
    assert other.conversation_id != w.conversation_id
    assert other.messages() == []
    # a new Workshop opens the most recent conversation
    again = ws_repo.workshop(provider=Recording([]))
    assert again.conversation_id == other.conversation_id
    listed = {c.id: c for c in again.conversations()}
    assert set(listed) == {w.conversation_id, other.conversation_id}
    assert listed[other.conversation_id].title == "second topic"
    first = ws_repo.workshop(w.conversation_id[:9], provider=Recording([]))
    assert [m.text for m in first.messages() if m.kind == "user_message"] == ["first"]


def test_an_empty_message_fails_clearly_and_records_nothing(ws_repo: Repository) -> None:
    w = shop(ws_repo, [])
    from strata.errors import UsageError

    with pytest.raises(UsageError):
        w.send("  ")
    with pytest.raises(UsageError):
        w.send("", rpi=True)
    assert w.messages() == []


def test_a_failed_turn_is_recorded_and_leaves_the_draft_whole(ws_repo: Repository) -> None:
    # the script ends after the first step: the second model call fails
    w = shop(ws_repo, [write("a.txt", "one\n")])
    from strata.errors import ProviderError

    with pytest.raises(ProviderError):
        w.send("edit")
    last = w.messages()[-1]
    assert last.kind == "assistant_message" and last.data["error"]["type"]
    assert draft_file(ws_repo) == "one\n"  # the whole first step stays
    assert not w.busy


# -- input is blocked while a step runs --------------------------------------------------


class Blocking:
    """A provider whose answer waits until released."""

    name = "slow"
    adapter = "scripted"
    model = "slow"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        self.started.set()
        self.release.wait(20)
        return Scripted([{"text": "finally"}]).stream(request, cancel=cancel)


def test_a_second_send_is_refused_while_a_turn_runs(ws_repo: Repository) -> None:
    slow = Blocking()
    w = ws_repo.workshop(provider=slow)
    other = ws_repo.workshop(w.conversation_id, provider=Recording([{"text": "no"}]))
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: w.send("slow one"))
    thread.start()
    try:
        assert slow.started.wait(20)
        assert other.busy
        with pytest.raises(WorkshopBusy, match="in progress"):
            other.send("me too")
        assert all(r.text != "me too" for r in other.log().records)
        with pytest.raises(WorkshopBusy):
            other.rewind(w.messages()[0].id)
    finally:
        slow.release.set()
        thread.join(20)
    assert not errors
    assert [m.text for m in w.messages() if m.kind == "user_message"] == ["slow one"]
    assert not w.busy


def test_a_send_from_another_process_is_refused_while_a_turn_runs(
    ws_repo: Repository, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    child = f"""
import sys, time, pathlib
from strata import Repository
from strata.providers.scripted import Scripted
class Slow:
    name = adapter = model = "slow"
    def stream(self, request, *, cancel=None):
        print("started", flush=True)
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.02)
        return Scripted([{{"text": "done"}}]).stream(request, cancel=cancel)
repo = Repository.open(sys.argv[1])
repo.workshop(provider=Slow()).send("in the child")
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(ws_repo.root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        w = ws_repo.workshop(provider=Recording([{"text": "no"}]))
        with pytest.raises(WorkshopBusy):
            w.send("from the parent")
        assert all(r.text != "from the parent" for r in w.log().records)  # nothing recorded
    finally:
        go.touch()
        assert proc.wait(30) == 0
        assert proc.stdout is not None
        proc.stdout.close()
    w = ws_repo.workshop(provider=Recording([{"text": "now"}]))
    w.send("from the parent")
    assert [m.text for m in w.messages() if m.kind == "user_message"] == [
        "in the child",
        "from the parent",
    ]


# -- rewind ------------------------------------------------------------------------------


def two_turns(repo: Repository) -> Workshop:
    w = shop(repo, turn("a.txt", "one\n", "Set one.") + turn("a.txt", "two\n", "Set two."))
    w.send("one please")
    w.send("two please")
    return w


def test_rewind_to_an_assistant_message_restores_its_draft_revision(
    ws_repo: Repository,
) -> None:
    w = two_turns(ws_repo)
    first_answer = next(m for m in w.messages() if m.kind == "assistant_message")
    result = w.rewind(first_answer.id[:10])
    assert draft_file(ws_repo) == "one\n"
    assert w.head == first_answer.id
    assert [m.text for m in w.messages() if m.kind != "system_event"] == [
        "one please",
        "Set one.",
    ]
    assert result.draft_revision == first_answer.draft_revision
    # the later messages stay in the log, inactive; the rewind is an off-chain note
    log = w.log()
    assert any(r.text == "Set two." for r in log.records)
    assert log.records[-1].system_kind == "rewind"


def test_rewind_to_the_first_user_message_discards_the_draft(ws_repo: Repository) -> None:
    w = two_turns(ws_repo)
    first = w.messages()[0]
    w.rewind(first.id)
    assert not ws_repo.layout.draft_state.exists()
    assert w.head == first.id
    assert (ws_repo.root / "a.txt").read_text() == "original\n"


def test_rewind_to_a_message_not_in_the_transcript_changes_nothing(ws_repo: Repository) -> None:
    w = two_turns(ws_repo)
    second_answer = w.messages()[-1]
    w.rewind(w.messages()[0].id)
    with pytest.raises(WorkshopError, match="not in the active transcript"):
        w.rewind(second_answer.id)
    from strata.errors import UnknownRef

    with pytest.raises(UnknownRef):
        w.rewind("evt_nosuchmessage")


def test_rewind_across_a_publish_restores_published_from_the_first_publish(
    ws_repo: Repository,
) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one.") + turn("a.txt", "two\n", "Set two."))
    w.send("one please")
    target = w.messages()[-1]
    w.publish()
    assert (ws_repo.root / "a.txt").read_text() == "one\n"
    w.send("two please")
    w.publish()
    assert (ws_repo.root / "a.txt").read_text() == "two\n"
    cards = [m for m in w.messages() if m.system_kind == "checkpoint_publish"]
    assert len(cards) == 2
    result = w.rewind(target.id)
    # Published as the FIRST publish after the target found it; the Draft as at the target
    assert result.published_from_checkpoint == cards[0].data["checkpoint_id"]
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    assert draft_file(ws_repo) == "one\n"
    assert w.head == target.id


def test_rewind_across_a_checkpoint_restore_uses_its_pre_restore_checkpoint(
    ws_repo: Repository,
) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one."))
    w.send("one please")
    w.publish()  # Published: one
    target = w.messages()[-1]
    first_cp = target.data["checkpoint_id"]
    card = w.restore(first_cp)  # Published: original again
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    assert card.system_kind == "checkpoint_restore" and card.data["pre_restore_checkpoint_id"]
    w.rewind(target.id)
    assert (ws_repo.root / "a.txt").read_text() == "one\n"  # the pre_restore checkpoint's
    assert not ws_repo.layout.draft_state.exists()  # at the publish card, no Draft


def test_a_missing_checkpoint_fails_the_rewind_with_nothing_changed(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one."))
    w.send("one please")
    target = w.messages()[-1]
    with ws_repo.transaction("chat publish") as tx:  # a card whose checkpoint is gone
        append(
            tx,
            EventType.SYSTEM_EVENT,
            w.conversation_id,
            text="published",
            parent=w.head,
            data={"kind": "checkpoint_publish", "checkpoint_id": "evt_gonegonegone"},
        )
    head = w.head
    ops = len(ws_repo.operations())
    with pytest.raises(WorkshopError, match="checkpoint evt_gonegonegone is missing"):
        w.rewind(target.id)
    assert w.head == head and len(ws_repo.operations()) == ops
    assert draft_file(ws_repo) == "one\n"


# -- regenerate --------------------------------------------------------------------------


def test_regenerate_replaces_the_last_answer_and_its_draft_revision(ws_repo: Repository) -> None:
    w = shop(
        ws_repo,
        turn("a.txt", "one\n", "Set one.") + turn("a.txt", "uno\n", "Set uno instead."),
    )
    first = w.send("one please")
    old = first.assistant_message
    new = w.regenerate()
    assert new.assistant_message.text == "Set uno instead."
    assert new.user_message.id == first.user_message.id  # the same user message answered
    assert draft_file(ws_repo) == "uno\n"
    texts = [m.text for m in w.messages() if m.kind == "assistant_message"]
    assert texts == ["Set uno instead."]
    note = w.log().records[-1]
    assert note.system_kind == "regenerate"
    assert note.data["replaced_message_id"] == old.id
    assert note.data["new_message_id"] == new.assistant_message.id


def test_regenerate_after_a_rewind_answers_the_head(ws_repo: Repository) -> None:
    w = shop(ws_repo, [{"text": "First."}, {"text": "Second."}, {"text": "Third."}])
    w.send("q1")
    w.send("q2")
    q2 = [m for m in w.messages() if m.kind == "user_message"][-1]
    w.rewind(q2.id)
    turn_ = w.regenerate()
    assert turn_.assistant_message.text == "Third." and turn_.user_message.id == q2.id
    assert w.log().records[-1].data["replaced_message_id"] is None


def test_regenerate_of_an_empty_conversation_fails(ws_repo: Repository) -> None:
    with pytest.raises(WorkshopError, match="nothing to regenerate"):
        shop(ws_repo, []).regenerate()


# -- model switching ---------------------------------------------------------------------


def test_switching_the_model_is_a_card_and_the_workspace_default(ws_repo: Repository) -> None:
    with open(ws_repo.layout.config, "a") as config:
        config.write('\n[providers.other]\nadapter = "scripted"\nscript = "x.yaml"\n')
    reopened = Repository.open(ws_repo.root)
    try:
        w = reopened.workshop(provider=Recording([]))
        card = w.set_model("other")
        assert card.system_kind == "model_switch" and w.model == "other"
        assert w.messages()[-1].id == card.id
        assert reopened.workshop(provider=Recording([])).model == "other"
        with pytest.raises(ProviderNotConfigured):
            w.set_model("nosuch")
        reopened.undo()
        assert reopened.workshop(provider=Recording([])).model == "demo"
    finally:
        reopened.close()


# -- undo --------------------------------------------------------------------------------


def test_undo_of_a_rewind_brings_the_head_and_the_draft_back(ws_repo: Repository) -> None:
    w = two_turns(ws_repo)
    head = w.head
    w.rewind(w.messages()[0].id)
    assert not ws_repo.layout.draft_state.exists()
    undone = ws_repo.undo()
    assert undone.command == "chat rewind"
    assert w.head == head and draft_file(ws_repo) == "two\n"


def test_undo_of_a_rewind_across_a_publish_puts_published_back(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one."))
    w.send("one please")
    target = w.messages()[0]
    w.publish()
    head = w.head
    w.rewind(target.id)
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    ws_repo.undo()
    assert (ws_repo.root / "a.txt").read_text() == "one\n"
    assert not ws_repo.layout.draft_state.exists() and w.head == head


def test_undo_of_a_regenerate_brings_the_old_answer_back(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one.") + turn("a.txt", "uno\n", "Uno."))
    old = w.send("one please").assistant_message
    w.regenerate()
    assert ws_repo.undo().command == "chat regenerate"
    assert w.head == old.id and draft_file(ws_repo) == "one\n"


def test_undo_of_a_publish_puts_published_and_the_draft_back(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one."))
    w.send("one please")
    head = w.head
    w.publish()
    assert (ws_repo.root / "a.txt").read_text() == "one\n"
    assert ws_repo.undo().command == "chat publish"
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    assert draft_file(ws_repo) == "one\n" and w.head == head


def test_undo_of_a_turn_and_of_a_discard(ws_repo: Repository) -> None:
    w = shop(ws_repo, turn("a.txt", "one\n", "Set one.") + turn("a.txt", "two\n", "Set two."))
    w.send("one please")
    head = w.head
    w.send("two please")
    assert ws_repo.undo().command == "chat turn"
    assert w.head == head and draft_file(ws_repo) == "one\n"
    w.discard()
    assert not ws_repo.layout.draft_state.exists()
    assert w.messages()[-1].system_kind == "draft_discarded"
    assert ws_repo.undo().command == "chat discard"
    assert draft_file(ws_repo) == "one\n" and w.head == head
    # the next undo reaches the first turn: no Draft, an empty transcript
    assert ws_repo.undo().command == "chat turn"
    assert not ws_repo.layout.draft_state.exists() and w.head is None


def test_redo_of_a_workshop_undo_is_refused_with_nothing_changed(ws_repo: Repository) -> None:
    from strata.errors import UndoError

    w = two_turns(ws_repo)
    w.rewind(w.messages()[0].id)
    ws_repo.undo()
    head = w.head
    with pytest.raises(UndoError, match="not redone"):
        ws_repo.redo()
    assert w.head == head and draft_file(ws_repo) == "two\n"


def test_a_system_prompt_function_runs_each_turn_and_its_failure_records_nothing(
    ws_repo: Repository,
) -> None:
    provider = Recording([{"text": "One."}, {"text": "Two."}])
    calls: list[int] = []

    def prompt() -> str:
        calls.append(1)
        if len(calls) == 2:
            raise WorkshopError("the file manifest cannot be built")
        return f"manifest #{len(calls)}"

    w = Workshop(ws_repo, provider=provider, system=prompt)
    w.send("first")
    assert provider.requests[0].messages[0].content == "manifest #1"
    with pytest.raises(WorkshopError, match="manifest"):
        w.send("second")
    assert [m.text for m in w.messages() if m.kind == "user_message"] == ["first"]
    w.send("third")
    assert provider.requests[-1].messages[0].content == "manifest #3"


def test_a_send_is_refused_while_an_agent_step_runs_in_the_draft(ws_repo: Repository) -> None:
    w = shop(ws_repo, [{"text": "no"}])
    draft = ws_repo.draft()
    with draft.step("agent step 1"):
        assert w.busy
        with pytest.raises(WorkshopBusy, match="agent step 1"):
            w.send("now")
    assert w.messages() == []


@pytest.mark.parametrize("files", [True, False])
def test_a_conversation_in_a_workspace_with_nothing_recorded_passes_check(
    repo: Repository, files: bool
) -> None:
    if files:
        (repo.root / "a.txt").write_text("never snapshotted\n")
    w = shop(repo, [{"text": "Hi."}])
    w.send("hello")
    assert repo.check() == []
    assert w.messages()[0].kind == "user_message"


def test_check_passes_after_every_kind_of_workshop_operation(ws_repo: Repository) -> None:
    w = shop(
        ws_repo,
        turn("a.txt", "one\n", "Set one.") + turn("a.txt", "two\n", "Set two.") + [{"text": "R"}],
    )
    w.send("one please")
    target = w.head
    assert target is not None
    w.publish()
    w.send("two please")
    w.rewind(target)
    w.regenerate()
    ws_repo.undo()
    ws_repo.undo()
    w.discard()
    ws_repo.undo()
    assert ws_repo.check() == []


def test_a_summary_replaces_the_earlier_messages_in_what_the_model_is_sent(
    ws_repo: Repository,
) -> None:
    provider = Recording([{"text": "A1."}, {"text": "A2."}])
    w = ws_repo.workshop(provider=provider)
    w.send("q1")
    card = w.summarize("The user asked q1; the answer was A1.")
    assert card.kind == "summary_message" and w.head == card.id
    w.send("q2")
    sent = [(m.role, m.content) for m in provider.requests[-1].messages[1:]]
    assert sent == [
        ("user", "Summary of the conversation so far:\nThe user asked q1; the answer was A1."),
        ("user", "q2"),
    ]
    kept = [m.text for m in w.messages() if m.kind != "system_event"]
    assert kept[:2] == ["q1", "A1."]  # still in the transcript
    ws_repo.undo()  # the second turn
    ws_repo.undo()  # the summary
    assert w.messages()[-1].text == "A1."


def test_a_prompt_hook_assembles_the_system_text_and_the_history(ws_repo: Repository) -> None:
    provider = Recording(
        turn("a.txt", "one\n", "Set one.") + turn("a.txt", "two\n", "Two.") + [{"text": "R."}]
    )
    seen: list[tuple[Path, list[str], str, str | None]] = []

    def prompt(folder: Path, history: list[Any], text: str, _: Any) -> tuple[str, list[Any]]:
        a = folder / "a.txt"
        seen.append((folder, [m.content for m in history], text, a.read_text()))
        return f"files of {folder.name}", history[-1:]  # only the last message

    w = Workshop(ws_repo, provider=provider, prompt=prompt)
    w.send("one please")
    assert seen[0] == (ws_repo.root, [], "one please", "original\n")  # no Draft yet
    w.send("second")
    draft = ws_repo.draft(create=False)
    assert seen[1] == (draft.path, ["one please", "Set one."], "second", "one\n")
    last = provider.requests[-2]  # the second turn's first call
    assert last.messages[0].content == f"files of {draft.path.name}"
    assert [(m.role, m.content) for m in last.messages[1:]] == [
        ("assistant", "Set one."),
        ("user", "second"),
    ]
    assert (draft.path / "a.txt").read_text() == "two\n"
    w.regenerate()  # assembled once the Draft is back as it was at "second": a.txt is "one"
    assert seen[2][1:] == (["one please", "Set one."], "second", "one\n")
