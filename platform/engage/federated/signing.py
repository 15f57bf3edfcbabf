"""Signing schemes for updates: HMAC-SHA256 with per-client keys, or Ed25519.

A :class:`Signer` lives with one client and signs ``Header.signed_bytes()``; the server's
:class:`KeyRing` checks a signature against the claimed client's key. Schemes are
registered by name (``hmac-sha256``, ``ed25519``).
"""

from __future__ import annotations

import hashlib
import hmac
from abc import ABC, abstractmethod
from collections.abc import Mapping

SIGNATURE_HEX = {"hmac-sha256": 64, "ed25519": 128}
SCHEMES = tuple(SIGNATURE_HEX)


class Signer(ABC):
    """Signs messages for one client."""

    scheme: str

    def __init__(self, client: str) -> None:
        self.client = client

    @abstractmethod
    def sign(self, message: bytes) -> bytes:
        """The signature of ``message`` under this client's key."""


class KeyRing(ABC):
    """The server's view of every client's key: who is known, whose signature is valid."""

    scheme: str

    @abstractmethod
    def knows(self, client: str) -> bool:
        """Whether the ring holds a key for ``client``."""

    @abstractmethod
    def verify(self, client: str, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is ``client``'s over ``message`` (the client must be known)."""


class HmacSigner(Signer):
    """HMAC-SHA256 under the client's own 32-byte secret."""

    scheme = "hmac-sha256"

    def __init__(self, client: str, key: bytes) -> None:
        super().__init__(client)
        self._key = bytes(key)

    def sign(self, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` under the client's secret."""
        return hmac.new(self._key, message, hashlib.sha256).digest()


class HmacKeyRing(KeyRing):
    """HMAC keys of every client (the server must hold the shared secrets)."""

    scheme = "hmac-sha256"

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = dict(keys)

    def knows(self, client: str) -> bool:
        """Whether the ring holds ``client``'s secret."""
        return client in self._keys

    def verify(self, client: str, message: bytes, signature: bytes) -> bool:
        """Recompute the HMAC and compare in constant time."""
        expected = hmac.new(self._keys[client], message, hashlib.sha256).digest()
        return hmac.compare_digest(expected, signature)


class Ed25519Signer(Signer):
    """Ed25519 with the client's private key; the server needs only public keys."""

    scheme = "ed25519"

    def __init__(self, client: str, private: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        super().__init__(client)
        self._key = Ed25519PrivateKey.from_private_bytes(bytes(private))

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``."""
        return self._key.sign(message)


class Ed25519KeyRing(KeyRing):
    """Ed25519 public keys of every client."""

    scheme = "ed25519"

    def __init__(self, public: Mapping[str, bytes]) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self._keys = {c: Ed25519PublicKey.from_public_bytes(k) for c, k in public.items()}

    def knows(self, client: str) -> bool:
        """Whether the ring holds ``client``'s public key."""
        return client in self._keys

    def verify(self, client: str, message: bytes, signature: bytes) -> bool:
        """Check the Ed25519 signature against ``client``'s public key."""
        from cryptography.exceptions import InvalidSignature

        try:
            self._keys[client].verify(signature, message)
        except InvalidSignature:
            return False
        return True


def make_signer(scheme: str, client: str, secret: bytes) -> Signer:
    """The signer of ``scheme`` for ``client`` with its secret key bytes."""
    return {"hmac-sha256": HmacSigner, "ed25519": Ed25519Signer}[scheme](client, secret)
