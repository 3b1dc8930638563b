"""``strata chat``, the Workshop's terminal UI, driven for real in tmux (send-keys, capture-pane).

Each test starts ``strata chat`` in a tmux session of its own (on a tmux
server of its own, ``-L``) in a scratch workspace whose providers are scripted,
types into it and reads the screen.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CliRunner, ok

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (scripts/dev installs it)"
)

BOT = """\
responses:
  - text: "Hello! I read your notes and they look fine."
    stream: 4
  - tool_calls:
      - name: write_file
        arguments: {path: todo.txt, content: "buy milk\\n"}
  - text: "I wrote todo.txt."
    stream: 3
"""
OTHER = """\
responses:
  - text: "This is the other model speaking."
    stream: 5
"""


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

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        self.keys("Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", self.name)

    def wait_for(self, text: str, *, after: int = 0, timeout: float = 20) -> str:
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
def chat_workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("milk\n")
    (tmp_path / "bot.yaml").write_text(BOT)
    (tmp_path / "other.yaml").write_text(OTHER)
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            '\n[model]\ndefault = "bot"\n'
            f'\n[providers.bot]\nadapter = "scripted"\nscript = "{tmp_path / "bot.yaml"}"\n'
            f'\n[providers.other]\nadapter = "scripted"\nscript = "{tmp_path / "other.yaml"}"\n'
        )
    ok(run_cli("snapshot", "-m", "base", cwd=ws))
    return ws


@pytest.fixture
def chat(chat_workspace: Path, run_cli: CliRunner) -> Iterator[Tmux]:
    env = run_cli.env({"TERM": "xterm-256color"})
    session = Tmux([sys.executable, "-m", "strata", "chat"], cwd=chat_workspace, env=env)
    try:
        session.wait_for("you>", timeout=30)
        yield session
    finally:
        session.close()


@pytest.mark.slow
def test_a_message_streams_its_answer_and_ctrl_d_quits(chat: Tmux) -> None:
    chat.type("hello there")
    screen = chat.wait_for("look fine.")
    assert "Hello! I read your notes and they look fine." in screen
    assert "model: bot" in screen  # the bottom bar names the model
    chat.keys("C-d")
    screen = chat.wait_for("EXIT=")
    assert "EXIT=0" in screen and "Traceback" not in screen


@pytest.mark.slow
def test_tool_calls_show_as_one_line_and_model_switch_is_a_card(
    chat: Tmux, chat_workspace: Path
) -> None:
    chat.type("hello")
    chat.wait_for("look fine.")
    chat.type("write my todo")
    screen = chat.wait_for("I wrote todo.txt.")
    assert "→ write_file path=todo.txt content=buy milk" in screen

    chat.type("/model other")
    screen = chat.wait_for("Model switched to other")
    chat.type("who are you?")
    screen = chat.wait_for("This is the other model speaking.")
    assert "model: other" in screen
    chat.keys("C-d")
    assert "EXIT=0" in chat.wait_for("EXIT=")


@pytest.mark.slow
def test_rewind_goes_back_and_ctrl_r_answers_again(chat: Tmux) -> None:
    chat.type("hello")
    chat.wait_for("look fine.")
    chat.type("/history")
    screen = chat.wait_for("agent: Hello!")
    user_id = next(
        line.split("]")[0].lstrip("[")
        for line in screen.splitlines()
        if line.startswith("[") and "] you: hello" in line
    )
    chat.type(f"/rewind {user_id}")
    chat.wait_for("Rewound to")
    chat.keys("C-r")  # regenerate: the next scripted answer, to the same message
    screen = chat.wait_for("I wrote todo.txt.")
    assert "→ write_file" in screen
    chat.type("/quit")
    assert "EXIT=0" in chat.wait_for("EXIT=")


@pytest.mark.slow
def test_a_bad_command_says_what_to_do_and_the_session_goes_on(chat: Tmux) -> None:
    chat.type("/rewind msg_nope")
    screen = chat.wait_for("error:")
    assert "Traceback" not in screen
    chat.type("/frobnicate")
    chat.wait_for("unknown command /frobnicate")
    chat.type("hello")
    chat.wait_for("look fine.")
    chat.keys("C-d")
    assert "EXIT=0" in chat.wait_for("EXIT=")
