"""``strata mcp``: Strata's operations as a Model Context Protocol server.

Built on the official ``mcp`` SDK (:class:`mcp.server.mcpserver.MCPServer`).
Each tool is a thin call into the public :class:`strata.Repository` API and
returns, as its text, the JSON the matching CLI command prints with ``--json``
(``{"schema": 1, ...}`` for an object, a list for ``history``); a
:class:`~strata.errors.StrataError` becomes a tool error whose text is the
error's message (and hint). ``exec`` runs a command through the tool
gateway's policy (:mod:`strata.gateway`), a command the policy wants
approved being put to the client's user by MCP elicitation (:func:`exec_tool`).
The agent's tool set (:data:`strata.agent.tools.TOOLS`) is offered too, on the
Draft's files, as ``draft_<name>`` tools (:func:`file_tools`): the same
definitions, the same executor, each change a Draft revision.
Resources: ``strata://history`` (the newest events) and
``strata://diff/{a}/{b}`` (a diff's JSON).

Two transports: stdio (the client starts ``strata mcp`` itself) and streamable
HTTP bound to 127.0.0.1, where every request must carry
``Authorization: Bearer TOKEN`` (anything else is answered 401).

The one repository is opened when the server starts and shared by the tool
calls, which run in worker threads (a Repository may be shared by threads:
writes take turns).
"""

from __future__ import annotations

import hmac
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from strata.errors import StrataError, UsageError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from strata.gateway import Approver
    from strata.ledger.events import Author
    from strata.repo import Repository

T = TypeVar("T")

#: the newest events ``strata://history`` lists
HISTORY_RESOURCE_LIMIT = 50
#: the characters of a command's output kept in ``draft_run``'s answer (its tail)
OUTPUT_LIMIT = 20_000

INSTRUCTIONS = (
    "Strata records this workspace's files in an append-only ledger. Call 'snapshot' "
    "after a change worth keeping (with a rationale), 'diff'/'history'/'show' to look "
    "back, 'rewind' or 'restore' to put files back (unrecorded work is auto-saved "
    "first). Risky work goes in the Draft: 'draft_start', 'draft_run', 'review', then "
    "'publish' or 'discard'. 'exec' runs a shell command in the workspace through "
    "Strata's command policy: risky ones are asked of the user, or refused."
)


def render(value: Any) -> str:
    """``value`` as the CLI's ``--json`` prints it (an object gains ``"schema": 1``)."""
    from strata.schemas import versioned

    return json.dumps(versioned(value), indent=2, ensure_ascii=False)


def _tool_error(exc: StrataError) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    text = f"{type(exc).__name__}: {exc.message}"
    if exc.hint:
        text += f" (hint: {exc.hint})"
    return ToolError(text)


