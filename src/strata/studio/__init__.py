"""Strata Studio: the local web view of a workspace (``strata studio``).

A front end like ``cli/``: a Starlette application served by uvicorn on
127.0.0.1 with a token, whose pages (timeline, diff viewer, Draft review) call
the public Repository API the CLI calls. Its packages are the ``studio``
extra's; importing this package without them raises
:class:`~strata.errors.ExtraNotInstalled`.
"""

from __future__ import annotations

from strata.errors import ExtraNotInstalled

try:
    import jinja2  # noqa: F401
    import pygments  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed with [test]
    raise ExtraNotInstalled("strata studio", "studio", exc.name or "a package") from None

from strata.studio.context import Studio
from strata.studio.server import make_app, running

__all__ = ["Studio", "make_app", "running"]
