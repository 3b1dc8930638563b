"""Secrets kept out of what Strata writes: traces, and every event and operation it records.

A :class:`Redactor` replaces, in text, every value it is told is secret (the
environment's values under secret-like names: :func:`secret_values`) and
everything that looks like one (an API key, a bearer token, a private key, a
``NAME_TOKEN=value`` assignment, the password of a URL) by
``[REDACTED:<kind>]``, counting what it removed. Traces also take e-mail
addresses out (``emails=True``). Files in the workspace are never changed:
this is for what Strata says about them (rationales, commands, model calls).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: what a secret looks like, by kind, in any text
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private-key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
        ),
    ),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("api-key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
)
#: ``NAME=value`` (or ``NAME: value``) where NAME, in the environment's upper case, says it is a
#: secret (``OPENAI_API_KEY=…``, ``DB_PASSWORD: …``): the value goes. Lower-case names are left
#: alone: ``password: str`` in code is no secret
ASSIGNMENT = re.compile(
    r"\b((?:[A-Z0-9]+_)*(?:SECRET|PASSWORD|PASSWD|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
    r"|SECRET_?KEY|CREDENTIALS?)(?:_[A-Z0-9]+)*|DATABASE_URL)"
    r"(\s*[=:]\s*)(['\"]?)([^\s'\"`;&|]{4,})"
)
#: the password in ``scheme://user:password@host``
URL_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
#: keys of a JSON object whose value is a secret whatever it looks like
SECRET_KEYS = re.compile(
    r"(?i)^(?:api[_-]?key|x-api-key|authorization|proxy-authorization|password|secret|token"
    r"|access[_-]?token|refresh[_-]?token|client[_-]?secret)$"
)
#: environment variables whose values are secrets (their names)
SECRET_NAMES = re.compile(
    r"(?i)(?:SECRET|PASSWORD|PASSWD|TOKEN|_KEY|API_KEY|CREDENTIALS?)$|^(?:DATABASE_URL|.*_DSN)$"
)
#: the shortest value taken for a secret (shorter ones would match by chance)
MIN_SECRET = 8


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The values of ``environ`` under secret-like names (``*_TOKEN``, ``*_KEY``, ...)."""
    return tuple(
        sorted(
            {v for k, v in environ.items() if SECRET_NAMES.search(k) and len(v) >= MIN_SECRET},
            key=len,
            reverse=True,  # a longer secret first: one that holds a shorter one goes whole
        )
    )


#: files whose values are secrets, by name (an agent reads them; their values then travel in
#: its commands and messages): environment files, then key and credential files
ENV_FILES = (".env", ".env.*", "*.env", ".envrc")
KEY_FILES = ("*.pem", "*.key", "id_rsa*", "id_ecdsa*", "id_ed25519*", ".netrc", ".pgpass")
#: how deep below the workspace's root such files are looked for, and how big one is read
SECRET_FILE_DEPTH = 1
SECRET_FILE_BYTES = 64 * 1024
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*[=:]\s*(.*?)\s*$")
_SKIPPED = frozenset({".git", ".strata", "node_modules", ".venv", "venv", "__pycache__"})


def file_secrets(root: Path) -> tuple[str, ...]:
    """The secret values of the workspace's environment and key files (``.env``, ``*.pem``…).

    Looked for in ``root`` and its folders down to :data:`SECRET_FILE_DEPTH`
    (git-ignored ones too: that is where they are kept). An environment
    file's values (``NAME=value``, quotes taken off) and a key file's lines
    count when at least :data:`MIN_SECRET` characters long. Unreadable files
    are passed over.
    """
    found: set[str] = set()
    for folder in _folders(root):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            env = any(fnmatch.fnmatch(name, p) for p in ENV_FILES)
            if not env and not any(fnmatch.fnmatch(name, p) for p in KEY_FILES):
                continue
            try:
                with open(folder / name, "rb") as f:
                    text = f.read(SECRET_FILE_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            for line in text.splitlines():
                if env:
                    match = _ENV_LINE.match(line)
                    value = match.group(1).strip("'\"") if match else ""
                else:
                    value = line.strip()
                    if value.startswith("-----") or value.startswith("#"):
                        continue
                    if name in (".netrc", ".pgpass"):
                        value = value.split()[-1] if " " in value else value.split(":")[-1]
                if len(value) >= MIN_SECRET and not value.startswith("#"):
                    found.add(value)
    return tuple(sorted(found, key=len, reverse=True))


def _folders(root: Path) -> list[Path]:
    """``root`` and its folders down to :data:`SECRET_FILE_DEPTH` (not .git, .strata…)."""
    out = [(root, 0)]
    for folder, depth in out:
        if depth >= SECRET_FILE_DEPTH:
            continue
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name not in _SKIPPED and entry.is_dir(follow_symlinks=False):
                out.append((Path(entry.path), depth + 1))
    return [folder for folder, _ in out]


def known_secrets(environ: Mapping[str, str], root: Path | None = None) -> tuple[str, ...]:
    """Every value never to be written: the environment's secrets, and ``root``'s files'."""
    values = set(secret_values(environ))
    if root is not None:
        values.update(file_secrets(root))
    return tuple(sorted(values, key=len, reverse=True))


@dataclass
class Redactor:
    """Removes secrets from text and JSON values; counts what it removed."""

    secrets: tuple[str, ...] = ()
    emails: bool = False
    count: int = 0

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED:<kind>]``."""
        for secret in self.secrets:
            if len(secret) >= MIN_SECRET and secret in value:
                self.count += value.count(secret)
                value = value.replace(secret, "[REDACTED:secret]")
        for kind, pattern in PATTERNS:
            value, n = pattern.subn(f"[REDACTED:{kind}]", value)
            self.count += n
        value, n = ASSIGNMENT.subn(
            lambda m: (
                m.group(0)
                if m.group(4).startswith("[REDACTED")
                else f"{m.group(1)}{m.group(2)}{m.group(3)}[REDACTED:secret]"
            ),
            value,
        )
        self.count += n
        value, n = URL_PASSWORD.subn(r"\1[REDACTED:password]\3", value)
        self.count += n
        if self.emails:
            value, n = EMAIL.subn("[REDACTED:email]", value)
            self.count += n
        return value

    def value(self, value: Any) -> Any:
        """A JSON value with :meth:`text` applied to every string and every secret key's value."""
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if SECRET_KEYS.match(str(k)) and isinstance(v, str) and v:
                    self.count += 1
                    out[k] = "[REDACTED:secret]"
                else:
                    out[k] = self.value(v)
            return out
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


def redact(value: Any, *, secrets: Iterable[str] = (), emails: bool = True) -> Any:
    """``value`` redacted (see :class:`Redactor`)."""
    return Redactor(tuple(secrets), emails).value(value)
