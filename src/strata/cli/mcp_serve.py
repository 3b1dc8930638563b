"""The process of the MCP server started ahead: ``python -m strata.cli.mcp_serve ROOT REPO``.

:func:`strata.integrations.mcp_prestart.start_later` starts it; it loads the
command line and Strata's MCP server once, then runs each later ``strata mcp``
of the workspace in a forked child (:func:`~strata.integrations.mcp_prestart.serve`).
"""

from __future__ import annotations

import os
import sys

from strata.integrations.mcp_prestart import serve


def _warm() -> None:
    """Load what a session needs: the command line, its ``mcp`` command, the MCP server."""
    import strata.cli.mcp
    import strata.integrations.mcp_server
    import strata.repo  # noqa: F401 (loaded once, for every session)
    from strata.cli import root

    root()  # the click group, built


def _run(argv: list[str]) -> None:
    """One session: the asker's ``strata mcp`` command line."""
    from strata.cli import main

    main(argv)


if __name__ == "__main__":  # started by start_later
    serve(os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2]), warm=_warm, run=_run)
