"""The studio's web application: routes, the guard around each page, errors, live events.

One :class:`Studio` serves one or several workspaces, each opened once as a
:class:`~strata.repo.Repository` shared by the request threads (reads take no
lock; each write is the Repository's own transaction, as from the CLI). Pages
live at ``/w/N/...`` (N: the workspace's place on the command line).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from strata.errors import (
    NoDraft,
    PathError,
    PathNotFound,
    RefError,
    StrataError,
    UnknownRef,
    UsageError,
)
from strata.studio.context import Ctx, Page, Studio, error_page, workspace_of
from strata.studio.guard import HEADERS, Refused

#: the files under ``static/`` the studio serves, with their media types
STATIC = {
    "studio.js": "text/javascript; charset=utf-8",
    "studio.css": "text/css; charset=utf-8",
}

LOG = logging.getLogger("strata.studio")

#: how often the live-events stream looks at the ledger (seconds)
POLL_S = 0.2


def status_of(exc: StrataError) -> int:
    """The HTTP status a Strata error deserves."""
    if isinstance(exc, UnknownRef | PathNotFound | NoDraft):
        return 404
    if isinstance(exc, PathError | UsageError | RefError):
        return 400
    return 409


def _guarded(studio: Studio, handler: Page, *, needs_workspace: bool = True) -> Any:
    async def endpoint(request: Request) -> Response:
        try:
            early = studio.guard.check(request)
            if early is not None:
                early.headers.update(HEADERS)
                return early
            form: dict[str, str] = {}
            if request.method == "POST":
                await studio.guard.check_csrf(request)
                raw = await request.form()
                form = {k: v for k, v in raw.items() if isinstance(v, str)}
            ws = workspace_of(studio, request) if needs_workspace else studio.workspaces[0]
            ctx = Ctx(request, studio, ws, form)
            response = await run_in_threadpool(handler, ctx)
        except Refused as exc:
            return error_page(exc.status, exc.message)
        except StrataError as exc:
            return error_page(status_of(exc), str(exc))
        except Exception as exc:  # a bug: one line on the page, the traceback in the log
            LOG.exception("internal error serving %s", request.url.path)
            return error_page(500, f"internal error ({type(exc).__name__}); see the server's log")
        response.headers.update(HEADERS)
        return response

    return endpoint


def _index(ctx: Ctx) -> Response:
    if len(ctx.studio.workspaces) == 1:
        return RedirectResponse("/w/0/timeline", status_code=303)
    return ctx.render("index.html")


def _static(ctx: Ctx) -> Response:
    name = ctx.request.path_params["name"]
    if name not in STATIC:
        raise Refused(404, "no such file")
    data = importlib.resources.files("strata.studio").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name])


def _events(studio: Studio) -> Any:
    """Server-sent events: ``data: SEQ`` each time the ledger grows (within POLL_S)."""

    async def endpoint(request: Request) -> Response:
        try:
            studio.guard.check(request)
            ws = workspace_of(studio, request)
        except Refused as exc:
            return error_page(exc.status, exc.message)

        def newest() -> int:
            last = ws.repo.ledger.driver.last()
            return last.seq if last is not None else 0

        async def stream() -> AsyncIterator[bytes]:
            seen = await run_in_threadpool(newest)
            yield f"retry: 500\ndata: {seen}\n\n".encode()
            idle = 0.0
            while not studio.closing.is_set() and not await request.is_disconnected():
                await asyncio.sleep(POLL_S)
                now = await run_in_threadpool(newest)
                idle += POLL_S
                if now != seen:
                    seen, idle = now, 0.0
                    yield f"data: {now}\n\n".encode()
                elif idle >= 15:
                    idle = 0.0
                    yield b": keep-alive\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={**HEADERS, "X-Accel-Buffering": "no"},
        )

    return endpoint


def make_app(studio: Studio) -> Starlette:
    """The Starlette application serving ``studio``."""
    from strata.studio import approvals, chat, diffview, review, timeline

    def route(path: str, handler: Page, methods: tuple[str, ...] = ("GET",)) -> Route:
        return Route(path, _guarded(studio, handler), methods=list(methods))

    routes = [
        Route("/", _guarded(studio, _index, needs_workspace=False)),
        Route("/static/{name}", _guarded(studio, _static, needs_workspace=False)),
        Route(
            "/favicon.ico",
            _guarded(studio, lambda ctx: Response(status_code=204), needs_workspace=False),
        ),
        Route("/w/{w}/events", _events(studio)),
        route("/w/{w}/timeline", timeline.timeline_page),
        route("/w/{w}/tree", timeline.tree_page),
        route("/w/{w}/file", timeline.file_page),
        route("/w/{w}/raw", timeline.raw_file),
        route("/w/{w}/compare", timeline.compare),
        route("/w/{w}/act/{what}", timeline.act, ("POST",)),
        route("/w/{w}/diff", diffview.diff_page),
        route("/w/{w}/object/{oid}", diffview.object_page),
        route("/w/{w}/draft", review.draft_page),
        route("/w/{w}/draft/{what}", review.draft_act, ("POST",)),
        route("/w/{w}/approvals", approvals.approvals_page),
        route("/w/{w}/approvals/answer", approvals.approvals_answer, ("POST",)),
        Route("/w/{w}/workshop/stream", chat.stream_endpoint(studio)),
        route("/w/{w}/workshop", chat.workshop_page),
        route("/w/{w}/workshop/{what}", chat.workshop_act, ("POST",)),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_page(404, "no such page")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error_page(405, f"{request.method} is not allowed here")

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: any free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", hint="pick another --port"
        ) from None
    sock.listen(128)
    return sock


@contextlib.contextmanager
def running(roots: list[Path], *, port: int = 0, token: str | None = None) -> Iterator[Studio]:
    """Serve ``roots`` on 127.0.0.1 from a thread for the length of the ``with`` block."""
    import uvicorn

    sock = bind(port)
    try:
        studio = Studio(roots, port=sock.getsockname()[1], token=token)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(
        make_app(studio),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            threading.Event().wait(0.01)
        yield studio
    finally:
        studio.closing.set()
        server.should_exit = True
        thread.join(10)
        sock.close()
        studio.close()
