"""The knowledge base of a workspace: index a snapshot's files, search them, answer from them.

:class:`KnowledgeBase` indexes the files of one stored snapshot (HEAD after
recording the working tree, a ref, or the Draft's newest revision) into an
index file under the repository's ``kb/`` folder (:mod:`strata.kb.index`).
Files are read from the object store by content hash, so re-indexing another
snapshot reads only the files whose hash differs from the indexed one's; a
rewind, a branch or a Draft gets an index of exactly its files.

Every hit is a citation: path, line span, snapshot id, score and the
passage. :meth:`KnowledgeBase.ask` answers from the retrieved passages only,
through a model provider whose call is recorded as a trace linked from a
``kb_ask`` event; with no provider it returns the passages.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.errors import KbError, KbNotIndexed, ObjectMissing, UsageError
from strata.kb.chunk import chunk
from strata.kb.extract import Unreadable, extract, kind_of
from strata.kb.index import KbIndex, Row, scored
from strata.ledger.events import Author, EventType
from strata.store.tree import walk_tree

if TYPE_CHECKING:
    from strata.core import Core
    from strata.kb.dense import Embedder, VectorStore
    from strata.providers.base import Provider

#: files larger than this are skipped (``[kb] max_file_bytes`` in config.toml changes it)
DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
MODES = ("bm25", "dense", "hybrid")
#: an update of more files than this merges the FTS5 index's segments afterwards
BULK_FILES = 500
#: reciprocal rank fusion's constant (Cormack et al. 2009)
RRF_K = 60
#: the targets an index can be of, and their files
TARGETS = {"published": "published.db", "draft": "draft.db"}

SYSTEM_PROMPT = (
    "You answer questions about a workspace using ONLY the numbered passages given. "
    "Cite the passages you use as [1], [2]... If the passages do not contain the answer, "
    "say that they do not; never answer from outside knowledge."
)


@dataclass(frozen=True)
class Skipped:
    """A file the index could not read, and why."""

    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        """As JSON."""
        return {"path": self.path, "reason": self.reason}


@dataclass
class IndexReport:
    """What one ``kb index`` did."""

    target: str
    snapshot_id: str
    event_id: str | None
    files: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    #: files of kinds the knowledge base does not read (images, archives...)
    ignored: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    chunks: int = 0
    dense: bool = False
    embedded: int = 0
    duration_ms: int = 0
    #: the working tree was recorded first (a new snapshot event)
    recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata kb index --json`` prints."""
        return {
            "target": self.target,
            "snapshot_id": self.snapshot_id,
            "event_id": self.event_id,
            "recorded": self.recorded,
            "files": self.files,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "ignored": self.ignored,
            "skipped": [s.to_json() for s in self.skipped],
            "chunks": self.chunks,
            "dense": self.dense,
            "embedded": self.embedded,
            "duration_ms": self.duration_ms,
        }


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and its citation."""

    path: str
    start_line: int
    end_line: int
    snapshot_id: str
    score: float
    text: str
    heading: str = ""
    page: int | None = None
    chunk_id: int = 0

    @property
    def citation(self) -> str:
        """``path:start-end@snapshot`` (``p.N`` added for a PDF page)."""
        page = f" p.{self.page}" if self.page is not None else ""
        return f"{self.path}:{self.start_line}-{self.end_line}{page}@{self.snapshot_id[:12]}"

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "page": self.page,
            "snapshot_id": self.snapshot_id,
            "score": round(self.score, 6),
            "heading": self.heading,
            "text": self.text,
            "citation": self.citation,
        }


@dataclass
class SearchResult:
    """The hits of one query."""

    query: str
    mode: str
    target: str
    snapshot_id: str
    event_id: str | None
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata kb search --json`` prints."""
        return {
            "query": self.query,
            "mode": self.mode,
            "target": self.target,
            "snapshot_id": self.snapshot_id,
            "event_id": self.event_id,
            "hits": [h.to_json() for h in self.hits],
            "warnings": self.warnings,
        }


