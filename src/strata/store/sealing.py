"""Traces encrypted at rest: age (``pyrage``) for the recipients of ``[traces]``.

Bytes in, bytes out: the object store keeps what :meth:`TraceCipher.seal`
returns like any other object, and a replay opens it with the key file
named in config, kept outside the repository (docs/replay.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: how every age file starts (an encrypted trace, as stored)
AGE_MAGIC = b"age-encryption.org/v1"


def pyrage_module(feature: str = "traces encrypted at rest") -> Any:
    """The ``pyrage`` module, or :class:`~strata.errors.ExtraNotInstalled` naming ``feature``."""
    try:
        import pyrage
    except ImportError:
        from strata.errors import ExtraNotInstalled

        raise ExtraNotInstalled(feature, "bundle-age", "pyrage") from None
    return pyrage


@dataclass(frozen=True)
class TraceCipher:
    """Encrypts traces for age ``recipients``; opens them with the key file ``identity``."""

    recipients: tuple[str, ...]
    identity: Path | None = None

    def seal(self, data: bytes) -> bytes:
        """``data`` encrypted for every recipient."""
        pyrage = pyrage_module()
        keys = [pyrage.x25519.Recipient.from_str(r) for r in self.recipients]
        return bytes(pyrage.encrypt(data, keys))

    def open(self, data: bytes, *, name: str) -> bytes:
        """The plaintext of a stored trace (``data`` as it is when it was not encrypted)."""
        if not data.startswith(AGE_MAGIC):
            return data
        from strata.errors import TraceLocked

        if self.identity is None:
            raise TraceLocked(name, "no key is configured ([traces] identity)")
        pyrage = pyrage_module()
        try:
            text = self.identity.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceLocked(name, f"the key {self.identity} cannot be read: {exc}") from None
        try:
            keys = [
                pyrage.x25519.Identity.from_str(line.strip())
                for line in text.splitlines()
                if line.startswith("AGE-SECRET-KEY-")
            ]
            return bytes(pyrage.decrypt(data, keys))
        except (pyrage.IdentityError, pyrage.DecryptError, ValueError):
            raise TraceLocked(name, f"the key {self.identity} does not open it") from None


def trace_cipher(
    config: dict[str, Any], *, repository: Path, workspace: Path
) -> TraceCipher | None:
    """The cipher of a ``[traces]`` config table (None: traces are stored as they are).

    ``recipients`` are age public keys (``age1...``); ``identity`` is the path of
    the age key file that opens them, refused inside the repository or the
    workspace (a key stored beside the traces would protect nothing).
    """
    from strata.errors import UsageError

    table = config.get("traces")
    if not isinstance(table, dict) or not table.get("recipients"):
        return None
    recipients = table["recipients"]
    if isinstance(recipients, str):
        recipients = [recipients]
    if not isinstance(recipients, list) or not all(
        isinstance(r, str) and r.startswith("age1") for r in recipients
    ):
        raise UsageError(
            "[traces] recipients must be a list of age public keys (age1...)",
            hint="age-keygen -y KEYFILE prints the public key of a key file",
        )
    pyrage = pyrage_module()
    for r in recipients:
        try:
            pyrage.x25519.Recipient.from_str(r)
        except (pyrage.RecipientError, ValueError):
            raise UsageError(f"[traces] recipients: not an age public key: {r[:24]!r}") from None
    identity = table.get("identity")
    key: Path | None = None
    if identity is not None:
        if not isinstance(identity, str) or not identity:
            raise UsageError("[traces] identity must be the path of an age key file")
        key = Path(identity).expanduser()
        if not key.is_absolute():
            raise UsageError(f"[traces] identity must be an absolute path, not {identity!r}")
        resolved = key.resolve()
        for inside in (repository.resolve(), workspace.resolve()):
            if resolved == inside or inside in resolved.parents:
                raise UsageError(
                    f"[traces] identity {key} is inside {inside}: keep the key outside the "
                    "repository and the workspace, or encrypting protects nothing"
                )
    return TraceCipher(tuple(recipients), key)


__all__ = ["AGE_MAGIC", "TraceCipher", "pyrage_module", "trace_cipher"]
