"""The recording model proxy: streamed through unbuffered, recorded redacted, replayed offline.

The proxy (:mod:`strata.integrations.model_proxy`) runs against upstreams on
127.0.0.1: a gated streaming endpoint of this file (the test decides when each
event leaves, so it sees whether the proxy passed the first one on before the
upstream sent the rest) and the scripted Anthropic endpoint the real Claude
Code runs against (``tests/agent_endpoints.py``). The last tests run the real
``claude`` under ``strata run --record-model``, stop the endpoint, and replay.
"""

from __future__ import annotations

import http.client
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_endpoints import AnthropicEndpoint, Shell, ToolCall, agent_binary, agent_env
from conftest import CliRunner, as_json, ok
from strata.integrations.model_proxy import ModelProxy, recording, replaying
from strata.providers.trace import Recorder, Trace

KEY = "sk-ant-api03-very-secret-key-0123456789"


class GatedStream:
    """An upstream on 127.0.0.1 that streams SSE events one by one, each when allowed.

    ``POST /v1/messages`` (and any path) answers ``events`` as server-sent
    events, chunked; the n-th event leaves once ``gate`` was released n times
    (the first leaves at once). ``requests`` keeps what reached it.
    """

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.gate = threading.Semaphore(0)
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((self.path, dict(self.headers.items()), raw))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, event in enumerate(owner.events):
                    if i:
                        assert owner.gate.acquire(timeout=10), "the test never let it go on"
                    data = f"data: {event}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[GatedStream]:
    stream = GatedStream(['{"type": "message_start"}', '{"text": "hello"}', '{"type": "stop"}'])
    yield stream
    stream.close()


_OPEN: list[http.client.HTTPConnection] = []


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _post(url: str, path: str, body: dict[str, Any], **headers: str) -> http.client.HTTPResponse:
    host = url.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=10)
    _OPEN.append(conn)
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    return conn.getresponse()


def _store() -> tuple[dict[str, bytes], Recorder]:
    objects: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        oid = str(len(objects))
        objects[oid] = data
        return oid

    return objects, Recorder(put=put, agent_id="proxy")


BODY = {
    "model": "claude-x",
    "stream": True,
    "messages": [{"role": "user", "content": "hello from /work/ws"}],
    "metadata": {"user_id": "session-1"},
}


def test_the_first_event_passes_before_the_upstream_sends_the_next(
    upstream: GatedStream,
) -> None:
    """Streaming is passed through read by read: the client reads the first event while
    the upstream still holds back the second (a buffering proxy would hang here)."""
    objects, recorder = _store()
    with ModelProxy(recorder=recorder, upstreams={"anthropic": upstream.url}) as proxy:
        response = _post(proxy.url, "/v1/messages", BODY, **{"x-api-key": KEY})
        assert response.status == 200
        first = response.read1(1000)
        assert b"message_start" in first and b"hello" not in first
        upstream.gate.release()
        upstream.gate.release()
        rest = response.read()
        assert b'"hello"' in rest and b"stop" in rest
    # the upstream got the request as sent, key included, asking for no compression
    [(path, headers, raw)] = upstream.requests
    assert path == "/v1/messages" and json.loads(raw) == BODY
    assert headers["x-api-key"] == KEY and headers["Accept-Encoding"] == "identity"
    assert len(objects) == 1


