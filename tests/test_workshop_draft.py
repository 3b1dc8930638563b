"""The Workshop and the Draft: a question opens none, a failed turn opens none, writes are bounded.

Turns are answered over real HTTP on 127.0.0.1 (``tests/wire_server.py``,
the OpenAI Chat Completions wire) or by the scripted provider.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from conftest import as_json, ok
from strata import Repository
from strata.errors import (
    ProviderAuthFailed,
    ProviderUnavailable,
    WorkshopStepLimit,
)
from strata.providers import Retry
from strata.providers.openai import OpenAIChat
from strata.providers.scripted import Scripted
from wire_server import WireServer, status, text, tools


@pytest.fixture
def ws_repo(repo: Repository) -> Repository:
    (repo.root / "a.txt").write_text("original\n")
    repo.snapshot("base")
    return repo


def chat_provider(url: str, **settings: Any) -> OpenAIChat:
    """The OpenAI Chat Completions adapter on ``url``, retrying without waiting."""
    settings.setdefault("retry", Retry(sleep=lambda seconds: None))
    return OpenAIChat(name="local", model="m", base_url=url, api_key="sk-test", **settings)


def no_draft(repo: Repository) -> bool:
    return not repo.layout.draft_state.exists()


def draft_events(repo: Repository) -> list[str]:
    kinds = ("draft_revision", "draft_start")
    return [str(e.action_type) for e in repo.history(limit=200) if e.action_type in kinds]


# -- 1. a question, a failure: no Draft --------------------------------------------------------


def test_a_question_that_only_reads_opens_no_draft(ws_repo: Repository, wire: WireServer) -> None:
    wire.queue(tools(("read_file", {"path": "a.txt"})), text("a.txt says original."))
    w = ws_repo.workshop(provider=chat_provider(wire.openai_url))
    turn = w.send("what is in a.txt?")
    assert turn.assistant_message.text == "a.txt says original."
    assert turn.draft_revision is None
    assert no_draft(ws_repo) and draft_events(ws_repo) == []
    # the tool read Published's file
    assert "original" in str(wire.requests[1].body)
    # no draft_created card, and the model calls stay linked from the answer
    assert [m.kind for m in w.messages()] == ["user_message", "assistant_message"]
    answer = next(e for e in ws_repo.history(limit=50) if e.id == turn.assistant_message.id)
    assert len(answer.artifacts) == 3  # two model calls, one tool call
    # nothing blocks moving Published: rewind and branch switch work at once
    ws_repo.rewind("HEAD")


def test_the_first_write_opens_the_draft_and_earlier_reads_read_published(
    ws_repo: Repository, wire: WireServer
) -> None:
    wire.queue(
        tools(("read_file", {"path": "a.txt"})),
        tools(("write_file", {"path": "b.txt", "content": "new\n"})),
        text("Wrote b.txt."),
    )
    w = ws_repo.workshop(provider=chat_provider(wire.openai_url))
    turn = w.send("copy a.txt's gist into b.txt")
    draft = ws_repo.draft(create=False)
    assert (draft.path / "b.txt").read_text() == "new\n"
    assert turn.draft_revision == draft.tip().id
    assert draft.state.source == {
        "kind": "workshop",
        "conversation": w.conversation_id,
        "message": turn.user_message.id,
    }
    assert [m.system_kind for m in w.messages()] == [None, "draft_created", None]
    assert not (ws_repo.root / "b.txt").exists()


@pytest.mark.parametrize("failure", ["503", "401", "refused"])
def test_a_turn_whose_provider_fails_opens_no_draft_and_shows_why(
    ws_repo: Repository, wire: WireServer, failure: str, run_cli
) -> None:
    if failure == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        provider = chat_provider(f"http://127.0.0.1:{port}/v1")
        expected: type[Exception] = ProviderUnavailable
    else:
        code = int(failure)
        wire.queue(*[status(code, "overloaded" if code == 503 else "invalid key")] * 6)
        provider = chat_provider(wire.openai_url)
        expected = ProviderUnavailable if code == 503 else ProviderAuthFailed
    w = ws_repo.workshop(provider=provider)
    with pytest.raises(expected):
        w.send("rewrite a.txt")
    assert no_draft(ws_repo) and draft_events(ws_repo) == []
    answer = w.messages()[-1]
    assert answer.kind == "assistant_message" and answer.data["error"]["type"] == expected.__name__
    # chat log shows the error itself, not only that the turn failed
    line = ok(run_cli("chat", "log", cwd=ws_repo.root)).splitlines()[-1]
    assert "[failed:" in line and answer.data["error"]["message"][:40] in line


def test_ask_of_a_question_leaves_no_draft_on_the_command_line(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    script = tmp_path / "q.yaml"
    script.write_text(
        "- tool_calls: [{name: read_file, arguments: {path: a.txt}}]\n- text: It says original.\n"
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{script}"\n'
            '[model]\ndefault = "shop"\n'
        )
    code, out, err = run_cli("ask", "what is in a.txt?", cwd=ws)
    assert code == 0 and "It says original." in out and "no Draft" in err
    assert as_json(run_cli("draft", "status", "--json", cwd=ws))["open"] is False
    ok(run_cli("rewind", "HEAD", cwd=ws))  # nothing blocks it


# -- 8. bounds ---------------------------------------------------------------------------------


def test_a_step_limit_says_so_and_fails_the_turn(ws_repo: Repository) -> None:
    writes = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": f"f{i}.txt", "content": "x"}}]}
        for i in range(3)
    ]
    w = ws_repo.workshop(provider=Scripted(writes, name="demo"))
    w.max_steps = 2
    with pytest.raises(WorkshopStepLimit) as caught:
        w.send("write many files")
    assert "step limit (2 steps)" in caught.value.message
    answer = w.messages()[-1]
    assert answer.data["error"]["type"] == "WorkshopStepLimit"
    draft = ws_repo.draft(create=False)
    assert sorted(p.name for p in draft.path.glob("f*.txt")) == ["f0.txt", "f1.txt"]


def test_ask_at_the_step_limit_exits_non_zero(run_cli, ws: Path, tmp_path: Path) -> None:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    script = tmp_path / "loop.yaml"
    script.write_text(
        "".join(
            f"- tool_calls: [{{name: write_file, arguments: {{path: f{i}.txt, content: x}}}}]\n"
            for i in range(4)
        )
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{script}"\n'
            '[model]\ndefault = "shop"\n'
        )
    code, _, err = run_cli("ask", "--max-steps", "2", "write files", cwd=ws)
    assert code == 1 and "error: the turn stopped at its step limit (2 steps)" in err
    assert "Traceback" not in err


def test_a_failed_turn_is_not_sent_again_with_the_next_message(
    ws_repo: Repository, wire: WireServer
) -> None:
    wire.queue(*[status(503, "overloaded")] * 6)
    w = ws_repo.workshop(provider=chat_provider(wire.openai_url))
    with pytest.raises(ProviderUnavailable):
        w.send("delete everything")
    wire.queue(text("Hello."))
    w.send("hi")
    sent = wire.requests[-1].body["messages"]
    contents = " ".join(str(m.get("content")) for m in sent)
    assert "hi" in contents and "delete everything" not in contents


def test_writes_are_bounded_per_file_and_per_turn(ws_repo: Repository) -> None:
    with open(ws_repo.layout.config, "a") as config:
        config.write("\n[edits]\nmax_file_bytes = 100\nmax_turn_bytes = 150\n")
    ws_repo = Repository.open(ws_repo.root)

    def write(path: str, size: int) -> dict[str, Any]:
        return {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": path, "content": "x" * size}}
            ]
        }

    script = [write("big.txt", 101), write("one.txt", 90), write("two.txt", 90), {"text": "ok"}]
    w = ws_repo.workshop(provider=Scripted(script, name="demo"))
    results: list[Any] = []
    w.send("write", on_event=results.append)
    from strata.workshop.events import ToolResultEvent

    told = [r for r in results if isinstance(r, ToolResultEvent)]
    assert [r.is_error for r in told] == [True, False, True]
    assert "over the limit of 100 bytes per file" in told[0].text
    assert "this turn's limit of 150 bytes" in told[2].text
    draft = ws_repo.draft(create=False)
    assert sorted(p.name for p in draft.path.glob("*.txt")) == ["a.txt", "one.txt"]


def test_a_bad_limit_in_the_config_is_one_clear_error_before_anything_is_recorded(
    ws_repo: Repository,
) -> None:
    with open(ws_repo.layout.config, "a") as config:
        config.write('\n[edits]\nmax_file_bytes = "big"\n')
    repo = Repository.open(ws_repo.root)
    w = repo.workshop(provider=Scripted([{"text": "hi"}], name="demo"))
    from strata.errors import UsageError

    with pytest.raises(UsageError, match=r"\[edits\] max_file_bytes"):
        w.send("hi")
    assert w.messages() == []


@pytest.mark.parametrize("tool", ["write_file", "edit_file", "table_export"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_edit_tools_refuse_symlinks_and_special_files(
    tmp_path: Path, tool: str, kind: str
) -> None:
    from strata.agent.tools import bounded
    from strata.workshop.tools import workshop_tools

    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "d.csv").write_text("a\n1\n")
    outside = tmp_path / "outside.csv"
    outside.write_text("secret,old\n")
    target = folder / "t.csv"
    if kind == "symlink":
        target.symlink_to(outside)
    else:
        os.mkfifo(target)
    arguments = {
        "write_file": {"path": "t.csv", "content": "new\n"},
        "edit_file": {"path": "t.csv", "old": "old", "new": "new"},
        "table_export": {"path": "d.csv", "sql": "SELECT a FROM t", "output": "t.csv"},
    }[tool]
    with bounded(None):
        result = workshop_tools().run(folder, tool, arguments)
    assert result.is_error
    assert ("symlink" if kind == "symlink" else "special file") in result.text
    assert outside.read_text() == "secret,old\n"
    assert target.is_symlink() if kind == "symlink" else not target.is_file()


@pytest.mark.parametrize("command", [("draft", "run"), ("run", "--draft")])
def test_a_failed_draft_run_is_rolled_back_unless_kept(
    run_cli, ws: Path, command: tuple[str, ...]
) -> None:
    """One rule for both commands (and MCP's draft_run, which runs 'strata draft run')."""
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    failing = ["sh", "-c", "echo half > a.txt; echo new > new.txt; exit 3"]
    code, _, err = run_cli(*command, "--sandbox", "none", "--", *failing, cwd=ws)
    assert code == 3 and "were rolled back" in err
    status = as_json(run_cli("draft", "status", "--json", cwd=ws))
    files = Path(status["path"])
    assert status["source"] == {"kind": "run", "command": failing}
    assert (files / "a.txt").read_text() == "original\n" and not (files / "new.txt").exists()
    ok(run_cli("undo", cwd=ws))  # the roll-back is a draft rewind: undo brings the writes back
    assert (files / "new.txt").read_text() == "new\n"
    code, out, _ = run_cli(
        *command, "--json", "--keep-failed", "--sandbox", "none", "--",
        "sh", "-c", "echo kept > kept.txt; exit 1", cwd=ws,
    )  # fmt: skip
    assert code == 1 and as_json((0, out, ""))["rolled_back_to"] is None
    assert (files / "kept.txt").read_text() == "kept\n"


def test_keep_failed_is_refused_for_a_run_on_published(run_cli, ws: Path) -> None:
    ok(run_cli("init", cwd=ws))
    code, _, err = run_cli("run", "--keep-failed", "--", "true", cwd=ws)
    assert code == 125 and "--keep-failed" in err and "--draft" in err  # strata run: its own 125


# -- 2. publishes, cards, rewinds ---------------------------------------------------------------


def one_turn() -> list[dict[str, Any]]:
    """The script of a turn that sets a.txt to 1."""
    arguments = {"path": "a.txt", "content": "1\n"}
    return [{"tool_calls": [{"name": "write_file", "arguments": arguments}]}, {"text": "One."}]


def shop_cli(run_cli, ws: Path, tmp_path: Path, script: str) -> None:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    (tmp_path / "shop.yaml").write_text(script)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{tmp_path / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )


EDIT = """\
- tool_calls: [{name: write_file, arguments: {path: a.txt, content: "one\\n"}}]
- text: Set a.txt to one.
"""


def test_ask_publish_on_the_command_line_then_chat_rewind_restores_published(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    shop_cli(run_cli, ws, tmp_path, EDIT)
    turn = as_json(run_cli("ask", "--json", "set a.txt to one", cwd=ws))
    published = as_json(run_cli("publish", "--json", cwd=ws))
    assert (ws / "a.txt").read_text() == "one\n"
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    card = log["messages"][-1]
    assert card["system_kind"] == "checkpoint_publish"
    assert card["data"]["checkpoint_id"] == published["checkpoint_id"]
    assert log["head"] == card["id"]
    assert "strata chat restore" in ok(run_cli("chat", "log", cwd=ws))
    rewound = as_json(run_cli("chat", "rewind", turn["user_message"]["id"], "--json", cwd=ws))
    assert rewound["published_from_checkpoint"] == published["checkpoint_id"]
    assert (ws / "a.txt").read_text() == "original\n"
    assert as_json(run_cli("draft", "status", "--json", cwd=ws))["open"] is False


def test_undoing_a_command_line_publish_takes_its_checkpoint_card_back(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    shop_cli(run_cli, ws, tmp_path, EDIT)
    turn = as_json(run_cli("ask", "--json", "set a.txt to one", cwd=ws))
    as_json(run_cli("publish", "--json", cwd=ws))
    card = as_json(run_cli("chat", "log", "--json", cwd=ws))["messages"][-1]
    assert card["system_kind"] == "checkpoint_publish"
    ok(run_cli("undo", cwd=ws))
    assert (ws / "a.txt").read_text() == "original\n"
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    # the head is the turn's answer again: the card is out of the transcript
    assert log["head"] == turn["assistant_message"]["id"]
    assert card["id"] not in [m["id"] for m in log["messages"]]
    assert "strata chat restore" not in ok(run_cli("chat", "log", cwd=ws))
    code, _, err = run_cli("chat", "restore", card["id"][:12], cwd=ws)
    assert code == 1 and "undone" in err and "Traceback" not in err
    # the next turn follows the answer, not the card
    again = as_json(run_cli("ask", "--json", "set a.txt to one again", cwd=ws))
    assert again["user_message"]["parent"] == turn["assistant_message"]["id"]


def test_a_publish_from_anywhere_adds_one_card_to_each_conversation_that_edited_the_draft(
    ws_repo: Repository,
) -> None:
    script = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "1\n"}}]},
        {"text": "One."},
    ]
    first = ws_repo.workshop(provider=Scripted(script, name="demo"))
    first.send("one")
    other = first.new_conversation("other")
    other.provider = Scripted(
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "b.txt", "content": "b"}}
                ]
            },
            {"text": "Bee."},
        ],
        name="demo",
    )
    other.send("bee")
    bystander = other.new_conversation("bystander")
    first.publish()  # the chat's own publish: its card, and the other conversation's
    cards = {
        w.conversation_id: [m for m in w.messages() if m.system_kind == "checkpoint_publish"]
        for w in (first, other, bystander)
    }
    assert len(cards[first.conversation_id]) == 1 and len(cards[other.conversation_id]) == 1
    assert cards[bystander.conversation_id] == []
    assert other.head == cards[other.conversation_id][0].id
    # the other conversation rewinds across it: Published comes back
    other.rewind(other.messages()[0].id)
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    assert not (ws_repo.root / "b.txt").exists()


