"""``strata mcp``: serve the workspace to any MCP client (:mod:`strata.integrations.mcp_server`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from strata.cli.common import AUTHOR_KINDS, make_author, open_repo
from strata.errors import UsageError


def _token(token_file: str | None) -> tuple[str, bool]:
    """The bearer token: read from ``token_file``, else a new one (and whether it is new)."""
    if token_file is None:
        import secrets  # only here: every command imports this module

        return secrets.token_urlsafe(32), True
    try:
        text = Path(token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the token file {token_file}: {exc}") from None
    if not text:
        raise UsageError(f"the token file {token_file} is empty")
    return text, False


def _check_port(port: int) -> None:
    """Refuse a port something already listens on, before the repository is opened."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror}",
                hint="pick another port with --port",
            ) from None


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio (the client starts 'strata mcp') or streamable HTTP on 127.0.0.1.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8765,
    show_default=True,
    help="The HTTP port (only with --transport http).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="Read the HTTP bearer token from this file (only with --transport http; default: "
    "a new token, printed on stderr).",
)
@click.option("--host", hidden=True, help="Not an option: named so its use gets a clear error.")
@click.option(
    "--author",
    default=None,
    help="Who the changes are recorded as (default $STRATA_AUTHOR or mcp).",
)
@click.option(
    "--author-kind",
    type=click.Choice(AUTHOR_KINDS),
    default=None,
    help="What made them (default $STRATA_AUTHOR_KIND or agent).",
)
@click.option(
    "--ask-studio",
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="When the client cannot ask its user (no MCP elicitation), put a command that "
    "needs approval on the approvals page of 'strata studio' and wait up to SECONDS for "
    "the answer (no answer: denied), instead of refusing it at once.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    transport: str,
    port: int,
    token_file: str | None,
    host: str | None,
    author: str | None,
    author_kind: str | None,
    ask_studio: float | None,
) -> None:
    """Serve this workspace to an MCP client (Claude Code, Cursor, Cline, any other).

    Tools: snapshot, status, diff, history, show, rewind, restore,
    draft_start, draft_run, review, publish, discard, checkpoint_list,
    checkpoint_create, checkpoint_restore and exec (through the command
    policy; a command it wants approved is asked of the client's user by
    MCP elicitation, and refused when the client cannot ask, or with
    --ask-studio asked on the studio's approvals page); each returns
    the JSON of the matching CLI command's --json. Resources: strata://history and
    strata://diff/{a}/{b}. Changes are recorded with --author (default:
    $STRATA_AUTHOR, else "mcp") of kind agent.

    Over HTTP the server listens on 127.0.0.1:PORT/mcp only (no other
    address), and every request must send 'Authorization: Bearer TOKEN'.
    --port and --token-file are HTTP's: given without --transport http they
    are a usage error, not ignored.

    \b
    Example:
      strata mcp --transport http --port 8765 --token-file ~/.config/strata/mcp-token
      # Claude Code: claude mcp add strata -- strata -C ~/project mcp
      strata mcp --ask-studio 300   # approvals answered in 'strata studio'
    """
    from click.core import ParameterSource

    if host is not None:
        raise click.UsageError(
            "there is no --host: the HTTP server listens on 127.0.0.1 only "
            "(to reach it from elsewhere, put an authenticating proxy in front of it)"
        )
    if transport != "http":
        for name in ("port", "token_file"):
            if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None):
                flag = "--" + name.replace("_", "-")
                raise click.UsageError(
                    f"{flag} is for the HTTP server: add --transport http "
                    "(stdio, the default, has no port and no token)"
                )
    from strata.cli.watcher import watcher_report
    from strata.integrations.mcp_server import StrataTools, build_server, serve_http, serve_stdio

    who = make_author(
        author or os.environ.get("STRATA_AUTHOR") or "mcp",
        author_kind or os.environ.get("STRATA_AUTHOR_KIND") or "agent",
    )
    token, generated = _token(token_file) if transport == "http" else ("", False)
    if transport == "http":
        _check_port(port)
    with open_repo(who) as repo:
        server = build_server(
            StrataTools(repo, author=who, watcher=watcher_report, ask_studio=ask_studio)
        )
        if transport == "stdio":
            from strata.integrations.mcp_prestart import note_used, start_later

            # the next 'strata mcp' of this workspace is a fork of a server started ahead
            # (and the watcher, when it starts, starts one ahead for the workspace's next day)
            note_used(str(repo.layout.repo))
            start_later(str(repo.layout.repo), str(repo.root))
            serve_stdio(server)
            return
        click.echo(f"strata mcp: serving {repo.root} at http://127.0.0.1:{port}/mcp", err=True)
        if generated:
            click.echo(f"strata mcp: bearer token {token}", err=True)
        serve_http(server, port=port, token=token)


COMMANDS = [mcp]
