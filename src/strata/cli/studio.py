"""``strata studio`` (alias ``strata ui``): the local web view of one or several workspaces."""

from __future__ import annotations

import os
import webbrowser
from pathlib import Path

import click

from strata.cli.common import emit_json_line, json_option, local_port_option, wait_for_interrupt


@click.command("studio")
@click.argument("paths", nargs=-1, type=click.Path(file_okay=False))
@local_port_option
@click.option("--no-open", is_flag=True, help="Print the URL; do not open a browser.")
@json_option
def studio(paths: tuple[str, ...], port: int, no_open: bool, as_json: bool) -> None:
    """Serve the timeline, diffs and Draft review in a browser until Ctrl-C.

    Serves each workspace given (default: the current one) on 127.0.0.1
    only, behind a random token: open the printed URL (the token becomes a
    cookie on the first visit). Every change made from a page (rewind,
    restore, bookmark, undo, redo, publish, discard) is the CLI's own call.
    It prints the URL on one line; with --json, one line of JSON (url, token,
    port, pid, the workspaces) for a script, then serves on: stop it with
    SIGTERM to the pid.

    \b
    Example:
      strata studio --no-open        # prints http://127.0.0.1:PORT/?token=...
      strata studio ~/a ~/b          # two workspaces in one studio
      strata studio --json --no-open # {"url": ..., "token": ..., "port": ..., "pid": ...}
    """
    from strata.studio import running

    roots = [Path(p) for p in paths] or [Path.cwd()]
    with running(roots, port=port) as served:
        if as_json:
            emit_json_line(
                {
                    "url": served.url,
                    "token": served.token,
                    "port": served.port,
                    "pid": os.getpid(),
                    "workspaces": [
                        {
                            "index": ws.index,
                            "name": ws.name,
                            "root": str(ws.repo.root),
                            "url": f"http://127.0.0.1:{served.port}/w/{ws.index}/timeline",
                        }
                        for ws in served.workspaces
                    ],
                }
            )
        else:
            click.echo(f"Strata Studio: {served.url}", nl=True)
        click.echo("strata: serving until Ctrl-C", err=True)
        if not no_open:
            webbrowser.open(served.url)
        wait_for_interrupt()


COMMANDS = [studio]