class StrataTools:
    """The operations the server offers, each returning the CLI's ``--json`` text.

    Plain methods, so they are usable (and testable) without a transport;
    :func:`build_server` registers them as MCP tools.
    """

    def __init__(
        self,
        repo: Repository,
        *,
        author: Author,
        environ: MutableMapping[str, str] | None = None,
        python: str = sys.executable,
        watcher: Callable[[Repository], dict[str, Any]] | None = None,
        ask_studio: float | None = None,
    ) -> None:
        self.repo = repo
        self.author = author
        #: seconds an approval waits on the studio's page when the client cannot ask (None:
        #: such a command is refused at once)
        self.ask_studio = ask_studio
        #: what ``status`` says of the workspace's watcher (passed in by ``strata mcp``)
        self.watcher = watcher
        self.environ = dict(os.environ if environ is None else environ)
        self.python = python

    def call(self, fn: Callable[[], Any]) -> str:
        """Run ``fn`` and render its result; a StrataError becomes an MCP tool error."""
        try:
            return render(fn())
        except StrataError as exc:
            raise _tool_error(exc) from None

    # -- recording and reading ---------------------------------------------------------

    def snapshot(self, message: str = "", bookmark: str | None = None) -> str:
        """Record the workspace as it is now (no event when nothing changed)."""
        return self.call(
            lambda: self.repo.snapshot(message, author=self.author, bookmark=bookmark).to_json()
        )

    def status(self) -> str:
        """How the working tree differs from HEAD (records nothing)."""

        def run() -> dict[str, Any]:
            report = self.repo.status().to_json()
            return {**report, "watcher": self.watcher(self.repo)} if self.watcher else report

        return self.call(run)

    def diff(self, a: str = "HEAD", b: str | None = None, paths: list[str] | None = None) -> str:
        """What changed from ref ``a`` to ref ``b`` (default: the working tree)."""

        def run() -> dict[str, Any]:
            from strata.workbench.summaries import summaries_between

            result = self.repo.diff(a, b, paths=paths or None)
            summaries = summaries_between(self.repo.resolve, result, a, b)
            return {**result.to_json(), "file_summaries": summaries}

        return self.call(run)

    def history(
        self,
        limit: int | None = 20,
        path: str | None = None,
        author: str | None = None,
        action: str | None = None,
    ) -> str:
        """Recorded events, newest first."""
        return self.call(
            lambda: [
                e.to_json()
                for e in self.repo.history(limit=limit, path=path, author=author, action=action)
            ]
        )

    def show(self, ref: str, path: str) -> str:
        """A file's text as it was at ``ref`` (a folder: its listing)."""

        def run() -> dict[str, Any]:
            data = self.repo.show(ref, path)
            try:
                return {"ref": ref, "path": path, "text": data.decode("utf-8")}
            except UnicodeDecodeError:
                return {"ref": ref, "path": path, "binary": True, "size": len(data)}

        return self.call(run)

    # -- moving the files --------------------------------------------------------------

    def rewind(self, ref: str, branch: str | None = None) -> str:
        """Move HEAD and the files to ``ref``; unrecorded work is auto-saved first."""
        return self.call(lambda: self.repo.rewind(ref, author=self.author, branch=branch).to_json())

    def restore(self, ref: str, paths: list[str]) -> str:
        """Put ``paths`` back as they were at ``ref`` (unrecorded work is auto-saved first)."""
        return self.call(lambda: self.repo.restore(ref, paths, author=self.author).to_json())

    # -- the Draft -----------------------------------------------------------------------

    def draft_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run tool ``name`` of the agent's tool set on the Draft's files (see :func:`file_tools`).

        A tool that changes a file is a Draft revision of its own (a step, as
        ``strata agent`` records one); its failure is the tool's error text.
        """
        from strata.agent.step import step_title
        from strata.agent.tools import TOOLS
        from strata.errors import NoDraft
        from strata.providers.base import Response, ToolCall
        from strata.workbench.draft import open_draft

        draft = open_draft(self.repo)
        if draft is None:
            raise _tool_error(NoDraft())
        with draft.step(f"mcp {name}"):
            result = TOOLS.run(draft.path, name, arguments)
            if not result.is_error and name not in FILE_READERS:
                call = ToolCall(name, name, arguments)
                draft.record(
                    step_title("mcp", Response(text="", tool_calls=(call,))),
                    author=self.author,
                )
        if result.is_error:
            raise _tool_error(UsageError(result.text))
        return result.text

    def draft_start(self) -> str:
        """Create the Draft, an isolated copy of the workspace where risky edits land."""
        from strata.workbench.draft import start_draft

        def run() -> dict[str, Any]:
            draft = start_draft(self.repo, author=self.author, source={"kind": "mcp"})
            return draft.status(now_ms=self.repo.now_ms())

        return self.call(run)

    def draft_run(
        self,
        command: list[str],
        sandbox: str = "bwrap",
        net: str = "deny",
        message: str = "",
    ) -> str:
        """Run ``command`` (an argv) in the Draft and record a draft revision.

        Runs ``strata draft run --json`` in a child process, so the command's
        output never reaches this server's stdout (the stdio transport's
        channel); the answer is that command's JSON plus ``output`` (the
        command's output, its last :data:`OUTPUT_LIMIT` characters) and
        ``output_truncated``.
        """
        if not command:
            raise _tool_error(UsageError("give the command to run as a list of arguments"))
        if sandbox not in ("bwrap", "none") or net not in ("deny", "allow"):
            raise _tool_error(UsageError("sandbox is 'bwrap' or 'none'; net is 'deny' or 'allow'"))
        # a model may not lift its own confinement: the gateway says what the user's
        # configuration allows
        from strata.gateway.decision import Call

        call = Call(
            "draft_run", tuple(command), unconfined=sandbox == "none", network=net == "allow"
        )
        verdict = self.repo.gateway(author=self.author).ask_gateway(call)
        if verdict.answer != "allow":
            raise _tool_error(
                UsageError(
                    f"draft_run with sandbox={sandbox!r} net={net!r} refused: {verdict.reason}",
                    hint="the workspace's owner decides in .strata/config.toml ([gateway])",
                )
            )
        argv = [self.python, "-m", "strata", "draft", "run", "--json"]
        argv += ["--sandbox", sandbox, "--net", net, "--author", self.author.name]
        argv += ["--author-kind", self.author.kind]
        if message:
            argv += ["-m", message]
        argv += ["--", *command]
        proc = subprocess.run(
            argv,
            cwd=self.repo.root,
            env={**self.environ, "STRATA_NO_RESIDENT": "1"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        output = proc.stderr.decode("utf-8", "replace")
        if proc.stdout.strip():
            result = json.loads(proc.stdout)
        else:  # Strata refused before running the command: the error is JSON on stderr
            lines = [ln for ln in output.splitlines() if ln.startswith("{")]
            error = json.loads(lines[-1])["error"] if lines else {"message": output.strip()}
            from mcp.server.mcpserver.exceptions import ToolError

            hint = f" (hint: {error['hint']})" if error.get("hint") else ""
            raise ToolError(f"{error.get('type', 'StrataError')}: {error['message']}{hint}")
        truncated = len(output) > OUTPUT_LIMIT
        result["output"] = output[-OUTPUT_LIMIT:]
        result["output_truncated"] = truncated
        return render(result)

    def review(self) -> str:
        """Record the Draft and show its changes against the point it started from."""
        return self.call(lambda: self.repo.draft(create=False).review().to_json())

    def publish(self, message: str = "", expect: str | None = None) -> str:
        """Apply the Draft to Published, atomically (checkpointed first), and end it."""
        return self.call(
            lambda: (
                self.repo.draft(create=False)
                .publish(message, expect=expect, author=self.author)
                .to_json()
            )
        )

    def discard(self) -> str:
        """End the Draft without touching Published (its revisions stay on its branch)."""

        def run() -> dict[str, Any]:
            draft = self.repo.draft(create=False)
            event = draft.discard(author=self.author)
            return {
                "event_id": event.id,
                "draft_id": draft.id,
                "branch": draft.branch,
                "draft_event_id": event.anchor_event_id,
            }

        return self.call(run)

    # -- checkpoints -----------------------------------------------------------------

    def checkpoint_list(self) -> str:
        """Checkpoints of Published, newest first."""
        return self.call(lambda: [c.to_json() for c in self.repo.checkpoints.list()])

    def checkpoint_create(self, message: str = "") -> str:
        """Record Published and protect it as a checkpoint."""
        return self.call(
            lambda: self.repo.checkpoints.create(message, author=self.author).to_json()
        )

    def checkpoint_restore(self, checkpoint_id: str) -> str:
        """Put Published back as a checkpoint holds it (a checkpoint is taken first)."""
        return self.call(
            lambda: self.repo.checkpoints.restore(checkpoint_id, author=self.author).to_json()
        )

    # -- resources --------------------------------------------------------------------

    def history_resource(self) -> str:
        """The newest events (``strata://history``)."""
        return self.history(limit=HISTORY_RESOURCE_LIMIT)

    def diff_resource(self, a: str, b: str) -> str:
        """The diff from ``a`` to ``b`` (``strata://diff/{a}/{b}``)."""
        from mcp.server.mcpserver.exceptions import ResourceError

        try:
            return render(self.repo.diff(a, b).to_json())
        except StrataError as exc:
            raise ResourceError(f"{type(exc).__name__}: {exc.message}") from None

    #: the tools :func:`build_server` registers, in order
    TOOLS: Sequence[str] = (
        "snapshot",
        "status",
        "diff",
        "history",
        "show",
        "rewind",
        "restore",
        "draft_start",
        "draft_run",
        "review",
        "publish",
        "discard",
        "checkpoint_list",
        "checkpoint_create",
        "checkpoint_restore",
    )


# -- exec: the tool gateway, approvals asked through MCP elicitation --------------------------

NO_ELICITATION = (
    "the MCP client cannot ask the user (it does not support elicitation), so a command "
    "that needs approval is refused; run it in a terminal with 'strata exec --shell \"...\"' "
    "(it asks there)"
)


#: the resolver's answer when no one needs asking (the policy does not prompt)
NOT_ASKED = "not-asked"
#: the resolver's answer when the client cannot be asked (no elicitation capability)
CANNOT_ASK = "cannot-ask"


def approver_from(answer: Any) -> Approver:
    """The approver the elicited ``answer`` stands for (an ``ElicitationResult`` or a marker).

    Only an accepted answer whose ``approve`` is true approves; a client that
    cannot be asked, a declined or cancelled question, and anything else deny.
    """
    from strata.gateway import ApprovalDecision, deny_all

    data = getattr(answer, "data", None)
    action = str(getattr(answer, "action", ""))
    if data == CANNOT_ASK:
        return deny_all(NO_ELICITATION, by="mcp")
    if action == "accept" and getattr(data, "approve", None) is True:
        decision = ApprovalDecision(True, "approved through the MCP client", "mcp")
    elif action == "accept" and data == NOT_ASKED:
        decision = ApprovalDecision(False, "the policy changed while asking; ask again", "mcp")
    elif action == "accept":
        decision = ApprovalDecision(False, "denied through the MCP client", "mcp")
    else:
        decision = ApprovalDecision(
            False, f"the MCP client's user chose {action or 'nothing'}", "mcp"
        )
    return lambda request: decision


def exec_tool(tools: StrataTools) -> Callable[..., Awaitable[str]]:
    """The ``exec`` tool: a command through the gateway's policy, approvals elicited.

    The question is asked by the SDK's resolver (``Resolve``/``Elicit``), which
    follows the protocol the client speaks: a server-to-client
    ``elicitation/create`` request mid-call (up to 2025-11-25), or an
    ``InputRequiredResult`` the client answers by calling again (2026-07-28).
    The tool body then runs the command once, through ``Repository.exec``
    with an approver holding that answer.
    """
    from typing import Annotated

    import anyio.to_thread
    from mcp.server.elicitation import ElicitationResult
    from mcp.server.mcpserver import Context, Elicit, Resolve
    from pydantic import BaseModel, Field

    from strata.gateway import ApprovalRequest, state_summary

    class Approval(BaseModel):
        approve: bool = Field(description="Run the command?")

    def ask(command: str, ctx: Context, cwd: str | None = None) -> Any:
        capabilities = ctx.client_capabilities
        verdict = tools.repo.gateway(author=tools.author).judge(command, cwd=cwd)
        decision = verdict.policy
        if verdict.answer != "ask" or decision is None:
            return NOT_ASKED
        if capabilities is None or capabilities.elicitation is None:
            return CANNOT_ASK
        request = ApprovalRequest(
            command=command,
            risk=decision.risk,
            reason=decision.reason,
            workspace=str(tools.repo.root),
            state=state_summary(tools.repo.status()),
            cwd=cwd or "",
            rule=decision.rule,
        )
        return Elicit("Strata: this command needs your approval\n" + request.describe(), Approval)

    ask.__annotations__ = {"command": str, "ctx": Context, "cwd": str | None, "return": Any}

    async def exec(
        command: str,
        answer: Any,
        timeout_s: float | None = None,
        cwd: str | None = None,
    ) -> str:
        """Run a shell command in the workspace through Strata's command policy.

        Low-risk commands run; medium and high ones ask the user (MCP
        elicitation) or are refused, by the policy's profile and rules. The
        command runs as a recorded run, snapshotted right before, so it is
        one 'undo' away. Answers with 'strata exec --json': decision, risk,
        exit code, stdout/stderr (clipped, 'truncated'), the files changed.
        """
        approver = approver_from(answer)
        if getattr(answer, "data", None) == CANNOT_ASK and tools.ask_studio is not None:
            # the client cannot ask its user: the studio's approvals page does
            from strata.gateway import ApprovalQueue, queued_approver

            queue = ApprovalQueue.of(tools.repo.layout.repo)
            approver = queued_approver(queue, timeout_s=tools.ask_studio)

        def run() -> str:
            return tools.call(
                lambda: tools.repo.exec(
                    command, approver=approver, author=tools.author, timeout_s=timeout_s, cwd=cwd
                ).to_json()
            )

        return await anyio.to_thread.run_sync(run)

    # the SDK reads the signature's types: real ones, as they are imported only here
    exec.__annotations__ = {
        "command": str,
        "answer": Annotated[ElicitationResult[Approval], Resolve(ask)],
        "timeout_s": float | None,
        "cwd": str | None,
        "return": str,
    }
    return exec


#: tools that only read: clients may call them without asking
READ_ONLY = frozenset({"status", "diff", "history", "show", "checkpoint_list"})
#: the agent's file tools that only read
FILE_READERS = frozenset({"list_files", "read_file"})
#: the MCP name of an agent tool run on the Draft: ``draft_`` and its name
FILE_PREFIX = "draft_"


_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "boolean": bool, "number": float}


