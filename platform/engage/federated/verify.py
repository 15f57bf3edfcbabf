"""Server-side checks on every update before it can reach scoring or aggregation.

:class:`UpdateVerifier` turns raw bytes into an :class:`UpdateVerdict`: accepted with the
verified update, or rejected with a :class:`Reason`. The order is fixed: size and format,
scheme, known client, signature present, signature valid, payload hash, session, replay,
round, selection, duplicate, shape, finite values. The nonce is remembered only once the
signature holds, so forged junk cannot fill the replay store.

Two bindings hold across runs, where keys are reused and nonces are not remembered: every
signed header names the run's session (drawn by the server per run), so an update signed
in another run is a replay; and a client's ``num_samples``, which it signs itself, is
clamped to the count the server assigned it, so no client can sign 10^12 and dominate a
sample-weighted aggregate.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from engage.federated.signing import SIGNATURE_HEX, KeyRing
from engage.federated.wire import NO_SESSION, Header, Schema, WireError, from_payload, unpack


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
        """Whether every check passed."""
        return self.reason is None


class NonceStore:
    """Nonces seen per client, the newest ``capacity`` of each."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._order: dict[str, deque[str]] = {}
        self._seen: dict[str, set[str]] = {}

    def seen(self, client: str, nonce: str) -> bool:
        """Whether ``client`` has used ``nonce`` before."""
        return nonce in self._seen.get(client, ())

    def add(self, client: str, nonce: str) -> None:
        """Remember ``nonce`` for ``client``, forgetting its oldest past ``capacity``."""
        order = self._order.setdefault(client, deque())
        seen = self._seen.setdefault(client, set())
        order.append(nonce)
        seen.add(nonce)
        if len(order) > self.capacity:
            seen.discard(order.popleft())


class UpdateVerifier:
    """Checks updates for the current round against keys, schema and what was seen.

    Parameters
    ----------
    keyring:
        The clients' keys (HMAC secrets or Ed25519 public keys).
    schema:
        The tensors every update must declare.
    max_payload_bytes:
        The largest payload read at all.
    nonces:
        The replay store (a fresh one by default).
    session:
        This run's session id (32 hex digits); updates signed for another are replays.
    samples:
        The sample count the server assigned each client; a larger signed count is
        clamped to it. None: counts are taken as signed.
    """

    def __init__(
        self,
        keyring: KeyRing,
        schema: Schema,
        max_payload_bytes: int,
        nonces: NonceStore | None = None,
        *,
        session: str = NO_SESSION,
        samples: Mapping[str, int] | None = None,
    ) -> None:
        self.keyring = keyring
        self.schema = schema
        self.max_payload_bytes = max_payload_bytes
        self.nonces = nonces or NonceStore()
        self.session = session
        self.samples = dict(samples) if samples is not None else None
        self.round = 0
        self._selected: frozenset[str] = frozenset()
        self._quarantined: frozenset[str] = frozenset()
        self._done: set[str] = set()

    def begin_round(
        self, round_: int, selected: set[str], quarantined: set[str] | frozenset = frozenset()
    ) -> None:
        """Start round ``round_``: who was sampled, who is quarantined; no update yet."""
        self.round = round_
        self._selected = frozenset(selected)
        self._quarantined = frozenset(quarantined)
        self._done = set()

    def check(self, raw: bytes) -> UpdateVerdict:
        """The verdict on one raw message: accepted with its update, or the first failed
        check's reason (the order is in the module docstring).
        """
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
        num_samples, detail = self._bound_samples(header)
        update = VerifiedUpdate(header.client, header.round, header.nonce, num_samples, vector)
        return UpdateVerdict(self.round, header.client, None, detail, update)

    def _bound_samples(self, h: Header) -> tuple[int, str]:
        """The signed sample count, clamped to what the server assigned the client."""
        assigned = None if self.samples is None else self.samples.get(h.client)
        if assigned is None or h.num_samples <= assigned:
            return h.num_samples, ""
        return assigned, f"num_samples {h.num_samples} clamped to the {assigned} assigned"

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
        if h.session != self.session:
            return Reason.REPLAYED, f"signed for another run (session {h.session[:8]}…)"
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
