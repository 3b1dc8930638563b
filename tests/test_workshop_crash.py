"""A Workshop turn killed with SIGKILL leaves a consistent conversation and Draft.

The child runs a real turn (scripted provider, real tools, real ledger) and
kills itself at a chosen point: while the model streams, in the middle of a
tool call that already wrote a file, or after a whole step was recorded. The
parent then opens a Workshop again (which finishes what the dead turn left)
and checks: the transcript ends with the user's message answered by an
assistant message marked interrupted, the Draft's files are exactly its last
revision's, ``strata check`` passes, and a new turn runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strata import Repository
from strata.providers.scripted import Scripted

CHILD = r"""
import os, signal, sys
from pathlib import Path
from strata import Repository
from strata.agent.tools import TOOLS, ToolResult
from strata.providers.scripted import Scripted
from strata.workshop.session import Workshop

point = sys.argv[2]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def half_write(folder, arguments):
    (folder / "a.txt").write_text("half\n")
    (folder / "stray.txt").write_text("stray\n")
    die()

class Killing(Scripted):
    def stream(self, request, *, cancel=None):
        calls = getattr(self, "calls", 0) + 1
        self.calls = calls
        if (point == "stream" and calls == 1) or (point == "second_step" and calls == 2):
            yield from []
            die()
        yield from super().stream(request, cancel=cancel)

tools = dict(TOOLS)
tools["half_write"] = (TOOLS["write_file"][0].__class__(
    "half_write", "writes half", {"type": "object", "properties": {}}), half_write)
first = {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "one\n"}}]}
then = {"tool_calls": [{"name": "half_write", "arguments": {}}]}
provider = Killing([first, then, {"text": "never"}], name="demo")
repo = Repository.open(sys.argv[1])
Workshop(repo, provider=provider, tools=tools).send("edit a.txt")
"""


@pytest.mark.parametrize("point", ["stream", "mid_tool", "second_step"])
def test_a_killed_turn_leaves_a_consistent_conversation_and_draft(
    repo: Repository, point: str
) -> None:
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    w = repo.workshop(provider=Scripted([{"text": "Hi."}], name="demo"))
    w.send("hello")  # a question: it opens no Draft
    assert not repo.layout.draft_state.exists()
    repo.draft()  # a Draft is open already
    hello_answer = w.head
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(repo.root), point if point != "mid_tool" else "tool"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr

    again = repo.workshop(provider=Scripted([{"text": "Back."}], name="demo"))
    again.recover()
    messages = again.messages()
    last, asked = messages[-1], messages[-2]
    assert asked.kind == "user_message" and asked.text == "edit a.txt"
    assert last.kind == "assistant_message" and last.data["interrupted"] is True
    draft = repo.draft(create=False)
    assert last.draft_revision == draft.tip().id
    # the Draft's files are exactly its last revision's: a half-done step left nothing
    assert draft.workspace.scan().tree == repo.tree_of(draft.tip())
    assert not (draft.path / "stray.txt").exists()
    expected = "original\n" if point == "stream" else "one\n"
    assert (draft.path / "a.txt").read_text() == expected
    assert repo.check() == []
    assert not again.busy
    again.send("go on")
    assert again.messages()[-1].text == "Back."
    # the killed turn is one undoable operation
    repo.undo()
    repo.undo()
    assert again.head == hello_answer
    assert (Path(draft.path) / "a.txt").read_text() == "original\n"


REWIND_CHILD = r"""
import os, signal, sys
from strata import Repository
from strata.providers.scripted import Scripted
import strata.workbench.checkpoints as checkpoints
import strata.workbench.draft as draft_module
import strata.workbench.publish as publish

point = sys.argv[3]

def die_after(owner, name):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, wrapper)

if point == "discard":
    die_after(publish, "discard")
elif point == "restore":
    die_after(checkpoints.Checkpoints, "restore")
elif point == "start":
    die_after(draft_module, "start_draft")
elif point == "answer":
    class Dying(Scripted):
        def stream(self, request, *, cancel=None):
            os.kill(os.getpid(), signal.SIGKILL)
            yield from ()