@dataclass
class AskResult:
    """An answer from retrieved passages (None without a provider) and its citations."""

    question: str
    search: SearchResult
    answer: str | None = None
    provider: str | None = None
    model: str | None = None
    #: the ``kb_ask`` event that links the model call's trace (None without a provider)
    event_id: str | None = None
    traces: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The shape ``strata kb ask --json`` prints."""
        return {
            "question": self.question,
            "answer": self.answer,
            "provider": self.provider,
            "model": self.model,
            "event_id": self.event_id,
            "traces": list(self.traces),
            "snapshot_id": self.search.snapshot_id,
            "citations": [h.to_json() for h in self.search.hits],
            "warnings": self.search.warnings,
        }


class KnowledgeBase:
    """The knowledge base of one repository (``Repository.kb``).

    ``max_file_bytes``: files larger are skipped with a warning (default: the
    ``[kb] max_file_bytes`` setting of config.toml, else 16 MiB).
    ``embedder``: the model for dense retrieval (default: the packaged one,
    loaded when first needed).
    """

    def __init__(
        self,
        core: Core,
        *,
        max_file_bytes: int | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.core = core
        self.folder = core.layout.repo / "kb"
        self.max_file_bytes = (
            max_file_bytes if max_file_bytes is not None else configured_max_bytes(core)
        )
        self._embedder = embedder
        #: index files open for searching, by (draft, thread)
        self._readers: dict[tuple[bool, int], KbIndex] = {}

    # -- where -------------------------------------------------------------------------

    def path(self, *, draft: bool = False) -> Path:
        """The index file of Published (and refs) or of the Draft."""
        return self.folder / TARGETS["draft" if draft else "published"]

    def embedder(self) -> Embedder:
        """The embedding model (loaded on first use)."""
        if self._embedder is None:
            from strata.kb.dense import load_embedder

            self._embedder = load_embedder()
        return self._embedder

    # -- indexing -------------------------------------------------------------------------

    def index(
        self,
        *,
        ref: str | None = None,
        draft: bool = False,
        record: bool = True,
        dense: bool | None = None,
        author: Author | None = None,
    ) -> IndexReport:
        """Bring the index up to a snapshot's files; re-read only files whose hash changed.

        Which snapshot: ``ref`` (as ``strata diff`` takes one), else the open
        Draft's newest revision with ``draft``, else HEAD after recording the
        working tree (``record``; an unchanged tree records nothing). ``dense``
        turns vector embeddings on (True) or off (False) for this and later
        runs (None: as before).
        """
        if ref is not None and draft:
            raise UsageError("give a ref or --draft, not both")
        started = time.monotonic()
        target, tree, snapshot_id, event_id, recorded = self._target(
            ref=ref, draft=draft, record=record, author=author
        )
        idx = KbIndex(self.path(draft=draft))
        try:
            report = IndexReport(target, snapshot_id, event_id, recorded=recorded)
            self._update(idx, tree, report)
            was_dense = idx.meta("dense") == "on"
            use_dense = was_dense if dense is None else dense
            if use_dense:
                report.embedded = self._embed(idx, draft=draft)
            elif was_dense:
                self.vectors_path(draft=draft).unlink(missing_ok=True)
            with idx.write():
                idx.set_meta("dense", "on" if use_dense else None)
            report.dense = use_dense
            report.chunks = idx.count_chunks()
        finally:
            idx.close()
        report.duration_ms = int((time.monotonic() - started) * 1000)
        return report

    def _target(
        self, *, ref: str | None, draft: bool, record: bool, author: Author | None
    ) -> tuple[str, str, str, str | None, bool]:
        """(target name, tree, snapshot id, event id, recorded) of what to index."""
        core = self.core
        recorded = False
        if draft:
            from strata.workbench.draft import current_draft

            point = core.point(current_draft(core).tip())
            target = "draft"
        elif ref is not None:
            point = core.resolve(ref)
            target = ref
        else:
            if record:
                with core.transaction(EventType.SNAPSHOT, author) as tx:
                    result, _ = tx.snapshot("recorded for kb index", author=author)
                recorded = result.event is not None
            head = core.head()
            if head is None:
                raise KbError(
                    "nothing is recorded yet: there is no snapshot to index",
                    hint="run 'strata kb index' without --no-record, or 'strata snapshot' first",
                )
            point = core.point(head)
            target = "HEAD"
        if point.snapshot_id is None:
            raise KbError(f"{ref or target} names files, not a recorded snapshot")
        return (
            target,
            point.tree,
            str(point.snapshot_id),
            point.event.id if point.event else None,
            recorded,
        )

    def _update(self, idx: KbIndex, tree: str, report: IndexReport) -> None:
        from strata.ids import ObjectId

        old = idx.files()
        cap = self.max_file_bytes
        cap_changed = idx.meta("max_file_bytes") not in (None, str(cap))
        wanted: dict[str, tuple[str, str, int]] = {}
        for path, entry in walk_tree(self.core.objects, ObjectId(tree)):
            if entry.kind != "file":
                continue
            kind = kind_of(path)
            if kind is None:
                report.ignored += 1
                continue
            wanted[path] = (kind, entry.oid, entry.size)
        with idx.write():
            for path in old.keys() - wanted.keys():
                idx.remove(path)
                report.removed += 1
            for path, (kind, oid, size) in sorted(wanted.items()):
                prev = old.get(path)
                if prev is not None and prev.oid == oid:
                    too_big = (prev.reason or "").startswith("larger than")
                    if not (cap_changed and (too_big or size > cap)):
                        report.unchanged += 1
                        continue
                if prev is None:
                    report.added += 1
                else:
                    report.changed += 1
                reason: str | None = None
                chunks = []
                if size > cap:
                    reason = f"larger than the {cap}-byte limit ({size} bytes)"
                else:
                    try:
                        chunks = chunk(extract(kind, self.core.objects.get(ObjectId(oid))))
                    except Unreadable as exc:
                        reason = exc.reason
                    except ObjectMissing:
                        reason = "its content is not in the store (removed by gc)"
                idx.put(path, oid=oid, kind=kind, size=size, chunks=chunks, reason=reason)
            if report.added + report.changed + report.removed > BULK_FILES:
                idx.optimize()  # a bulk load leaves many segments: merge them for queries
            idx.set_meta("chunks", str(idx.count_chunks()))
            idx.set_meta("snapshot_id", report.snapshot_id)
            idx.set_meta("event_id", report.event_id)
            idx.set_meta("tree", tree)
            idx.set_meta("target", report.target)
            idx.set_meta("max_file_bytes", str(cap))
        files = idx.files()
        report.files = sum(1 for f in files.values() if f.status == "indexed")
        report.skipped = [
            Skipped(f.path, f.reason or "")
            for f in sorted(files.values(), key=lambda f: f.path)
            if f.status == "skipped"
        ]

    def vectors_path(self, *, draft: bool = False) -> Path:
        """The file of the dense vectors beside the index file."""
        return self.path(draft=draft).with_suffix(".vec.db")

    def _vectors(self, *, draft: bool) -> VectorStore:
        from strata.kb.dense import VectorStore

        embedder = self.embedder()
        return VectorStore(self.vectors_path(draft=draft), dim=embedder.dim, model=embedder.name)

    def _embed(self, idx: KbIndex, *, draft: bool) -> int:
        embedder = self.embedder()
        store = self._vectors(draft=draft)

        def embed(ids: list[int]) -> list[bytes]:
            return embedder.passages([f"{h}\n{t}" for _, h, t in idx.texts(ids)])

        try:
            return store.sync(idx.chunk_id_set(), embed)
        finally:
            store.close()

    # -- searching ------------------------------------------------------------------------

    def search(
        self, query: str, *, mode: str = "bm25", k: int = 5, draft: bool = False
    ) -> SearchResult:
        """The ``k`` passages that best match ``query``, each with its citation.

        ``mode``: ``bm25`` (keywords, FTS5), ``dense`` (embeddings; the index
        must have been made with ``dense=True``) or ``hybrid`` (both, fused by
        reciprocal rank).
        """
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if k < 1:
            raise UsageError("-k must be at least 1")
        if not query.strip():
            raise UsageError("the query is empty")
        idx = self._reader(draft=draft)
        snapshot_id = idx.meta("snapshot_id") or ""
        if mode == "bm25":
            rows = idx.bm25(query, k)
        else:
            if idx.meta("dense") != "on":
                raise KbNotIndexed(
                    "the knowledge base's dense retrieval (its vectors)",
                    hint="run 'strata kb index --dense' (needs the kb-dense extra)",
                )
            vector = self.embedder().queries([query])[0]
            store = self._vectors(draft=draft)
            try:
                depth = k if mode == "dense" else max(4 * k, 20)
                near = store.nearest(vector, depth)
            finally:
                store.close()
            found = idx.rows(i for i, _ in near)
            dense_rows = [scored(found[i], s) for i, s in near if i in found]
            if mode == "dense":
                rows = dense_rows
            else:
                rows = fuse([_safe_bm25(idx, query, depth), dense_rows], k)
        result = SearchResult(
            query,
            mode,
            idx.meta("target") or "",
            snapshot_id,
            idx.meta("event_id"),
            [_hit(r, snapshot_id) for r in rows],
        )
        result.warnings = self._staleness(result, draft=draft)
        return result

    def _reader(self, *, draft: bool) -> KbIndex:
        """The index file opened for searching, kept open for this thread's next search."""
        import threading

        key = (draft, threading.get_ident())
        idx = self._readers.get(key)
        if idx is None or not idx.path.exists():
            idx = self._readers[key] = self._open(draft=draft)
        return idx

    def close(self) -> None:
        """Close the index files kept open for searching (they close with the object too)."""
        readers = getattr(self, "_readers", {})
        for idx in readers.values():
            idx.close()
        readers.clear()

    def __del__(self) -> None:
        self.close()

    def _open(self, *, draft: bool) -> KbIndex:
        path = self.path(draft=draft)
        what = "the Draft's knowledge base" if draft else "the knowledge base"
        if not path.exists():
            raise KbNotIndexed(what, hint="run 'strata kb index" + (" --draft'" if draft else "'"))
        idx = KbIndex(path)
        if idx.meta("snapshot_id") is None:
            idx.close()
            raise KbNotIndexed(what)
        return idx

    def _staleness(self, result: SearchResult, *, draft: bool) -> list[str]:
        """A warning when the index is of another snapshot than HEAD (or the Draft's tip)."""
        try:
            if draft:
                from strata.workbench.draft import open_draft

                found = open_draft(self.core)
                current = found.tip() if found is not None else None
            else:
                if result.target != "HEAD" or self.core.view().head_event == result.event_id:
                    return []  # HEAD is still the event indexed: no need to read it
                current = self.core.head()
        except KbError:
            return []
        if current is None or current.snapshot_ref is None:
            return []
        if str(current.snapshot_ref) == result.snapshot_id:
            return []
        where = "the Draft's newest revision" if draft else "HEAD"
        again = "strata kb index --draft" if draft else "strata kb index"
        return [
            f"the index is of snapshot {result.snapshot_id[:12]}, {where} is at "
            f"{str(current.snapshot_ref)[:12]}: run '{again}' to bring it up to date"
        ]

    # -- answering -----------------------------------------------------------------------

    def ask(
        self,
        question: str,
        *,
        provider: Provider | None = None,
        k: int = 5,
        mode: str = "bm25",
        draft: bool = False,
        secrets: Sequence[str] = (),
        author: Author | None = None,
    ) -> AskResult:
        """Answer ``question`` from the ``k`` best passages only, citing them.

        With a ``provider``, its call is recorded (redacted) as a trace linked
        from a ``kb_ask`` event anchored at the indexed snapshot's event, so it
        replays offline; without one, the result holds the passages alone.
        """
        found = self.search(question, mode=mode, k=k, draft=draft)
        result = AskResult(question, found)
        if provider is None:
            return result
        from strata.providers.base import Message, Request, complete
        from strata.providers.trace import Recorder, RecordingProvider

        recorder = Recorder(put=self.core.objects.put, agent_id="kb", secrets=tuple(secrets))
        request = Request(
            model=provider.model,
            messages=(
                Message("system", SYSTEM_PROMPT),
                Message("user", ask_prompt(question, found.hits)),
            ),
        )
        response = complete(RecordingProvider(provider, recorder), request)
        result.answer = response.text
        result.provider, result.model = provider.name, provider.model
        result.traces = tuple(recorder.ids)
        author = author or Author("kb", "llm", provider.model or None)
        with self.core.transaction(EventType.KB_ASK, author) as tx:
            event = tx.annotate(
                EventType.KB_ASK,
                anchor=found.event_id,
                rationale=question[:200],
                author=author,
                data={
                    "kb": {
                        "question": question,
                        "mode": mode,
                        "snapshot_id": found.snapshot_id,
                        "provider": provider.name,
                        "model": provider.model,
                        "citations": [h.citation for h in found.hits],
                    }
                },
                artifacts=result.traces,
            )
        result.event_id = event.id
        return result


