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


# -- auth per listener (issue 11 item 1) ---------------------------------------------------
OPEN = auth.Listener("0.0.0.0", 8731)
LOCAL = auth.Listener("127.0.0.1", 8731)


def test_an_app_without_token_on_a_non_loopback_listener_is_refused_whatever_it_asked():
    """The bypass: the second deploy asked for 127.0.0.1, Serve listens on 0.0.0.0."""
    with pytest.raises(EngageError) as caught:
        auth.listener_digest(OPEN, "127.0.0.1", "T", environ={})

    message = caught.value.message
    assert "listens on 0.0.0.0:8731" in message
    assert "requested host 127.0.0.1 cannot change it" in message
    assert "$T is not set" in message


def test_an_app_with_a_token_on_a_non_loopback_listener_gets_its_digest():
    assert auth.listener_digest(OPEN, "127.0.0.1", "T", environ={"T": TOKEN}) == auth.digest(TOKEN)


def test_a_loopback_listener_serves_openly_even_when_the_spec_asked_for_all_interfaces():
    """Serve kept its loopback listener: nothing is exposed, so no token is needed."""
    assert auth.listener_digest(LOCAL, "0.0.0.0", "T", environ={}) is None


def test_a_token_set_on_a_loopback_listener_is_still_checked():
    assert auth.listener_digest(LOCAL, "127.0.0.1", "T", environ={"T": TOKEN}) is not None


def test_listener_addresses_and_urls():
    assert OPEN.address == "0.0.0.0:8731"
    assert not OPEN.loopback
    assert auth.Listener("::1", 80).address == "[::1]:80"
    assert auth.Listener("::1", 80).loopback
    assert LOCAL.url("/open/") == "http://127.0.0.1:8731/open"
    assert LOCAL.url("/") == "http://127.0.0.1:8731"


def test_clients_send_the_token_only_when_there_is_one():
    assert auth.auth_headers("T", environ={"T": TOKEN}) == {"Authorization": f"Bearer {TOKEN}"}
    assert auth.auth_headers("T", environ={}) == {}
    assert auth.auth_headers(None, environ={"T": TOKEN}) == {}