repo = Repository.open(sys.argv[1])
provider = Dying([], name="demo") if point == "answer" else Scripted([], name="demo")
w = repo.workshop(provider=provider)
if sys.argv[2] == "rewind":
    w.rewind(w.messages()[0].id if point == "first" else sys.argv[4])
else:
    w.regenerate()
"""


def _published_then_edited(repo: Repository) -> tuple[str, str]:
    """Turn 1 (a.txt one), published; turn 2 (a.txt two) in a new Draft; turn 1's answer, head."""
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    write = "write_file"
    w = repo.workshop(
        provider=Scripted(
            [
                {"tool_calls": [{"name": write, "arguments": {"path": "a.txt", "content": "1\n"}}]},
                {"text": "One."},
                {"tool_calls": [{"name": write, "arguments": {"path": "a.txt", "content": "2\n"}}]},
                {"text": "Two."},
            ],
            name="demo",
        )
    )
    w.send("one")
    target = w.head
    w.publish()
    w.send("two")
    assert target is not None and w.head is not None
    return target, w.head


@pytest.mark.parametrize("point", ["discard", "restore", "start"])
def test_a_killed_rewind_across_a_publish_is_finished_by_the_next_write(
    repo: Repository, point: str
) -> None:
    target, head = _published_then_edited(repo)
    proc = subprocess.run(
        [sys.executable, "-c", REWIND_CHILD, str(repo.root), "rewind", point, target],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr
    w = repo.workshop(provider=Scripted([], name="demo"))
    w.recover()
    # finished: the head at the target, Published and the Draft as they were there
    assert w.head == target
    assert (repo.root / "a.txt").read_text() == "original\n"
    assert (repo.draft(create=False).path / "a.txt").read_text() == "1\n"
    assert w.log().records[-1].data.get("recovered") is True
    assert repo.check() == []
    # and one undo reverses it whole
    assert repo.undo().command == "chat rewind"
    assert w.head == head and (repo.root / "a.txt").read_text() == "1\n"
    assert (repo.draft(create=False).path / "a.txt").read_text() == "2\n"


def test_a_killed_regenerate_is_recorded_as_interrupted(repo: Repository) -> None:
    _, head = _published_then_edited(repo)
    proc = subprocess.run(
        [sys.executable, "-c", REWIND_CHILD, str(repo.root), "regenerate", "answer"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr
    w = repo.workshop(provider=Scripted([], name="demo"))
    w.recover()
    last = w.messages()[-1]
    assert last.kind == "assistant_message" and last.data["interrupted"] is True
    assert w.messages()[-2].text == "two"
    # back at the state of the message: no Draft (the turn was killed before it wrote)
    assert not repo.layout.draft_state.exists()
    assert (repo.root / "a.txt").read_text() == "1\n"
    assert repo.check() == []
    assert repo.undo().command == "chat regenerate"
    draft = repo.draft(create=False)
    assert w.head == head and (draft.path / "a.txt").read_text() == "2\n"


PUBLISH_CHILD = r"""
import os, signal, sys
from strata import Repository
from strata.providers.scripted import Scripted
import strata.workbench.publish as publish

original = publish.publish
def publish_then_die(*args, **kwargs):
    original(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
publish.publish = publish_then_die
repo = Repository.open(sys.argv[1])
repo.workshop(provider=Scripted([], name="demo")).publish()
"""


def test_a_publish_killed_before_its_card_gets_the_card_from_the_next_write(
    repo: Repository,
) -> None:
    target, _ = _published_then_edited(repo)
    proc = subprocess.run(
        [sys.executable, "-c", PUBLISH_CHILD, str(repo.root)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, proc.stderr
    assert (repo.root / "a.txt").read_text() == "2\n"  # the publish itself was whole
    w = repo.workshop(provider=Scripted([], name="demo"))
    w.recover()
    cards = [m for m in w.messages() if m.system_kind == "checkpoint_publish"]
    assert len(cards) == 2 and cards[-1].data["recovered"] is True
    # so a rewind across both publishes still finds the first one's checkpoint
    w.rewind(target)
    assert (repo.root / "a.txt").read_text() == "original\n"
    assert repo.check() == []
