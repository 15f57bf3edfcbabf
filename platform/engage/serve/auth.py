"""Bearer-token auth of the serving app, decided per listener.

The token comes from an environment variable the spec names (never from the spec); the
replicas get only its SHA-256 digest, so the secret is not stored in Serve's config nor in
the serving head's environment. A token is required whenever the app is reachable on
anything but loopback. What decides that is the **listener**, the address Serve's HTTP
entry (HAProxy or Serve's proxy, and the replicas' own ports) actually binds: Serve keeps
the ``http_options`` of its first start, so a later deploy's ``host`` changes nothing and
must not decide auth (:func:`listener_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass

from engage.errors import EngageError
from engage.serve.validation import RequestError

_LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Listener:
    """Where a cluster's Serve HTTP entry listens, as bound when Serve first started."""

    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port`` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        return is_loopback(self.host)

    def url(self, route_prefix: str = "/") -> str:
        """The HTTP URL of an app served under ``route_prefix`` on this listener."""
        return f"http://{self.address}{route_prefix.rstrip('/')}"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def digest(token: str) -> str:
    """The SHA-256 hex digest of ``token``: what the replicas compare presented tokens to."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_digest(host: str, token_env: str, environ: dict[str, str] | None = None) -> str | None:
    """The digest replicas check against; None (no auth) only on a loopback address.

    ``host`` is where the app will be reachable: the requested host before anything runs
    (to refuse early), the listener's host once Serve runs (:func:`listener_digest`).

    Raises
    ------
    EngageError
        When ``host`` is not loopback and ``token_env`` holds no token, or the token is
        shorter than 16 characters.
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


def listener_digest(
    listener: Listener, requested_host: str, token_env: str, environ: dict[str, str] | None = None
) -> str | None:
    """The digest for an app on ``listener``: auth is decided by where Serve listens.

    ``requested_host`` (the deploy's ``host``) only words the message: when Serve already
    listens elsewhere, the request cannot move it, and an app without a token on a
    non-loopback listener would answer anyone.

    Raises
    ------
    EngageError
        When the listener is not loopback and ``token_env`` holds no token (naming the real
        listening address), or the token is too short.
    """
    token = (environ if environ is not None else os.environ).get(token_env) or None
    if token is None and not listener.loopback:
        moved = (
            f" (bound when Serve first started on this cluster; the requested host "
            f"{requested_host} cannot change it)"
            if requested_host != listener.host
            else ""
        )
        raise EngageError(
            f"refusing to serve without a bearer token: Serve on this cluster listens on "
            f"{listener.address}, which is not loopback{moved}; ${token_env} is not set",
            hint=f"export {token_env}=<a long random secret> (e.g. `openssl rand -hex 32`), or "
            "stop every app (`engage serve stop`) and deploy again on 127.0.0.1",
        )
    return token_digest(listener.host, token_env, environ)


def auth_headers(token_env: str | None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``Authorization`` header for a client of an app whose token is in ``$token_env``.

    Empty when the app needs no token or the variable is unset (the request then gets 401).
    """
    token = (environ if environ is not None else os.environ).get(token_env) if token_env else None
    return {"Authorization": f"Bearer {token}"} if token else {}


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
