"""Bearer-token auth of the serving app.

The token comes from an environment variable the spec names (never from the spec); the
replicas get only its SHA-256 digest, so the secret is not stored in Serve's config. A
token is required whenever the app binds to anything but loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os

from engage.errors import EngageError
from engage.serve.validation import RequestError

_LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_digest(host: str, token_env: str, environ: dict[str, str] | None = None) -> str | None:
    """The digest replicas check against; None (no auth) only on a loopback address.

    Raises EngageError when ``host`` is not loopback and ``token_env`` holds no token.
    """
    token = (environ if environ is not None else os.environ).get(token_env) or None
    if token is None and not is_loopback(host):
        raise EngageError(
            f"refusing to serve on {host} without a bearer token: ${token_env} is not set",
            hint=f"export {token_env}=<a long random secret> (e.g. `openssl rand -hex 32`), "
            "or serve on 127.0.0.1",
        )
    if token is not None and len(token) < 16:
        raise EngageError(
            f"the bearer token in ${token_env} is {len(token)} characters; use at least 16",
            hint="`openssl rand -hex 32` makes a good one",
        )
    return digest(token) if token is not None else None


def check(authorization: str | None, expected_digest: str | None) -> None:
    """401 without credentials, 403 with wrong ones; compared in constant time."""
    if expected_digest is None:
        return
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise RequestError(
            401, "unauthorized", "missing bearer token: send 'Authorization: Bearer <token>'"
        )
    if not hmac.compare_digest(digest(presented.strip()), expected_digest):
        raise RequestError(403, "forbidden", "the bearer token is not valid for this deployment")
