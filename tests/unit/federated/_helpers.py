"""Small builders shared by the federated unit tests."""

from __future__ import annotations

import numpy as np

from engage.federated.signing import HmacKeyRing, HmacSigner
from engage.federated.verify import UpdateVerifier
from engage.federated.wire import Schema, TensorSpec

SCHEMA = Schema((TensorSpec("layer.weight", (4, 3)), TensorSpec("layer.bias", (4,))))
CLIENTS = ("c0", "c1", "c2")
KEYS = {c: bytes([i + 1]) * 32 for i, c in enumerate(CLIENTS)}


def signer(client: str = "c0") -> HmacSigner:
    return HmacSigner(client, KEYS[client])


def verifier(round_: int = 3, max_bytes: int = 1 << 16) -> UpdateVerifier:
    v = UpdateVerifier(HmacKeyRing(KEYS), SCHEMA, max_bytes)
    v.begin_round(round_, set(CLIENTS))
    return v


def vector(seed: int = 0, n: int = SCHEMA.size) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=n).astype(np.float32)
