"""One Workshop turn end to end on a real local model (SmolLM2-135M behind llama.cpp's server).

``scripts/dev test-model`` installs the server and the model; without them the
test is skipped, saying so (see ``model_server.py``, whose server this test
starts). The model is tiny: the test asserts what the Workshop records
(the messages, the model call's trace, the answer shown in the terminal), not
what the model says.
"""

from __future__ import annotations

import io
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_server import ModelServer, local_config, serving

from strata import Repository
from strata.providers.trace import Trace

pytestmark = pytest.mark.model


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[ModelServer]:
    with serving(tmp_path / "server.log") as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path, model_server: ModelServer) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("milk\neggs\n")
    with Repository.init(ws) as repo:
        repo.snapshot(message="base")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[model]\ndefault = "local"\n' + local_config(model_server.url))
    return ws


def test_a_workshop_turn_on_the_local_model_is_recorded_and_shown(workspace: Path) -> None:
    from prompt_toolkit.data_structures import Size
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output.vt100 import Vt100_Output

    from strata.workshop.tui import run

    assert tomllib.loads((workspace / ".strata" / "config.toml").read_text())["providers"]
    with Repository.open(workspace) as repo:
        workshop = repo.workshop()
        screen = io.StringIO()
        output = Vt100_Output(screen, lambda: Size(rows=40, columns=120))
        with create_pipe_input() as pipe:
            pipe.send_text("What is in notes.txt?\r\x04")
            assert run(workshop, input=pipe, output=output) == 0
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", screen.getvalue())
        words = " ".join(shown.replace("│", " ").split())  # cards wrap long lines

        messages = workshop.messages()
        users = [m for m in messages if m.kind == "user_message"]
        answers = [m for m in messages if m.kind == "assistant_message"]
        assert [m.text for m in users] == ["What is in notes.txt?"]
        assert len(answers) == 1
        answer = answers[0]
        assert answer.data["provider"] == "local"
        if "error" in answer.data:  # a tiny model may call a tool with broken arguments
            assert "error: " + " ".join(answer.data["error"]["message"].split())[:30] in words
        else:
            assert " ".join(answer.text.split())[:30] in words
        # the model's call is a trace in the store, with the request the Workshop sent
        assert answer.data["traces"]
        first = Trace.decode(repo.objects.get(answer.data["traces"][0]), name="trace")
        assert first.event_type == "llm_call"
        sent = first.request["messages"]
        assert sent[0]["role"] == "system" and sent[-1]["content"] == "What is in notes.txt?"