def test_a_call_is_recorded_redacted_with_its_whole_stream(upstream: GatedStream) -> None:
    """The trace holds the request, the response as the concatenated stream and its status,
    under the IO key of strata agent's traces; the key in the header is nowhere in it, and
    the workspace's path is written {workspace}."""
    upstream.gate.release(2)
    objects, recorder = _store()
    body = {**BODY, "system": f"the key is {KEY}"}
    with ModelProxy(
        recorder=recorder, upstreams={"anthropic": upstream.url}, root="/work/ws"
    ) as proxy:
        _post(proxy.url, "/v1/messages", body, **{"x-api-key": KEY}).read()
    assert len(proxy.trace_ids) == 1  # stored by the time the proxy stopped
    [stored] = objects.values()
    assert KEY not in stored.decode() and b"api03" not in stored
    assert b"x-api-key" not in stored.lower()  # no header is recorded, not even redacted
    trace = Trace.decode(stored, name="t")  # verifies the key against the request
    assert trace.key.startswith("llm_call:proxy-anthropic:proxy:-:0:")
    assert trace.request["path"] == "/v1/messages"
    assert trace.request["body"]["messages"][0]["content"] == "hello from {workspace}"
    assert "metadata" not in trace.request["body"]  # a session id: not the question
    assert trace.wire_request is not None
    assert trace.wire_request["body"]["metadata"] == {"user_id": "session-1"}
    assert trace.response is not None and trace.response["status"] == 200
    assert trace.response["body"].count("data: ") == 3 and '"hello"' in trace.response["body"]
    assert trace.redactions >= 1


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
def test_openai_calls_go_to_the_openai_base_url_without_its_v1_twice(
    upstream: GatedStream, path: str
) -> None:
    """OPENAI_BASE_URL ends in /v1 (the proxy's does too): /v1/responses goes to BASE/responses."""
    upstream.gate.release(2)
    objects, recorder = _store()
    with ModelProxy(recorder=recorder, upstreams={"openai": upstream.url + "/api/v1"}) as proxy:
        assert proxy.environment()["OPENAI_BASE_URL"] == proxy.url + "/v1"
        body = {"model": "gpt-x", "input": "hi", "stream": True}
        response = _post(proxy.url, path, body, Authorization=f"Bearer {KEY}")
        assert response.status == 200 and b"hello" in response.read()
    assert upstream.requests[0][0] == "/api/v1" + path.removeprefix("/v1")
    trace = Trace.decode(next(iter(objects.values())), name="t")
    assert trace.adapter == "proxy-openai" and KEY not in json.dumps(trace.to_json())


def test_replay_serves_the_recorded_answer_with_no_upstream_and_names_a_changed_field(
    upstream: GatedStream,
) -> None:
    """Replaying, the upstream is gone: the recorded request gets the recorded stream (in
    the replay's folder), a changed one a 400 naming the field, kept as the divergence."""
    upstream.gate.release(2)
    objects, recorder = _store()
    with ModelProxy(
        recorder=recorder, upstreams={"anthropic": upstream.url}, root="/work/ws"
    ) as proxy:
        recorded = _post(proxy.url, "/v1/messages", BODY, **{"x-api-key": KEY}).read()
    upstream.close()
    traces = [Trace.decode(data, name=oid) for oid, data in objects.items()]
    same = {**BODY, "messages": [{"role": "user", "content": "hello from /scratch/files"}]}
    with replaying(traces, Path("/scratch/files")) as replay:
        answer = _post(replay.url, "/v1/messages", {**same, "metadata": {"user_id": "other"}})
        assert answer.status == 200 and answer.read() == recorded
        assert replay.first_divergence() is None and not replay.unserved
        changed = {**same, "messages": [{"role": "user", "content": "hello, changed"}]}
        refused = _post(replay.url, "/v1/messages", changed)
        assert refused.status == 400
        message = json.loads(refused.read())["error"]["message"]
        assert "body.messages[0].content" in message, message
        found = replay.first_divergence()
        assert found is not None and "body.messages[0].content" in found[0]
        assert '"hello, changed"' in found[0] and found[1].startswith("llm_call:proxy-anthropic")


def test_the_home_folder_and_the_workspace_folder_name_are_tokens(
    upstream: GatedStream,
) -> None:
    """A sandbox gives the agent another home, and Claude Code names a folder after the
    workspace's path (-work-ws): both are written as tokens, so the replay in a sandbox's
    home and a scratch folder asks the same question."""
    upstream.gate.release(2)
    objects, recorder = _store()
    said = "memory in /home/me/.claude/projects/-work-ws/ for /work/ws"
    body = {**BODY, "system": said}
    with ModelProxy(
        recorder=recorder, upstreams={"anthropic": upstream.url}, root="/work/ws", home="/home/me"
    ) as proxy:
        _post(proxy.url, "/v1/messages", body).read()
    traces = [Trace.decode(data, name=oid) for oid, data in objects.items()]
    assert traces[0].request["body"]["system"] == (
        "memory in {home}/.claude/projects/{workspace-folder}/ for {workspace}"
    )
    with replaying(traces, Path("/tmp/s"), home="/run/home") as replay:
        again = {**body, "system": "memory in /run/home/.claude/projects/-tmp-s/ for /tmp/s"}
        again["messages"] = [{"role": "user", "content": "hello from /tmp/s"}]
        assert _post(replay.url, "/v1/messages", again).status == 200, replay.divergences


