"""``strata stats``: the Workshop's local usage statistics, counted from the ledger."""

from __future__ import annotations

from pathlib import Path

from conftest import CliRunner, as_json, assert_user_error, ok


def test_stats_count_turns_drafts_undo_switches_and_failures(
    run_cli: CliRunner, ws: Path, tmp_path: Path
) -> None:
    ok(run_cli("init", cwd=ws))
    before = as_json(run_cli("stats", "--json", cwd=ws))["stats"]
    assert before["turns"] == 0 and before["undo"]["undos_per_turn"] is None
    script = tmp_path / "shop.yaml"
    script.write_text(
        "- tool_calls: [{name: write_file, arguments: {path: w.txt, content: hi}}]\n"
        "- text: Wrote w.txt.\n"
    )
    (tmp_path / "other.yaml").write_text("- text: Hello.\n")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{script}"\n'
            f'\n[providers.other]\nadapter = "scripted"\nscript = "{tmp_path / "other.yaml"}"\n'
            # nothing listens on the discard port: refused at once, not retried
            '\n[providers.down]\nadapter = "openai-chat"\nmodel = "m"\n'
            'base_url = "http://127.0.0.1:9/v1"\nretry_delays = []\n'
        )
    ok(run_cli("chat", "model", "shop", cwd=ws))
    ok(run_cli("ask", "write w.txt", cwd=ws))
    ok(run_cli("publish", cwd=ws))
    ok(run_cli("chat", "model", "down", cwd=ws))
    run_cli("ask", "and again", cwd=ws)  # the provider is down: a failed turn
    ok(run_cli("chat", "model", "other", cwd=ws))
    ok(run_cli("ask", "hello?", cwd=ws))
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    ok(run_cli("chat", "rewind", log["messages"][0]["id"], cwd=ws))
    ok(run_cli("undo", cwd=ws))

    stats = as_json(run_cli("stats", "--json", cwd=ws))
    assert stats["sent_anywhere"] is False
    found = stats["stats"]
    assert found["turns"] == 3 and found["conversations"] == 1
    assert found["failed_turns"] == 1
    assert found["failures"]["by_category"] == {"provider": 1}
    assert found["failures"]["by_type"] == {"ProviderUnavailable": 1}
    assert found["drafts"]["published"] == 1 and found["drafts"]["opened"] >= 1
    assert found["drafts"]["revisions"] >= 1
    assert found["models"]["switches"] == 3
    assert found["models"]["answers_by_model"]["other"] == 1
    assert found["undo"]["undos"] == 1 and found["undo"]["undos_per_turn"] == round(1 / 3, 3)
    assert found["undo"]["chat_rewinds"] == 1
    (distance,) = found["undo"]["rewind_distances"]
    assert int(distance) >= 1
    text = ok(run_cli("stats", cwd=ws))
    assert "turns             3 in 1 conversation(s)" in text
    assert "failure reasons   provider 1" in text
    assert "nothing is sent anywhere" in text


def test_stats_outside_a_repository_is_a_clear_error(run_cli: CliRunner, tmp_path: Path) -> None:
    assert_user_error(run_cli("stats", cwd=tmp_path), says="not a strata workspace")