def ask_prompt(question: str, hits: Sequence[Hit]) -> str:
    """The user message of ``kb ask``: the question, then the numbered passages."""
    parts = [f"Question: {question}", "", "Passages:"]
    for n, hit in enumerate(hits, start=1):
        parts += ["", f"[{n}] {hit.citation}", hit.text]
    if not hits:
        parts += ["", "(no passage matched)"]
    return "\n".join(parts)


def fuse(rankings: Sequence[Sequence[Row]], k: int) -> list[Row]:
    """Reciprocal rank fusion: each list adds ``1 / (RRF_K + rank)`` to a chunk's score."""
    scores: dict[int, float] = {}
    rows: dict[int, Row] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row.id] = scores.get(row.id, 0.0) + 1.0 / (RRF_K + rank)
            rows.setdefault(row.id, row)
    best = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [scored(rows[i], scores[i]) for i in best]


def _safe_bm25(idx: KbIndex, query: str, k: int) -> list[Row]:
    try:
        return idx.bm25(query, k)
    except KbError:  # no word BM25 can use: the dense ranking alone
        return []


def _hit(row: Row, snapshot_id: str) -> Hit:
    return Hit(
        row.path,
        row.start_line,
        row.end_line,
        snapshot_id,
        row.score,
        row.text,
        row.heading,
        row.page,
        row.id,
    )


def configured_max_bytes(core: Core) -> int:
    """``[kb] max_file_bytes`` of config.toml (default :data:`DEFAULT_MAX_FILE_BYTES`)."""
    from strata.layout import bad_config, misspelt_problem

    if (near := misspelt_problem(core.config.raw, "kb")) is not None:
        raise bad_config(core.layout, near)
    table = core.config.raw.get("kb", {})
    value = table.get("max_file_bytes", DEFAULT_MAX_FILE_BYTES) if isinstance(table, dict) else None
    if type(value) is not int or value < 1:
        raise bad_config(core.layout, "kb.max_file_bytes is not a whole number of bytes above 0")
    return value
