"""``strata studio`` (alias ``strata ui``) from the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from tests.studio_support import history, studio_process


def test_studio_prints_its_url_serves_it_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = history(tmp_path / "ws")
    with studio_process("ui", "--no-open", str(root)) as line:
        found = re.match(r"Strata Studio: (http://127\.0\.0\.1:\d+/\?token=\S+)$", line)
        assert found, line
        with httpx.Client(follow_redirects=True) as client:
            page = client.get(found.group(1))
        assert page.status_code == 200 and "fix the answer" in page.text


def test_studio_json_is_one_line_then_it_serves(tmp_path: Path) -> None:
    a, b = history(tmp_path / "a"), history(tmp_path / "b")
    with studio_process("studio", "--json", "--no-open", str(a), str(b)) as line:
        told = json.loads(line)
        assert told["pid"] != os.getpid() and told["url"].endswith(told["token"])
        assert [w["root"] for w in told["workspaces"]] == [str(a), str(b)]
        with httpx.Client(follow_redirects=True) as client:
            refused = client.get(told["workspaces"][1]["url"])
            assert refused.status_code == 401  # the token is still needed
            client.get(told["url"])
            page = client.get(told["workspaces"][1]["url"])
        assert page.status_code == 200 and "fix the answer" in page.text
        assert f":{told['port']}/" in told["url"]
        os.kill(told["pid"], 0)  # the pid it names is the serving process


def test_a_folder_that_is_no_workspace_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strata", "studio", "--no-open", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: not a strata workspace")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
