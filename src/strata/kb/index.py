"""The knowledge base's SQLite file: files, chunks, and their FTS5 (BM25) index.

One file per indexed target (``published.db``, ``draft.db`` under the
repository's ``kb/`` folder). It is a cache: everything in it is rebuilt from
the stored snapshot it names, so deleting it loses nothing. Tables::

    meta(key, value)          format, snapshot_id, event_id, tree, target, dense...
    files(path, oid, kind, size, status, reason, chunks)   the indexed snapshot's files
    chunks(id, path, start_line, end_line, page, heading, text)
    chunks_fts                FTS5 over (path, heading, text, every), external content: chunks

A file whose content hash is unchanged keeps its chunks (and their rowids);
a changed one has its chunks replaced (chunk ids are never reused, so the
vectors of dense retrieval, kept beside in ``<name>.vec.db``, stay keyed
right). An update is one SQLite transaction, so an interrupted index leaves
the previous one whole.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from strata.errors import KbError
from strata.kb.chunk import Chunk

FORMAT = "1"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
    path TEXT PRIMARY KEY,
    oid TEXT NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    page INTEGER,
    heading TEXT NOT NULL,
    text TEXT NOT NULL,
    every TEXT NOT NULL DEFAULT 'kbany'
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    path, heading, text, every,
    content='chunks', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, path, heading, text, every)
    VALUES (new.id, new.path, new.heading, new.text, new.every);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, path, heading, text, every)
    VALUES ('delete', old.id, old.path, old.heading, old.text, old.every);
END;
"""

#: BM25 weights of the FTS columns: path, heading, text, and ``every`` (one token,
#: ``kbany``, in every chunk: it lets a query match "any chunk" at no score)
WEIGHTS = (2.0, 3.0, 1.0, 0.0)
#: a term in more than this share of the chunks is "common" (see :meth:`KbIndex.bm25`)
COMMON_SHARE = 0.05

#: words left out of a BM25 query (they match nearly every passage)
STOPWORDS = frozenset(
    """
    a an and are as at be but by can could did do does for from had has have how i if in
    into is it its me my of on or our should so than that the their them then there these
    they this to was we were what when where which who why will with would you your
    """.split()  # noqa: SIM905
)

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Row:
    """A chunk as stored, with its score (higher is better)."""

    id: int
    path: str
    start_line: int
    end_line: int
    page: int | None
    heading: str
    text: str
    score: float


@dataclass(frozen=True, slots=True)
class FileRow:
    """What the index holds of one file."""

    path: str
    oid: str
    kind: str
    size: int
    status: str  # "indexed" or "skipped"
    reason: str | None
    chunks: int


def query_words(query: str) -> list[str]:
    """The words of a free-text query, lower-cased, once each, English stop words left out.

    Raises :class:`KbError` for a query with no word in it.
    """
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS] or words
    if not kept:
        raise KbError(
            f"the query {query!r} has no words to search for",
            hint='e.g. strata kb search "install"',
        )
    return list(dict.fromkeys(kept))


def match_expression(query: str) -> str:
    """The FTS5 expression of a free-text query: its words, OR-ed (see :func:`query_words`)."""
    return _any(query_words(query))


def _any(words: list[str]) -> str:
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)


