"""The network allow-list, with the real bubblewrap and a real HTTP server on 127.0.0.1.

The sandboxed command has a network namespace of its own. The stand-in for an
API host is an HTTP server on the host's 127.0.0.1; the proxy maps the allowed
name (``api.anthropic.com:443``) to it, so no DNS is needed. From inside, the
same address ``127.0.0.1:PORT`` is the sandbox's own loopback: a command that
ignores the proxy variables finds nothing there.
"""

from __future__ import annotations

import http.server
import json
import os
import site
import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import conftest
from conftest import CliRunner, assert_user_error, ok
from strata.errors import UsageError
from strata.runs.process import run_command
from strata.sandbox.bwrap import SandboxSpec, sandbox_command, sandbox_problem
from strata.sandbox.net import AllowedHost, NetPolicy, NetProxy

pytestmark = pytest.mark.sandbox

PYTHON = "/usr/bin/python3"  # the system's: visible in the sandbox through /usr


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = sandbox_problem()
    if problem is not None:
        if os.environ.get("CI") or "not installed" in problem:
            pytest.fail(f"the sandbox tests need bubblewrap: {problem}")
        pytest.skip(problem)
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is needed inside the sandbox")


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive, as API servers do

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "host": self.headers.get("Host")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[int]:
    """An HTTP server on the host's 127.0.0.1 (the stand-in API host); its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


#: Run in the sandbox: each line of the script's output is one JSON result.
CLIENT = textwrap.dedent(
    """
    import http.client, json, os, socket, sys, urllib.request

    def tunnel(host, port, path):
        # what an HTTPS client does through HTTPS_PROXY: CONNECT, then its bytes
        conn = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
        conn.set_tunnel(host, port)
        try:
            conn.request("GET", path)
            return {"status": conn.getresponse().status}
        except OSError as exc:
            return {"error": str(exc)}

    def plain(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:  # through HTTP_PROXY
                return {"status": r.status, "body": json.loads(r.read())}
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, "body": exc.read().decode()}
        except OSError as exc:
            return {"error": str(exc)}

    def direct(port):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            return {"connected": True}
        except OSError as exc:
            return {"connected": False, "error": str(exc)}

    port = int(sys.argv[1])
    results = {
        "env": os.environ.get("HTTPS_PROXY"),
        "allowed_tls": tunnel("api.anthropic.com", 443, "/v1/messages"),
        "allowed_plain": plain("http://api.anthropic.com/v1/models"),
        "refused_tls": tunnel("evil.example", 443, "/"),
        "refused_plain": plain("http://evil.example/steal"),
        "refused_port": tunnel("api.anthropic.com", 22, "/"),
        "direct": direct(port),
    }
    print(json.dumps(results))
    """
)


def _workspace(root: Path) -> SandboxSpec:
    published, draft, repository = root / "project", root / "draft", root / "repository"
    for folder in (published, draft, repository):
        folder.mkdir()
    (draft / "client.py").write_text(CLIENT)
    return SandboxSpec(workspace=published, source=draft, cwd=published, repository=repository)


def test_allowed_host_passes_others_are_refused_and_nothing_else_gets_out(
    tmp_path: Path, upstream: int, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = _workspace(tmp_path)
    policy = NetPolicy.parse("allow=api.anthropic.com")
    refused: list[str] = []
    resolve = {f"api.anthropic.com:{p}": ("127.0.0.1", upstream) for p in (443, 80)}
    with NetProxy(policy, resolve=resolve, on_refused=refused.append) as proxy:
        from dataclasses import replace

        spec = replace(spec, proxy=proxy.folder)
        argv = [PYTHON, "client.py", str(upstream)]
        full, env = sandbox_command(spec, argv, environ={"PATH": "/usr/bin:/bin"})
        capfd.readouterr()
        outcome = run_command(full, env=env, new_session=True)
        out = capfd.readouterr().out
        admitted = list(proxy.admitted)
    assert outcome.exit_code == 0, out
    got = json.loads(out.strip().splitlines()[-1])
    assert got["env"] == "http://127.0.0.1:3128"
    # the allowed host passes, over a CONNECT tunnel and as a plain proxied request
    assert got["allowed_tls"] == {"status": 200}
    assert got["allowed_plain"]["status"] == 200
    assert got["allowed_plain"]["body"] == {"path": "/v1/models", "host": "api.anthropic.com"}
    # others are refused, with a body that names the host and the way to allow it
    assert "403" in got["refused_tls"]["error"]
    assert got["refused_plain"]["status"] == 403
    body = got["refused_plain"]["body"]
    assert "evil.example:80 is not on the sandbox's network allow-list" in body
    assert "--net allow=api.anthropic.com,evil.example" in body
    assert "403" in got["refused_port"]["error"]  # a listed host, another port
    assert refused == ["evil.example:443", "evil.example:80", "api.anthropic.com:22"]
    assert admitted == ["api.anthropic.com:443", "api.anthropic.com:80"]
    # the host's 127.0.0.1:PORT is not the sandbox's: a command ignoring the proxy reaches nothing
    assert got["direct"]["connected"] is False


def test_the_proxy_refuses_before_resolving_and_reports_unreachable_hosts(tmp_path: Path) -> None:
    """Refused names are never looked up; an allowed host that is down is a 502 naming it."""
    policy = NetPolicy.parse("allow=down.example:9")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    with NetProxy(policy, resolve={"down.example:9": ("127.0.0.1", port)}) as proxy:
        answers = []
        for target in ("down.example:9", "refused.example:443", "nonsense"):
            client = socket.socket(socket.AF_UNIX)
            client.settimeout(10)
            client.connect(str(proxy.folder / "proxy.sock"))
            client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            answers.append(_read_all(client))
            client.close()
    assert answers[0].startswith("HTTP/1.1 502") and "cannot reach down.example:9" in answers[0]
    assert answers[1].startswith("HTTP/1.1 403")
    assert "X-Strata-Refused: refused.example:443" in answers[1]
    assert answers[2].startswith("HTTP/1.1 400")
    assert not proxy_folder_exists(proxy)


def proxy_folder_exists(proxy: NetProxy) -> bool:
    try:
        return proxy.folder.exists()
    except RuntimeError:
        return False  # removed when the proxy stopped


def _read_all(client: socket.socket) -> str:
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    return data.decode()


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("allow=API.Anthropic.com.,pypi.org:8443", ("api.anthropic.com", "pypi.org:8443")),
        ("allow=*.githubusercontent.com", ("*.githubusercontent.com",)),
        ("allow=[::1]:8080,127.0.0.1", ("[::1]:8080", "127.0.0.1")),
    ],
)
def test_allow_lists_parse(text: str, hosts: tuple[str, ...]) -> None:
    policy = NetPolicy.parse(text)
    assert policy.mode == "list"
    assert tuple(str(h) for h in policy.hosts) == hosts
    assert NetPolicy.parse("none").mode == NetPolicy.parse("deny").mode == "deny"
    assert NetPolicy.parse("allow").mode == "allow"


def test_allow_list_matching() -> None:
    policy = NetPolicy.parse("allow=api.openai.com,*.example.org,local.test:8080")
    assert policy.admits("api.openai.com", 443) and policy.admits("API.OPENAI.COM.", 80)
    assert not policy.admits("api.openai.com", 8443)
    assert not policy.admits("evil-api.openai.com", 443) and not policy.admits("openai.com", 443)
    assert policy.admits("a.b.example.org", 443) and not policy.admits("example.org", 443)
    assert policy.admits("local.test", 8080) and not policy.admits("local.test", 443)
    assert policy.with_hosts([AllowedHost("pypi.org")]).admits("pypi.org", 443)
    assert NetPolicy("deny").with_hosts([AllowedHost("pypi.org")]).mode == "list"


@pytest.mark.parametrize(
    "text", ["bogus", "allow=", "allow=http://x.com", "allow=x.com:0", "allow=a b", "allow=[::1"]
)
def test_bad_allow_lists_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        NetPolicy.parse(text)


# -- through the CLI ---------------------------------------------------------------

#: a client for the CLI tests: GET the URL through the proxy variables, print the status
FETCH = textwrap.dedent(
    """
    import sys, urllib.request, urllib.error
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
            print("status", r.status)
    except urllib.error.HTTPError as exc:
        print("status", exc.code, exc.read().decode().splitlines()[0])
    except OSError as exc:
        print("failed", exc)
    """
)


@pytest.fixture
def workspace(tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fetch.py").write_text(FETCH)
    ok(run_cli("init", "--no-snapshot", cwd=ws))
    ok(run_cli("snapshot", "-m", "start", cwd=ws))
    return ws


def test_cli_allow_list(workspace: Path, run_cli: CliRunner, upstream: int) -> None:
    # the host's own loopback, named in the list, is reached through the proxy
    url = f"http://localhost:{upstream}/x"
    code, out, err = run_cli(
        "run", "--draft", f"--net=allow=localhost:{upstream}", "--", PYTHON, "fetch.py", url,
        cwd=workspace,
    )  # fmt: skip
    assert code == 0, err
    assert out.strip() == "status 200"
    # a host not listed: the command gets the 403, the user a line naming the option
    code, out, err = run_cli(
        "run", "--draft", "--net", "allow=pypi.org", "--", PYTHON, "fetch.py",
        "http://example.com/", cwd=workspace,
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("status 403 strata: example.com:80 is not on the sandbox's network")
    assert (
        "strata: refused a connection to example.com:80: it is not on the network allow-list; "
        "to allow it, run again with --net allow=pypi.org,example.com"
    ) in err
    # the default: no network at all, and no proxy variables
    code, out, err = run_cli("run", "--draft", "--", PYTHON, "fetch.py", url, cwd=workspace)
    assert code == 0, err
    assert out.startswith("failed")
    # --net allow: the host's network, as before
    code, out, err = run_cli(
        "run", "--draft", "--net", "allow", "--", PYTHON, "fetch.py", url, cwd=workspace
    )
    assert code == 0, err
    assert out.strip() == "status 200"


def test_cli_refuses_bad_network_options(workspace: Path, run_cli: CliRunner) -> None:
    assert_user_error(
        run_cli("run", "--draft", "--net", "maybe", "--", "true", cwd=workspace),
        code=125,
        says="--net 'maybe': use deny, allow, or allow=HOST[:PORT]",
    )
    assert_user_error(
        run_cli(
            "run",
            "--draft",
            "--sandbox",
            "none",
            "--net",
            "allow=pypi.org",
            "--",
            "true",
            cwd=workspace,
        ),
        code=125,
        says="need the sandbox",
    )
    assert_user_error(
        run_cli("run", "--net", "allow=pypi.org", "--", "true", cwd=workspace),
        code=125,
        says="apply to runs in the Draft",
    )


#: Run as ``person`` with the system's Python: the proxy and the sandbox as that user.
DRIVER = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    from dataclasses import replace
    from pathlib import Path
    from strata.runs.process import run_command
    from strata.sandbox.bwrap import SandboxSpec, sandbox_command
    from strata.sandbox.net import NetPolicy, NetProxy

    root, port = Path(sys.argv[2]), int(sys.argv[3])
    spec = SandboxSpec(
        workspace=root / "project", source=root / "draft", cwd=root / "project",
        repository=root / "repository",
    )
    resolve = {f"api.anthropic.com:{p}": ("127.0.0.1", port) for p in (443, 80)}
    with NetProxy(NetPolicy.parse("allow=api.anthropic.com"), resolve=resolve) as proxy:
        argv = ["/usr/bin/python3", "client.py", str(port)]
        full, env = sandbox_command(replace(spec, proxy=proxy.folder), argv, environ={})
        sys.exit(run_command(full, env=env, new_session=True).exit_code)
    """
)


