"""The workspace digest (seed 003): the byte-stable scan, session > override > placeholder,
the key rule, the SESSION and GLOBAL scopes, optimize recorded and replayed offline."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata import Repository
from strata.digest import (
    PLACEHOLDER,
    TITLE,
    OverridesStore,
    Scope,
    SessionDigests,
    digest_context_item,
    normalize_key,
    scan_tree,
)
from strata.digest import scan as digest_scan
from strata.digest.optimize import EXPECTATIONS, GOAL, optimization_sections
from strata.errors import (
    DigestError,
    ProviderError,
    ProviderProtocolError,
    UsageError,
)
from strata.providers.scripted import Scripted
from strata.providers.trace import Trace

FILES: dict[str, str | bytes] = {
    "README.md": (
        "[![build](https://ci/badge.svg)](https://ci)\n\n# Demo Tool\n\n"
        "Demo Tool turns notes\ninto reports.\n\n## Install\n\npip install demo\n"
    ),
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "demo"\n'
        '[project.scripts]\ndemo = "demo.cli:main"\n\n[tool.pytest.ini_options]\n'
        'testpaths = ["tests"]\n\n[tool.ruff]\nline-length = 100\n'
    ),
    "setup.cfg": "[options.entry_points]\nconsole_scripts =\n    demo-legacy = demo.old:main\n",
    "package.json": json.dumps(
        {
            "name": "demo-web",
            "bin": {"demo-web": "bin/web.js"},
            "scripts": {"build": "tsc -p .", "test": "jest", "lint": "eslint ."},
        }
    ),
    "Makefile": ".PHONY: test\nVAR := 1\ntest: build\n\tpytest -q\nbuild:\n\tpython -m build\n",
    ".github/workflows/ci.yml": (
        "on: push\njobs:\n  tests:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: |\n          pip install -e .\n"
        "          pytest -q\n"
    ),
    ".gitlab-ci.yml": (
        "stages: [test]\nunit:\n  script:\n    - make test\n.hidden:\n  script: [x]\n"
    ),
    ".ci/run": "#!/bin/sh\nmake test\n",
    "src/demo/__init__.py": "",
    "src/demo/__main__.py": "from demo.cli import main\nmain()\n",
    "src/demo/cli.py": "def main():\n    pass\n",
    "tests/test_cli.py": "def test_x():\n    pass\n",
    "web/app.ts": "export {}\n",
    "docs/guide.md": "# Guide\n",
}


def _write(root: Path, files: dict[str, str | bytes], *, reverse: bool = False) -> Path:
    for path in sorted(files, reverse=reverse):
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        content = files[path]
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return root


@pytest.fixture
def demo(ws: Path, make_repo) -> Repository:
    _write(ws, FILES)
    return make_repo(ws)


def _scripted(*texts: str) -> Scripted:
    return Scripted([{"text": t} for t in texts], name="demo")


def _events(repo: Repository) -> list:
    return list(repo.history(limit=1000))


# -- the scan ------------------------------------------------------------------------------


def test_the_scan_reports_readme_commands_layout_languages_and_entry_points(demo):
    scan = demo.digest().scan()
    assert scan.readme == {
        "path": "README.md",
        "title": "Demo Tool",
        "summary": "Demo Tool turns notes into reports.",  # the badge line is skipped
    }
    commands = {(c.source, c.command, c.kind) for c in scan.commands}
    assert {
        ("pyproject.toml", "python -m build", "build"),
        ("pyproject.toml", "pytest", "test"),
        ("pyproject.toml", "ruff check .", "lint"),
        ("Makefile", "make test", "test"),
        ("Makefile", "make build", "build"),
        ("package.json", "npm test # jest", "test"),
        ("package.json", "npm run build # tsc -p .", "build"),
        ("package.json", "npm run lint # eslint .", "lint"),
        (".github/workflows/ci.yml", "pytest -q", "test"),
        (".github/workflows/ci.yml", "pip install -e .", "test"),  # a step of the tests job
        (".gitlab-ci.yml", "make test", "test"),
        (".ci/run", "./.ci/run", "run"),
    } <= commands
    assert not any(c.source == ".gitlab-ci.yml" and c.name == ".hidden" for c in scan.commands)
    assert not any(c.name in (".PHONY", "VAR") for c in scan.commands)
    entries = {(e.kind, e.name, e.target) for e in scan.entry_points}
    assert entries == {
        ("console_script", "demo", "demo.cli:main"),
        ("console_script", "demo-legacy", "demo.old:main"),
        ("bin", "demo-web", "bin/web.js"),
        ("main_module", "demo", "python -m demo"),
    }
    assert scan.layout == [
        (".ci", 1),
        (".github", 1),
        ("docs", 1),
        ("src", 3),
        ("tests", 1),
        ("web", 1),
    ]
    assert scan.files == 14 and scan.top_level_files == 6
    assert dict(scan.languages)["Python"] == 4 and dict(scan.languages)["TypeScript"] == 1
    assert scan.languages[0] == ("Python", 4)  # most files first
    # build commands come first, then tests, in the markdown the model reads
    text = scan.to_markdown()
    assert text.index("[build]") < text.index("[test]") < text.index("[lint]")


def test_the_same_snapshot_gives_the_same_bytes(demo):
    first = demo.digest().scan().to_bytes()
    assert demo.digest().scan().to_bytes() == first
    event = demo.snapshot("s").event
    assert event is not None
    assert scan_tree(demo.objects, demo.tree_of(event)).to_bytes() == first


def test_a_copy_elsewhere_written_in_another_order_scans_to_the_same_bytes(
    demo, tmp_path, make_repo
):
    other = _write(tmp_path / "elsewhere" / "deeper", FILES, reverse=True)
    copy = make_repo(other, seed=7)
    assert copy.digest().scan().to_bytes() == demo.digest().scan().to_bytes()
    # and a copy made with shutil (other inode order, other mtimes) too
    third = tmp_path / "third"
    shutil.copytree(demo.root, third, ignore=shutil.ignore_patterns(".strata"))
    assert make_repo(third, seed=9).digest().scan().to_bytes() == demo.digest().scan().to_bytes()


def test_ignored_files_are_never_read(ws, make_repo):
    _write(ws, {**FILES, ".gitignore": "Makefile\nREADME.md\n.ci/\n"})
    scan = make_repo(ws).digest().scan()
    assert scan.readme is None
    assert not any(c.source in ("Makefile", ".ci/run") for c in scan.commands)
    assert ".ci" not in dict(scan.layout)


def test_unreadable_configs_are_warnings_not_crashes(ws, make_repo, monkeypatch):
    monkeypatch.setattr(digest_scan, "READ_LIMIT", 1000)
    _write(
        ws,
        {
            "pyproject.toml": "[project\nname = ",
            "package.json": "[1, 2]",
            "setup.cfg": "key = a value outside any section\n",
            "Makefile": b"\x00\x01binary",
            ".gitlab-ci.yml": "a: [unclosed\n",
            "README.md": "# Big\n\n" + "x" * 2000,
        },
    )
    scan = make_repo(ws).digest().scan()
    assert scan.commands == [] and scan.readme is None
    assert scan.warnings == [
        ".gitlab-ci.yml: cannot be parsed (YAML error at line 2)",
        "Makefile: binary, not read",
        "README.md: larger than 0 KiB, not read",
        "package.json: cannot be parsed (not a JSON object)",
        "pyproject.toml: cannot be parsed (TOML error at line 1)",
        "setup.cfg: cannot be parsed (INI error)",
    ]
    assert "Not read:" in scan.to_markdown()


def test_readme_summaries_of_rst_and_long_paragraphs():
    rst = digest_scan.readme_summary(
        "README.rst", "=====\nTitle\n=====\n\n.. image:: x\n\nBody text.\n"
    )
    assert rst == {"path": "README.rst", "title": "Title", "summary": "Body text."}
    long = digest_scan.readme_summary("README.md", "# T\n\n" + "word " * 200)
    assert len(long["summary"]) == digest_scan.SUMMARY_LIMIT and long["summary"].endswith("…")
    fenced = digest_scan.readme_summary("README.md", "# T\n\n```\ncode\n```\n\nProse.\n")
    assert fenced["summary"] == "Prose."


# -- keys --------------------------------------------------------------------------------


def test_keys_are_normalised_trimmed_and_lower_cased():
    assert normalize_key("  Workspace-Digest ") == "workspace-digest"
    assert normalize_key("a") == "a" and normalize_key("0.x_y-z") == "0.x_y-z"
    assert normalize_key("a" * 64) == "a" * 64


@pytest.mark.parametrize("bad", ["", "-a", ".a", "a b", "a/b", "ä", "a" * 65, "a:b", "_x"])
def test_a_key_outside_the_rule_is_refused_with_the_rule(bad, demo):
    with pytest.raises(UsageError, match=r"\^\[a-z0-9\]\[a-z0-9\._-\]\{0,63\}\$"):
        demo.digest().set("text", key=bad)
    assert not (demo.layout.repo / "digest").exists()  # nothing half-written


# -- precedence: session > override > placeholder -----------------------------------------


def test_with_neither_source_the_placeholder_is_shown_with_a_warning(demo, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="strata.digest"):
        resolved = demo.digest(overrides=tmp_path / "store", tag="latest").show()
    assert resolved.source == "placeholder" and resolved.text == PLACEHOLDER
    assert PLACEHOLDER == (
        "No workspace digest is available yet. Before starting further tasks, explore the "
        "workspace: read the README and docs, note the layout, the build and test commands "
        "and the tooling defaults, then continue with what you learned."
    )
    assert resolved.warnings and "placeholder" in resolved.warnings[0]
    assert [r.getMessage() for r in caplog.records] == resolved.warnings


def test_an_override_is_used_exactly_as_stored_when_the_session_has_none(demo, tmp_path):
    curated = "Run ${tests} with {{runner}}; costs $$5.\n\n  indented\t tab  \n"
    demo.digest(overrides=tmp_path / "store").set(curated, scope=Scope.GLOBAL, tag="team")
    resolved = demo.digest(overrides=tmp_path / "store", tag="team").show()
    assert resolved.source == "override" and resolved.text == curated
    assert resolved.warnings == []


def test_a_session_digest_wins_over_an_override(demo, tmp_path):
    store = tmp_path / "store"
    demo.digest(overrides=store).set("curated", scope=Scope.GLOBAL, tag="team")
    demo.digest().set("fresh from the session")
    resolved = demo.digest(overrides=store, tag="team").show()
    assert (resolved.source, resolved.text) == ("session", "fresh from the session")


def test_clearing_the_session_falls_back_to_the_override(demo, tmp_path):
    store = tmp_path / "store"
    demo.digest(overrides=store).set("curated", scope=Scope.GLOBAL, tag="team")
    demo.digest().set("session one")
    assert demo.digest().clear() == 1
    assert demo.digest(overrides=store, tag="team").show().text == "curated"
    assert demo.digest().clear() == 0


def test_the_newest_session_digest_is_the_one_shown(demo):
    demo.digest().set("first")
    demo.digest().set("second")
    assert demo.digest().show().text == "second"
    assert [e.text for e in SessionDigests(demo.layout.repo).entries()] == ["first", "second"]


def test_an_override_of_another_tag_or_workspace_is_not_used(demo, ws, tmp_path, make_repo):
    store = tmp_path / "store"
    demo.digest(overrides=store).set("team's", scope=Scope.GLOBAL, tag="team")
    assert demo.digest(overrides=store, tag="other").show().source == "placeholder"
    other = make_repo(_write(tmp_path / "other", {"a.txt": "a"}))
    assert other.digest(overrides=store, tag="team").show().source == "placeholder"


def test_sessions_are_separate(demo):
    demo.digest(session="alpha").set("alpha's")
    assert demo.digest(session="beta").show().source == "placeholder"
    assert demo.digest(session="Alpha").show().text == "alpha's"  # names are keys too


# -- scopes and writes ---------------------------------------------------------------------


def test_the_session_scope_writes_only_the_repository_folder(demo, tmp_path):
    store = tmp_path / "store"
    path = demo.digest(overrides=store).set("text", scope=Scope.SESSION)
    assert path == demo.layout.repo / "digest" / "sessions" / "default.json"
    assert not store.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == ["default.json"]  # no temp file left
    raw = json.loads(path.read_bytes())
    assert raw["format"] == "strata-digest-session" and raw["entries"][0]["text"] == "text"


def test_the_global_scope_needs_a_store_and_a_tag(demo, tmp_path):
    with pytest.raises(UsageError, match="needs a tag"):
        demo.digest(overrides=tmp_path / "store").set("x", scope=Scope.GLOBAL)
    with pytest.raises(UsageError, match="needs an overrides store"):
        demo.digest().set("x", scope=Scope.GLOBAL, tag="team")
    with pytest.raises(UsageError, match="needs an overrides store and a tag"):
        demo.digest().clear(scope=Scope.GLOBAL)
    assert not (tmp_path / "store").exists()


def test_a_global_optimize_without_a_tag_fails_before_any_model_call(demo, tmp_path):
    (demo.root / "unrecorded.txt").write_text("work\n")
    provider = Scripted([], name="never")  # any call would be an error naming the script
    before = _events(demo)
    for overrides, tag in ((tmp_path / "store", None), (None, "team")):
        with pytest.raises(UsageError, match="the global scope needs"):
            demo.digest(overrides=overrides).optimize(provider, scope=Scope.GLOBAL, tag=tag)
    assert _events(demo) == before  # not even the auto-save ran
    assert not (demo.layout.repo / "digest").exists() and not (tmp_path / "store").exists()


def test_a_global_optimize_writes_the_session_and_the_override(demo, tmp_path):
    store = tmp_path / "store"
    result = demo.digest(overrides=store).optimize(
        _scripted("# Demo\n\nTests: `pytest`."), scope=Scope.GLOBAL, tag="team"
    )
    assert result.scope is Scope.GLOBAL and result.override_path is not None
    assert demo.digest().show().text == "# Demo\n\nTests: `pytest`."
    demo.digest().clear()
    override = demo.digest(overrides=store, tag="team").show()
    assert (override.source, override.text) == ("override", "# Demo\n\nTests: `pytest`.")


def test_a_session_optimize_writes_only_the_session(demo, tmp_path):
    store = tmp_path / "store"
    result = demo.digest(overrides=store).optimize(_scripted("digest"), scope=Scope.SESSION)
    assert result.override_path is None and not store.exists()
    entry = SessionDigests(demo.layout.repo).latest()
    assert entry is not None and (entry.text, entry.origin, entry.event_id) == (
        "digest",
        "optimize",
        result.event_id,
    )


def test_a_damaged_session_file_is_a_clear_error(demo):
    path = demo.layout.repo / "digest" / "sessions" / "default.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(DigestError, match=r"default\.json cannot be read"):
        demo.digest().show()
    path.write_text(json.dumps({"format": "strata-digest-session", "version": 99}))
    with pytest.raises(DigestError, match="format version 99"):
        demo.digest().show()


# -- optimize --------------------------------------------------------------------------


def test_optimize_sends_the_seed_prompt_and_records_the_call(demo):
    result = demo.digest().optimize(_scripted("the digest"), focus="the CLI")
    event = demo.event(result.event_id)
    assert event.action_type == "agent_step" and event.artifacts == result.traces
    assert event.anchor_event_id == result.anchor_event_id
    assert demo.event(result.anchor_event_id).action_type == "auto_save"  # the files recorded
    trace = Trace.decode(demo.objects.get(result.traces[0]), name="t")
    user = trace.request["messages"][1]["content"]
    titles = [line[3:] for line in user.splitlines() if line.startswith("## ")]
    assert titles == ["Workspace", TITLE, "Optimization Goal", "Expectations", "Focus Areas"]
    assert GOAL in user and EXPECTATIONS in user and "Section key: `workspace-digest`" in user
    assert "README (README.md): Demo Tool" in user and "make test" in user
    assert trace.response is not None and trace.response["text"] == "the digest"


def test_structured_output_is_read_from_the_section_key(demo):
    answer = '```json\n{"workspace-digest": "# From JSON", "other": 1}\n```'
    assert demo.digest().optimize(_scripted(answer)).digest == "# From JSON"
    plain = '{"unrelated": "x"}'
    assert demo.digest().optimize(_scripted(plain)).digest == plain  # no key: the text


def test_an_empty_answer_persists_nothing(demo):
    with pytest.raises(ProviderProtocolError, match="empty digest"):
        demo.digest().optimize(_scripted("   \n"))
    assert demo.digest().show().source == "placeholder"
    assert not any(e.action_type == "agent_step" for e in _events(demo))


def test_a_failing_provider_records_no_optimize_event(demo):
    with pytest.raises(ProviderError):
        demo.digest().optimize(Scripted([], name="empty"))
    assert not any(e.action_type == "agent_step" for e in _events(demo))


def test_optimize_replays_offline_and_a_changed_scan_is_a_divergence(demo, monkeypatch):
    base = demo.snapshot("base").event
    assert base is not None
    (demo.root / "NEWS.md").write_text("# News\n")
    result = demo.digest().optimize(_scripted("# Demo digest"))
    span = f"{base.id}..{result.anchor_event_id}"
    report = demo.replay(span)
    assert report.ok, report.divergence
    kinds = [(s.kind, s.status) for s in report.steps]
    assert kinds == [("recorded", "applied"), ("digest", "same")]
    assert report.steps[1].event_id == result.event_id
    dry = demo.replay(span, dry_run=True)
    assert [(s.kind, s.status) for s in dry.steps] == [
        ("recorded", "verified"),
        ("digest", "verified"),
    ]
    # a scanner that reads the files differently no longer reproduces the recorded prompt
    monkeypatch.setattr(digest_scan, "SUMMARY_LIMIT", 5)
    changed = demo.replay(span)
    assert changed.divergence is not None
    assert (changed.divergence.event_id, changed.divergence.kind) == (result.event_id, "digest")
    assert "scan" in changed.divergence.detail


def test_the_digest_is_a_context_item(demo, tmp_path):
    assert digest_context_item(demo) == (TITLE, PLACEHOLDER)
    assert digest_context_item(demo, placeholder=False) is None
    demo.digest(overrides=tmp_path / "s").set("curated", scope=Scope.GLOBAL, tag="t")
    assert digest_context_item(demo, overrides=tmp_path / "s", tag="t") == (TITLE, "curated")
    demo.digest().set("live")
    assert digest_context_item(demo, overrides=OverridesStore(tmp_path / "s"), tag="t") == (
        TITLE,
        "live",
    )
    assert optimization_sections(demo.digest().scan())[1][0] == TITLE


def test_concurrent_session_writes_lose_nothing(demo, ws, make_repo):
    import threading

    def writer(name: str) -> None:
        repo = Repository.open(ws)
        try:
            for i in range(10):
                repo.digest().set(f"{name} {i}", key=f"{name}-{i}")
        finally:
            repo.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = {e.key for e in SessionDigests(demo.layout.repo).entries()}
    assert keys == {f"{n}-{i}" for n in "abc" for i in range(10)}


def test_optimize_may_read_the_recorded_files_with_read_only_tools(demo):
    base = demo.snapshot("base").event
    assert base is not None
    (demo.root / "notes.txt").write_text("unrecorded until optimize auto-saves it\n")
    calls = [
        {"tool_calls": [{"name": "list_files", "arguments": {}}]},
        {
            "expect": "notes.txt",  # the listing is of the auto-saved tree
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "README.md"}},
                {"name": "read_file", "arguments": {"path": ".strata/config.toml"}},
                {"name": "read_file", "arguments": {"path": "../outside"}},
                {"name": "write_file", "arguments": {"path": "x", "content": "y"}},
            ],
        },
        {"expect": "unknown tool 'write_file'", "text": "# From the files"},
    ]
    before = sorted(p.name for p in demo.root.iterdir())
    result = demo.digest().optimize(Scripted(calls, name="demo"))
    assert result.digest == "# From the files"
    assert sorted(p.name for p in demo.root.iterdir()) == before  # nothing was written
    traces = [Trace.decode(demo.objects.get(t), name=t) for t in result.traces]
    assert [(t.event_type, t.tool) for t in traces] == [
        ("llm_call", "-"),
        ("tool_call", "list_files"),
        ("llm_call", "-"),
        ("tool_call", "read_file"),
        ("tool_call", "read_file"),
        ("tool_call", "read_file"),
        ("tool_call", "write_file"),
        ("llm_call", "-"),
    ]
    results = [t.response for t in traces if t.event_type == "tool_call"]
    assert "notes.txt" in results[0]["result"] and not results[0]["is_error"]
    assert results[1] == {"result": FILES["README.md"], "is_error": False}
    assert results[2]["is_error"] and ".strata or .git" in results[2]["result"]
    assert results[3]["is_error"] and results[4]["is_error"]
    # and the whole conversation replays offline
    report = demo.replay(f"{base.id}..{result.anchor_event_id}")
    assert report.ok, report.divergence
    assert [s.kind for s in report.steps][-1] == "digest"


class _Asked:
    """A provider's requests, kept as they are asked (the provider answers from its script)."""

    def __init__(self, inner: Scripted) -> None:
        self.inner = inner
        self.name, self.adapter, self.model = inner.name, inner.adapter, inner.model
        self.requests: list[Any] = []

    def stream(self, request, *, cancel=None):
        self.requests.append(request)
        return self.inner.stream(request, cancel=cancel)