def test_the_cards_restore_brings_back_the_files_a_publish_replaced(ws_repo: Repository) -> None:
    w = ws_repo.workshop(provider=Scripted(one_turn(), name="demo"))
    w.send("one")
    ws_repo.draft(create=False).publish()  # the API's publish, outside the chat
    card = w.messages()[-1]
    assert card.system_kind == "checkpoint_publish"
    restored = w.restore(w.checkpoint_of(card.id[:10]))
    assert restored.system_kind == "checkpoint_restore"
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    from strata.errors import WorkshopError

    with pytest.raises(WorkshopError, match="not a checkpoint card"):
        w.checkpoint_of(w.messages()[0].id)


def test_rewind_to_the_first_message_keeps_a_draft_opened_before_the_conversation(
    ws_repo: Repository,
) -> None:
    draft = ws_repo.draft()  # opened by hand, before any conversation
    (draft.path / "mine.txt").write_text("mine\n")
    draft.record("mine")
    w = ws_repo.workshop(provider=Scripted(one_turn(), name="demo"))
    w.send("one")
    w.rewind(w.messages()[0].id)
    kept = ws_repo.draft(create=False)
    assert kept.id == draft.id
    assert (kept.path / "mine.txt").read_text() == "mine\n"
    assert (kept.path / "a.txt").read_text() == "original\n"


