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

pytestmark = pytest.mark.slow

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
    w.send("hello")  # a Draft exists already, from an earlier turn
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
