"""Server-side checks on every update before it can reach scoring or aggregation.

:class:`UpdateVerifier` turns raw bytes into an :class:`UpdateVerdict`: accepted with the
verified update, or rejected with a :class:`Reason`. The order is fixed: size and format,
scheme, known client, signature present, signature valid, payload hash, replay, round,
selection, duplicate, shape, finite values. The nonce is remembered only once the
signature holds, so forged junk cannot fill the replay store.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from engage.federated.signing import SIGNATURE_HEX, KeyRing
from engage.federated.wire import Header, Schema, WireError, from_payload, unpack


class Reason(StrEnum):
    """Why an update was rejected (the ``reason`` label of the rejection counter)."""

    MALFORMED = "malformed"
    OVERSIZED = "oversized"
    WRONG_SCHEME = "wrong_scheme"
    UNKNOWN_CLIENT = "unknown_client"
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"
    TAMPERED = "tampered"
    REPLAYED = "replayed"
    STALE_ROUND = "stale_round"
    FUTURE_ROUND = "future_round"
    QUARANTINED = "quarantined"
    NOT_SELECTED = "not_selected"
    DUPLICATE = "duplicate"
    WRONG_SHAPE = "wrong_shape"
    NON_FINITE = "non_finite"


@dataclass(frozen=True)
class VerifiedUpdate:
    """An update whose every check passed: the client's model change for one round."""

    client: str
    round: int
    nonce: str
    num_samples: int
    vector: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class UpdateVerdict:
    """The verifier's result for one message: never a decision about the client."""

    round: int
    client: str | None  # as claimed; None when the message did not parse
    reason: Reason | None
    detail: str = ""
    update: VerifiedUpdate | None = field(default=None, repr=False)

    @property
    def accepted(self) -> bool:
        return self.reason is None


class NonceStore:
    """Nonces seen per client, the newest ``capacity`` of each."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._order: dict[str, deque[str]] = {}
        self._seen: dict[str, set[str]] = {}

    def seen(self, client: str, nonce: str) -> bool:
        return nonce in self._seen.get(client, ())

    def add(self, client: str, nonce: str) -> None:
        order = self._order.setdefault(client, deque())
        seen = self._seen.setdefault(client, set())
        order.append(nonce)
        seen.add(nonce)
        if len(order) > self.capacity:
            seen.discard(order.popleft())


class UpdateVerifier:
    """Checks updates for the current round against keys, schema and what was seen."""

    def __init__(
        self,
        keyring: KeyRing,
        schema: Schema,
        max_payload_bytes: int,
        nonces: NonceStore | None = None,
    ) -> None:
        self.keyring = keyring
        self.schema = schema
        self.max_payload_bytes = max_payload_bytes
        self.nonces = nonces or NonceStore()
        self.round = 0
        self._selected: frozenset[str] = frozenset()
        self._quarantined: frozenset[str] = frozenset()
        self._done: set[str] = set()

    def begin_round(
        self, round_: int, selected: set[str], quarantined: set[str] | frozenset = frozenset()
    ) -> None:
        self.round = round_
        self._selected = frozenset(selected)
        self._quarantined = frozenset(quarantined)
        self._done = set()

    def check(self, raw: bytes) -> UpdateVerdict:
        try:
            header, payload = unpack(raw, self.max_payload_bytes)
        except WireError as exc:
            return UpdateVerdict(self.round, None, Reason(exc.reason), exc.detail)
        reason, detail = self._authenticate(header, payload)
        if reason is None:
            reason, detail = self._admit(header)
        if reason is None:
            reason, detail, vector = self._content(header, payload)
        if reason is not None:
            return UpdateVerdict(self.round, header.client, reason, detail)
        self._done.add(header.client)
        update = VerifiedUpdate(
            header.client, header.round, header.nonce, header.num_samples, vector
        )
        return UpdateVerdict(self.round, header.client, None, "", update)

    def _authenticate(self, h: Header, payload: bytes) -> tuple[Reason | None, str]:
        if h.kind != "update":
            return Reason.MALFORMED, f"a {h.kind!r} message is not an update"
        if h.scheme != self.keyring.scheme:
            return Reason.WRONG_SCHEME, f"{h.scheme} instead of {self.keyring.scheme}"
        if not self.keyring.knows(h.client):
            return Reason.UNKNOWN_CLIENT, f"no key for {h.client!r}"
        if h.signature is None:
            return Reason.UNSIGNED, "no signature"
        if len(h.signature) != SIGNATURE_HEX[h.scheme]:
            return Reason.BAD_SIGNATURE, "signature of the wrong length"
        if not self.keyring.verify(h.client, h.signed_bytes(), bytes.fromhex(h.signature)):
            return Reason.BAD_SIGNATURE, "signature does not match the header"
        if hashlib.sha256(payload).hexdigest() != h.payload_sha256:
            return Reason.TAMPERED, "payload does not match its signed hash"
        if self.nonces.seen(h.client, h.nonce):
            return Reason.REPLAYED, f"nonce {h.nonce[:8]}… already used"
        self.nonces.add(h.client, h.nonce)
        return None, ""

    def _admit(self, h: Header) -> tuple[Reason | None, str]:
        if h.round < self.round:
            return Reason.STALE_ROUND, f"round {h.round} during round {self.round}"
        if h.round > self.round:
            return Reason.FUTURE_ROUND, f"round {h.round} during round {self.round}"
        if h.client in self._quarantined:
            return Reason.QUARANTINED, f"{h.client} is quarantined"
        if h.client not in self._selected:
            return Reason.NOT_SELECTED, f"{h.client} was not sampled for round {self.round}"
        if h.client in self._done:
            return Reason.DUPLICATE, f"{h.client} already has an update in round {self.round}"
        return None, ""

    def _content(self, h: Header, payload: bytes) -> tuple[Reason | None, str, np.ndarray | None]:
        if h.schema != self.schema:
            return Reason.WRONG_SHAPE, "declared tensors differ from the model's", None
        vector = from_payload(payload)
        if not np.isfinite(vector).all():
            return Reason.NON_FINITE, "NaN or infinite values", None
        if h.num_samples < 1:
            return Reason.MALFORMED, "num_samples must be >= 1", None
        return None, "", vector
