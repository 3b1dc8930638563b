"""``strata proxy``: the recording model proxy for a long-lived agent."""

from __future__ import annotations

import os

import click

from strata.cli.common import local_port_option, open_repo, wait_for_interrupt
from strata.errors import UsageError

#: the annotation that links a ``strata proxy`` session's traces
ACTION = "model_calls"


@click.command("proxy")
@local_port_option
def proxy(port: int) -> None:
    """Record an agent's model calls until Ctrl-C: point its base URLs at the printed URL.

    Starts the recording model proxy on 127.0.0.1 (as 'strata run
    --record-model' does for one command): each call to Anthropic's Messages
    API or OpenAI's Responses and Chat Completions APIs is forwarded to the
    base URL this shell has in ANTHROPIC_BASE_URL / OPENAI_BASE_URL (or the
    public API), streamed through as it arrives, and kept as a redacted trace
    (API keys in headers are never kept). On Ctrl-C (or SIGTERM) the traces
    are linked from one 'model_calls' event at HEAD ('strata history --action
    model_calls'). It prints 'export NAME=URL' lines, for a shell to eval.

    \b
    Example:
      strata proxy                  # prints the two export lines, then waits
      # in the agent's shell: export ANTHROPIC_BASE_URL=http://127.0.0.1:PORT
    """
    from strata.integrations.model_proxy import recording
    from strata.redaction import known_secrets

    with open_repo() as repo:
        try:
            serving = recording(
                repo.objects.put,
                os.environ,
                root=repo.root,
                secrets=known_secrets(os.environ, repo.root),
                port=port,
            )
            running = serving.__enter__()
        except OSError as exc:
            raise UsageError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", hint="pick another --port"
            ) from None
        try:
            env = running.environment()
            for name, value in env.items():
                click.echo(f"export {name}={value}")
            click.echo("strata: recording model calls; Ctrl-C stops", err=True)
            wait_for_interrupt()
        finally:
            serving.__exit__(None, None, None)
        ids = tuple(running.trace_ids)
        if ids:
            with repo.transaction(ACTION, repo.author) as tx:
                head = tx.view.head_event
                tx.annotate(
                    ACTION,
                    anchor=head,
                    data={"calls": len(ids), "url": running.url},
                    rationale=f"{len(ids)} model calls recorded by strata proxy",
                    artifacts=ids,
                )
        click.echo(f"strata: {len(ids)} model calls recorded", err=True)


COMMANDS = [proxy]
