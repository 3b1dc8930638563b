"""Binary files: sizes, hashes, ``bytes_changed``; images: dimensions and likeness.

``bytes_changed`` is the length of the differing middle once the common
prefix and suffix are set aside (the larger of the two sides' middles): one
byte flipped is 1, a rewritten file is its size. An image Pillow can open is
also compared by a difference hash (dHash, 64 bits: each pixel of a 9x8
grey thumbnail brighter than its right neighbour or not); the Hamming
distance between the two hashes says how alike the two look.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import blake3

from strata.semantic.base import Block, HandlerResult

__all__ = ["BinaryHandler", "bytes_changed", "image_info"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ico")
_CHUNK = 1 << 16


def _prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i : i + _CHUNK] == b[i : i + _CHUNK]:
        i += _CHUNK
    end = min(i + _CHUNK, n)
    while i < end and a[i] == b[i]:
        i += 1
    return min(i, n)


def bytes_changed(a: bytes, b: bytes) -> int:
    """How many bytes differ between ``a`` and ``b`` (the changed middle's length)."""
    if a == b:
        return 0
    head = _prefix(a, b)
    ra, rb = a[head:][::-1], b[head:][::-1]
    tail = _prefix(ra, rb)
    return max(len(a) - head - tail, len(b) - head - tail)


def _dhash(image: Any) -> int:
    from PIL import Image

    small = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    px = small.tobytes()  # mode L: one byte a pixel
    bits = 0
    for row in range(8):
        for col in range(8):
            bits = (bits << 1) | (px[row * 9 + col] > px[row * 9 + col + 1])
    return bits


def image_info(data: bytes) -> tuple[int, int, int] | None:
    """``(width, height, dhash)`` of an image Pillow can read, else ``None``."""
    try:
        from PIL import Image

        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if width * height > 50_000_000:
                    return None
                return width, height, _dhash(image)
    except Exception:  # not an image, a truncated one, a decompression bomb
        return None


def _size(n: int) -> str:
    return f"{n:,} byte{'' if n == 1 else 's'}"


class BinaryHandler:
    """The ``binary`` handler: every binary file, images with a likeness."""

    name = "binary"

    def handles(self, path: str) -> bool:
        """Image files by name; the registry sends any other binary content here too."""
        return path.lower().endswith(IMAGE_SUFFIXES)

    def diff(
        self, path: str, before: bytes | None, after: bytes | None, unified_patch: str
    ) -> HandlerResult:
        """Sizes, hashes and ``bytes_changed``; dimensions and likeness for images."""
        old, new = before or b"", after or b""
        changed = bytes_changed(old, new)
        impact: dict[str, Any] = {
            "path": path,
            "kind": "binary",
            "size_before": None if before is None else len(old),
            "size_after": None if after is None else len(new),
            "bytes_changed": changed,
            "hash_before": None if before is None else "blake3:" + blake3.blake3(old).hexdigest(),
            "hash_after": None if after is None else "blake3:" + blake3.blake3(new).hexdigest(),
        }
        verb = "added" if before is None else "deleted" if after is None else "replaced"
        words = [f"{verb} {path}"]
        if before is not None and after is not None:
            words.append(f"{_size(changed)} changed")
            if len(old) != len(new):
                words.append(f"{_size(len(old))} → {_size(len(new))}")
        else:
            words.append(_size(len(new or old)))
        a_img = image_info(old) if before is not None else None
        b_img = image_info(new) if after is not None else None
        if a_img or b_img:
            impact["kind"] = "image"
            if a_img:
                impact["dimensions_before"] = [a_img[0], a_img[1]]
            if b_img:
                impact["dimensions_after"] = [b_img[0], b_img[1]]
            if a_img and b_img:
                if a_img[:2] != b_img[:2]:
                    words.append(f"{a_img[0]}x{a_img[1]} → {b_img[0]}x{b_img[1]}")
                distance = bin(a_img[2] ^ b_img[2]).count("1")
                impact["phash_distance"] = distance
                words.append(f"looks {round(100 * (64 - distance) / 64)} % alike")
            else:
                img = a_img or b_img
                assert img is not None
                words.append(f"{img[0]}x{img[1]}")
        impact["summary"] = "; ".join(words)
        change = "added" if before is None else "removed" if after is None else "changed"
        block = Block(impact["kind"], f"{path}::", change, detail=impact["summary"])
        return HandlerResult(
            "binary", (block,), impact["summary"], handler=self.name, artifact_impacts=(impact,)
        )
