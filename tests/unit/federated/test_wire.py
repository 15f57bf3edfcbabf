"""The wire format: raw float32 tensors under a canonical, declared header; no pickle."""

from __future__ import annotations

import numpy as np
import pytest

from engage.federated import wire
from tests.unit.federated._helpers import SCHEMA, signer, vector


def test_an_update_round_trips_exactly_with_its_declared_schema() -> None:
    v = vector(1)

    header, payload = wire.unpack(wire.encode_update(signer(), 7, v, SCHEMA, 42), 1 << 16)

    assert (header.client, header.round, header.num_samples) == ("c0", 7, 42)
    assert header.schema == SCHEMA
    np.testing.assert_array_equal(wire.from_payload(payload), v)
    assert set(wire.Schema.split(SCHEMA, v)) == {"layer.weight", "layer.bias"}


def test_the_payload_is_little_endian_float32_bytes_and_nothing_is_pickled() -> None:
    v = np.arange(SCHEMA.size, dtype=np.float32)

    raw = wire.encode_update(signer(), 1, v, SCHEMA, 1)

    assert raw.endswith(v.astype("<f4").tobytes())
    assert b"\x80\x04" not in raw[:8]
    assert b"pickle" not in raw


def test_a_global_model_message_round_trips() -> None:
    v = vector(2)

    session = "5e" * 16

    r, out, got = wire.decode_global(wire.encode_global(5, v, SCHEMA, session), SCHEMA, 1 << 16)

    assert r == 5
    np.testing.assert_array_equal(out, v)
    assert got == session


def test_the_session_is_part_of_what_the_signature_covers() -> None:
    raw = wire.encode_update(signer(), 1, vector(), SCHEMA, 1, session="ab" * 16)
    header, _ = wire.unpack(raw, 1 << 16)

    assert header.session == "ab" * 16
    assert b'"session":"' + b"ab" * 16 + b'"' in header.signed_bytes()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "malformed"),
        (b"EFL1" + (10**9).to_bytes(4, "little"), "oversized"),
        (b"XXXX\x00\x00\x00\x00", "malformed"),
        (b"EFL1\x02\x00\x00\x00{}", "malformed"),
    ],
)
def test_off_format_bytes_are_refused_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(wire.WireError) as exc:
        wire.unpack(raw, 1 << 16)

    assert exc.value.reason == reason


def test_a_payload_over_the_limit_is_refused_before_it_is_read() -> None:
    raw = wire.encode_update(signer(), 1, vector(), SCHEMA, 1)

    with pytest.raises(wire.WireError) as exc:
        wire.unpack(raw, max_payload_bytes=SCHEMA.nbytes - 1)

    assert exc.value.reason == "oversized"


def test_a_non_canonical_but_equivalent_header_is_refused() -> None:
    raw = wire.encode_update(signer(), 1, vector(), SCHEMA, 1)
    header, payload = wire.unpack(raw, 1 << 16)
    loose = wire.json.dumps(header.to_json(), indent=1).encode()

    with pytest.raises(wire.WireError, match="canonical"):
        wire.unpack(wire._PREFIX.pack(wire.MAGIC, len(loose)) + loose + payload, 1 << 16)
