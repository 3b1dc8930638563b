"""A Workshop turn's context items: the situation, Agent Skills, format style skills, notices.

Each test drives a real turn against a real HTTP server on 127.0.0.1
(tests/wire_server.py) that records the requests it receives, and asserts what
the model was sent: the situation after the manifest, the skills named or
relevant with their references, the style skill of each format the workspace
holds (merged with the Document Style), the ``*_get_styles`` tools, what was
cut to fit and the ``context_notice`` card saying what could not be used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata import Repository
from strata.providers.base import Provider
from strata.providers.config import open_provider
from strata.providers.window import forget
from strata.workshop.skills import SkillInvalid, parse_skill
from wire_server import WireServer, text, tools
from workshop_fixtures import docx_bytes, pptx_bytes, xlsx_bytes


@pytest.fixture(autouse=True)
def _fresh_windows() -> Iterator[None]:
    forget()
    yield
    forget()


def local(wire: WireServer) -> Provider:
    """A llama.cpp-like server on this machine, configured as a user would."""
    table = {
        "adapter": "openai-chat",
        "model": "m",
        "base_url": wire.openai_url,
        "retry_delays": [],
        "tool_choice_required": False,
    }
    return open_provider("local", config={"providers": {"local": table}}, environ={})


def context(repo: Repository) -> Path:
    folder = repo.layout.repo / "context"
    (folder / "skills").mkdir(parents=True, exist_ok=True)
    return folder


def skill(
    repo: Repository, name: str, description: str, body: str, files: dict[str, str] | None = None
) -> Path:
    folder = context(repo) / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}")
    for path, content in (files or {}).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return folder


def system_of(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    assert isinstance(content, str)
    return content


def notices(repo: Repository, w: Any) -> list[str]:
    return [n for m in w.messages() if m.system_kind == "context_notice" for n in m.data["notices"]]


def test_the_situation_is_sent_after_the_manifest_and_before_the_conversation(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    (context(repo) / "situation.md").write_text("Audit week: the books close on Friday.\n")
    wire.queue(text("Noted."), text("Still noted."))
    w = repo.workshop(provider=local(wire))
    w.send("hello")
    w.send("and now?")
    for body in wire.bodies:
        system = system_of(body)
        assert system.index("## Workspace files") < system.index("<<<BEGIN Situation context>>>")
        assert "Audit week: the books close on Friday." in system
        assert body["messages"][0]["role"] == "system"  # the conversation comes after it
        # no Office file, none asked for: no style skill, no style tool
        assert "Style skill" not in system
        assert not any(t["function"]["name"].endswith("_get_styles") for t in body["tools"])
    assert notices(repo, w) == []


def test_skills_named_or_relevant_are_sent_with_their_references_others_only_listed(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    skill(
        repo,
        "house-rules",
        "How this company writes anything",
        "Always write British English. See [the summary](references/summary.md).",
        {"references/summary.md": "Short sentences. No jargon."},
    )
    skill(
        repo,
        "invoice-checks",
        "Checking supplier invoices against purchase orders",
        "Match every invoice line to its purchase order.",
    )
    skill(repo, "release-notes", "Writing release notes for software", "Group by feature.")
    wire.queue(text("ok"))
    w = repo.workshop(provider=local(wire))
    w.send("Use $house-rules and check the supplier invoices please")
    system = system_of(wire.bodies[0])
    rules = system.index("<<<BEGIN Skill: house-rules>>>")
    assert "Always write British English." in system
    assert "### Reference: references/summary.md\nShort sentences. No jargon." in system
    assert rules < system.index("<<<BEGIN Skill: invoice-checks>>>")  # named first, then relevant
    assert "Match every invoice line" in system
    assert "Group by feature." not in system  # not relevant: only named in the index
    assert "- release-notes: Writing release notes for software" in system
    assert notices(repo, w) == []


def test_a_skill_that_cannot_be_used_or_a_name_that_names_none_is_a_notice(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    broken = context(repo) / "skills" / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("no front matter here\n")
    skill(repo, "tidy", "Tidy text files", "Trim trailing spaces.")
    wire.queue(text("ok"))
    w = repo.workshop(provider=local(wire))
    turn = w.send("please use $nosuch on a.txt")
    assert turn.assistant_message.text == "ok"  # a notice never blocks the turn
    found = notices(repo, w)
    assert any(n.startswith("skill broken not used: SKILL.md has no front matter") for n in found)
    assert any("no skill is named 'nosuch' (skills: tidy)" in n for n in found)
    kinds = [(m.kind, m.system_kind) for m in w.messages()]
    assert kinds == [
        ("user_message", None),
        ("system_event", "context_notice"),
        ("assistant_message", None),
    ]


def test_a_skill_past_the_budget_is_cut_with_a_context_note_and_a_notice(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    wire.n_ctx = 4096
    skill(repo, "style-guide", "The style guide", "Write plainly.\n" * 1500)
    wire.queue(text("ok"))
    w = repo.workshop(provider=local(wire))
    turn = w.send("apply $style-guide to a.txt")
    system = system_of(wire.bodies[0])
    assert "<<<BEGIN Skill: style-guide>>>" in system and "[truncated:" in system
    assert system.count("Write plainly.") < 1500
    notes = turn.assistant_message.data["context_notes"]
    assert any(n.startswith("context Skill: style-guide: ") for n in notes), notes
    assert any(n.startswith("Skill: style-guide was cut to fit") for n in notices(repo, w))


def test_style_skills_follow_the_formats_and_merge_the_document_style(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "report.docx").write_bytes(docx_bytes())
    skill(
        repo,
        "document-style",
        "The house style of our documents",
        "Use the company font.\n\n## Word documents\nHeadings in navy.\n\n"
        "## Slides\nOne chart a slide.\n",
    )
    wire.queue(text("ok"), text("ok"))
    w = repo.workshop(provider=local(wire))
    w.send("tidy the report")
    system = system_of(wire.bodies[0])
    merged = "<<<BEGIN Style skill: docx (docx-style + document-style)>>>"
    assert merged in system
    assert "call `docx_get_styles`" in system  # the bundled generic rules
    assert "## House style (Document Style: where it differs" in system
    assert "Headings in navy." in system and "Use the company font." in system
    assert "One chart a slide." not in system  # a section for another format
    assert "Style skill: xlsx" not in system and "Style skill: pptx" not in system
    assert "<<<BEGIN Skill: document-style>>>" not in system  # merged, not sent twice
    # a request for a format the workspace does not hold brings its style skill
    w.send("now make a spreadsheet of the totals")
    second = system_of(wire.bodies[1])
    begin = "<<<BEGIN Style skill: xlsx (xlsx-style + document-style)>>>"
    xlsx = second[second.index(begin) : second.index("<<<END Style skill: xlsx")]
    assert "call `xlsx_get_styles`" in xlsx and "Use the company font." in xlsx
    assert "One chart a slide." not in xlsx and "Headings in navy." not in xlsx
    offered = {t["function"]["name"] for t in wire.bodies[1]["tools"]}
    assert {"docx_get_styles", "xlsx_get_styles"} <= offered
    assert "pptx_get_styles" not in offered


def test_without_an_office_format_the_document_style_is_sent_on_its_own(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    skill(repo, "document-style", "The house style", "Use the company font.")
    wire.queue(text("ok"))
    repo.workshop(provider=local(wire)).send("hello")
    system = system_of(wire.bodies[0])
    assert "<<<BEGIN Skill: document-style>>>\nUse the company font." in system
    assert "Style skill:" not in system


def test_a_document_style_that_cannot_be_merged_falls_back_to_the_generic_style(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "deck.pptx").write_bytes(pptx_bytes())
    folder = context(repo) / "skills" / "document-style"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: [document-style\n---\nbody\n")
    wire.queue(text("ok"))
    w = repo.workshop(provider=local(wire))
    w.send("tidy the deck")
    system = system_of(wire.bodies[0])
    assert "<<<BEGIN Style skill: pptx>>>" in system and "pptx_get_styles" in system
    assert "House style" not in system
    found = notices(repo, w)
    assert (
        "the Document Style could not be merged into the pptx style skill (its SKILL.md is not "
        "valid): the generic pptx style is used"
    ) in found


def test_the_get_styles_tools_read_each_format(repo: Repository, wire: WireServer) -> None:
    (repo.root / "report.docx").write_bytes(docx_bytes())
    (repo.root / "book.xlsx").write_bytes(xlsx_bytes())
    (repo.root / "deck.pptx").write_bytes(pptx_bytes())
    wire.queue(
        tools(("docx_get_styles", {"path": "report.docx"})),
        tools(("xlsx_get_styles", {"path": "book.xlsx", "sheet": "Sales"})),
        tools(("pptx_get_styles", {"path": "deck.pptx"})),
        tools(("docx_get_styles", {"path": "deck.pptx"})),
        text("Styled alike."),
    )
    turn = repo.workshop(provider=local(wire)).send("what styles do my files use?")
    assert turn.assistant_message.text == "Styled alike."
    sent = {t["function"]["name"] for t in wire.bodies[0]["tools"]}
    assert {"docx_get_styles", "xlsx_get_styles", "pptx_get_styles"} <= sent
    results = [m["content"] for m in wire.bodies[-1]["messages"] if m["role"] == "tool"]
    docx, xlsx, pptx, wrong = results
    assert "Heading 1 (paragraph), used 1 times: 14 pt, bold" in docx
    assert "page (section 1): 21.59 x 27.94 cm, portrait" in docx
    assert "sheet 'Sales':" in xlsx and "font Calibri 11 pt" in xlsx and "'Notes'" not in xlsx
    assert "master 1 layouts: Title Slide, Title and Content" in pptx
    assert "slide 2: layout Title and Content" in pptx
    assert "deck.pptx is a pptx file, not docx; use pptx_get_styles" in wrong


def test_each_rpi_phase_sends_and_records_its_own_reasoning_effort(
    repo: Repository, wire: WireServer
) -> None:
    (repo.root / "a.txt").write_text("alpha\n")
    (context(repo) / "situation.md").write_text("Audit week: the books close on Friday.\n")
    table = {
        "adapter": "openai-responses",
        "model": "gpt-5.2",
        "base_url": wire.openai_url,
        "retry_delays": [],
        "research_effort": "low",
        "plan_effort": "high",
        "implement_effort": "none",
    }
    provider = open_provider("fast", config={"providers": {"fast": table}}, environ={})
    wire.queue(
        text("a.txt holds alpha."),
        text("- [ ] Write b.txt"),
        tools(("write_file", {"path": "b.txt", "content": "beta\n"})),
        text("DONE"),
        text("I wrote b.txt."),
    )
    w = repo.workshop(provider=provider)
    turn = w.send("write b.txt", rpi=True)
    assert turn.assistant_message.text == "I wrote b.txt."
    efforts = [b["reasoning"]["effort"] for b in wire.bodies]
    assert efforts == ["low", "high", "none", "none", "medium"]  # the summary keeps the default
    # the context items reach research, plan and implement
    assert all("Audit week: the books close" in json.dumps(b) for b in wire.bodies[:4])
    # every call's trace records the effort asked for (research and plan ran before the Draft)
    from strata.providers.trace import Trace

    traces = [
        Trace.decode(repo.objects.get(t), name=t) for t in turn.assistant_message.data["traces"]
    ]
    traced = [t.request.get("reasoning_effort") for t in traces if t.event_type == "llm_call"]
    assert traced == ["low", "high", "none", "none", None]  # the summary asks for no effort
    recorded = [repo.event(e).data["step"] for e in turn.assistant_message.data["steps"] if e]
    assert [(s["phase"], s["reasoning_effort"]) for s in recorded] == [
        ("implement", "none"),
        ("implement", "none"),
        ("summary", "medium"),
    ]


def test_a_phase_effort_is_checked_in_the_config(wire: WireServer) -> None:
    from strata.errors import ProviderNotConfigured

    table = {"adapter": "openai-chat", "model": "m", "base_url": wire.openai_url}
    bad = {"providers": {"x": {**table, "plan_effort": "extreme"}}}
    with pytest.raises(ProviderNotConfigured, match=r"plan_effort of .* 'extreme', not one of"):
        open_provider("x", config=bad, environ={})
    anthropic = {"adapter": "anthropic", "model": "c", "research_effort": "low"}
    with pytest.raises(ProviderNotConfigured, match=r"research_effort .* only for the openai"):
        open_provider(
            "y", config={"providers": {"y": anthropic}}, environ={"ANTHROPIC_API_KEY": "k"}
        )


def test_strata_ask_shows_the_context_notice_and_chat_log_keeps_it(
    run_cli: Any, ws: Path, tmp_path: Path
) -> None:
    from conftest import as_json, ok

    (ws / "a.txt").write_text("alpha\n")
    ok(run_cli("init", cwd=ws))
    (tmp_path / "shop.yaml").write_text("- text: Done.\n")
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{tmp_path / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )
    broken = ws / ".strata" / "context" / "skills" / "broken"
    broken.mkdir(parents=True)
    (broken / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\nbody\n")
    code, out, err = run_cli("ask", "hello", cwd=ws)
    assert code == 0 and out.startswith("Done.")
    assert "note: skill broken not used: its name 'other' is not its folder's name 'broken'" in err
    log = as_json(run_cli("chat", "log", "--json", cwd=ws))
    [card] = [m for m in log["messages"] if m["system_kind"] == "context_notice"]
    assert card["data"]["notices"] == [
        "skill broken not used: its name 'other' is not its folder's name 'broken'"
    ]
    assert "context_notice: context: skill broken not used" in ok(run_cli("chat", "log", cwd=ws))


def test_a_skill_or_situation_the_user_cannot_read_is_a_notice_not_a_failure(
    cli_as: Any, person: Any, home_of: Path, tmp_path: Path
) -> None:
    import os
    import subprocess

    from conftest import ok

    ws = home_of / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    script = home_of / "shop.yaml"
    script.write_text("- text: Done.\n")
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(home_of)], check=True)
    ok(cli_as("init", cwd=ws))
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{script}"\n'
            '[model]\ndefault = "shop"\n'
        )
    context = ws / ".strata" / "context"
    (context / "skills" / "secret").mkdir(parents=True)
    (context / "skills" / "secret" / "SKILL.md").write_text(
        "---\nname: secret\ndescription: hidden\n---\nThe secret rule.\n"
    )
    (context / "situation.md").write_text("Audit week.\n")
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(context)], check=True)
    os.chmod(context / "skills" / "secret" / "SKILL.md", 0)
    os.chmod(context / "situation.md", 0)
    code, out, err = cli_as("ask", "use $secret", cwd=ws)
    assert code == 0 and out.startswith("Done."), err
    if person.uid == 0:  # root reads everything: both are used
        assert "note:" not in err
    else:
        assert "note: the situation was not used: situation.md cannot be read" in err
        assert "note: skill secret not used: SKILL.md cannot be read" in err


def test_a_turn_that_read_styles_replays_offline(run_cli: Any, ws: Path, tmp_path: Path) -> None:
    """The tools a turn offered depend on its formats: a replay finds the same set."""
    from conftest import as_json, ok

    (ws / "report.docx").write_bytes(docx_bytes())
    ok(run_cli("init", cwd=ws))
    (tmp_path / "shop.yaml").write_text(
        "- tool_calls: [{name: docx_get_styles, arguments: {path: report.docx}}]\n"
        '- tool_calls: [{name: write_file, arguments: {path: notes.txt, content: "ok\\n"}}]\n'
        "- text: Noted the styles.\n"
    )
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write(
            f'\n[providers.shop]\nadapter = "scripted"\nscript = "{tmp_path / "shop.yaml"}"\n'
            '[model]\ndefault = "shop"\n'
        )
    ok(run_cli("ask", "note the report's styles", cwd=ws))
    base = as_json(run_cli("draft", "status", "--json", cwd=ws))["base_event_id"]
    steps = as_json(run_cli("history", "--json", "--action", "draft_revision", cwd=ws))
    tip = (steps["events"] if isinstance(steps, dict) else steps)[0]["id"]
    report = as_json(run_cli("replay", f"{base}..{tip}", "--json", cwd=ws))
    assert report["ok"] is True and report["first_divergence"] is None


@given(st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_any_skill_md_is_parsed_or_refused_with_skill_invalid(text: str) -> None:
    for candidate in (text, f"---\n{text}\n---\nbody", f"---\nname: a\ndescription: {text}\n---\n"):
        try:
            name, description, _ = parse_skill(candidate)
        except SkillInvalid as exc:
            assert str(exc)
        else:
            assert name and description.strip()


def test_formats_are_read_as_words_and_a_general_heading_applies_to_every_format(
    tmp_path: Path,
) -> None:
    from strata.workshop.context import build_manifest
    from strata.workshop.skills import Skill, bundled_style, formats_of, merge_style

    empty = build_manifest(tmp_path)
    assert formats_of(empty, "a representation of the words") == []
    assert formats_of(empty, "put it in a Word document and some slides") == ["docx", "pptx"]
    assert formats_of(empty, "an Excel workbook") == ["xlsx"]
    house = Skill(
        "document-style",
        "The house style",
        "# Document Style\nUse Inter.\n\n## Spreadsheets\nNo fills.\n\n## Slides\nNavy titles.",
    )
    merged = merge_style(bundled_style("xlsx"), house, "xlsx")
    assert "Use Inter." in merged and "No fills." in merged and "Navy titles." not in merged
