"""The ``engage`` command: parses arguments, calls the API, maps errors to exit codes."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from engage.cli import exit_codes
from engage.cli.dashboard import dashboard
from engage.cli.drift import drift_app
from engage.cli.export import export
from engage.cli.fl import fl_app
from engage.cli.models import app as models_app
from engage.cli.monitor import monitor_app
from engage.cli.options import HomeOption, TrackingOption
from engage.cli.serve import deploy, serve_app
from engage.errors import EngageError

app = typer.Typer(
    name="engage",
    help="Run ML pipelines on Ray, tracked in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(models_app, name="models")
app.add_typer(drift_app, name="drift")
app.add_typer(monitor_app, name="monitor")
app.add_typer(serve_app, name="serve")
app.add_typer(fl_app, name="fl")
app.command("deploy")(deploy)
app.command("export")(export)
app.command("dashboard")(dashboard)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

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


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _guarded(fn: Callable[[], None]) -> None:
    """Run a command body: EngageError -> headline + exit code, anything else -> internal."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # MLflow logs schema migrations at INFO on every new store; users need none of it.
    # (MLflow sets its level when first imported, so say it through its variable.)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    try:
        fn()
        code = exit_codes.OK
    except EngageError as exc:
        err.print(f"[bold red]error:[/] {exc.headline}")
        err.print(exc.message, markup=False)
        if exc.hint:
            err.print(f"hint: {exc.hint}", markup=False)
        code = exc.exit_code
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: stopped cleanly; the MLflow run is marked KILLED")
        code = exit_codes.INTERRUPTED
    except Exception:
        err.print(
            "[bold red]internal error[/] (a bug in engage; please report it with this traceback):"
        )
        err.print(traceback.format_exc(), markup=False)
        code = exit_codes.INTERNAL
    raise typer.Exit(code)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    set_: SetOption = None,
    data: Annotated[bool, typer.Option(help="Also load and check the data.")] = True,
) -> None:
    """Check a spec (and its data) without running anything."""

    def body() -> None:
        from engage.spec import load_spec

        loaded = load_spec(file, set_ or [])
        if not data:
            out.print(f"[green]✓[/] {file}: valid spec for pipeline '{loaded.spec.name}'")
            return
        from engage.runtime._stages import prepare_data

        prepared = prepare_data(loaded)
        sizes = {s: len(getattr(prepared, s).y) for s in ("train", "val", "test")}
        out.print(
            f"[green]✓[/] {file}: valid spec for pipeline '{loaded.spec.name}'; data OK: "
            f"{prepared.fingerprint.rows:,} rows -> train {sizes['train']:,} / val {sizes['val']:,} "
            f"/ test {sizes['test']:,} windows"
        )

    _guarded(body)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Pipeline spec (YAML).")],
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Stream Ray worker logs.")
    ] = False,
) -> None:
    """Run a pipeline: data, train, evaluate, register."""

    def body() -> None:
        _run_file(file, set_ or [], address, tracking_uri, home, verbose)

    _guarded(body)


@app.command()
def quickstart(
    set_: SetOption = None,
    address: AddressOption = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Run the quickstart pipeline end to end on synthetic smart-home data, then serve it."""
    from engage.cli.quickstart import print_next_steps, quickstart_spec_path, show_drift_caught

    def body() -> None:
        from engage import env_vars

        result = _run_file(quickstart_spec_path(), set_ or [], address, tracking_uri, home, False)
        if result.deployment is not None and result.deployment.result.url:
            show_drift_caught(out, result, env_vars.engage_home(home))
        print_next_steps(out, result)

    _guarded(body)


@app.command()
def sync(
    home: HomeOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds to keep trying.")] = 60.0,
) -> None:
    """Send every spooled run, metric and artifact still waiting to MLflow."""
    from engage import env_vars
    from engage.cli.sync import sync as do_sync

    _guarded(lambda: do_sync(env_vars.engage_home(home), timeout, out))


def _run_file(file: Path, sets: list[str], address, tracking_uri, home, verbose):
    from engage import env_vars
    from engage.cli.progress import RunDisplay
    from engage.cli.summary import print_summary
    from engage.runtime.pipeline import RunOptions, run_pipeline
    from engage.spec import load_spec

    loaded = load_spec(file, sets)
    options = RunOptions(address, tracking_uri, env_vars.engage_home(home), verbose=verbose)
    out.print(f"[bold]engage[/] running pipeline [cyan]{loaded.spec.name}[/] from {file}")
    with RunDisplay(out, loaded.spec.data.task, loaded.spec.train.epochs) as display:
        result = run_pipeline(loaded, options, display)
    print_summary(out, loaded, result)
    return result


def main() -> None:
    try:
        app()
    except SystemExit as exc:
        sys.exit(exc.code)


if __name__ == "__main__":
    main()