RPI = """\
- tool_calls: [{name: list_files, arguments: {}}]
- text: a.txt holds 'original'.
- text: "- [ ] 1. Set a.txt to one"
- tool_calls: [{name: write_file, arguments: {path: a.txt, content: "one\\n"}}]
- text: "DONE: a.txt is one"
- text: I set a.txt to one, as planned.
"""


def test_ask_rpi_shows_its_phases(run_cli, ws: Path, tmp_path: Path) -> None:
    shop_cli(run_cli, ws, tmp_path, RPI)
    code, out, err = run_cli("ask", "--rpi", "set a.txt to one", cwd=ws)
    assert code == 0 and "I set a.txt to one" in out
    shown = [line for line in err.splitlines() if line.startswith("[") and "]" in line]
    phases = [line for line in shown if not line.startswith(("[message", "[Draft"))]
    assert phases == [
        "[research]",
        "[plan]",
        "[implement]",
        "[implement 1/1: Set a.txt to one]",
        "[summary]",
    ]


# -- 3. the Draft in view ------------------------------------------------------------------------


def test_ask_shows_the_open_draft_with_its_age_and_source(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    shop_cli(run_cli, ws, tmp_path, EDIT)
    code, _, err = run_cli("ask", "set a.txt to one", cwd=ws)
    assert code == 0
    after = err.splitlines()[-1]
    assert "in progress: from 2023-11-14 22:13 UTC (0 min old), source Workshop (conv_" in after
    status = as_json(run_cli("draft", "status", "--json", cwd=ws))
    assert status["source"]["kind"] == "workshop" and status["source_text"].startswith("Workshop")
    # on start too, a day later, with the reminder and its three actions
    later = {"STRATA_NOW": str(1_700_000_000_000 + 25 * 3600 * 1000)}
    code, _, err = run_cli("ask", "set a.txt to one", cwd=ws, env=later)
    first = err.splitlines()[:2]
    assert "(24 h old)" in first[0]
    assert "You have an open Draft from 2023-11-14 22:13 UTC" in first[1]
    assert "'strata review'" in first[1] and "'strata discard'" in first[1]
    assert "'strata draft dismiss'" in first[1]


def test_draft_dismiss_quiets_the_reminder_for_a_day(run_cli, ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    ok(run_cli("init", cwd=ws))
    ok(run_cli("draft", "start", cwd=ws))
    day = 24 * 3600 * 1000
    at = {"STRATA_NOW": str(1_700_000_000_000 + day + 1000)}
    warnings = as_json(run_cli("status", "--json", cwd=ws, env=at))["warnings"]
    assert any("'strata draft dismiss'" in w for w in warnings)
    dismissed = as_json(run_cli("draft", "dismiss", "--json", cwd=ws, env=at))
    assert dismissed["next_reminder_ts"] > dismissed["dismissed_ts"]
    warnings = as_json(run_cli("status", "--json", cwd=ws, env=at))["warnings"]
    assert not any("open Draft" in w for w in warnings)
    again = {"STRATA_NOW": str(1_700_000_000_000 + 2 * day + 2000)}
    warnings = as_json(run_cli("status", "--json", cwd=ws, env=again))["warnings"]
    assert any("open Draft" in w for w in warnings)
    ok(run_cli("discard", cwd=ws))
    code, _, err = run_cli("draft", "dismiss", cwd=ws)
    assert code == 1 and "no Draft is open" in err


def test_chat_new_with_an_open_draft_publishes_discards_or_keeps_it(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    shop_cli(run_cli, ws, tmp_path, EDIT)
    ok(run_cli("ask", "set a.txt to one", cwd=ws))
    ok(run_cli("chat", "new", "kept", cwd=ws))  # not a terminal: the Draft is kept
    assert as_json(run_cli("draft", "status", "--json", cwd=ws))["open"] is True
    ok(run_cli("chat", "new", "--draft", "publish", "next", cwd=ws))
    assert (ws / "a.txt").read_text() == "one\n"
    assert as_json(run_cli("draft", "status", "--json", cwd=ws))["open"] is False


# -- 9. local telemetry ------------------------------------------------------------------------


def test_stats_counts_turns_drafts_rewinds_undo_switches_and_failures(
    ws_repo: Repository, wire: WireServer, run_cli
) -> None:
    from strata.workshop.stats import workshop_stats

    assert workshop_stats(ws_repo).turns == 0
    w = ws_repo.workshop(provider=Scripted([*one_turn(), {"text": "Hi."}], name="demo"))
    first = w.send("one")
    w.send("hello")  # a question
    w.rewind(first.user_message.id)  # takes back both answers
    w.set_model("openai")
    failing = ws_repo.workshop(provider=chat_provider(wire.openai_url))
    wire.queue(*[status(503, "overloaded")] * 6)
    with pytest.raises(ProviderUnavailable):
        failing.send("again")
    ws_repo.undo()
    found = as_json(run_cli("stats", "--json", cwd=ws_repo.root))
    assert found["conversations"] == 1
    assert found["turns"] == {
        "total": 3,
        "failed": 1,
        "with_edits": 1,
        "failure_reasons": {"provider": 1},
        "failure_types": {"ProviderUnavailable": 1},
    }
    assert found["draft_changes"] == {"generated": 1, "applied": 1}
    assert found["rewinds"] == {"total": 1, "distances": {"2": 1}}
    assert found["model_switches"] == 1 and found["undo"]["total"] == 1
    assert found["drafts"]["started"] == 1
    text = ok(run_cli("stats", cwd=ws_repo.root))
    assert "turns             3 (1 failed: provider 1)" in text


def test_a_studio_publish_adds_the_card_too(ws_repo: Repository) -> None:
    import httpx

    from strata.studio import running

    w = ws_repo.workshop(provider=Scripted(one_turn(), name="demo"))
    w.send("one")
    ws_repo.close()
    with (
        running([ws_repo.root]) as studio,
        httpx.Client(base_url=f"http://127.0.0.1:{studio.port}") as c,
    ):
        c.get(f"/?token={studio.token}")
        answer = c.post("/w/0/draft/publish", data={"csrf": studio.guard.csrf, "message": "x"})
        assert answer.status_code < 400
    with Repository.open(ws_repo.root) as repo:
        card = repo.workshop(provider=Scripted([], name="demo")).messages()[-1]
        assert card.system_kind == "checkpoint_publish" and card.data["via"] == "publish"
        assert (repo.root / "a.txt").read_text() == "1\n"


def test_a_turn_cancelled_after_its_first_write_leaves_no_draft(ws_repo: Repository) -> None:
    from strata.errors import ProviderCancelled
    from strata.providers.base import CancelToken
    from strata.workshop.events import ToolResultEvent

    both = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "a.txt", "content": "1\n"}},
            {"name": "write_file", "arguments": {"path": "b.txt", "content": "2\n"}},
        ]
    }
    token = CancelToken()

    def cancel_after_the_first_write(event: object) -> None:
        if isinstance(event, ToolResultEvent):
            token.cancel()  # Ctrl-C between the step's two writes

    w = ws_repo.workshop(provider=Scripted([both, {"text": "never"}], name="demo"))
    with pytest.raises(ProviderCancelled):
        w.send("write two files", on_event=cancel_after_the_first_write, cancel=token)
    assert no_draft(ws_repo)  # the Draft its first write opened went with the step
    assert w.messages()[-1].data["interrupted"] is True
    assert (ws_repo.root / "a.txt").read_text() == "original\n"
    assert ws_repo.check() == []
