"""What every page handler is given: the studio, the workspace, the request's values."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from strata.diff.display import printable
from strata.repo import Repository
from strata.studio.guard import HEADERS, Guard, Refused, new_token
from strata.studio.render import page


@dataclass
class Workspace:
    """One served workspace."""

    index: int
    repo: Repository
    name: str


@dataclass
class Ctx:
    """What a page handler gets: the request's values, its workspace, the studio."""

    request: Request
    studio: Studio
    ws: Workspace
    form: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str = "") -> str:
        """A query parameter (or form field for a POST), stripped."""
        value = self.form.get(name) if self.form else None
        if value is None:
            value = self.request.query_params.get(name, default)
        return value.strip()

    def url(self, tail: str) -> str:
        """The URL of a page of this workspace."""
        return f"/w/{self.ws.index}/{tail}"

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        """A page of this workspace."""
        return HTMLResponse(
            page(template, ws=self.ws, studio=self.studio, csrf=self.studio.guard.csrf, **values),
            status_code=status,
        )

    def done(self, title: str, lines: list[str], back: str) -> HTMLResponse:
        """The result of an action: what the CLI would print, and a link back."""
        return self.render("done.html", title=title, lines=lines, back=back)


Page = Callable[[Ctx], Response]


class Studio:
    """The served workspaces, the token and the guard."""

    def __init__(
        self,
        roots: list[Path],
        *,
        port: int,
        token: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.port = port
        #: the environment the Workshop opens models with (API keys)
        self.environ = dict(os.environ if environ is None else environ)
        #: the Workshops the pages drive, by workspace and conversation
        self.workshops: dict[tuple[int, str | None], Any] = {}
        #: the Workshop turns running or last run, by workspace and conversation
        self.turns: dict[tuple[int, str], Any] = {}
        self.lock = threading.Lock()
        #: set when the server stops: live streams end instead of holding the shutdown
        self.closing = threading.Event()
        self.token = token or new_token()
        self.guard = Guard(self.token, port)
        self.workspaces: list[Workspace] = []
        for i, root in enumerate(roots):
            repo = Repository.open(root)
            self.workspaces.append(Workspace(i, repo, repo.root.name or str(repo.root)))

    @property
    def url(self) -> str:
        """The URL to open (with the token)."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def close(self) -> None:
        """Close every workspace's Repository."""
        for ws in self.workspaces:
            ws.repo.close()


def error_page(status: int, message: str) -> HTMLResponse:
    """A page with one line saying what went wrong, and the status it deserves."""
    return HTMLResponse(
        page("error.html", status=status, message=printable(message)),
        status_code=status,
        headers=HEADERS,
    )


def workspace_of(studio: Studio, request: Request) -> Workspace:
    """The workspace ``/w/N/`` names (:class:`Refused` 404 when there is none)."""
    raw = str(request.path_params.get("w", ""))
    if not raw.isdigit() or int(raw) >= len(studio.workspaces):
        raise Refused(404, "no such workspace in this studio")
    return studio.workspaces[int(raw)]