def test_a_store_that_fails_does_not_fail_the_call(upstream: GatedStream) -> None:
    """The answer has passed before the trace is stored: a full disk is reported, not
    turned into the agent's failure."""
    upstream.gate.release(2)

    def put(data: bytes) -> str:
        raise OSError(28, "No space left on device")

    with ModelProxy(recorder=Recorder(put=put), upstreams={"anthropic": upstream.url}) as proxy:
        assert b"hello" in _post(proxy.url, "/v1/messages", BODY).read()
    assert proxy.trace_ids == [] and "No space left" in proxy.failures[0]


def test_an_unreachable_upstream_is_a_502_and_a_recorded_failure() -> None:
    objects, recorder = _store()
    with ModelProxy(recorder=recorder, upstreams={"anthropic": "http://127.0.0.1:9"}) as proxy:
        response = _post(proxy.url, "/v1/messages", BODY)
        assert response.status == 502
        assert "could not reach" in json.loads(response.read())["error"]["message"]
    trace = Trace.decode(next(iter(objects.values())), name="t")
    assert trace.error is not None and trace.response is None


def test_recording_uses_the_users_base_url(upstream: GatedStream) -> None:
    upstream.gate.release(2)
    objects, recorder = _store()
    env = {"ANTHROPIC_BASE_URL": upstream.url + "/"}
    with recording(recorder.put, env, root=None) as proxy:
        assert proxy.upstreams["anthropic"] == upstream.url
        assert proxy.upstreams["openai"] == "https://api.openai.com/v1"
        assert b"hello" in _post(proxy.url, "/v1/messages", BODY).read()
    assert len(objects) == 1


# -- the real Claude Code, recorded and replayed ---------------------------------------


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("x = 1\n")
    ok(run_cli("init", cwd=ws))
    return ws


def _claude_env(run_cli: CliRunner, **extra: str) -> dict[str, str]:
    return agent_env(run_cli.env(), PATH="/usr/bin:/bin", ANTHROPIC_API_KEY=KEY, **extra)


@pytest.mark.sandbox
def test_a_claude_code_session_recorded_through_the_proxy_replays_offline(
    workspace: Path, run_cli: CliRunner
) -> None:
    """strata run --record-model -- claude -p …: every model call is a trace of the run;
    with the endpoint stopped, strata replay RUN gets the same files; the same run with
    a changed prompt is reported at the first request that differs."""
    claude = agent_binary("claude")
    script = [
        [Shell("sed -i s/1/9/ src/app.py")],
        [ToolCall("Write", {"file_path": str(workspace / "notes.txt"), "content": "todo\n"})],
    ]
    argv = [
        "sh",
        "-c",
        f'exec {claude} -p "$PROMPT" --output-format json --allowedTools Bash,Write',
    ]
    with AnthropicEndpoint(script) as api:
        env = _claude_env(run_cli, ANTHROPIC_BASE_URL=api.url, PROMPT="go ahead")
        code, out, err = run_cli(
            "run", "--record-model", "--json", "--", *argv, cwd=workspace, env=env
        )
        assert code == 0, out + err
        calls = len(api.requests)
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"
    assert (workspace / "notes.txt").read_text() == "todo\n"
    result = json.loads(out)
    run_id = result["run_id"]
    [event] = as_json(run_cli("history", "--json", "--action", "run", cwd=workspace, env=env))
    assert event["data"]["model_calls"] == calls == len(event["artifacts"]) >= 2
    ok(run_cli("check", cwd=workspace, env=env))  # the traces are verified objects
    for oid in event["artifacts"]:  # Claude Code sends the key in a header: never kept
        assert KEY not in ok(run_cli("cat", oid, cwd=workspace, env=env))

    # the endpoint is gone: the replay's answers come from the traces alone, served to the
    # sandbox (no network: the proxy's socket is its only way out) where claude sees the
    # workspace at its own path and a home of its own
    names = ["ANTHROPIC_API_KEY", "PROMPT", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]  # fmt: skip
    inside = [a for n in names for a in ("--env", n)] + ["--bind-ro", str(claude.parent.parent)]
    replay = run_cli("replay", "--json", *inside, run_id, cwd=workspace, env=env)
    report = json.loads(replay[1])
    assert replay[0] == 0 and report["ok"], replay
    assert [s["kind"] for s in report["steps"]] == ["run"]
    assert f"({calls} of {calls} recorded model calls served)" in report["steps"][0]["detail"]
    # and without the sandbox, in a scratch folder (its path is not the workspace's)
    unsandboxed = run_cli("replay", "--sandbox", "none", "--json", run_id, cwd=workspace, env=env)
    assert unsandboxed[0] == 0 and json.loads(unsandboxed[1])["ok"], unsandboxed

    changed = run_cli(
        "replay", "--json", *inside, run_id, cwd=workspace,
        env={**env, "PROMPT": "go somewhere else"},
    )  # fmt: skip
    assert changed[0] == 1, changed
    divergence = json.loads(changed[1])["first_divergence"]
    assert divergence["kind"] == "unrecorded_call"
    assert "POST /v1/messages: body.messages[0].content" in divergence["detail"], divergence
    assert "go somewhere else" in divergence["detail"]