def test_an_optimize_that_never_stops_asking_for_tools_persists_nothing(demo):
    # each call asks for a different file: no loop; the last call is asked for the digest,
    # without tools, and a model that still calls one gives none
    endless = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": f"file{n}.txt"}}]}
        for n in range(8)
    ]
    provider = _Asked(Scripted(endless, name="demo"))
    with pytest.raises(ProviderProtocolError, match="answered with a tool call when asked"):
        demo.digest().optimize(provider)
    assert [r.tool_choice for r in provider.requests] == ["auto"] * 7 + ["none"]
    assert demo.digest().show().source == "placeholder"
    assert not any(e.action_type == "agent_step" for e in _events(demo))


def test_an_optimize_that_repeats_one_tool_call_is_asked_for_the_digest(demo):
    """A small model listing the files again and again is warned, then asked for the digest."""
    same = {"tool_calls": [{"name": "list_files", "arguments": {}}]}
    provider = _Asked(Scripted([same, same, same, {"text": "# Listed"}], name="demo"))
    result = demo.digest().optimize(provider)
    assert result.digest == "# Listed"
    assert [r.tool_choice for r in provider.requests] == ["auto", "auto", "auto", "none"]
    assert "same arguments 3 times" in provider.requests[-1].messages[-1].content
    assert demo.digest().show().source == "session"
    # the call asked for the digest replays as it was recorded
    base = next(e for e in _events(demo) if e.action_type != "agent_step")
    report = demo.replay(f"{base.id}..{result.anchor_event_id}")
    assert report.ok, report.divergence


CONFIG_NAMES = (
    "README.md",
    "README.rst",
    "pyproject.toml",
    "setup.cfg",
    "package.json",
    "Makefile",
    ".gitlab-ci.yml",
    ".github/workflows/ci.yml",
    ".ci/run",
)
TEXTISH = st.one_of(
    st.binary(max_size=400),
    st.text(alphabet=st.sampled_from('[]{}":=#\n\t -abcxyz01\\${}'), max_size=400).map(str.encode),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(files=st.dictionaries(st.sampled_from(CONFIG_NAMES), TEXTISH, min_size=1))
def test_any_bytes_in_the_files_it_reads_never_crash_the_scan(ws, make_repo, files):
    repo = make_repo(ws) if not (ws / ".strata").exists() else Repository.open(ws)
    try:
        for name in CONFIG_NAMES:
            (ws / name).unlink(missing_ok=True)
        _write(ws, dict(files))
        first = repo.digest().scan()
        assert repo.digest().scan().to_bytes() == first.to_bytes()
        first.to_markdown()
    finally:
        repo.close()
