"""Bearer-token auth: required off loopback, 401 without a token, 403 with a wrong one."""

from __future__ import annotations

import pytest

from engage.errors import EngageError
from engage.serve import auth
from engage.serve.validation import RequestError

TOKEN = "s3cret-token-0123456789"


def test_loopback_without_token_serves_openly():
    assert auth.token_digest("127.0.0.1", "T", environ={}) is None
    assert auth.token_digest("localhost", "T", environ={}) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "example.org"])
def test_any_other_address_without_token_is_refused(host):
    with pytest.raises(EngageError, match=r"without a bearer token: \$T is not set"):
        auth.token_digest(host, "T", environ={})


def test_short_tokens_are_refused():
    with pytest.raises(EngageError, match="at least 16"):
        auth.token_digest("0.0.0.0", "T", environ={"T": "short"})


def test_the_replicas_get_a_digest_not_the_token():
    digest = auth.token_digest("0.0.0.0", "T", environ={"T": TOKEN})

    assert digest is not None
    assert TOKEN not in digest


@pytest.mark.parametrize(
    ("header", "status"),
    [(None, 401), ("Basic abc", 401), ("Bearer ", 401), ("Bearer wrong-token", 403)],
)
def test_bad_credentials(header, status):
    with pytest.raises(RequestError) as caught:
        auth.check(header, auth.digest(TOKEN))

    assert caught.value.status == status


def test_right_token_passes_and_no_auth_passes_everything():
    auth.check(f"Bearer {TOKEN}", auth.digest(TOKEN))
    auth.check(None, None)
