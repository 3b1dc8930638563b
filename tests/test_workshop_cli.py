"""``strata ask`` and ``strata chat …``: the Workshop from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import as_json, assert_user_error, ok

SCRIPT = """\
- tool_calls: [{name: write_file, arguments: {path: a.txt, content: "one\\n"}}]
- text: Set a.txt to one.
  stream: 4
"""


@pytest.fixture
def shop_ws(run_cli, ws: Path, tmp_path: Path) -> Path:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    (tmp_path / "shop.yaml").write_text(SCRIPT)
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{tmp_path / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )
    return ws


def draft_path(run_cli, ws: Path) -> Path:
    return Path(as_json(run_cli("draft", "status", "--json", cwd=ws))["path"])


def test_ask_streams_the_answer_and_edits_the_draft(run_cli, shop_ws: Path) -> None:
    out = ok(run_cli("ask", "set a.txt to one", cwd=shop_ws))
    assert out.startswith("Set a.txt to one.")
    assert (draft_path(run_cli, shop_ws) / "a.txt").read_text() == "one\n"
    assert (shop_ws / "a.txt").read_text() == "original\n"
    log = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))
    assert [m["kind"] for m in log["messages"]] == [
        "user_message",
        "system_event",
        "assistant_message",
    ]
    assert log["head"] == log["messages"][-1]["id"]
    text = ok(run_cli("chat", "log", cwd=shop_ws))
    assert "you: set a.txt to one" in text and "* " in text


def test_chat_rewind_regenerate_and_undo(run_cli, shop_ws: Path) -> None:
    turn = as_json(run_cli("ask", "--json", "set a.txt to one", cwd=shop_ws))
    files = draft_path(run_cli, shop_ws)
    first = turn["user_message"]["id"]
    rewound = as_json(run_cli("chat", "rewind", first[:10], "--json", cwd=shop_ws))
    assert rewound["head"] == first and rewound["draft_revision"] is None
    assert as_json(run_cli("draft", "status", "--json", cwd=shop_ws))["open"] is False
    again = as_json(run_cli("chat", "regenerate", "--json", cwd=shop_ws))
    assert again["user_message"]["id"] == first
    assert again["assistant_message"]["text"] == "Set a.txt to one."
    assert (files / "a.txt").read_text() == "one\n"
    ok(run_cli("undo", cwd=shop_ws))  # the regenerate: back to the rewound head, no Draft
    log = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))
    assert log["head"] == first
    ok(run_cli("undo", cwd=shop_ws))  # the rewind: the first answer and its Draft back
    log = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))
    assert log["head"] == turn["assistant_message"]["id"]
    assert (files / "a.txt").read_text() == "one\n"


def test_bad_input_is_one_clear_line(run_cli, shop_ws: Path) -> None:
    assert_user_error(run_cli("ask", " ", cwd=shop_ws), code=2, says="empty")
    assert_user_error(run_cli("chat", "rewind", "nosuchmsg", cwd=shop_ws), says="nosuchmsg")
    assert_user_error(run_cli("chat", "regenerate", cwd=shop_ws), says="nothing to regenerate")
    assert_user_error(run_cli("chat", "model", "nosuch", cwd=shop_ws), says="nosuch")
    assert_user_error(run_cli("ask", "--model", "nosuch", "hi", cwd=shop_ws), says="nosuch")
    # nothing was half-recorded
    assert as_json(run_cli("chat", "log", "--json", cwd=shop_ws))["messages"] == []


def test_conversations_new_and_list(run_cli, shop_ws: Path) -> None:
    ok(run_cli("ask", "first", cwd=shop_ws))
    new = as_json(run_cli("chat", "new", "second", "--json", cwd=shop_ws))
    listed = as_json(run_cli("chat", "list", "--json", cwd=shop_ws))["conversations"]
    assert next(c["id"] for c in listed) == new["conversation"] and len(listed) == 2
    log = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))
    assert log["conversation"] == new["conversation"] and log["messages"] == []
    older = listed[1]["id"]
    log = as_json(run_cli("chat", "log", "--json", "--conversation", older[:8], cwd=shop_ws))
    assert log["messages"][0]["text"] == "first"


def test_chat_without_a_subcommand_opens_the_ui_or_says_it_is_missing(
    run_cli, shop_ws: Path
) -> None:
    import importlib.util

    if importlib.util.find_spec("strata.workshop.tui") is not None:
        pytest.skip("the terminal UI is installed: its own tests drive it")
    assert_user_error(run_cli("chat", cwd=shop_ws), says="terminal UI")


RPI_SCRIPT = """\
- tool_calls: [{name: list_files, arguments: {}}]
- text: a.txt holds 'original'.
- text: "- [ ] 1. Set a.txt to one"
- tool_calls: [{name: write_file, arguments: {path: a.txt, content: "one\\n"}}]
- text: "DONE: a.txt is one"
- text: I set a.txt to one, as planned.
"""


def test_ask_rpi_researches_plans_implements_and_summarises(
    run_cli, shop_ws: Path, tmp_path: Path
) -> None:
    (tmp_path / "shop.yaml").write_text(RPI_SCRIPT)
    turn = as_json(run_cli("ask", "--rpi", "set a.txt to one", "--json", cwd=shop_ws))
    # only the summary is the user-visible answer; the phases' texts are not messages
    assert turn["assistant_message"]["text"] == "I set a.txt to one, as planned."
    log = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))
    assert [m["kind"] for m in log["messages"]].count("assistant_message") == 1
    assert (draft_path(run_cli, shop_ws) / "a.txt").read_text() == "one\n"
    assert (shop_ws / "a.txt").read_text() == "original\n"
    plan = next((shop_ws / ".strata" / "workshop").glob("*/_rpi/plan.md")).read_text()
    assert "- [x] 1. Set a.txt to one" in plan
    # a rewind voids the RPI progress
    ok(run_cli("chat", "rewind", log["messages"][0]["id"], cwd=shop_ws))
    assert list((shop_ws / ".strata" / "workshop").glob("*/_rpi/plan.md")) == []


def test_the_model_is_told_the_files_and_the_digest(run_cli, shop_ws: Path, tmp_path: Path) -> None:
    ok(run_cli("digest", "set", "Build with make; tests in tests/.", cwd=shop_ws))
    ok(run_cli("ask", "set a.txt to one", cwd=shop_ws))
    turn = as_json(run_cli("chat", "log", "--json", cwd=shop_ws))["messages"][-1]
    trace = ok(run_cli("cat", turn["data"]["traces"][0], cwd=shop_ws))
    assert "a.txt" in trace and "Build with make; tests in tests/." in trace
    assert "upload" in trace  # the file context contract: never ask the user to upload


TABLE_SCRIPT = """\
- tool_calls:
  - {name: table_query, arguments: {path: d.csv, sql: "SELECT sum(a) AS s FROM t", sheet: null}}
