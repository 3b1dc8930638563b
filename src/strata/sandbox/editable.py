"""Editable installs that point into a workspace: why ``--sandbox none`` may run Published's code.

Run with ``--sandbox none``, a command works in the Draft's folder, but a
Python package installed *editable* from the workspace (``pip install -e .``)
is imported from where it was installed: the real workspace (Published), not
the Draft. The sandbox avoids this (it shows the Draft at the workspace's own
path); without it, Strata can only warn. :func:`editable_installs_in` finds
such installs in a Python environment's ``site-packages``: a
``*.dist-info/direct_url.json`` marked editable (PEP 610/660), a ``.pth`` file
listing a folder, or setuptools' ``__editable__`` finder mapping a package.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["editable_installs_in"]

_QUOTED_PATH = re.compile(r"""['"](/[^'"]+)['"]""")


def editable_installs_in(workspace: Path, *, prefixes: Iterable[Path]) -> list[tuple[str, Path]]:
    """(distribution name, source folder) of each editable install from ``workspace``.

    ``prefixes`` are Python environments (``sys.prefix``, a virtual
    environment's folder); their ``lib/python*/site-packages`` are read.
    Unreadable files are skipped. Found once per name, in a stable order.
    """
    root = Path(os.path.realpath(workspace))
    found: dict[str, Path] = {}
    for site in _site_folders(prefixes):
        for name, source in _editables(site):
            real = Path(os.path.realpath(source))
            if (real == root or root in real.parents) and name not in found:
                found[name] = real
    return sorted(found.items())


def _site_folders(prefixes: Iterable[Path]) -> list[Path]:
    folders: list[Path] = []
    for prefix in prefixes:
        lib = prefix / "lib"
        try:
            candidates = [lib / n / "site-packages" for n in sorted(os.listdir(lib))]
        except OSError:
            continue
        for folder in candidates:
            if folder.is_dir() and folder not in folders:
                folders.append(folder)
    return folders


def _editables(site: Path) -> Iterable[tuple[str, Path]]:
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return
    for name in names:
        path = site / name
        try:
            if name.endswith(".dist-info"):
                data = json.loads((path / "direct_url.json").read_text(encoding="utf-8"))
                url = urlsplit(str(data.get("url", "")))
                if data.get("dir_info", {}).get("editable") and url.scheme == "file":
                    yield _dist_name(name), Path(unquote(url.path))
            elif name.endswith(".pth"):
                for line in (path).read_text(encoding="utf-8", errors="replace").splitlines():
                    line = line.strip()
                    if line.startswith("/"):
                        yield _pth_name(name), Path(line)
            elif name.startswith("__editable__") and name.endswith(".py"):
                text = path.read_text(encoding="utf-8", errors="replace")
                for match in _QUOTED_PATH.finditer(text):
                    yield _pth_name(name), Path(match.group(1))
        except (OSError, ValueError, AttributeError):
            continue


def _dist_name(folder: str) -> str:
    """``my_pkg-1.0.dist-info`` -> ``my_pkg``."""
    return folder[: -len(".dist-info")].rsplit("-", 1)[0]


def _pth_name(file: str) -> str:
    """A name for an install known from a file: ``__editable___strata_0_1_finder.py`` -> strata."""
    stem = file.rsplit(".", 1)[0].lstrip("_")
    stem = stem.removeprefix("editable").lstrip("_.")
    stem = re.sub(r"_finder$", "", stem)
    return re.sub(r"(_\d+)+$", "", stem) or file
