"""Start a scan's listing before the scan's modules are loaded (``strata._walk.prefetch``).

A ``strata snapshot`` or ``status`` that no watcher serves spends its first
tens of milliseconds loading modules on one core, then walks the workspace.
Where ``strata._walk`` is built, :func:`start` hands the folders the stat
cache's base file describes to it first: their listing and ``lstat`` calls
run on the other cores while the modules load, and the scan's walk takes the
results that still fit (same folder, same recorded names and ignored names).
The base file is only a hint: a folder it no longer describes as the scan's
cache does is listed by the scan as usual. What was read of it is handed to
the stat cache's own load (:func:`take_base`) while the file is unchanged.

Anything that writes to the workspace in this process before the scan (the
recovery of an interrupted command, say) drops the prefetch first
(:class:`strata.store.fsops.WorkspaceWriter`), so a scan never takes a
listing made before a write of its own process.
"""

from __future__ import annotations

import marshal
import mmap
import os

from strata._locate import find_repo

try:  # built by setup.py where a C compiler is found
    import strata._walk as _walk
except ImportError:  # pragma: no cover - depends on the build
    _walk = None  # type: ignore[assignment]

#: the commands whose first step is a walk of the whole workspace
COMMANDS = frozenset({"snapshot", "status"})
#: :data:`strata.store.ignore.IGNORE_FILES` (that module loads pathspec): a folder holding
#: one is read by the scan itself
_IGNORE_FILES = (".gitignore", ".strataignore")


#: (path, (device, inode, size, mtime), what marshal read) of the stat cache's base file
#: read by :func:`start`: the scan's own load takes it (:func:`take_base`) instead of
#: reading the file again
_base: tuple[str, tuple[int, ...], object] | None = None


def quick_ok(raw: object) -> bool:
    """Whether ``raw`` has the shape of a folder's quick record in the stat cache.

    (The stat cache's own check: it lives here, where nothing else is loaded.)
    """
    return (
        isinstance(raw, tuple)
        and len(raw) == 6
        and isinstance(raw[0], str)
        and isinstance(raw[1], str)
        and isinstance(raw[2], tuple)
        and (not raw[2] or all(isinstance(n, str) for n in raw[2]))
        and isinstance(raw[3], bytes)
        and isinstance(raw[4], str)
        and type(raw[5]) is int
    )


def take_base(path: str, key: tuple[int, ...]) -> object | None:
    """What :func:`start` read of the base file at ``path``, if the file is still ``key``."""
    global _base
    found, _base = _base, None
    if found is None or found[0] != path or found[1] != key:
        return None
    return found[2]


def start(argv: list[str]) -> None:
    """Start the walk ``argv``'s command will make; nothing when it makes none or cannot."""
    if _walk is None or not argv or argv[0] not in COMMANDS:
        return
    if os.environ.get("STRATA_NO_PREFETCH") == "1":
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2:
        return  # nothing would run beside the loading of modules: the scan walks as usual
    try:
        found = find_repo(os.getcwd())
        if found is None:
            return
        root, repo = found
        path = os.path.join(repo, "statcache")
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            st = os.fstat(f.fileno())
            body = marshal.loads(mapped)
    except (OSError, ValueError, EOFError, TypeError):
        return  # no cache yet, or not one this reads: the scan walks as usual
    global _base
    _base = (path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), body)
    quick = body.get("quick") if type(body) is dict else None
    if type(quick) is not dict:
        return
    items: list[tuple[str, str, tuple[str, ...]]] = []
    for key, record in quick.items():
        if not (type(key) is str and quick_ok(record) and record[3]):
            continue  # not a record, or one without a digest: the scan lists that folder
        order = record[0]
        if _IGNORE_FILES[0] in order or _IGNORE_FILES[1] in order:
            continue
        items.append((f"{root}/{key}" if key else root, order, record[2]))
    if items:
        _walk.prefetch(items, cores - 1)  # this thread goes on loading modules
