"""Tracking URIs without their secrets: masked wherever printed or stored, whole at send time.

A URI may carry a password (``http://user:pw@host``, ``postgresql://user:pw@host/db``).
engage prints and stores it masked (``user:***@host``): the spool and every message keep
the masked form. The whole URI lives only in memory: :func:`remember` keeps it for this
process (the drainer process is told it over a pipe, never on a command line), and
:func:`resolve` turns a masked URI back into it when the drainer opens a client. A later
process (``engage sync``) gets the password from ``MLFLOW_TRACKING_URI`` (the whole URI)
or ``MLFLOW_TRACKING_PASSWORD``.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from engage.errors import TrackingError

MASK = "***"
_lock = threading.Lock()
_known: dict[str, str] = {}  # masked -> whole, for the URIs this process was given
_listeners: list[Callable[[str], None]] = []


def mask_uri(uri: str) -> str:
    """``uri`` with its password, if any, replaced by ``***``."""
    try:
        parts = urlsplit(uri)
        password = parts.password
    except ValueError:
        return uri
    if not password or password == MASK:
        return uri
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}"))


_IN_TEXT = re.compile(r"([a-z][a-z0-9+.-]*://[^:/@\s]*):([^@\s/]+)@", re.IGNORECASE)


class MissingPassword(TrackingError):
    """A stored (masked) tracking URI whose password this process was not given."""


def mask_text(text: str) -> str:
    """``text`` with the password of every URI in it replaced by ``***`` (for messages)."""
    return _IN_TEXT.sub(lambda m: f"{m.group(1)}:{MASK}@", text)


def remember(uri: str) -> str:
    """Keep the whole ``uri`` in this process's memory; returns its masked form to store."""
    masked = mask_uri(uri)
    if masked != uri:
        with _lock:
            new = _known.get(masked) != uri
            _known[masked] = uri
            listeners = list(_listeners) if new else []
        for listener in listeners:
            listener(uri)
    return masked


def known() -> list[str]:
    """The whole URIs remembered so far (to hand to a drainer process)."""
    with _lock:
        return list(_known.values())


def on_remember(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call ``listener(uri)`` for each whole URI remembered from now on; returns an undo."""
    with _lock:
        _listeners.append(listener)

    def undo() -> None:
        with _lock, contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return undo


def resolve(uri: str) -> str:
    """The whole URI for a stored (masked) one.

    Raises
    ------
    MissingPassword
        The password is not known to this process, in ``MLFLOW_TRACKING_URI`` or in
        ``MLFLOW_TRACKING_PASSWORD``.
    """
    if mask_uri(uri) != uri or MASK not in uri:
        return uri
    with _lock:
        if uri in _known:
            return _known[uri]
    env_uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if env_uri and mask_uri(env_uri) == uri:
        return env_uri
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if password:
        return uri.replace(f":{MASK}@", f":{_quote(password)}@", 1)
    raise MissingPassword(
        f"the spool keeps {uri} without its password, and this process does not know it",
        hint="export MLFLOW_TRACKING_URI with the whole URI (or MLFLOW_TRACKING_PASSWORD), "
        "then run `engage sync`; nothing has been dropped",
    )


def sqlite_store_path(uri: str | None) -> Path | None:
    """The file of a ``sqlite:///`` tracking URI, else None."""
    if uri and uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///"))
    return None


def _quote(password: str) -> str:
    from urllib.parse import quote

    return quote(password, safe="")
