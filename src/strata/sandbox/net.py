"""A sandboxed command's network allow-list: an HTTP(S) proxy that admits only listed hosts.

``--net allow=api.anthropic.com,api.openai.com`` gives the command a network
namespace of its own (bubblewrap's ``--unshare-net``: a private loopback and
nothing else), so nothing it does reaches the host's network directly. The
only way out is this proxy:

* :class:`NetProxy` runs in Strata's process, on the host's network, and
  listens on a Unix socket in a private folder (``proxy.sock``). It speaks
  HTTP ``CONNECT host:port`` (HTTPS and any TLS protocol: the tunnel is opaque,
  nothing is decrypted) and plain ``GET http://host/…`` requests, and admits a
  host only when the :class:`NetPolicy` lists it; any other gets ``403
  Forbidden`` with a body naming the host and the option that allows it.
* :mod:`strata.sandbox._netrelay` runs inside the sandbox, listens on
  ``127.0.0.1:3128`` in the sandbox's namespace and passes each connection to
  the proxy's socket (bound into the sandbox). ``HTTPS_PROXY``, ``HTTP_PROXY``,
  ``ALL_PROXY`` (and their lower-case forms) point there, so curl, git, pip,
  Node (``NODE_USE_ENV_PROXY``), Python's and Rust's HTTP clients use it.

A command that ignores the proxy variables reaches nothing: its namespace has
no route anywhere and no DNS. The proxy resolves the names itself, on the host.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from strata.errors import UsageError

if TYPE_CHECKING:
    import asyncio  # (loaded where the relay runs: every judged command would pay 15 ms)

__all__ = ["PROXY_PORT", "AllowedHost", "NetPolicy", "NetProxy", "proxy_environment"]

#: The port the relay listens on inside the sandbox (its loopback is its own).
PROXY_PORT = 3128
#: The name of the proxy's Unix socket in its folder.
SOCKET_NAME = "proxy.sock"
#: Host names that mean the loopback (the host's, when named in an allow-list).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

_DEFAULT_PORTS = (443, 80)
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*")
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 30.0
_CHUNK = 64 * 1024
_HOP_HEADERS = (
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
)


@dataclass(frozen=True)
class AllowedHost:
    """One entry of an allow-list: a host (``*.example.com`` for its subdomains) and a port."""

    host: str
    """Lower-case name or IP address, no trailing dot; ``*.`` admits every subdomain."""
    port: int | None = None
    """The one port admitted; None admits 443 and 80."""

    def admits(self, host: str, port: int) -> bool:
        """True when a connection to ``host:port`` is covered by this entry."""
        if self.port is None and port not in _DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class NetPolicy:
    """What a sandboxed command may reach on the network.

    ``deny``: nothing (a private loopback only); ``allow``: the host's network,
    unrestricted; ``list``: only ``hosts``, through :class:`NetProxy`.
    """

    mode: Literal["deny", "allow", "list"] = "deny"
    hosts: tuple[AllowedHost, ...] = ()

    @classmethod
    def parse(cls, text: str) -> NetPolicy:
        """The policy ``--net TEXT`` names: ``deny`` (or ``none``), ``allow``, or ``allow=HOSTS``.

        ``HOSTS`` is a comma-separated list of ``host``, ``host:port``,
        ``*.domain`` or ``[IPv6]:port``; a host without a port admits 443 and 80.

        Raises:
            UsageError: anything else, naming the bad part.

        """
        value = text.strip()
        if value in ("deny", "none"):
            return cls("deny")
        if value == "allow":
            return cls("allow")
        if not value.startswith("allow="):
            raise UsageError(
                f"--net {text!r}: use deny, allow, or allow=HOST[:PORT],…",
                hint="e.g. --net allow=api.anthropic.com,api.openai.com",
            )
        entries = [part.strip() for part in value[len("allow=") :].split(",")]
        if not any(entries):
            raise UsageError(
                "--net allow= needs at least one host", hint="e.g. --net allow=pypi.org"
            )
        return cls("list", tuple(dict.fromkeys(_parse_host(e) for e in entries if e)))

    def with_hosts(self, hosts: Iterable[AllowedHost]) -> NetPolicy:
        """The policy admitting ``hosts`` too (``deny`` becomes a list; ``allow`` stays)."""
        if self.mode == "allow":
            return self
        merged = tuple(dict.fromkeys([*self.hosts, *hosts]))
        return NetPolicy("list", merged) if merged else self

    def admits(self, host: str, port: int) -> bool:
        """True when the command may connect to ``host:port``."""
        if self.mode == "allow":
            return True
        name = _normal_host(host)
        return any(entry.admits(name, port) for entry in self.hosts)

    @property
    def names_loopback(self) -> bool:
        """True when the list admits the host's loopback (``localhost``, ``127.0.0.1``…)."""
        return any(
            entry.host in LOOPBACK_NAMES or entry.host.startswith("127.") for entry in self.hosts
        )

    def __str__(self) -> str:
        if self.mode != "list":
            return self.mode
        return "allow=" + ",".join(str(entry) for entry in self.hosts)


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _parse_host(entry: str) -> AllowedHost:
    host, port = entry, None
    if "://" in entry or "/" in entry or "@" in entry:
        raise UsageError(
            f"--net allow: {entry!r} is not a host name", hint="give the host only: api.openai.com"
        )
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            raise UsageError(f"--net allow: {entry!r} lacks its closing ']'")
        host, rest = entry[1:end], entry[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise UsageError(f"--net allow: cannot read {entry!r}", hint="use [IPv6]:PORT")
            port = _parse_port(entry, rest[1:])
    elif entry.count(":") == 1:
        host, port_text = entry.split(":")
        port = _parse_port(entry, port_text)
    name = _normal_host(host)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        if not _HOST_NAME.fullmatch(name) or len(name) > 253:
            raise UsageError(
                f"--net allow: {entry!r} is not a host name",
                hint="give names like api.openai.com, *.githubusercontent.com or pypi.org:443",
            ) from None
    return AllowedHost(name, port)


def _parse_port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(f"--net allow: {entry!r} has no valid port (1 to 65535)")
    return int(text)


class NetProxy:
    """The allow-list proxy, served on a Unix socket while a sandboxed command runs.

    Use it as a context manager: entering makes a private folder (mode 0700)
    holding ``proxy.sock`` and starts serving in a background thread; leaving
    stops it and removes the folder. Bind :attr:`folder` into the sandbox.

    ``resolve`` maps ``host:port`` to the address actually connected to
    (``{"api.anthropic.com:443": ("127.0.0.1", 8443)}``): a stand-in server,
    for tests and local mirrors; the allow-list is judged on the name asked
    for. ``on_refused`` is called once per refused ``host:port`` (from the
    proxy's thread), so the caller can tell the user right away.
    """

    def __init__(
        self,
        policy: NetPolicy,
        *,
        resolve: Mapping[str, tuple[str, int]] | None = None,
        on_refused: Callable[[str], None] | None = None,
        connect_timeout_s: float = _CONNECT_TIMEOUT_S,
    ) -> None:
        self.policy = policy
        self.resolve = dict(resolve or {})
        self.on_refused = on_refused
        self.connect_timeout_s = connect_timeout_s
        self.refused: list[str] = []
        """Each ``host:port`` refused so far, once, in order."""
        self.admitted: list[str] = []
        """Each ``host:port`` connected to so far, once, in order."""
        self._folder: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None

    @property
    def folder(self) -> Path:
        """The private folder holding the proxy's socket (valid while entered)."""
        if self._folder is None:
            raise RuntimeError("the proxy is not running")
        return self._folder

    def __enter__(self) -> NetProxy:
        import asyncio

        self._folder = Path(tempfile.mkdtemp(prefix="strata-net-"))
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="strata-net", daemon=True)
        self._thread.start()
        path = str(self._folder / SOCKET_NAME)
        try:
            future = asyncio.run_coroutine_threadsafe(
                asyncio.start_unix_server(self._serve, path=path, limit=_HEAD_LIMIT), loop
            )
            self._server = future.result(timeout=30)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        import asyncio

        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
        self._loop = self._thread = self._server = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    async def _shutdown(self) -> None:
        import asyncio

        if self._server is not None:
            self._server.close()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one connection --------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT_S)
        lines = head.decode("latin-1").split("\r\n")
        words = lines[0].split(" ")
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            await _answer(writer, 400, "strata: not an HTTP proxy request\n")
            return
        method, target, version = words
        parsed = _target(method, target)
        if parsed is None:
            await _answer(
                writer,
                400,
                f"strata: cannot proxy {method} {target}: give CONNECT host:port "
                "or an absolute http:// URL\n",
            )
            return
        host, port, path = parsed
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if not self.policy.admits(host, port):
            self._note(self.refused, shown, refused=True)
            await _answer(writer, 403, self._refusal(host, port), refused=shown)
            return
        address = self.resolve.get(f"{host}:{port}", (host, port))
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*address, limit=_CHUNK), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "timed out"
            await _answer(writer, 502, f"strata: cannot reach {shown}: {reason}\n")
            return
        self._note(self.admitted, shown, refused=False)
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
            else:
                await self._one_request(
                    (reader, writer), (up_reader, up_writer), f"{method} {path} {version}", lines
                )
        finally:
            up_writer.close()

    async def _one_request(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        request_line: str,
        lines: list[str],
    ) -> None:
        """Forward one plain HTTP request and its response, then end the connection.

        Both sides are told ``Connection: close``: a client reusing the
        connection for another host would otherwise reach the first one with
        it, unjudged; a new connection gets a new decision.
        """
        import asyncio

        head = [request_line, *_end_to_end(lines[1:]), "Connection: close"]
        upstream[1].write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        body = asyncio.ensure_future(_pump(client[0], upstream[1]))
        try:
            answer = await upstream[0].readuntil(b"\r\n\r\n")
            answer_lines = answer.decode("latin-1").split("\r\n")
            head = [answer_lines[0], *_end_to_end(answer_lines[1:]), "Connection: close"]
            client[1].write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            await _pump(upstream[0], client[1])
        finally:
            body.cancel()
            await asyncio.gather(body, return_exceptions=True)

    def _note(self, seen: list[str], shown: str, *, refused: bool) -> None:
        if shown in seen:
            return
        seen.append(shown)
        if refused and self.on_refused is not None:
            self.on_refused(shown)

    def _refusal(self, host: str, port: int) -> str:
        entry = str(AllowedHost(host, None if port in _DEFAULT_PORTS else port))
        listed = [str(e) for e in self.policy.hosts]
        allowed = ", ".join(listed) if listed else "nothing"
        return (
            f"strata: {host}:{port} is not on the sandbox's network allow-list "
            f"(allowed: {allowed}).\n"
            f"To allow it, run again with --net allow={','.join([*listed, entry])}\n"
        )


