"""The knowledge base's SQLite file: files, chunks, and their FTS5 (BM25) index.

One file per indexed target (``published.db``, ``draft.db`` under the
repository's ``kb/`` folder). It is a cache: everything in it is rebuilt from
the stored snapshot it names, so deleting it loses nothing. Tables::

    meta(key, value)          format, snapshot_id, event_id, tree, target, dense...
    files(path, oid, kind, size, status, reason, chunks)   the indexed snapshot's files
    chunks(id, path, start_line, end_line, page, heading, text)
    chunks_fts                FTS5 over (path, heading, text), external content: chunks

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
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    path, heading, text, content='chunks', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, path, heading, text)
    VALUES (new.id, new.path, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, path, heading, text)
    VALUES ('delete', old.id, old.path, old.heading, old.text);
END;
"""

#: BM25 weights of the FTS columns: path, heading, text
WEIGHTS = (2.0, 3.0, 1.0)

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


def match_expression(query: str) -> str:
    """The FTS5 expression of a free-text query: its words, OR-ed (stop words left out).

    Raises :class:`KbError` for a query with no word in it.
    """
    words = [w.lower() for w in _WORD.findall(query)]
    kept = [w for w in words if w not in STOPWORDS] or words
    if not kept:
        raise KbError(
            f"the query {query!r} has no words to search for",
            hint='e.g. strata kb search "install"',
        )
    unique = list(dict.fromkeys(kept))
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in unique)


class KbIndex:
    """An open index file (see the module doc)."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        if not create and not path.exists():
            raise FileNotFoundError(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
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
        """The ``k`` best chunks for ``query`` by BM25 (score: minus FTS5's bm25, higher better)."""
        expression = match_expression(query)
        sql = (
            "SELECT c.id, c.path, c.start_line, c.end_line, c.page, c.heading, c.text, "
            f"-bm25(chunks_fts, {WEIGHTS[0]}, {WEIGHTS[1]}, {WEIGHTS[2]}) AS score "
            "FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid "
            "WHERE chunks_fts MATCH ? ORDER BY bm25(chunks_fts, "
            f"{WEIGHTS[0]}, {WEIGHTS[1]}, {WEIGHTS[2]}) LIMIT ?"
        )
        return [Row(*r) for r in self.db.execute(sql, (expression, k))]

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
