"""What the HTTP adapters share: retries with backoff, error mapping, tool arguments.

A call is tried again when it failed in a way that may pass (a refused or
reset connection, a timeout, HTTP 408/409/429 or 5xx, a stream that broke
or ended early) and nothing of the answer was delivered yet; the delays
between attempts are :data:`DEFAULT_DELAYS` (1, 2, 4, 8, 16 s: six
attempts), each waited in real time with jitter (between half and all of it,
so clients that failed together do not come back together), then
:class:`~strata.errors.ProviderUnavailable`. When the server
says how long to wait (``Retry-After``, in seconds or as an HTTP date, on a
429 or 503), that wait replaces the scheduled one, up to
:data:`RETRY_AFTER_MAX`; a longer one is not waited for. HTTP 401 and 403
are :class:`~strata.errors.ProviderAuthFailed` at once, a stream that is not
its wire format :class:`~strata.errors.ProviderProtocolError`, and any other
refusal (400, 404…) a plain :class:`~strata.errors.ProviderError`: trying
those again gives the same answer. A server on this machine's loopback
address is not waited for once nothing listens at its port (its
process is gone, or was never started): the first failure is the last.
"""

from __future__ import annotations

import importlib
import ipaddress
import json
import random
import re
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from strata.errors import (
    ProviderAuthFailed,
    ProviderCancelled,
    ProviderError,
    ProviderProtocolError,
    ProviderUnavailable,
    ToolArgumentsInvalid,
)
from strata.providers.base import (
    CancelToken,
    Request,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

#: seconds waited before the 2nd … 6th attempt
DEFAULT_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)

#: the longest ``Retry-After`` a call waits for; a server asking more is unavailable now
RETRY_AFTER_MAX = 300.0

#: seconds an HTTP adapter waits for the server (to connect, and between two pieces of a stream)
DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class Retry:
    """How failed calls are retried: the delays between attempts and how to wait them.

    ``delays=()`` makes one attempt. ``sleep`` None waits in real time and
    stops waiting as soon as the call's :class:`CancelToken` is set; tests
    pass a ``sleep`` that records the waits instead of waiting. ``notify``
    is told, in one line, of each failure about to be retried (a command
    line prints it, so a user never waits minutes on a silent retry).
    """

    delays: tuple[float, ...] = DEFAULT_DELAYS
    sleep: Callable[[float], None] | None = None
    notify: Callable[[str], None] | None = None

    def wait(self, seconds: float, cancel: CancelToken | None) -> None:
        """Wait ``seconds`` before the next attempt (less when ``cancel`` is set meanwhile)."""
        if self.sleep is not None:
            self.sleep(seconds)
            return
        end = time.monotonic() + seconds * random.uniform(0.5, 1.0)  # jitter
        while (left := end - time.monotonic()) > 0:
            if cancel is not None and cancel.cancelled:
                return
            time.sleep(min(left, 0.1))


