"""The studio's safety rules, applied to every request before any page runs.

* **Token, then cookie.** The URL ``strata studio`` prints carries a random
  token; the first request with it gets a cookie (``HttpOnly``,
  ``SameSite=Strict``) and is redirected to the same URL without the token.
  A request with neither is refused (401).
* **Host and Origin.** The ``Host`` header must name this server
  (``127.0.0.1:PORT`` or ``localhost:PORT``), so a page of another site whose
  name was rebound to 127.0.0.1 (DNS rebinding) is refused (400); an
  ``Origin`` header, when sent, must be this server's too (403).
* **POST and CSRF.** Every request that changes something is a POST carrying
  the page's CSRF token (a form field ``csrf`` or the ``X-CSRF`` header), derived
  from the token; GET never changes anything.
* **Headers.** A Content-Security-Policy allows scripts, styles and images from
  the studio only (no inline script), no framing; ``nosniff``; no referrer
  sent to another site.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

#: the Content-Security-Policy of every answer
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes a form post's Origin "null"
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class Refused(Exception):
    """A request the guard turns away: an HTTP status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class Guard:
    """Checks one request against the token, the cookie, the Host and the Origin."""

    def __init__(self, token: str, port: int) -> None:
        self.token = token
        self.port = port
        self.cookie = f"strata_studio_{port}"
        self.csrf = hmac.new(token.encode(), b"csrf", hashlib.sha256).hexdigest()[:32]
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    def check(self, request: Request) -> Response | None:
        """None when the request may go on; a redirect that sets the cookie; or :class:`Refused`."""
        host = request.headers.get("host", "")
        if host not in self.hosts:
            raise Refused(400, f"this studio answers only at 127.0.0.1:{self.port}, not {host!r}")
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.origins:
            raise Refused(403, f"requests from {origin!r} are refused")
        given = request.query_params.get("token")
        if given is not None:
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                raise Refused(401, "wrong token: open the URL 'strata studio' printed")
            if request.method == "GET":
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + ("?" + urlencode(rest) if rest else "")
                answer = RedirectResponse(target, status_code=303)
                answer.set_cookie(
                    self.cookie, self.token, httponly=True, samesite="strict", path="/"
                )
                return answer
            return None
        cookie = request.cookies.get(self.cookie, "")
        if not hmac.compare_digest(cookie.encode(), self.token.encode()):
            raise Refused(
                401, "this page needs the studio's token: open the URL 'strata studio' printed"
            )
        return None

    async def check_csrf(self, request: Request) -> None:
        """Refuse a POST without this studio's CSRF token (403)."""
        sent = request.headers.get("x-csrf")
        if sent is None:
            form = await request.form()
            value = form.get("csrf")
            sent = value if isinstance(value, str) else ""
        if not hmac.compare_digest(sent.encode(), self.csrf.encode()):
            raise Refused(403, "this form is stale or was not sent by the studio (CSRF token)")


Handler = Callable[[Request], Awaitable[Response]]


def same_origin_url(url: URL) -> str:
    """The path and query of ``url`` (a redirect never leaves the studio)."""
    return url.path + ("?" + url.query if url.query else "")