def test_strata_proxy_prints_the_urls_and_links_its_traces_when_stopped(
    workspace: Path, run_cli: CliRunner, upstream: GatedStream
) -> None:
    """strata proxy, for a long-lived agent: the export lines on stdout, calls forwarded to
    the shell's ANTHROPIC_BASE_URL, and on SIGINT one model_calls event linking the traces."""
    import signal
    import sys

    upstream.gate.release(2)
    env = run_cli.env({"ANTHROPIC_BASE_URL": upstream.url, "ANTHROPIC_API_KEY": KEY})
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", "proxy"],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        exports = dict(
            proc.stdout.readline().removeprefix("export ").strip().split("=", 1) for _ in range(2)
        )
        url = exports["ANTHROPIC_BASE_URL"]
        assert exports["OPENAI_BASE_URL"] == url + "/v1"
        assert b"hello" in _post(url, "/v1/messages", BODY, **{"x-api-key": KEY}).read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "1 model calls recorded" in err
    [event] = as_json(run_cli("history", "--json", "--action", "model_calls", cwd=workspace))
    assert event["data"]["calls"] == 1 and len(event["artifacts"]) == 1
    ok(run_cli("check", cwd=workspace))


# -- the Draft sandbox: the proxy as the only way out -------------------------------------

CALLER = """\
import json, os, socket, urllib.request
base = os.environ["ANTHROPIC_BASE_URL"]
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
headers = {"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"]}
request = urllib.request.Request(base + "/v1/messages", data=body, headers=headers)
out = [urllib.request.urlopen(request, timeout=10).read().decode()]
try:
    urllib.request.urlopen("https://example.com", timeout=10).read()
    out.append("example.com: reached")
except Exception as exc:
    out.append(f"example.com: {exc}")
try:
    socket.create_connection(("1.1.1.1", 443), timeout=5).close()
    out.append("1.1.1.1: reached")
except OSError as exc:
    out.append(f"1.1.1.1: {exc}")
open("out.txt", "w").write("\\n".join(out) + "\\n")
"""


