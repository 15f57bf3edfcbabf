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
