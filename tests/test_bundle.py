"""The audit bundle: exported from a workspace, verified and replayed where no repository is."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import zstandard

from conftest import (
    CliRunner,
    Dir,
    File,
    Link,
    as_json,
    assert_user_error,
    ok,
    read_manifest,
    write_tree,
)


def recorded(tmp_path: Path, run_cli: CliRunner) -> Path:
    ws = write_tree(
        tmp_path / "ws",
        {
            "a.txt": "one\n",
            "bin/tool": File("#!/bin/sh\n", 0o755),
            "private.cfg": File("k=v\n", 0o600),
            "empty": Dir(0o700),
            "link": Link("a.txt"),
        },
    )
    ok(run_cli("init", cwd=ws))
    (ws / "a.txt").write_text("one\ntwo\n")
    ok(run_cli("snapshot", "-m", "second", cwd=ws))
    ok(run_cli("run", "--", sys.executable, "-c", "open('ran.txt', 'w').write('ran')", cwd=ws))
    return ws


def repack(path: Path, change: dict[str, bytes]) -> None:
    """Rewrite a bundle with some members replaced (what someone tampering would do)."""
    data = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for info in tar:
            extracted = tar.extractfile(info)
            assert extracted is not None
            members[info.name] = extracted.read()
    members.update(change)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    path.write_bytes(zstandard.ZstdCompressor().compress(buffer.getvalue()))


def test_a_bundle_verifies_and_replays_to_the_same_files_with_no_repository(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = recorded(tmp_path, run_cli)
    file = tmp_path / "audit.tar.zst"
    exported = as_json(run_cli("bundle", "export", str(file), "--json", cwd=ws))
    head = ok(run_cli("ledger", "head", cwd=ws)).strip()
    assert exported["head"] == head and exported["patches"] >= 2
    elsewhere = tmp_path / "elsewhere"  # no repository here, nor above
    elsewhere.mkdir()
    report = as_json(run_cli("bundle", "verify", str(file), "--json", cwd=elsewhere))
    assert report["ok"] and report["head"] == head and report["snapshots"] >= 3
    replayed = as_json(
        run_cli("bundle", "replay", str(file), "out", "--json", cwd=elsewhere),
    )
    assert replayed["files"] == 5
    assert read_manifest(elsewhere / "out") == read_manifest(ws)
    # the script inside the bundle does the same with Python alone
    (tmp_path / "x").mkdir()
    subprocess.run(["tar", "--zstd", "-xf", str(file), "-C", str(tmp_path / "x")], check=True)
    subprocess.run(
        [sys.executable, str(tmp_path / "x" / "replay.py"), str(tmp_path / "y")],
        check=True,
        capture_output=True,
    )
    assert read_manifest(tmp_path / "y") == read_manifest(ws)
    patches = sorted((tmp_path / "x" / "patches").iterdir())
    assert any(b"+two" in p.read_bytes() for p in patches)
    # an earlier state of the range, by event id
    first = as_json(run_cli("history", "--json", cwd=ws))[-1]["id"]
    ok(run_cli("bundle", "replay", str(file), "first", "--event", first, cwd=elsewhere))
    assert (elsewhere / "first" / "a.txt").read_text() == "one\n"
    assert_user_error(run_cli("bundle", "replay", str(file), "out", cwd=elsewhere), code=2)


def test_a_range_bundle_and_tampering_found(tmp_path: Path, run_cli: CliRunner) -> None:
    ws = recorded(tmp_path, run_cli)
    file = tmp_path / "range.tar.zst"
    exported = as_json(run_cli("bundle", "export", str(file), "HEAD~1..HEAD", "--json", cwd=ws))
    assert exported["events"] >= 2
    ok(run_cli("bundle", "verify", str(file), cwd=tmp_path))

    # an edited record breaks the chain at that record
    x = tmp_path / "x"
    x.mkdir()
    subprocess.run(["tar", "--zstd", "-xf", str(file), "-C", str(x)], check=True)
    lines = (x / "records.jsonl").read_bytes().splitlines()
    edited = [line.replace(b'"second"', b'"rewritten"') for line in lines]
    assert edited != lines
    bad = tmp_path / "edited.tar.zst"
    bad.write_bytes(file.read_bytes())
    repack(bad, {"records.jsonl": b"\n".join(edited) + b"\n"})
    code, out, err = run_cli("bundle", "verify", str(bad), "--json", cwd=tmp_path)
    assert code == 1 and "was modified" in json.loads(out)["problems"][0]
    # a changed file content is named by its object
    blob = next(p.name for p in (x / "objects").iterdir() if p.read_bytes() == b"one\ntwo\n")
    bad2 = tmp_path / "object.tar.zst"
    bad2.write_bytes(file.read_bytes())
    repack(bad2, {f"objects/{blob}": b"one\nTWO\n"})
    code, _, err = run_cli("bundle", "verify", str(bad2), cwd=tmp_path)
    assert code == 1 and f"object {blob}" in err
    assert_user_error(run_cli("bundle", "replay", str(bad2), "out", cwd=tmp_path), says=blob)
    assert not (tmp_path / "out").exists()
    # not a bundle at all: one line
    (tmp_path / "junk").write_bytes(b"junk")
    assert_user_error(run_cli("bundle", "verify", "junk", cwd=tmp_path), says="not an audit bundle")
    assert_user_error(run_cli("bundle", "export", "f", "HEAD", cwd=ws), code=2, says="A..B")


def test_a_bundle_encrypted_for_an_age_key_opens_only_with_its_identity(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    from pyrage import x25519

    ws = recorded(tmp_path, run_cli)
    auditor, stranger = x25519.Identity.generate(), x25519.Identity.generate()
    (tmp_path / "auditor.key").write_text(f"# created: now\n{auditor}\n")
    (tmp_path / "stranger.key").write_text(f"{stranger}\n")
    file = tmp_path / "sealed.age"
    recipient = str(auditor.to_public())
    ok(run_cli("bundle", "export", str(file), "--recipient", recipient, cwd=ws))
    assert file.read_bytes().startswith(b"age-encryption.org/v1")
    assert_user_error(run_cli("bundle", "verify", str(file), cwd=tmp_path), says="encrypted")
    wrong = ("--identity", str(tmp_path / "stranger.key"))
    assert_user_error(run_cli("bundle", "verify", str(file), *wrong, cwd=tmp_path), says="none")
    right = ("--identity", str(tmp_path / "auditor.key"))
    assert as_json(run_cli("bundle", "verify", str(file), *right, "--json", cwd=tmp_path))["ok"]
    ok(run_cli("bundle", "replay", str(file), "out", *right, cwd=tmp_path))
    assert read_manifest(tmp_path / "out") == read_manifest(ws)
    assert_user_error(
        run_cli("bundle", "export", "x", "--recipient", "age1nope", cwd=ws), code=2, says="key"
    )
