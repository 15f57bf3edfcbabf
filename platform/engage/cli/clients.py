"""The MLflow client the ``models``, ``drift`` and ``export`` commands share.

One helper resolves the tracking URI the same way for each of them and refuses to create a
local store as a side effect of a read-only command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tracking_client(tracking_uri: str | None, home: Path | None, must_exist: bool = True) -> Any:
    """An MLflow client on the resolved store; a local store that does not exist is never created.

    Parameters
    ----------
    tracking_uri
        ``--tracking-uri`` as given (None: the environment, else the store under ``home``).
    home
        ``--home`` as given (None: ``ENGAGE_HOME`` or ``./.engage``).
    must_exist
        When false, a missing local SQLite store gives None instead of an error.

    Raises
    ------
    TrackingError
        When the local store is missing and ``must_exist`` is true.
    """
    from engage import env_vars
    from engage.errors import TrackingError
    from engage.tracking.store import open_client, resolve_tracking_uri

    uri = resolve_tracking_uri(None, tracking_uri, env_vars.engage_home(home))
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        if not must_exist:
            return None
        raise TrackingError(
            f"no MLflow store at {uri}",
            hint="run a pipeline first, or pass --tracking-uri / --home (or set ENGAGE_HOME)",
        )
    return open_client(uri)