- tool_calls: [{name: recall_tool_result, arguments: {index: 1, offset: null}}]
- tool_calls: [{name: write_file, arguments: {path: total.txt, content: "4\\n"}}]
- text: The sum is 4.
"""


def test_a_workshop_turn_replays_offline_with_the_workshops_own_tools(
    run_cli, shop_ws: Path, tmp_path: Path
) -> None:
    (shop_ws / "d.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "shop.yaml").write_text(TABLE_SCRIPT)
    ok(run_cli("ask", "sum a into total.txt", cwd=shop_ws))
    base = as_json(run_cli("draft", "status", "--json", cwd=shop_ws))["base_event_id"]
    steps = as_json(run_cli("history", "--json", "--action", "draft_revision", cwd=shop_ws))
    tip = (steps["events"] if isinstance(steps, dict) else steps)[0]["id"]
    report = as_json(run_cli("replay", f"{base}..{tip}", "--json", cwd=shop_ws))
    assert report["ok"] is True and report["first_divergence"] is None
    # the two reading steps ran before the Draft existed (a write opens it): no revision
    assert [(s["kind"], s["status"]) for s in report["steps"]] == [("agent", "same")] * 2


def test_regenerate_asks_the_model_that_gave_the_answer(run_cli, ws: Path, tmp_path: Path) -> None:
    (ws / "a.txt").write_text("original\n")
    ok(run_cli("init", cwd=ws))
    (tmp_path / "fake.yaml").write_text("- text: An answer.\n")
    with open(ws / ".strata" / "config.toml", "a") as config:  # no [model] default
        config.write(f'\n[providers.fake]\nadapter = "scripted"\nscript = "{tmp_path}/fake.yaml"\n')
    ok(run_cli("ask", "--model", "fake", "hello", cwd=ws))
    turn = as_json(run_cli("chat", "regenerate", "--json", cwd=ws))
    assert turn["assistant_message"]["text"] == "An answer."
    assert turn["assistant_message"]["data"]["model"] == "fake"
    again = as_json(run_cli("chat", "regenerate", "--model", "fake", "--json", cwd=ws))
    assert again["assistant_message"]["text"] == "An answer."


def test_a_models_terminal_controls_are_written_out_not_obeyed(
    run_cli, ws: Path, tmp_path: Path
) -> None:
    """A clipboard write (OSC 52), a hidden link and a bidi override in the answer stay text."""
    hostile = (
        "Done.\\x1b]52;c;cm0gLXJmIH4=\\x07 "
        "See \\x1b]8;;http://evil.test\\x1b\\\\here\\x1b]8;;\\x1b\\\\ "
        "\\u202eelif"
    )
    (tmp_path / "evil.yaml").write_text(f'- text: "{hostile}"\n')
    ok(run_cli("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.evil]\nadapter = "scripted"\nscript = "{tmp_path / "evil.yaml"}"\n'
            '[model]\ndefault = "evil"\n'
        )
    for out in (ok(run_cli("ask", "hello", cwd=ws)), ok(run_cli("chat", "log", cwd=ws))):
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
        assert "\\x1b]52;c;cm0gLXJmIH4=" in out and "\\u202eelif" in out


def test_an_ask_is_one_operation_and_one_undo_reverts_it(run_cli, shop_ws: Path) -> None:
    ok(run_cli("snapshot", "-m", "base", cwd=shop_ws))
    ok(run_cli("ask", "set a.txt to one", cwd=shop_ws))
    # the message, the Draft's start, its revision and the chat operation: one line
    lines = ok(run_cli("op", "log", cwd=shop_ws)).splitlines()
    assert len(lines) == 2, lines  # the ask, and the base snapshot before it
    assert "workshop" in lines[0] and "set a.txt to one" in lines[0] and "steps)" in lines[0]
    ops = as_json(run_cli("op", "log", "--json", cwd=shop_ws))
    turn = [o for o in ops if (o.get("group") or {}).get("kind") == "workshop"]
    assert {o["command"] for o in turn} >= {"chat message", "draft start", "chat turn"}
    assert len({o["group"]["id"] for o in turn}) == 1
    # one undo: the conversation and the Draft as they were before the ask
    ok(run_cli("undo", cwd=shop_ws))
    assert as_json(run_cli("draft", "status", "--json", cwd=shop_ws))["open"] is False
    assert as_json(run_cli("chat", "log", "--json", cwd=shop_ws))["messages"] == []
    assert (shop_ws / "a.txt").read_text() == "original\n"
    ok(run_cli("check", cwd=shop_ws))
