"""The ``engage`` command: assembles the Typer app from the subcommand modules, nothing else.

Each command lives in its own module and runs through ``engage.cli.console.guarded``; this
module only names them, so no subcommand ever needs to import it.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from engage import env_vars
from engage.cli.dashboard import dashboard
from engage.cli.drift import drift_app
from engage.cli.export import export
from engage.cli.fl import fl_app
from engage.cli.init import init
from engage.cli.models import app as models_app
from engage.cli.monitor import monitor_app
from engage.cli.plan import plan
from engage.cli.profile import profile
from engage.cli.quickstart import quickstart
from engage.cli.run import run, validate
from engage.cli.serve import deploy, serve_app
from engage.cli.sync import sync
from engage.cli.version import version, version_callback

app = typer.Typer(
    name="engage",
    help="Run ML pipelines on Ray, tracked in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Run ML pipelines on Ray, tracked in MLflow."""


app.command("init")(init)
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
app.command("profile")(profile)
app.command("plan")(plan)
app.command("dashboard")(dashboard)
app.command("version")(version)

# Where Ray logs its token-auth notices; named, not imported: `engage --help` imports no Ray.
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


class _DropRayAuthEnabledNotice(logging.Filter):
    """Drop Ray's "token authentication is enabled ... opt out" notice on a local start.

    It is informational (engage keeps Ray's token auth on) and tells users of engage to set a
    variable they need not touch; the "disabled" warning, which matters, still passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for the opt-out notice, True for every other record."""
        return "disabled to opt out" not in record.getMessage()


def _quiet_third_party_output() -> None:
    """Keep Ray's and MLflow's notices and progress bars out of engage's output."""
    env_vars.set_third_party_defaults()
    logging.getLogger(_RAY_AUTH_LOGGER).addFilter(_DropRayAuthEnabledNotice())


def main() -> None:
    """Entry point of the ``engage`` script: run the app and exit with its code."""
    _quiet_third_party_output()
    try:
        app()
    except SystemExit as exc:
        sys.exit(exc.code)


if __name__ == "__main__":
    main()
