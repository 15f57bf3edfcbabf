"""The ``engage`` command: assembles the Typer app from the subcommand modules, nothing else.

Each command lives in its own module and runs through ``engage.cli.console.guarded``; this
module only names them, so no subcommand ever needs to import it.
"""

from __future__ import annotations

import sys

import typer

from engage.cli.dashboard import dashboard
from engage.cli.drift import drift_app
from engage.cli.export import export
from engage.cli.fl import fl_app
from engage.cli.models import app as models_app
from engage.cli.monitor import monitor_app
from engage.cli.quickstart import quickstart
from engage.cli.run import run, validate
from engage.cli.serve import deploy, serve_app
from engage.cli.sync import sync

app = typer.Typer(
    name="engage",
    help="Run ML pipelines on Ray, tracked in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("validate")(validate)
app.command("run")(run)
app.command("quickstart")(quickstart)
app.command("sync")(sync)
app.add_typer(models_app, name="models")
app.add_typer(drift_app, name="drift")
app.add_typer(monitor_app, name="monitor")
app.add_typer(serve_app, name="serve")
app.add_typer(fl_app, name="fl")
app.command("deploy")(deploy)
app.command("export")(export)
app.command("dashboard")(dashboard)


def main() -> None:
    """Entry point of the ``engage`` script: run the app and exit with its code."""
    try:
        app()
    except SystemExit as exc:
        sys.exit(exc.code)


if __name__ == "__main__":
    main()
