"""Per-client keys on disk: ``ENGAGE_HOME/fl/keys``, one file per client, mode 0600.

``engage fl keys`` provisions them. For ``hmac-sha256`` a client's file holds its 32-byte
secret (the server reads the same files); for ``ed25519`` it holds the private key and a
``.pub`` file beside it the public key, which is all the server reads. Files are created
with ``O_EXCL`` and mode 0600 in a 0700 folder; a key file others can read is refused.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from engage.errors import FederatedError
from engage.federated.signing import (
    SCHEMES,
    Ed25519KeyRing,
    HmacKeyRing,
    KeyRing,
    Signer,
    make_signer,
)
from engage.federated.wire import CLIENT_ID

_SUFFIX = {"hmac-sha256": ".hmac", "ed25519": ".ed25519"}


def key_dir(home: Path) -> Path:
    """The folder of the clients' key files under an engage home."""
    return Path(home) / "fl" / "keys"


class KeyStore:
    """The key files of every client under one folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, client: str, scheme: str, public: bool = False) -> Path:
        """The key file of ``client`` (``public``: its Ed25519 public key).

        Raises
        ------
        FederatedError
            Unknown scheme, or a client id that cannot name a file.
        """
        _check(client, scheme)
        return self.root / f"{client}{_SUFFIX[scheme]}{'.pub' if public else ''}"

    def provision(self, clients: Iterable[str], scheme: str, *, rotate: bool = False) -> list[str]:
        """Create the keys that are missing (all of them with ``rotate``); returns who got one."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        made = []
        for client in clients:
            path = self.path(client, scheme)
            if path.exists() and not rotate:
                continue
            secret, public = _new_key(scheme)
            _write_secret(path, secret)
            if public is not None:
                _write_secret(self.path(client, scheme, public=True), public)
            made.append(client)
        return made

    def missing(self, clients: Iterable[str], scheme: str) -> list[str]:
        """The clients without a key file for ``scheme``."""
        return [c for c in clients if not self.path(c, scheme).exists()]

    def secret(self, client: str, scheme: str) -> bytes:
        """A client's own secret key (what only that client should hold)."""
        return _read(self.path(client, scheme))

    def signer(self, client: str, scheme: str) -> Signer:
        """The signer ``client`` uses, from its secret key file.

        Raises
        ------
        FederatedError
            The key file is missing or readable by others.
        """
        return make_signer(scheme, client, self.secret(client, scheme))

    def keyring(self, clients: Iterable[str], scheme: str) -> KeyRing:
        """The server's keyring: HMAC secrets, or only the Ed25519 public keys."""
        if scheme == "ed25519":
            return Ed25519KeyRing({c: _read(self.path(c, scheme, public=True)) for c in clients})
        return HmacKeyRing({c: self.secret(c, scheme) for c in clients})


def _check(client: str, scheme: str) -> None:
    if scheme not in SCHEMES:
        raise FederatedError(f"unknown signing scheme {scheme!r}", hint=f"use one of {SCHEMES}")
    if not CLIENT_ID.match(client):
        raise FederatedError(
            f"client id {client!r} cannot name a key file",
            hint="client ids are letters, digits, '_', '.' and '-', starting with a letter or digit",
        )


def _new_key(scheme: str) -> tuple[bytes, bytes | None]:
    if scheme == "hmac-sha256":
        return secrets.token_bytes(32), None
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    private = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return private, key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)


def _write_secret(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _read(path: Path) -> bytes:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FederatedError(
            f"no key at {path}", hint="provision keys with `engage fl keys SPEC`"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise FederatedError(
            f"key file {path} is readable by others (mode {stat.S_IMODE(mode):o})",
            hint=f"run `chmod 600 {path}` or provision new keys with `engage fl keys --rotate`",
        )
    return path.read_bytes()
