"""``engage dashboard``: the Streamlit dashboard on 127.0.0.1, reading the same stores as
``engage monitor`` (a thin launcher: the app is ``dashboard/app.py`` of the checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from engage.cli.console import guarded, out
from engage.cli.options import (
    AllowRemoteOption,
    EventsUriOption,
    HomeOption,
    TrackingOption,
    require_loopback,
)
from engage.errors import EngageError

APP = Path("dashboard") / "app.py"


def dashboard(
    home: HomeOption = None,
    events_uri: EventsUriOption = None,
    tracking_uri: TrackingOption = None,
    host: Annotated[str, typer.Option(help="Address to serve the dashboard on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the dashboard.", min=1, max=65535)] = 8501,
    allow_remote: AllowRemoteOption = False,
) -> None:
    """Runs, jobs, alerts, drift, federated rounds and models in the browser (Ctrl-C stops it)."""

    def _body() -> None:
        from engage import env_vars

        require_loopback(host, allow_remote, "dashboard")
        app = app_path()
        env = {**os.environ, "ENGAGE_HOME": str(env_vars.engage_home(home))}
        env |= {"ENGAGE_EVENTS_URI": events_uri} if events_uri else {}
        env |= {"MLFLOW_TRACKING_URI": tracking_uri} if tracking_uri else {}
        out.print(f"engage dashboard on http://{host}:{port} (Ctrl-C stops it)")
        command = [sys.executable, "-m", "streamlit", "run", str(app), *server_flags(host, port)]
        with subprocess.Popen(command, env=env) as server:
            try:
                code = server.wait()
            except KeyboardInterrupt:  # Ctrl-C reached it too; a SIGTERM to engage alone did not
                server.terminate()
                server.wait(timeout=15)
                return
        if code != 0:
            raise EngageError(f"the dashboard server exited with code {code}")

    guarded(_body)


def server_flags(host: str, port: int) -> list[str]:
    """Streamlit's flags for a local, headless server that phones nowhere."""
    return [
        "--server.headless=true",
        f"--server.address={host}",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
        "--client.toolbarMode=viewer",
    ]


def app_path() -> Path:
    """``dashboard/app.py`` of the checkout engage runs from, else of the working folder."""
    import engage

    for root in (Path(engage.__file__).resolve().parents[2], Path.cwd()):
        if (root / APP).is_file():
            return root / APP
    raise EngageError(
        "the dashboard app (dashboard/app.py) is not beside this engage installation",
        hint="run it from a checkout of engage: `make dashboard`, or `engage dashboard` there",
    )
