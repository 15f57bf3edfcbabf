"""Per-client keys: 0600 files under ENGAGE_HOME/fl/keys, both signing schemes end to end."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from engage.errors import FederatedError
from engage.federated import wire
from engage.federated.keys import KeyStore, key_dir
from engage.federated.verify import Reason, UpdateVerifier
from tests.unit.federated._helpers import SCHEMA, vector


@pytest.mark.parametrize("scheme", ["hmac-sha256", "ed25519"])
def test_provisioned_keys_are_private_files_and_sign_verifiable_updates(tmp_path, scheme) -> None:
    store = KeyStore(key_dir(tmp_path))

    made = store.provision(["a", "b"], scheme)

    assert made == ["a", "b"]
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    for c in made:
        assert stat.S_IMODE(store.path(c, scheme).stat().st_mode) == 0o600
    v = UpdateVerifier(store.keyring(["a", "b"], scheme), SCHEMA, 1 << 16)
    v.begin_round(1, {"a", "b"})
    assert v.check(wire.encode_update(store.signer("a", scheme), 1, vector(), SCHEMA, 3)).accepted
    forged = wire.encode_update(store.signer("a", scheme), 1, vector(), SCHEMA, 3)
    header, payload = wire.unpack(forged, 1 << 16)
    as_b = wire.pack(wire.Header(**{**header.__dict__, "client": "b"}), payload)
    assert v.check(as_b).reason == Reason.BAD_SIGNATURE


def test_provisioning_keeps_existing_keys_unless_rotated(tmp_path) -> None:
    store = KeyStore(tmp_path)
    store.provision(["a"], "hmac-sha256")
    first = store.secret("a", "hmac-sha256")

    assert store.provision(["a", "b"], "hmac-sha256") == ["b"]
    assert store.secret("a", "hmac-sha256") == first
    assert store.provision(["a"], "hmac-sha256", rotate=True) == ["a"]
    assert store.secret("a", "hmac-sha256") != first


def test_an_ed25519_server_holds_only_public_keys(tmp_path) -> None:
    store = KeyStore(tmp_path)
    store.provision(["a"], "ed25519")

    ring = store.keyring(["a"], "ed25519")

    assert ring.knows("a")
    assert not hasattr(ring, "_secret")
    assert len(store.path("a", "ed25519", public=True).read_bytes()) == 32


def test_a_key_readable_by_others_is_refused_with_the_fix(tmp_path) -> None:
    store = KeyStore(tmp_path)
    store.provision(["a"], "hmac-sha256")
    os.chmod(store.path("a", "hmac-sha256"), 0o644)

    with pytest.raises(FederatedError, match="readable by others") as exc:
        store.signer("a", "hmac-sha256")
    assert "chmod 600" in exc.value.hint


def test_a_missing_key_or_a_bad_client_id_says_how_to_fix_it(tmp_path) -> None:
    store = KeyStore(tmp_path)

    with pytest.raises(FederatedError, match="no key") as exc:
        store.signer("a", "hmac-sha256")
    assert "engage fl keys" in exc.value.hint
    with pytest.raises(FederatedError, match="cannot name a key file"):
        store.path("../etc", "hmac-sha256")


def test_signatures_are_over_client_round_nonce_and_payload_hash(tmp_path) -> None:
    store = KeyStore(tmp_path)
    store.provision(["a"], "hmac-sha256")
    raw = wire.encode_update(store.signer("a", "hmac-sha256"), 4, np.zeros(SCHEMA.size), SCHEMA, 1)
    header, _ = wire.unpack(raw, 1 << 16)

    signed = header.signed_bytes()

    for part in (
        b'"client":"a"',
        b'"round":4',
        header.nonce.encode(),
        header.payload_sha256.encode(),
    ):
        assert part in signed
