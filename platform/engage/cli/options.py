"""Options several engage commands share, declared once so they read the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TrackingOption = Annotated[
    str | None,
    typer.Option("--tracking-uri", help="MLflow tracking URI; overrides env (and the spec)."),
]
HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="Folder for engage's files; default: ENGAGE_HOME or ./.engage."),
]
EventsUriOption = Annotated[
    str | None,
    typer.Option("--events-uri", help="Event store URL; default: ENGAGE_EVENTS_URI, else SQLite."),
]
AllowRemoteOption = Annotated[
    bool, typer.Option("--allow-remote", help="Allow a non-loopback --host.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a spec field: --set train.epochs=3 (repeatable)."),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        help="Ray cluster address (host:port or 'auto'); default: RAY_ADDRESS, else a local cluster."
    ),
]
ServeAddressOption = Annotated[
    str | None,
    typer.Option(help="An existing Ray cluster (host:port); default: a local head engage manages."),
]


def require_loopback(host: str, allow_remote: bool, what: str) -> None:
    """Refuse to listen off loopback unless the user passed --allow-remote.

    Raises
    ------
    EngageError
        When ``host`` is not a loopback address and ``allow_remote`` is false.
    """
    from engage.errors import EngageError
    from engage.monitor.service import is_loopback

    if not is_loopback(host) and not allow_remote:
        raise EngageError(
            f"refusing to serve the {what} on {host}: it is not a loopback address",
            hint="pass --allow-remote to listen there on purpose, or drop --host",
        )
