"""Which tracking faults are worth retrying, and which need a person: one place decides.

The drainer retries a *transient* fault (the server down or restarting, a 5xx, a timeout,
"database is locked") with backoff, showing the lag. A *permanent* fault cannot heal by
waiting: a damaged spool file, a half-created or out-of-date MLflow store, credentials
the server refuses, a tracking URI MLflow will not open (a file store, an unknown scheme). Those stop the drainer with a :class:`~engage.errors.TrackingError`
(exit 5) whose message names the file or server and the repair to run.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from engage.errors import TrackingError
from engage.tracking.uris import MissingPassword, mask_text, mask_uri, sqlite_store_path

_SCHEMA_MARKS = (
    "already exists",
    "duplicate column",
    "no such table",
    "no such column",
    "out-of-date database schema",
    "can't locate revision",
)
_DAMAGE_MARKS = ("malformed", "not a database", "database corrupt")
# MLflow itself will not open a store for the URI: its file store is in maintenance mode
# (refused unless MLFLOW_ALLOW_FILE_STORE=true), or the scheme has no store at all.
_REFUSED_URI_MARKS = (
    "filesystem tracking backend",
    "unsupported uri",
    "could not find a registered",
)
_AUTH_CODES = {"UNAUTHENTICATED", "PERMISSION_DENIED"}
# MLflow's client says "failed with error code 401 != 200" for a non-JSON refusal.
_AUTH_TEXT = re.compile(r"error code (401|403)\b|\b(unauthorized|forbidden)\b")


class SpoolDamaged(TrackingError):
    """The spool file itself is damaged (a corrupted page): `engage sync --repair` salvages it."""

    headline = "tracking spool damaged"


def permanent_fault(exc: BaseException, uri: str | None) -> TrackingError | None:
    """The user-facing error if ``exc`` is permanent, else None (retry it).

    Parameters
    ----------
    exc
        What a drain pass raised.
    uri
        The tracking URI the pass was sending to, if any (named in the message).
    """
    if isinstance(exc, SpoolDamaged | MissingPassword):
        return exc
    text = " ".join(str(part) for part in _chain(exc)).lower()
    if "database is locked" in text or "database table is locked" in text:
        return None
    shown = mask_uri(uri or "")
    store = sqlite_store_path(uri)
    if _is_auth(exc, text):
        return TrackingError(
            f"MLflow at {shown} refused engage's credentials: {_first_line(exc)}",
            hint="set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
            "MLFLOW_TRACKING_TOKEN) for this server, then run `engage sync`; "
            "nothing has been dropped from the spool",
        )
    if any(mark in text for mark in _SCHEMA_MARKS + _DAMAGE_MARKS):
        return _store_fault(exc, shown, store)
    if any(mark in text for mark in _REFUSED_URI_MARKS):
        return TrackingError(
            f"MLflow will not open the tracking URI {shown}: {_first_line(exc)}",
            hint="track to a database (`sqlite:///path/mlflow.db`, the default under the home) "
            "or an MLflow server (http://...); a file store needs MLFLOW_ALLOW_FILE_STORE=true. "
            "Then run `engage sync`; nothing has been dropped from the spool",
        )
    return None


def _store_fault(exc: BaseException, shown: str, store: Path | None) -> TrackingError:
    what = "damaged" if any(m in str(exc).lower() for m in _DAMAGE_MARKS) else "half-created"
    if store is not None:
        return TrackingError(
            f"the MLflow store {store} is {what} or of another schema: {_first_line(exc)}",
            hint="run `engage sync --repair`: it moves the store aside (kept as a backup "
            "beside it), creates a fresh one and resends every run still in the spool",
        )
    return TrackingError(
        f"MLflow at {shown} has a database of another schema: {_first_line(exc)}",
        hint="its database needs `mlflow db upgrade <database URI>` (by whoever runs that "
        "server); then run `engage sync`; nothing has been dropped from the spool",
    )


def _is_auth(exc: BaseException, text: str) -> bool:
    codes = {getattr(e, "error_code", None) for e in _chain(exc)}
    if codes & _AUTH_CODES:
        return True
    status = {getattr(getattr(e, "response", None), "status_code", None) for e in _chain(exc)}
    return bool(status & {401, 403}) or bool(_AUTH_TEXT.search(text))


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _first_line(exc: BaseException) -> str:
    lines = mask_text(str(getattr(exc, "message", None) or exc)).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def is_sqlite_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (retrying cannot help)."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(m in text for m in _DAMAGE_MARKS)
