"""The Workshop page: the conversation, through the ``Workshop`` the terminal UI drives.

Beside it, the files the agent works on (the Draft's newest revision, else
the workspace's), each opening as a preview (text, image, table, document).

Send, rewind to a message, regenerate and switch model are the methods of
:class:`~strata.workshop.session.Workshop`: no second implementation. A
turn (send, regenerate) runs on a thread of the studio; the page streams its
text as it arrives (server-sent events from :class:`Turn`) and shows the
recorded conversation once it ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from strata.errors import StrataError, UsageError
from strata.providers.base import TextDelta
from strata.studio.context import Ctx, Studio, error_page, workspace_of
from strata.studio.guard import HEADERS, Refused
from strata.studio.timeline import tree_values
from strata.workbench.draft import open_draft
from strata.workshop.session import Workshop

LOG = logging.getLogger("strata.studio")


@dataclass
class Turn:
    """A turn running on a thread: the text streamed so far, and how it ended."""

    text: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    def run(self, call: Callable[[Callable[[object], None]], Any]) -> None:
        """Run ``call(on_event)`` on a thread, collecting the streamed text."""

        def on_event(event: object) -> None:
            if isinstance(event, TextDelta):
                self.text.append(event.text)

        def work() -> None:
            try:
                call(on_event)
            except StrataError as exc:
                self.error = str(exc)
            except Exception as exc:
                LOG.exception("internal error in a Workshop turn")
                self.error = f"internal error ({type(exc).__name__}); see the server's log"
            finally:
                self.done.set()

        threading.Thread(target=work, name="studio-turn", daemon=True).start()


def _workshop(ctx: Ctx) -> Workshop:
    """The conversation's Workshop, kept for the studio's life (as the terminal UI keeps one)."""
    conversation = ctx.arg("c") or None
    key = (ctx.ws.index, conversation)
    with ctx.studio.lock:
        shop = ctx.studio.workshops.get(key)
        if shop is None:
            shop = ctx.ws.repo.workshop(conversation, environ=ctx.studio.environ)
            ctx.studio.workshops[key] = shop
            ctx.studio.workshops[(ctx.ws.index, shop.conversation_id)] = shop
    return shop


def _turn_of(studio: Studio, index: int, conversation: str) -> Turn | None:
    turn = studio.turns.get((index, conversation))
    return turn if isinstance(turn, Turn) else None


def workshop_page(ctx: Ctx) -> Response:
    """The active transcript, the turn streaming (if one runs), the composer and the model."""
    shop = _workshop(ctx)
    turn = _turn_of(ctx.studio, ctx.ws.index, shop.conversation_id)
    repo = ctx.ws.repo
    draft = open_draft(repo)
    at = draft.tip().id if draft is not None else "HEAD"
    tree = tree_values(ctx, at, "") if draft is not None or repo.view().head_event else None
    return ctx.render(
        "workshop.html",
        nav="workshop",
        shop=shop,
        messages=shop.messages(),
        running=turn is not None and not turn.done.is_set(),
        failed=turn.error if turn is not None and turn.done.is_set() else None,
        tree=tree,
        in_draft=draft is not None,
        model=_model(ctx, shop),
    )


def _model(ctx: Ctx, shop: Workshop) -> str:
    """The model turns use, as the terminal UI names it (the default said to be one)."""
    if shop.model:
        return shop.model
    from strata.providers.config import default_spec

    try:
        named = default_spec(ctx.ws.repo.config.raw, ctx.studio.environ)
    except StrataError:
        named = None
    return f"{named} (the default)" if named else "none chosen"


def workshop_act(ctx: Ctx) -> Response:
    """Send or regenerate (a turn on a thread), rewind, switch model; then the conversation."""
    shop = _workshop(ctx)
    what = ctx.request.path_params["what"]
    key = (ctx.ws.index, shop.conversation_id)
    if what in ("send", "regenerate"):
        text = ctx.form.get("text", "")
        if what == "send" and not text.strip():
            raise UsageError("the message is empty")
        with ctx.studio.lock:
            running = _turn_of(ctx.studio, *key)
            if running is not None and not running.done.is_set():
                raise Refused(409, "a turn of this conversation is still running")
            turn = ctx.studio.turns[key] = Turn()
        if what == "send":
            turn.run(lambda on_event: shop.send(text, on_event=on_event))
        else:
            turn.run(lambda on_event: shop.regenerate(on_event=on_event))
    elif what == "rewind":
        shop.rewind(ctx.arg("message"))
    elif what == "model":
        shop.set_model(ctx.arg("model"))
    else:
        raise Refused(404, f"no action {what!r}")
    return RedirectResponse(ctx.url(f"workshop?c={shop.conversation_id}"), status_code=303)


def stream_endpoint(studio: Studio) -> Any:
    """Server-sent events of the running turn: ``data:`` the text so far, then ``event: done``."""

    async def endpoint(request: Request) -> Response:
        try:
            studio.guard.check(request)
            index = workspace_of(studio, request).index
        except Refused as exc:
            return error_page(exc.status, exc.message)
        turn = _turn_of(studio, index, request.query_params.get("c", ""))

        async def stream() -> AsyncIterator[bytes]:
            sent = -1
            while (
                turn is not None
                and not studio.closing.is_set()
                and not await request.is_disconnected()
            ):
                finished = turn.done.is_set()
                if len(turn.text) != sent:
                    sent = len(turn.text)
                    text = "".join(turn.text[:sent])
                    lines = "".join(f"data: {line}\n" for line in text.split("\n"))
                    yield (lines + "\n").encode()
                if finished:
                    break
                await asyncio.sleep(0.1)
            yield b"event: done\ndata: \n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers=HEADERS)

    return endpoint