class Transient(Exception):
    """A failure that another attempt may not meet; the text says what happened.

    ``timed_out``: the server took the request and sent nothing in time. A
    local server is then still generating, and another attempt would queue a
    second generation behind the first: :func:`with_retries` does not retry it.
    ``retry_after`` is the wait the server asked for (``Retry-After``), if it did.
    """

    def __init__(
        self, message: str, *, timed_out: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.retry_after = retry_after


def retry_after(headers: Any) -> float | None:
    """The seconds a ``Retry-After`` header in ``headers`` asks for (None if none or unreadable)."""
    value = headers.get("retry-after") if headers is not None else None
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime

    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def with_retries(
    provider: str,
    attempt: Callable[[], Iterator[StreamEvent]],
    *,
    retry: Retry,
    cancel: CancelToken | None,
    hint: str,
    gone: Callable[[], str | None] | None = None,
    local: bool = False,
) -> Iterator[StreamEvent]:
    """Yield ``attempt()``'s events, calling it again after a :class:`Transient` failure.

    ``hint`` is what :class:`ProviderUnavailable` tells the user to do. ``gone``,
    asked after a failure, says why the server can no longer answer (None while
    it may): then no further attempt is made. ``local`` (a server on this
    machine): a time-out is not retried, since the server is still busy with
    the request that timed out.
    """
    last: Transient | None = None
    attempts = 0
    for delay in (*retry.delays, None):
        if cancel is not None and cancel.cancelled:
            raise ProviderCancelled(provider, "the call was cancelled")
        attempts += 1
        delivered = False
        try:
            for event in attempt():
                if isinstance(event, TextDelta | ToolCallEvent):
                    delivered = True
                yield event
            return
        except Transient as exc:
            if delivered:
                # Never retried: the caller already has part of this answer (shown to
                # a user, recorded in a trace, acted upon); a new attempt would be
                # another answer whose start need not match, so text would repeat or
                # contradict what was delivered. The caller decides to ask again.
                raise ProviderUnavailable(
                    provider,
                    f"{exc} after part of the answer had arrived (not retried)",
                    attempts=attempts,
                    hint="ask again: the partial answer is incomplete",
                ) from None
            last = exc
        if delay is not None and local and last is not None and last.timed_out:
            raise ProviderUnavailable(
                provider,
                f"{last}; a local server that has not answered is still working on the request, "
                "and another attempt would queue a second one behind it (not retried)",
                attempts=attempts,
                hint="raise timeout (or lower max_tokens) of this provider in config.toml, "
                "or use a smaller model",
            )
        if delay is not None and last is not None and last.retry_after is not None:
            if last.retry_after > RETRY_AFTER_MAX:
                raise ProviderUnavailable(
                    provider,
                    f"{last}; it asks to wait {last.retry_after:.0f} s (not retried)",
                    attempts=attempts,
                    hint=hint,
                )
            delay = last.retry_after  # the server knows better than the schedule
        if delay is not None and gone is not None and (why := gone()) is not None:
            raise ProviderUnavailable(
                provider, f"{last}; {why} (not retried)", attempts=attempts, hint=hint
            )
        if delay is not None:
            if retry.notify is not None:
                retry.notify(
                    f"{provider}: {last}; attempt {attempts + 1} of {len(retry.delays) + 1} "
                    f"in {delay:g} s"
                )
            retry.wait(delay, cancel)
    raise ProviderUnavailable(
        provider,
        f"{last} ({_attempts(attempts)})",
        attempts=attempts,
        hint=hint,
    )


def _attempts(n: int) -> str:
    return "1 attempt" if n == 1 else f"{n} attempts"


def check_cancel(provider: str, cancel: CancelToken | None) -> None:
    """Raise :class:`ProviderCancelled` once ``cancel`` is set."""
    if cancel is not None and cancel.cancelled:
        raise ProviderCancelled(provider, "the call was cancelled")


def field(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` of an SDK object or ``obj[name]`` of a dict; ``default`` when absent.

    The SDKs build their objects from the server's JSON without validating it,
    so a field an OpenAI-compatible server left out is simply missing.
    """
    if isinstance(obj, dict):
        return obj.get(name, default)
    value = getattr(obj, name, default)
    return default if value is None else value


def tool_call(provider: str, call_id: str, name: str, arguments: str | None) -> ToolCall:
    """A :class:`ToolCall` from the wire's JSON text of its arguments.

    Empty arguments are an empty object (what a tool without parameters gets
    from some servers); anything else that is not a JSON object is
    :class:`ToolArgumentsInvalid`.
    """
    text = arguments or ""
    if not text.strip():
        return ToolCall(call_id, name, {})
    try:
        value = json.loads(text)
    except ValueError:
        raise ToolArgumentsInvalid(provider, name, text) from None
    if not isinstance(value, dict):
        raise ToolArgumentsInvalid(provider, name, text)
    return ToolCall(call_id, name, value)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return _one_line(inner["message"])
        if isinstance(inner, str):
            return _one_line(inner)
    return _one_line(getattr(exc, "message", None) or str(exc) or type(exc).__name__)


def _is_http_error(exc: BaseException, name: str) -> bool:
    """Whether ``exc`` is the HTTP client's ``name`` error (httpx, or httpx2 under openai 3)."""
    return any(
        c.__name__ == name and c.__module__.split(".")[0] in ("httpx", "httpx2")
        for c in type(exc).__mro__
    )


def classify(
    provider: str,
    exc: BaseException,
    *,
    sdk: ModuleType,
    where: str,
    key_env: str | None,
    timeout: float,
) -> BaseException:
    """The error a failure of ``sdk`` (openai or anthropic) or httpx becomes.

    Returns a :class:`Transient` for failures worth another attempt, a
    :class:`ProviderError` to raise, or ``exc`` itself when it is none of
    these (a bug, which stays a bug).
    """
    if isinstance(exc, ProviderError | Transient):
        return exc
    status = getattr(exc, "status_code", None)
    if isinstance(exc, sdk.APIStatusError) and isinstance(status, int):
        said = _server_message(exc)
        if status in (401, 403):
            where_key = f"check {key_env}" if key_env else "set api_key_env for it in config.toml"
            return ProviderAuthFailed(
                provider,
                f"{where} refused the credentials (HTTP {status}: {said})",
                hint=f"{where_key}; the key may be wrong, expired or lack access to the model",
            )
        if status in (400, 413) and _CONTEXT_OVERFLOW.search(said):
            return ProviderError(
                provider,
                f"the prompt does not fit the model's context window (HTTP {status} from "
                f"{where}: {said})",
                hint=f"set context_window of [providers.{provider}] to the model's context "
                "(the Workshop then fits its prompts to it), start a new conversation, or run "
                "the model with a larger context (llama.cpp: --ctx-size)",
            )
        if status in (408, 409, 429) or status >= 500 or status < 400:
            # below 400: an error the server sent inside an accepted stream
            response = getattr(exc, "response", None)
            return Transient(
                f"{where} answered HTTP {status} ({said})",
                retry_after=retry_after(getattr(response, "headers", None)),
            )
        return ProviderError(
            provider,
            f"{where} refused the request (HTTP {status}: {said})",
            hint="check the model name and base_url of this provider ('strata models')",
        )
    if isinstance(exc, sdk.APITimeoutError) or _is_http_error(exc, "TimeoutException"):
        return Transient(f"{where} did not answer within {timeout:g} s", timed_out=True)
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return Transient(f"cannot connect to {where} ({_one_line(str(cause or exc))})")
    if _is_http_error(exc, "TransportError"):
        return Transient(f"the connection to {where} broke ({_one_line(str(exc))})")
    if isinstance(exc, json.JSONDecodeError):
        return ProviderProtocolError(
            provider,
            f"{where} sent a stream event that is not JSON ({exc.msg} at {exc.pos})",
            hint="the server does not speak this adapter's wire format: check base_url and adapter",
        )
    if isinstance(exc, sdk.APIError):  # an error event inside a stream
        return Transient(f"{where} reported an error mid-stream ({_server_message(exc)})")
    return exc


#: what servers say when a prompt is longer than the model's context: llama.cpp ("exceeds the
#: available context size"), llama-cpp-python ("exceed context window"), OpenAI and vLLM
#: ("maximum context length"), Anthropic ("prompt is too long"), Ollama ("context length")
_CONTEXT_OVERFLOW = re.compile(
    r"context (size|window|length)|maximum context|context_length_exceeded|prompt is too long",
    re.IGNORECASE,
)


def is_local(base_url: str) -> bool:
    """Whether ``base_url`` names this machine (a loopback address or ``localhost``)."""
    host = urlsplit(base_url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_server_gone(base_url: str, *, timeout: float = 1.0) -> str | None:
    """Why the server at ``base_url`` is gone, when it is on loopback and nothing listens there.

    A refused connection to this machine's loopback address means no process
    listens at the port (a local model server that died or was stopped), and
    waiting will not bring it back. Any other address, or a port that accepts,
    gives None: a remote server may come back, a local one is busy.
    """
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if not is_local(base_url):
        return None
    # a server whose process is dying may still accept for a moment (its listening socket
    # closes with the process): asked three times, 50 ms apart, a refusal at any of them
    for attempt in range(3):
        if attempt:
            time.sleep(0.05)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except ConnectionRefusedError:
            return f"nothing listens at {host}:{port}"
        except OSError:
            return None
    return None


def unavailable_hint(name: str, base_url: str) -> str:
    """What to do when ``name`` at ``base_url`` cannot be reached."""
    return f"check that the server at {base_url} runs, or fix base_url of [providers.{name}]"


def protocol_error(provider: str, where: str, what: str) -> ProviderProtocolError:
    """A stream that does not follow the wire format: ``what`` says how."""
    return ProviderProtocolError(
        provider,
        f"{where} sent a malformed stream: {what}",
        hint="the server does not speak this adapter's wire format: check base_url and adapter",
    )


def read_usage(usage: Any, inputs: str = "input_tokens", outputs: str = "output_tokens") -> Usage:
    """The token counts of an answer's ``usage`` (fields ``inputs``, ``outputs``; 0 if missing)."""
    return Usage(int(field(usage, inputs, 0)), int(field(usage, outputs, 0)))


class SdkAdapter(ABC):
    """What the adapters on an official SDK share: the client, retries, error mapping.

    A subclass says which SDK (:attr:`sdk_module`) and client class
    (:attr:`sdk_client`), the body of a request (:meth:`wire_request`), how
    to send it (:meth:`_send`) and how to read a stream (:meth:`_events`) or a
    whole answer (:meth:`_whole`).
    """

    adapter = ""
    default_base_url = ""
    sdk_module = ""
    """The SDK: the module imported on the first call."""
    sdk_client = ""
    """The name of the SDK's client class."""

    def __init__(
        self,
        *,
        name: str,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        stream: bool = True,
        max_tokens: int | None = None,
    ) -> None:
        """A provider named ``name`` serving ``model`` at ``base_url`` (the vendor's by default).

        ``api_key`` None sends a placeholder (local servers want none);
        ``api_key_env`` only names the key's variable in error hints.
        ``max_tokens`` is the output limit of requests that set none (None:
        :meth:`_default_max_tokens`).
        """
        self.name = name
        self.model = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = float(timeout)
        self.retry = retry or Retry()
        self.streaming = stream
        self.max_tokens = max_tokens if max_tokens is not None else self._default_max_tokens()
        self._api_key = api_key
        self._key_env = api_key_env
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    def _default_max_tokens(self) -> int | None:
        """The output limit of requests that set none, when the configuration sets none."""
        return None

    def _sdk(self) -> ModuleType:
        """The SDK module (imported on the first call only)."""
        return importlib.import_module(self.sdk_module)

    def _make_client(self) -> Any:
        """A new SDK client for this provider (its own retries off)."""
        return getattr(self._sdk(), self.sdk_client)(
            api_key=self._api_key or "none",
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
        )

    @abstractmethod
    def wire_request(self, request: Request) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (pure)."""

    @abstractmethod
    def _send(self, client: Any, body: dict[str, Any]) -> Any:
        """Send ``body``: a stream to read, or the whole answer."""

    @abstractmethod
    def _events(self, stream: Any, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        """The events of a streamed answer."""

    @abstractmethod
    def _whole(self, answer: Any) -> Iterator[StreamEvent]:
        """The events of a whole (not streamed) answer."""

    def _sdk_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def close(self) -> None:
        """Close the HTTP connections (the adapter opens new ones if used again)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def stream(
        self, request: Request, *, cancel: CancelToken | None = None
    ) -> Iterator[StreamEvent]:
        """Ask the model; yields text deltas and tool calls, then one Finished."""
        body = self.wire_request(request)
        return with_retries(
            self.name,
            lambda: self._attempt(body, cancel),
            retry=self.retry,
            cancel=cancel,
            hint=unavailable_hint(self.name, self.base_url),
            gone=lambda: local_server_gone(self.base_url),
            local=is_local(self.base_url),
        )

    def _failure(self, exc: BaseException) -> BaseException:
        return classify(
            self.name,
            exc,
            sdk=self._sdk(),
            where=self.base_url,
            key_env=self._key_env,
            timeout=self.timeout,
        )

    def _attempt(self, body: dict[str, Any], cancel: CancelToken | None) -> Iterator[StreamEvent]:
        check_cancel(self.name, cancel)
        try:
            answer = self._send_until_cancelled(body, cancel)
        except Exception as exc:
            raise self._failure(exc) from exc
        if not body.get("stream"):
            yield from self._whole(answer)
            return
        try:
            yield from self._events(answer, cancel)
        except Exception as exc:
            raise self._failure(exc) from exc
        finally:
            answer.close()  # also when cancelled or abandoned: the server sees the stream end

    def _send_until_cancelled(self, body: dict[str, Any], cancel: CancelToken | None) -> Any:
        """:meth:`_send`, given up as soon as ``cancel`` is set.

        Until the server answers (a whole answer, or a stream's first bytes: a
        local model reads a long prompt for minutes before either) the call
        blocks in the HTTP client, where the token is never looked at; so it is
        sent from a thread of its own, and a cancel returns at once with
        :class:`ProviderCancelled` while the client is closed behind it (the
        server sees the connection end once its answer starts, or finishes a
        whole answer bounded by ``max_tokens``).
        """
        client = self._sdk_client()
        if cancel is None:
            return self._send(client, body)
        outcome: dict[str, Any] = {}
        done = threading.Event()
        given_up = threading.Event()

        def send() -> None:
            try:
                outcome["answer"] = self._send(client, body)
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc
            finally:
                done.set()
                close = getattr(outcome.get("answer"), "close", None)
                if given_up.is_set() and close is not None:
                    close()  # a stream that began after the caller left

        threading.Thread(target=send, name=f"{self.name}-call", daemon=True).start()
        while not done.wait(0.05):
            if cancel.cancelled:
                given_up.set()
                with self._lock:
                    if self._client is client:
                        self._client = None  # the next call opens new connections
                threading.Thread(target=client.close, daemon=True).start()
                raise ProviderCancelled(self.name, "the call was cancelled")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["answer"]

    def _ended_early(self) -> Transient:
        return Transient(f"the stream from {self.base_url} ended before the answer was complete")
