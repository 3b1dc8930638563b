"""``strata studio`` (alias ``strata ui``) from the command line."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from tests.studio_support import history


def test_studio_prints_its_url_serves_it_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = history(tmp_path / "ws")
    with subprocess.Popen(
        [sys.executable, "-m", "strata", "ui", "--no-open", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as served:
        try:
            assert served.stdout is not None
            line = served.stdout.readline()
            found = re.match(r"Strata Studio: (http://127\.0\.0\.1:\d+/\?token=\S+)$", line)
            assert found, line
            with httpx.Client(follow_redirects=True) as client:
                page = client.get(found.group(1))
            assert page.status_code == 200 and "fix the answer" in page.text
            served.send_signal(signal.SIGTERM)
            assert served.wait(timeout=20) == 0
        except BaseException:
            served.kill()
            raise


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