def file_tools(tools: StrataTools) -> list[tuple[str, str, Callable[..., str]]]:
    """The agent's tool set (:data:`strata.agent.tools.TOOLS`) as MCP tools on the Draft.

    Each is ``(draft_<name>, description, function)``, the function's signature
    made from the tool's JSON schema, so a tool added to the set is offered
    here too, checked and run by the same executor.
    """
    import inspect

    from strata.agent.tools import TOOLS

    out = []
    for spec in TOOLS.specs():
        required = set(spec.parameters.get("required") or ())
        params = []
        for key, prop in (spec.parameters.get("properties") or {}).items():
            kind = _JSON_TYPES.get(str(prop.get("type")), Any)
            params.append(
                inspect.Parameter(
                    key,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=kind if key in required else kind | None,
                    default=inspect.Parameter.empty if key in required else None,
                )
            )

        def run(_name: str = spec.name, **arguments: Any) -> str:
            given = {k: v for k, v in arguments.items() if v is not None}
            return tools.draft_tool(_name, given)

        run.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
        run.__name__ = FILE_PREFIX + spec.name
        out.append((FILE_PREFIX + spec.name, f"{spec.description} (in the Draft)", run))
    return out


def build_server(tools: StrataTools) -> MCPServer:
    """An :class:`MCPServer` offering ``tools``' operations, ``exec`` and the two resources."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from strata._version import __version__

    server: MCPServer = MCPServer(
        name="strata",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    for name in StrataTools.TOOLS:
        fn = getattr(tools, name)
        read_only = name in READ_ONLY
        server.tool(
            name=name,
            annotations=ToolAnnotations(read_only_hint=read_only, destructive_hint=not read_only),
            structured_output=False,
        )(fn)
    for name, description, fn in file_tools(tools):
        read_only = name.removeprefix(FILE_PREFIX) in FILE_READERS
        server.add_tool(
            fn,
            name=name,
            description=description,
            annotations=ToolAnnotations(read_only_hint=read_only, destructive_hint=False),
            structured_output=False,
        )
    server.tool(
        name="exec",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
        structured_output=False,
    )(exec_tool(tools))
    server.resource(
        "strata://history",
        name="history",
        description="The newest events of the workspace's ledger (strata history --json).",
        mime_type="application/json",
    )(tools.history_resource)
    server.resource(
        "strata://diff/{a}/{b}",
        name="diff",
        description="The diff from ref A to ref B (strata diff A B --json).",
        mime_type="application/json",
    )(tools.diff_resource)
    return server


# -- streamable HTTP behind a bearer token ----------------------------------------------------

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerToken:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer TOKEN`` gets 401."""

    def __init__(self, app: App, token: str) -> None:
        if not token:
            raise UsageError("the MCP server's token is empty")
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass an authorised request (and the lifespan events) on; refuse the others."""
        if scope["type"] == "http":
            given = b""
            for key, value in scope.get("headers", ()):
                if key.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps(
                    {"error": "unauthorized", "message": "missing or wrong bearer token"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, token: str) -> App:
    """The server's streamable HTTP app (at ``/mcp``) behind :class:`BearerToken`."""
    app: App = server.streamable_http_app(host="127.0.0.1")
    return BearerToken(app, token)


def serve_http(server: MCPServer, *, port: int, token: str, host: str = "127.0.0.1") -> None:
    """Serve streamable HTTP on ``host:port`` until interrupted."""
    import uvicorn

    config = uvicorn.Config(http_app(server, token), host=host, port=port, log_level="warning")
    uvicorn.Server(config).run()


def serve_stdio(server: MCPServer) -> None:
    """Serve on stdin/stdout until the client closes them."""
    server.run("stdio")
