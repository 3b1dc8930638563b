"""``strata chat``, the Workshop's terminal UI, driven for real in tmux (send-keys, capture-pane).

Each test starts ``strata chat`` in a tmux session of its own (on a tmux
server of its own, ``-L``) in a scratch workspace whose providers are scripted,
types into it and reads the screen.
"""

from __future__ import annotations

import io
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliRunner
from strata import Repository
from strata.workbench.draft import open_draft
from strata.workshop.tui import run

needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (scripts/dev installs it)"
)

# each turn opens its model afresh, so a script starts over at every turn
BOT = """\
responses:
  - tool_calls:
      - name: read_file
        arguments: {path: notes.txt}
  - text: "Hello! I read your notes and they look fine."
    stream: 4
"""
OTHER = """\
responses:
  - tool_calls:
      - name: write_file
        arguments: {path: todo.txt, content: "buy milk\\n"}
  - text: "I wrote todo.txt."
    stream: 3
"""

# -- in process: prompt_toolkit's pipe input, the screen written to a buffer ---------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def open_workspace(tmp_path: Path) -> Path:
    """A workspace with one file; its providers ``bot`` (the default) and ``other`` scripted."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("milk\n")
    (tmp_path / "bot.yaml").write_text(BOT)
    (tmp_path / "other.yaml").write_text(OTHER)
    with Repository.init(ws) as repo:
        repo.snapshot(message="base")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            '\n[model]\ndefault = "bot"\n'
            f'\n[providers.bot]\nadapter = "scripted"\nscript = "{tmp_path / "bot.yaml"}"\n'
            f'\n[providers.other]\nadapter = "scripted"\nscript = "{tmp_path / "other.yaml"}"\n'
        )
    return ws


def session(workshop: Any, keys: str) -> tuple[int, str]:
    """Run the terminal UI on ``keys`` (typed ahead); its exit status and the screen's text."""
    from prompt_toolkit.data_structures import Size
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output.vt100 import Vt100_Output

    screen = io.StringIO()
    output = Vt100_Output(screen, lambda: Size(rows=40, columns=120))
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        code = run(workshop, input=pipe, output=output)
    return code, ANSI.sub("", screen.getvalue())


@pytest.fixture
def repo_ws(tmp_path: Path) -> Iterator[Repository]:
    ws = open_workspace(tmp_path)
    with Repository.open(ws) as repo:
        yield repo