def _target(method: str, target: str) -> tuple[str, int, str] | None:
    """(host, port, path) of a proxy request's target; None when it is not one."""
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536 or not host:
            return None
        return _normal_host(host), int(port_text), ""
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError:
        return None
    if url.scheme != "http" or not url.hostname:
        return None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return _normal_host(url.hostname), port, path


def _end_to_end(lines: list[str]) -> list[str]:
    """Header lines without the hop-by-hop ones (``Connection``, ``Proxy-*``…)."""
    return [
        line for line in lines if line and line.split(":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]


async def _answer(
    writer: asyncio.StreamWriter, status: int, body: str, *, refused: str | None = None
) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    data = body.encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(data)}",
        "Connection: close",
    ]
    if refused is not None:
        head.append(f"X-Strata-Refused: {refused}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    await writer.drain()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of file, then half-close ``writer``."""
    try:
        while True:
            chunk = await reader.read(_CHUNK)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def proxy_environment(*, no_proxy: Iterable[str]) -> dict[str, str]:
    """The variables that send a sandboxed command's HTTP clients to the relay."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env: dict[str, str] = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    skip = ",".join(no_proxy)
    if skip:
        env["NO_PROXY"] = env["no_proxy"] = skip
    env["NODE_USE_ENV_PROXY"] = "1"  # Node 24's fetch honours the variables with this
    return env