@pytest.mark.sandbox
def test_in_the_draft_sandbox_with_the_network_denied_the_proxy_is_the_only_way_out(
    workspace: Path, run_cli: CliRunner
) -> None:
    """strata run --draft --record-model (--net deny): the command's model call reaches the
    endpoint on the host through the proxy's socket bound into the sandbox and is linked
    from the revision; a tunnel to any other host is refused, a direct connection has no
    route."""
    from agent_endpoints import Text

    (workspace / "call.py").write_text(CALLER)
    ok(run_cli("snapshot", cwd=workspace))
    with AnthropicEndpoint([[Text("hello")]]) as api:
        env = run_cli.env({"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": KEY})
        # the key is passed by name, as a user would (the sandbox clears the environment)
        code, out, err = run_cli(
            "run", "--draft", "--record-model", "--env", "ANTHROPIC_API_KEY", "--json", "--",
            "python3", "call.py", cwd=workspace, env=env,
        )  # fmt: skip
        assert code == 0, out + err
        assert len(api.requests) == 1
        headers = {k.lower(): v for k, v in api.requests[0].headers.items()}
        assert headers["x-api-key"] == KEY  # passed on, never recorded
    draft = json.loads(out)
    assert draft["isolated"] is True
    [answer] = [p for p in (workspace / ".strata" / "draft").rglob("out.txt")]
    text = answer.read_text()
    assert "message_start" in text and '"done"' in text  # the endpoint's stream, whole
    assert "example.com: <urlopen error Tunnel connection failed: 403" in text, text
    assert "1.1.1.1: reached" not in text
    branch = f"draft/{draft['draft_id']}"
    [revision] = [
        e for e in as_json(run_cli("history", "--json", "--branch", branch, cwd=workspace))
        if e["id"] == draft["revision_event_id"]
    ]  # fmt: skip
    assert revision["data"]["model_calls"] == 1 and len(revision["artifacts"]) == 1
    [trace_id] = revision["artifacts"]
    assert KEY not in ok(run_cli("cat", trace_id, cwd=workspace))


def test_codex_through_strata_proxy_records_its_responses_calls(
    workspace: Path, run_cli: CliRunner, tmp_path: Path
) -> None:
    """The real Codex CLI, whose model provider's base_url is `strata proxy --port N`'s
    (a provider's URL is fixed in its config): its streamed Responses calls reach the
    scripted endpoint through the proxy, the edits happen, and on Ctrl-C the calls are
    linked from one model_calls event, each a trace of the OpenAI adapter."""
    import signal
    import socket
    import sys

    from agent_endpoints import Patch, ResponsesEndpoint

    codex = agent_binary("codex")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    codex_home, tmp = tmp_path / "codex-home", tmp_path / "tmp"
    codex_home.mkdir()
    tmp.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "scripted"\n[model_providers.scripted]\n'
        f'name = "scripted"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'wire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
    )
    env = agent_env(
        run_cli.env(),
        PATH="/usr/bin:/bin",
        CODEX_HOME=str(codex_home),
        OPENAI_API_KEY=KEY,
        TMPDIR=str(tmp),
    )
    script = [
        [Shell("sed -i s/1/9/ src/app.py")],
        [Patch("*** Begin Patch\n*** Add File: NOTES.md\n+# Notes\n*** End Patch\n")],
    ]
    with ResponsesEndpoint(script) as api:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "strata", "proxy", "--port", str(port)],
            cwd=workspace,
            env={**env, "OPENAI_BASE_URL": api.url + "/v1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proxy.stdout is not None
            assert (
                proxy.stdout.readline().strip()
                == f"export ANTHROPIC_BASE_URL=http://127.0.0.1:{port}"
            )
            done = subprocess.run(
                [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write",
                 "tidy up"],
                cwd=workspace, env=env, capture_output=True, text=True, timeout=120,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            proxy.send_signal(signal.SIGINT)
            _, err = proxy.communicate(timeout=30)
        finally:
            proxy.kill()
            proxy.wait()
        calls = len(api.requests)
        assert calls >= 2 and {r.path for r in api.requests} == {"/v1/responses"}
    assert (workspace / "src" / "app.py").read_text() == "x = 9\n"
    assert (workspace / "NOTES.md").read_text() == "# Notes\n"
    assert f"{calls} model calls recorded" in err, err
    [event] = as_json(run_cli("history", "--json", "--action", "model_calls", cwd=workspace))
    assert len(event["artifacts"]) == calls
    for oid in event["artifacts"]:
        trace = json.loads(ok(run_cli("cat", oid, cwd=workspace)))
        assert trace["adapter"] == "proxy-openai" and trace["request"]["path"] == "/v1/responses"
        assert trace["response"]["status"] == 200
        assert "response.completed" in trace["response"]["body"]  # the whole stream
        assert KEY not in json.dumps(trace)