def test_a_turn_streams_shows_its_tool_calls_and_is_recorded(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop()
    code, screen = session(workshop, "hello\r/history\r\x04")
    assert code == 0
    assert "Hello! I read your notes and they look fine." in screen
    assert "→ read_file path=notes.txt" in screen
    kinds = [(m.kind, m.text) for m in workshop.messages()]
    assert ("user_message", "hello") in kinds
    assert ("assistant_message", "Hello! I read your notes and they look fine.") in kinds
    user = next(m for m in workshop.messages() if m.kind == "user_message")
    assert f"[{user.id}] you: hello" in screen  # /history lists the ids /rewind takes
    assert screen.rstrip().endswith("bye")


def test_rewind_then_ctrl_r_answers_the_message_again(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop()
    first = workshop.send("hello")
    user = first.user_message.id
    # Ctrl-R (\x12) regenerates from the head the rewind left
    code, screen = session(workshop, f"/rewind {user}\ry\r\x12/quit\r")
    assert code == 0
    assert f"Rewound to {user}." in screen
    assert "Ctrl-R or /regenerate answers it again" in screen
    after = screen[screen.index("Rewound to") :]
    assert after.count("Hello! I read your notes") == 1  # answered again after the rewind
    kinds = [m.kind for m in workshop.messages()]
    assert kinds[-1] == "assistant_message" and workshop.messages()[-1].id != (
        first.assistant_message.id
    )


def test_model_switch_review_publish(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop()
    keys = "/model other\rwrite it\r/review\r/publish\ry\r\x04"
    code, screen = session(workshop, keys)
    assert code == 0
    assert "Model switched to other." in screen
    assert "→ write_file path=todo.txt content=buy milk" in screen
    assert "I wrote todo.txt." in screen
    assert "Draft " in screen and " created" in screen  # the turn's system event, as a card
    assert "added" in screen and "todo.txt" in screen  # the review card
    assert "The Draft was published to the workspace" in screen
    assert (repo_ws.root / "todo.txt").read_text() == "buy milk\n"
    cards = [m.data.get("kind") for m in workshop.messages() if m.kind == "system_event"]
    assert "model_switch" in cards


def test_discard_throws_the_draft_away(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop(model="other")
    code, screen = session(workshop, "write it\r/discard\r\x04")
    assert code == 0
    assert "The Draft was discarded" in screen
    assert not (repo_ws.root / "todo.txt").exists()


def test_keys_review_history_and_publish_with_a_confirming_enter(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop(model="other")
    # F2 review, F3 history, Alt-P writes /publish (nothing happens until Enter)
    code, screen = session(workshop, "write it\r\x1bOQ\x1bOR\x1bp\ry\r\x04")
    assert code == 0
    assert "added     todo.txt" in screen
    assert "] you: write it" in screen
    assert "The Draft was published" in screen
    assert (repo_ws.root / "todo.txt").read_text() == "buy milk\n"
    # Alt-D writes /discard; Ctrl-C at the prompt clears it: nothing is discarded
    workshop.send("write it")
    code, screen = session(workshop, "\x1bd\x03\x04")
    assert "The Draft was discarded" not in screen
    assert open_draft(repo_ws) is not None  # the Draft is still there
    discarded = [m for m in workshop.messages() if m.data.get("kind") == "draft_discarded"]
    assert discarded == []


def test_bad_commands_say_what_to_do_and_the_session_goes_on(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop()
    code, screen = session(workshop, "/rewind evt_nope\r/frobnicate\r/model\r/help\rhello\r\x04")
    assert code == 0
    assert "error:" in screen and "Traceback" not in screen
    assert "unknown command /frobnicate" in screen
    assert "The model is bot (the default)" in screen  # config.toml's [model] default
    assert "/rewind MSG" in screen  # the help
    assert "Hello! I read your notes" in screen


def test_ctrl_c_during_a_turn_cancels_it_and_the_session_goes_on(repo_ws: Repository) -> None:
    from strata.agent.tools import TOOLS, ToolResult
    from strata.providers.base import ToolSpec
    from strata.providers.scripted import Scripted
    from strata.workshop.session import Workshop

    def slow(folder: Path, arguments: dict[str, Any]) -> ToolResult:
        signal.raise_signal(signal.SIGINT)  # the user presses Ctrl-C while the tool runs
        time.sleep(0.5)
        return ToolResult("slow done")

    tools = {**TOOLS, "slow": (ToolSpec("slow", "takes time", {"type": "object"}), slow)}
    provider = Scripted(
        [
            {"tool_calls": [{"name": "slow", "arguments": {}}]},
            # the cancelled turn asks for no more: the next turn gets this answer
            {"text": "Still here."},
        ]
    )
    workshop = Workshop(repo_ws, provider=provider, tools=tools)
    code, screen = session(workshop, "go slow\rare you there?\r\x04")
    assert code == 0
    assert "(cancelling the turn…)" in screen
    assert "Turn cancelled" in screen, screen
    assert provider.served == 2
    assert "Still here." in screen
    interrupted = [m for m in workshop.messages() if m.data.get("interrupted")]
    assert len(interrupted) == 1


# -- for real, in tmux ---------------------------------------------------------------------


class Tmux:
    """One tmux session on a private server, 100x30."""

    def __init__(self, command: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.server = f"wsrpi-{uuid.uuid4().hex[:8]}"
        self.name = "chat"
        line = " ".join(shlex.quote(part) for part in command)
        self.tmux(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            "100",
            "-y",
            "30",
            "-c",
            str(cwd),
            # the shell stays after the command ends, so its exit status can be read
            f"{line}; echo EXIT=$?; sleep 600",
            env=env,
        )

    def tmux(self, *args: str, env: dict[str, str] | None = None) -> str:
        return subprocess.run(
            ["tmux", "-L", self.server, *args],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
        ).stdout

    def ready(self, timeout: float = 45) -> None:
        """Wait for an empty prompt: keys typed before it are read by the terminal, not by us
        (a Ctrl-D would be the terminal's end of file)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [line.strip() for line in self.screen().splitlines() if line.strip()]
            lines = [line for line in lines if not line.startswith("model:")]
            if lines and lines[-1] == "you>":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no prompt; the screen:\n{self.screen()}")
            time.sleep(0.1)

    def keys(self, *keys: str) -> None:
        self.ready()
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        self.ready()
        self.tmux("send-keys", "-t", self.name, "-l", text + "\r")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", self.name)

    def wait_for(self, text: str, *, after: int = 0, timeout: float = 45) -> str:
        """The screen once ``text`` appears ``after`` times or more."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if screen.count(text) > after:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} did not appear; the screen:\n{screen}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True)


@pytest.fixture
def chat_workspace(tmp_path: Path) -> Path:
    return open_workspace(tmp_path)


CHAT = [sys.executable, "-m", "strata", "chat"]


@pytest.fixture
def chat(chat_workspace: Path, run_cli: CliRunner) -> Iterator[Tmux]:
    env = run_cli.env({"TERM": "xterm-256color"})
    session = Tmux(CHAT, cwd=chat_workspace, env=env)
    try:
        session.wait_for("you>", timeout=60)
        yield session
    finally:
        session.close()


@needs_tmux
def test_chat_in_tmux_answers_switches_model_rewinds_regenerates_and_quits(chat: Tmux) -> None:
    chat.wait_for("model: bot (the default)")  # the bottom bar names the model
    chat.type("hello there")
    screen = chat.wait_for("look fine.")
    assert "→ read_file path=notes.txt" in screen
    assert "Hello! I read your notes and they look fine." in screen

    chat.type("/model other")
    chat.wait_for("Model switched to other.")
    chat.type("write my todo")
    screen = chat.wait_for("I wrote todo.txt.")
    assert "→ write_file path=todo.txt content=buy milk" in screen
    chat.wait_for("model: other")

    chat.type("/history")
    screen = chat.wait_for("] you: write my todo")
    user_id = next(
        line.split("]")[0].lstrip("[")
        for line in screen.splitlines()
        if line.startswith("[") and line.endswith("] you: write my todo")
    )
    chat.type(f"/rewind {user_id}")
    chat.wait_for("[y/N]")
    chat.tmux("send-keys", "-t", chat.name, "-l", "y\r")  # the confirmation, not a prompt
    chat.wait_for("Ctrl-R or /regenerate answers it again")
    answers = chat.screen().count("agent:")
    chat.keys("C-r")
    chat.wait_for("agent:", after=answers)
    chat.keys("C-d")
    screen = chat.wait_for("EXIT=")
    assert "EXIT=0" in screen and "Traceback" not in screen


@needs_tmux
def test_chat_in_tmux_says_what_is_wrong_and_goes_on(chat: Tmux) -> None:
    chat.type("/rewind evt_nope")
    screen = chat.wait_for("error:")
    chat.type("/frobnicate")
    chat.wait_for("unknown command /frobnicate")
    chat.type("hello")
    chat.wait_for("look fine.")
    chat.keys("C-d")
    screen = chat.wait_for("EXIT=")
    assert "EXIT=0" in screen and "Traceback" not in screen


@needs_tmux
def test_ctrl_c_in_tmux_cancels_a_streaming_turn_of_a_real_http_model(
    tmp_path: Path, run_cli: CliRunner, wire: Any
) -> None:
    from wire_server import text

    ws = open_workspace(tmp_path)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.slow]\nadapter = "openai-chat"\nmodel = "m"\n'
            f'base_url = "{wire.openai_url}"\nretry_delays = []\n'
        )
    # a long answer, one character every 0.1 s: the turn is still streaming when Ctrl-C comes
    wire.queue(text("Counting slowly: " + "one two three " * 30, chunk=1, chunk_delay=0.1))
    env = run_cli.env({"TERM": "xterm-256color", "STRATA_MODEL": "slow"})
    chat = Tmux(CHAT, cwd=ws, env=env)
    try:
        chat.type("count for me")
        chat.wait_for("Counting slowly")
        chat.tmux("send-keys", "-t", chat.name, "C-c")
        screen = chat.wait_for("Turn cancelled")
        assert "cancelling the turn" in screen
        assert "one two three " * 30 not in screen.replace("\n", "")
        chat.keys("C-d")
        screen = chat.wait_for("EXIT=")
        assert "EXIT=0" in screen and "Traceback" not in screen
    finally:
        chat.close()
    with Repository.open(ws) as repo:
        answers = [m for m in repo.workshop().messages() if m.kind == "assistant_message"]
    assert len(answers) == 1 and answers[0].data.get("interrupted") is True
    assert answers[0].text.startswith("Counting slowly")  # the partial answer is kept


# -- the Draft in view (issue 31) ---------------------------------------------------------------


def test_a_turn_that_opens_a_draft_opens_its_review_and_says_where_it_came_from(
    repo_ws: Repository,
) -> None:
    workshop = repo_ws.workshop(model="other")
    code, screen = session(workshop, "write it\r\x04")
    assert code == 0
    after = screen[screen.index("I wrote todo.txt.") :]
    assert "added     todo.txt" in after  # the review, with no /review typed
    assert "in progress: from" in after and "source Workshop (conv_" in after
    # reopened with the Draft still open: the Draft's line and its review at once
    code, screen = session(repo_ws.workshop(), "\x04")
    assert "source Workshop (conv_" in screen and "added     todo.txt" in screen


def test_a_question_shows_no_draft_and_opens_no_review(repo_ws: Repository) -> None:
    code, screen = session(repo_ws.workshop(), "hello\r\x04")
    assert code == 0 and "in progress" not in screen and "Review" not in screen
    assert open_draft(repo_ws) is None


def test_actions_that_move_published_ask_first(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop(model="other")
    turn = workshop.send("write it")
    _, screen = session(workshop, "/publish\rn\r\x04")
    assert "Publish the Draft" in screen and "(cancelled: nothing changed)" in screen
    assert not (repo_ws.root / "todo.txt").exists() and open_draft(repo_ws) is not None
    session(workshop, "/publish\ry\r\x04")
    assert (repo_ws.root / "todo.txt").read_text() == "buy milk\n"
    # a rewind across that publish says it restores the files, and does nothing on "n"
    user = turn.user_message.id
    _, screen = session(workshop, f"/rewind {user}\rn\r\x04")
    assert "restored from checkpoint" in screen and "Rewind? [y/N]" in screen
    assert (repo_ws.root / "todo.txt").exists()
    _code, screen = session(workshop, f"/rewind {user}\ry\r\x04")
    assert not (repo_ws.root / "todo.txt").exists()


def test_restore_from_a_publish_card(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop(model="other")
    workshop.send("write it")
    repo_ws.draft(create=False).publish()  # published outside the chat: the card comes anyway
    card = workshop.messages()[-1]
    assert card.system_kind == "checkpoint_publish"
    code, screen = session(workshop, f"/restore {card.id[:10]}\ry\r\x04")
    assert code == 0 and "Restored checkpoint" in screen
    assert not (repo_ws.root / "todo.txt").exists()


def test_new_with_a_draft_open_asks_publish_discard_or_cancel(repo_ws: Repository) -> None:
    workshop = repo_ws.workshop(model="other")
    workshop.send("write it")
    before = workshop.conversation_id
    _, screen = session(workshop, "/new topic\rc\r\x04")
    assert "[p]ublish it, [d]iscard it, or [c]ancel" in screen
    assert "(cancelled: no new conversation)" in screen
    assert [c.id for c in workshop.conversations()] == [before]
    _code, screen = session(workshop, "/new topic\rp\r\x04")
    assert "The Draft was published" in screen and "Started conversation conv_" in screen
    assert (repo_ws.root / "todo.txt").read_text() == "buy milk\n"
    assert len(workshop.conversations()) == 2


def test_a_day_old_draft_is_reminded_with_review_discard_dismiss(tmp_path: Path) -> None:
    ws = open_workspace(tmp_path)
    now = [1_700_000_000_000]
    day = 24 * 3600 * 1000

    def shop() -> Any:
        return Repository.open(ws, clock=lambda: now[0]).workshop(model="other")

    shop().send("write it")
    _, screen = session(shop(), "\x04")
    assert "You have an open Draft" not in screen  # not a day old yet
    now[0] += day + 60_000
    _, screen = session(shop(), "/dismiss\r\x04")
    assert "You have an open Draft from" in screen
    assert "/review shows it · /discard throws it away · /dismiss" in screen
    assert "The Draft reminder comes back in a day." in screen
    state = open_draft(Repository.open(ws))
    assert state is not None and state.state.reminder_dismissed_ms == now[0]
    now[0] += day - 60_000
    _, screen = session(shop(), "\x04")
    assert "You have an open Draft" not in screen  # dismissed for a day
    now[0] += 120_000
    _code, screen = session(shop(), "\x04")
    assert "You have an open Draft" in screen  # and back after it


def test_a_model_that_stays_down_offers_the_configured_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):  # the built-ins: not offered keyless
        monkeypatch.delenv(key, raising=False)

    ws = open_workspace(tmp_path)
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.down]\nadapter = "openai-chat"\nmodel = "m"\n'
            f'base_url = "http://127.0.0.1:{port}/v1"\nretry_delays = []\n'
        )
    with Repository.open(ws) as repo:
        workshop = repo.workshop(model="down")
        code, screen = session(workshop, "hello\r2\r\x12\x04")
        assert workshop.model == "other:scripted"
    assert code == 0
    assert "Switch model?" in screen and "1) bot:scripted" in screen
    assert "2) other:scripted" in screen and "Model switched to other:scripted" in screen
    assert "I wrote todo.txt." in screen  # Ctrl-R asked the model switched to
