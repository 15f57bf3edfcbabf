"""The server's checks: at least a thousand mutated updates, none accepted, each with a reason.

Every mutation starts from a valid signed update for the verifier's round and changes it
the way a faulty network or an attacker could: flipped bits, overwritten or missing bytes,
edited header fields without a new signature, a stripped signature, a replay, an old or
future round, another client's key, a substituted payload, a wrong shape, NaN values.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engage.federated import wire
from engage.federated.signing import HmacSigner
from engage.federated.verify import NonceStore, Reason
from tests.unit.federated._helpers import SCHEMA, signer, vector, verifier

ROUND = 3


def _repack(raw: bytes, **changes) -> bytes:
    header, payload = wire.unpack(raw, 1 << 20)
    payload = changes.pop("payload", payload)
    return wire.pack(dataclasses.replace(header, **changes), payload)


def _mutations(rng: np.random.Generator, raw: bytes):
    """(kind, mutated bytes) for one random mutation of ``raw``."""
    kind = rng.integers(0, 14)
    data = bytearray(raw)
    if kind == 0:
        for _ in range(rng.integers(1, 9)):
            i = rng.integers(0, len(data))
            data[i] ^= 1 << rng.integers(0, 8)
        return "bit_flip", bytes(data)
    if kind == 1:
        i = rng.integers(0, len(data))
        data[i] = (data[i] + rng.integers(1, 256)) % 256
        return "overwrite", bytes(data)
    if kind == 2:
        return "truncate", bytes(data[: rng.integers(0, len(data))])
    if kind == 3:
        return "extend", bytes(data) + rng.bytes(int(rng.integers(1, 64)))
    if kind == 4:
        field = ["round", "client", "num_samples", "nonce"][rng.integers(0, 4)]
        value = {"round": ROUND + 1, "client": "c1", "num_samples": 10**6, "nonce": "ab" * 16}
        return f"edit_{field}", _repack(raw, **{field: value[field]})
    if kind == 5:
        return "unsigned", _repack(raw, signature=None)
    if kind == 6:
        return "stale", wire.encode_update(
            signer(), ROUND - rng.integers(1, 3), vector(), SCHEMA, 5
        )
    if kind == 7:
        return "future", wire.encode_update(signer(), ROUND + 1, vector(), SCHEMA, 5)
    if kind == 8:
        shape = wire.Schema((wire.TensorSpec("layer.weight", (3, 4)), *SCHEMA.tensors[1:]))
        return "wrong_shape", wire.encode_update(signer(), ROUND, vector(), shape, 5)
    if kind == 9:
        impostor = HmacSigner("c1", signer("c0")._key)  # c0's key, claiming to be c1
        return "impostor", wire.encode_update(impostor, ROUND, vector(), SCHEMA, 5)
    if kind == 10:
        outsider = HmacSigner("mallory", b"m" * 32)
        return "unknown", wire.encode_update(outsider, ROUND, vector(), SCHEMA, 5)
    if kind == 11:
        payload = wire.to_payload(vector(int(rng.integers(1, 1000))))
        digest = hashlib.sha256(payload).hexdigest()
        return "substituted", _repack(raw, payload=payload, payload_sha256=digest)
    if kind == 12:
        bad = vector()
        bad[rng.integers(0, len(bad))] = [np.nan, np.inf, -np.inf][rng.integers(0, 3)]
        return "non_finite", wire.encode_update(signer(), ROUND, bad, SCHEMA, 5)
    return "replay", raw


def test_a_thousand_random_mutations_of_signed_updates_are_all_rejected() -> None:
    rng = np.random.default_rng(20260705)
    accepted, kinds, reasons = 0, Counter(), Counter()
    for i in range(1200):
        v = verifier(ROUND)
        raw = wire.encode_update(signer(), ROUND, vector(i), SCHEMA, 5)
        kind, mutated = _mutations(rng, raw)
        if kind == "replay":
            assert v.check(raw).accepted  # the original goes through once
        verdict = v.check(mutated)
        accepted += verdict.accepted
        kinds[kind] += 1
        reasons[verdict.reason] += 1

    assert accepted == 0
    assert len(kinds) == 17
    assert min(kinds.values()) > 10
    assert {
        Reason.MALFORMED,
        Reason.BAD_SIGNATURE,
        Reason.TAMPERED,
        Reason.UNSIGNED,
        Reason.REPLAYED,
        Reason.STALE_ROUND,
        Reason.FUTURE_ROUND,
        Reason.WRONG_SHAPE,
        Reason.UNKNOWN_CLIENT,
        Reason.NON_FINITE,
    } <= set(reasons)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_edit_of_any_byte_range_is_rejected(data: st.DataObject) -> None:
    raw = wire.encode_update(signer(), ROUND, vector(), SCHEMA, 5)
    start = data.draw(st.integers(0, len(raw) - 1))
    end = data.draw(st.integers(start, min(len(raw), start + 16)))
    new = data.draw(st.binary(min_size=0, max_size=16))
    mutated = raw[:start] + new + raw[end:]
    if mutated == raw:
        return

    assert not verifier(ROUND).check(mutated).accepted


def test_a_valid_update_is_accepted_once_and_its_vector_is_exact() -> None:
    v, vec = verifier(ROUND), vector(9)

    verdict = v.check(wire.encode_update(signer("c2"), ROUND, vec, SCHEMA, 11))

    assert verdict.accepted
    assert verdict.update.client == "c2"
    np.testing.assert_array_equal(verdict.update.vector, vec)


def test_a_second_fresh_update_from_the_same_client_in_a_round_is_a_duplicate() -> None:
    v = verifier(ROUND)
    v.check(wire.encode_update(signer(), ROUND, vector(1), SCHEMA, 5))

    assert v.check(wire.encode_update(signer(), ROUND, vector(2), SCHEMA, 5)).reason == "duplicate"


def test_unselected_and_quarantined_clients_are_refused_by_name() -> None:
    v = verifier(ROUND)
    v.begin_round(ROUND, {"c0"}, quarantined={"c2"})

    assert v.check(wire.encode_update(signer("c1"), ROUND, vector(), SCHEMA, 5)).reason == (
        Reason.NOT_SELECTED
    )
    assert v.check(wire.encode_update(signer("c2"), ROUND, vector(), SCHEMA, 5)).reason == (
        Reason.QUARANTINED
    )


def test_a_replay_from_an_earlier_round_is_caught_by_its_nonce() -> None:
    v = verifier(1)
    raw = wire.encode_update(signer(), 1, vector(), SCHEMA, 5)
    assert v.check(raw).accepted
    v.begin_round(2, {"c0"})

    assert v.check(raw).reason == Reason.REPLAYED


def test_the_nonce_store_forgets_only_beyond_its_capacity() -> None:
    store = NonceStore(capacity=2)
    for n in ("a", "b", "c"):
        store.add("c0", n)

    assert not store.seen("c0", "a")
    assert store.seen("c0", "b")
    assert store.seen("c0", "c")
