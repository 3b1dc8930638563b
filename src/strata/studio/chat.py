"""The Workshop page: the conversation, through the ``Workshop`` the terminal UI drives.

Send, rewind to a message, regenerate and switch model are the methods of
:class:`~strata.workshop.session.Workshop`: no second implementation.

A turn runs inside the request; the page shows the answer when it is recorded
(each answer linked to the Draft revision it made).
"""

from __future__ import annotations

from starlette.responses import RedirectResponse, Response

from strata.errors import UsageError
from strata.studio.context import Ctx
from strata.studio.guard import Refused
from strata.workshop.session import Workshop


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


def workshop_page(ctx: Ctx) -> Response:
    """The active transcript, the composer and the model."""
    shop = _workshop(ctx)
    return ctx.render(
        "workshop.html",
        nav="workshop",
        shop=shop,
        messages=shop.messages(),
        conversations=shop.conversations(),
    )


def workshop_act(ctx: Ctx) -> Response:
    """Send, rewind, regenerate, switch model; then back to the conversation."""
    shop = _workshop(ctx)
    what = ctx.request.path_params["what"]
    if what == "send":
        text = ctx.form.get("text", "")
        if not text.strip():
            raise UsageError("the message is empty")
        shop.send(text)
    elif what == "rewind":
        shop.rewind(ctx.arg("message"))
    elif what == "regenerate":
        shop.regenerate()
    elif what == "model":
        shop.set_model(ctx.arg("model"))
    else:
        raise Refused(404, f"no action {what!r}")
    return RedirectResponse(ctx.url(f"workshop?c={shop.conversation_id}"), status_code=303)
