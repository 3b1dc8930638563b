"""The Repository for asyncio: each call runs in a worker thread.

::

    async with AsyncRepository.open("project") as repo:
        await repo.snapshot("before the agent")
        for event in await repo.history(limit=5):
            print(event.id, event.rationale)

:class:`AsyncRepository` adds no behaviour: each method hands its arguments
to the :class:`~strata.repo.Repository` method of the same name through
:func:`asyncio.to_thread`, so the event loop never waits for the disk. A
Repository may be used from any thread (writes take turns, reads never wait
for them), so calls may overlap: ``asyncio.gather`` of two snapshots records
them one after the other. What has no async form here is on :attr:`repo`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from strata.repo import Repository

__all__ = ["AsyncRepository"]

P = ParamSpec("P")
T = TypeVar("T")


def _in_thread(
    method: Callable[Concatenate[Repository, P], T],
) -> Callable[Concatenate[AsyncRepository, P], Coroutine[Any, Any, T]]:
    """The async form of a Repository method: the same call, in a worker thread."""

    @functools.wraps(method)
    async def call(self: AsyncRepository, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self.repo, *args, **kwargs)

    return call


class AsyncRepository:
    """A :class:`~strata.repo.Repository` whose methods are coroutines.

    Make one with ``await AsyncRepository.open(path)`` (or ``init``), or
    around an open Repository; ``async with`` closes it at the end.
    """

    def __init__(self, repo: Repository) -> None:
        #: the wrapped Repository (for what has no async form: the Draft, checkpoints)
        self.repo = repo

    @classmethod
    def open(cls, path: Path | str, **kwargs: Any) -> Opening:
        """Open the repository of the workspace that contains ``path`` (see ``Repository.open``)."""
        return Opening(functools.partial(Repository.open, path, **kwargs))

    @classmethod
    def init(cls, path: Path | str, **kwargs: Any) -> Opening:
        """Create or reopen the repository of the workspace ``path`` (see ``Repository.init``)."""
        return Opening(functools.partial(Repository.init, path, **kwargs))

    async def aclose(self) -> None:
        """Close the repository (every thread's ledger connection, the object store)."""
        await asyncio.to_thread(self.repo.close)

    async def __aenter__(self) -> AsyncRepository:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # recording
    snapshot = _in_thread(Repository.snapshot)
    # reading
    status = _in_thread(Repository.status)
    diff = _in_thread(Repository.diff)
    history = _in_thread(Repository.history)
    show = _in_thread(Repository.show)
    export = _in_thread(Repository.export)
    cat = _in_thread(Repository.cat)
    check = _in_thread(Repository.check)
    operations = _in_thread(Repository.operations)
    resolve = _in_thread(Repository.resolve)
    head = _in_thread(Repository.head)
    view = _in_thread(Repository.view)
    # moving the files
    rewind = _in_thread(Repository.rewind)
    restore = _in_thread(Repository.restore)
    branch_switch = _in_thread(Repository.branch_switch)
    undo = _in_thread(Repository.undo)
    redo = _in_thread(Repository.redo)
    # refs
    branch_create = _in_thread(Repository.branch_create)
    branch_delete = _in_thread(Repository.branch_delete)
    bookmark = _in_thread(Repository.bookmark)
    # runs and the ledger
    execute_run = _in_thread(Repository.execute_run)
    convert_ledger = _in_thread(Repository.convert_ledger)


class Opening:
    """An :class:`AsyncRepository` being opened: ``await`` it, or use it in ``async with``."""

    def __init__(self, opener: Callable[[], Repository]) -> None:
        self._opener = opener
        self._repo: AsyncRepository | None = None

    async def _open(self) -> AsyncRepository:
        return AsyncRepository(await asyncio.to_thread(self._opener))

    def __await__(self) -> Generator[Any, None, AsyncRepository]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncRepository:
        self._repo = await self._open()
        return self._repo

    async def __aexit__(self, *exc: object) -> None:
        if self._repo is not None:
            await self._repo.aclose()