class KbIndex:
    """An open index file (see the module doc)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self._vocab = False  # the temporary tables of _split, made on first use
        if not create and not path.exists():
            raise FileNotFoundError(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        if new:  # WAL is a property of the file: readers never wait for an indexer
            self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        try:
            found = self._meta_raw("format")
        except sqlite3.OperationalError:
            found = None
        if found is not None and found != FORMAT:
            self.db.close()
            raise KbError(
                f"the knowledge base {path} has format {found}; this Strata reads {FORMAT}",
                hint=f"delete {path} and run 'strata kb index' again",
            )
        if found is None:
            self.db.executescript(
                "BEGIN IMMEDIATE;"
                + SCHEMA
                + f"INSERT OR REPLACE INTO meta VALUES ('format', '{FORMAT}');"
                "COMMIT;"
            )

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    def _meta_raw(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta(self, key: str) -> str | None:
        """A value of the ``meta`` table (None: not set)."""
        return self._meta_raw(key)

    def set_meta(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) a ``meta`` value."""
        if value is None:
            self.db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction (taken at once: a second indexer waits)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- files and chunks ----------------------------------------------------------------

    def files(self) -> dict[str, FileRow]:
        """Every file of the index, by path."""
        return {
            r[0]: FileRow(*r)
            for r in self.db.execute(
                "SELECT path, oid, kind, size, status, reason, chunks FROM files"
            )
        }

    def chunk_ids(self, path: str) -> list[int]:
        """The rowids of a file's chunks, in order."""
        return [
            r[0]
            for r in self.db.execute("SELECT id FROM chunks WHERE path = ? ORDER BY id", (path,))
        ]

    def remove(self, path: str) -> list[int]:
        """Forget a file and its chunks; return the removed chunks' ids."""
        ids = self.chunk_ids(path)
        self.db.execute("DELETE FROM chunks WHERE path = ?", (path,))
        self.db.execute("DELETE FROM files WHERE path = ?", (path,))
        return ids

    def put(
        self,
        path: str,
        *,
        oid: str,
        kind: str,
        size: int,
        chunks: list[Chunk],
        reason: str | None = None,
    ) -> list[int]:
        """Record a file (replacing what was there) and its chunks; return the new chunk ids."""
        self.remove(path)
        self.db.execute(
            "INSERT INTO files(path, oid, kind, size, status, reason, chunks) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (path, oid, kind, size, "skipped" if reason else "indexed", reason, len(chunks)),
        )
        ids: list[int] = []
        for c in chunks:
            cursor = self.db.execute(
                "INSERT INTO chunks(path, start_line, end_line, page, heading, text) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (path, c.start_line, c.end_line, c.page, c.heading, c.text),
            )
            ids.append(int(cursor.lastrowid or 0))
        return ids

    def optimize(self) -> None:
        """Merge the FTS5 index's segments into one (after a bulk load: faster queries)."""
        self.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")

    def count_chunks(self) -> int:
        """How many chunks the index holds."""
        return int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def rows(self, ids: Iterable[int]) -> dict[int, Row]:
        """The chunks of ``ids`` (score 0), by id."""
        out: dict[int, Row] = {}
        for chunk_id in ids:
            r = self.db.execute(
                "SELECT id, path, start_line, end_line, page, heading, text FROM chunks "
                "WHERE id = ?",
                (chunk_id,),
            ).fetchone()
            if r is not None:
                out[int(r[0])] = Row(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], 0.0)
        return out

    # -- BM25 -----------------------------------------------------------------------------

    def bm25(self, query: str, k: int) -> list[Row]:
        """The ``k`` best chunks for ``query`` by BM25 (score: minus FTS5's bm25, higher better).

        FTS5 scores every chunk an OR query matches, and a common word matches
        most of them. So, as Lucene's common-terms query does, when the query
        has both rare and common words (in more than :data:`COMMON_SHARE` of
        the chunks), only the chunks with a rare word are candidates: the
        expression is ``(rare...) AND (common... OR every:kbany)``, which adds
        the common words' scores to those candidates without scoring the
        chunks that have only common words. When that finds fewer than ``k``
        chunks, the plain OR query runs.
        """
        words = query_words(query)
        rare, common = self._split(words)
        if rare and common:
            rows = self._bm25(f"({_any(rare)}) AND ({_any(common)} OR every:kbany)", k)
            if len(rows) >= k:
                return rows
        return self._bm25(_any(words), k)

    def _bm25(self, expression: str, k: int) -> list[Row]:
        weights = ", ".join(str(w) for w in WEIGHTS)
        # the best k by rowid and score first: only they are joined with their text
        sql = (
            "SELECT c.id, c.path, c.start_line, c.end_line, c.page, c.heading, c.text, -r.score "
            f"FROM (SELECT rowid, bm25(chunks_fts, {weights}) AS score FROM chunks_fts "
            "WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?) AS r "
            "JOIN chunks c ON c.id = r.rowid ORDER BY r.score, c.id"
        )
        return [Row(*r) for r in self.db.execute(sql, (expression, k))]

    def _split(self, words: list[str]) -> tuple[list[str], list[str]]:
        """The query's words in two lists: rare and common (by their stem's chunk count)."""
        if len(words) < 2:
            return words, []
        if not self._vocab:
            self.db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_query "
                "USING fts5(word, tokenize='porter unicode61')"
            )
            self.db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_query_terms "
                "USING fts5vocab('temp', 'kb_query', 'instance')"
            )
            self.db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_terms "
                "USING fts5vocab('main', 'chunks_fts', 'row')"
            )
            self._vocab = True
        total = int(self.meta("chunks") or 0)
        self.db.executemany(
            "INSERT INTO temp.kb_query(rowid, word) VALUES (?, ?)", enumerate(words, start=1)
        )
        stems = dict(self.db.execute("SELECT doc, term FROM temp.kb_query_terms"))
        self.db.execute("DELETE FROM temp.kb_query")
        rare: list[str] = []
        common: list[str] = []
        for n, word in enumerate(words, start=1):
            found = self.db.execute(
                "SELECT doc FROM temp.kb_terms WHERE term = ?", (stems.get(n, word),)
            ).fetchone()
            count = int(found[0]) if found else 0
            (common if count > COMMON_SHARE * total else rare).append(word)
        return rare, common

    def chunk_id_set(self) -> set[int]:
        """The ids of every chunk."""
        return {int(r[0]) for r in self.db.execute("SELECT id FROM chunks")}

    def texts(self, ids: Iterable[int]) -> list[tuple[int, str, str]]:
        """(id, heading, text) of the chunks of ``ids``, in id order."""
        wanted = set(ids)
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self.db.execute("SELECT id, heading, text FROM chunks ORDER BY id")
            if int(r[0]) in wanted
        ]


def _scored(row: Row, score: float) -> Row:
    return Row(
        row.id, row.path, row.start_line, row.end_line, row.page, row.heading, row.text, score
    )


def scored(row: Row, score: float) -> Row:
    """``row`` with another score."""
    return _scored(row, score)