def test_the_allow_list_as_root_and_as_an_unprivileged_user(
    person: conftest.Person, home_of: Path, upstream: int
) -> None:
    """The proxy's socket lives in a folder only its user may enter; the sandbox's user
    (root with every capability dropped, or the unprivileged user) must still reach it."""
    import strata

    _workspace(home_of)
    subprocess.run(["chown", "-R", f"{person.uid}:{person.gid}", str(home_of)], check=True)
    paths = [str(Path(strata.__file__).parent.parent), *site.getsitepackages()]
    done = person.run(
        [PYTHON, "-c", DRIVER, json.dumps(paths), str(home_of), str(upstream)],
        cwd=home_of,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["allowed_tls"] == {"status": 200}
    assert got["allowed_plain"]["status"] == 200
    assert got["refused_plain"]["status"] == 403
    assert got["direct"]["connected"] is False


def test_a_kept_alive_connection_cannot_carry_a_request_to_another_host(upstream: int) -> None:
    """Plain HTTP through the proxy is one request per connection: a second request
    sent on it (for a host not listed) never reaches the first host."""
    import http.client

    policy = NetPolicy.parse("allow=api.example.test")
    with NetProxy(policy, resolve={"api.example.test:80": ("127.0.0.1", upstream)}) as proxy:
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(10)
        client.connect(str(proxy.folder / "proxy.sock"))
        client.sendall(
            b"GET http://api.example.test/first HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
            b"GET http://evil.example/second HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        )
        answer = _read_all(client)
        client.close()
    assert answer.count("HTTP/1.") == 1, answer
    assert "Connection: close" in answer and '"/first"' in answer
    assert "second" not in answer

    # a client that keeps connections alive opens a new one, judged anew
    class ViaUnix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(str(folder / "proxy.sock"))

    with NetProxy(policy, resolve={"api.example.test:80": ("127.0.0.1", upstream)}) as proxy:
        folder = proxy.folder
        conn = ViaUnix("proxy", timeout=10)
        conn.request("GET", "http://api.example.test/one", headers={"Host": "api.example.test"})
        first = conn.getresponse()
        assert (first.status, json.loads(first.read())["path"]) == (200, "/one")
        conn.request("GET", "http://evil.example/two", headers={"Host": "evil.example"})
        second = conn.getresponse()
        assert second.status == 403
        refusal = second.read().decode()
        assert "evil.example:80 is not on the sandbox's network allow-list" in refusal
        conn.close()
