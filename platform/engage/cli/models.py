"""``engage models``: list, show, promote and roll back registered model versions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from engage.cli.options import HomeOption, TrackingOption

app = typer.Typer(
    name="models",
    help="Registered models: champion and candidate versions, promotion and rollback.",
    no_args_is_help=True,
)

ReasonOption = Annotated[
    str, typer.Option("--reason", "-r", help="Why: recorded as a tag on the version.")
]


@app.command("list")
def list_(tracking_uri: TrackingOption = None, home: HomeOption = None) -> None:
    """Registered models with their version count, champion and candidate."""

    def body() -> None:
        from engage.tracking.catalog import list_models

        client = _client(tracking_uri, home, must_exist=False)
        models = list_models(client) if client is not None else []
        if not models:
            _out().print("no registered models yet: a pipeline with tracking.registration adds one")
            return
        table = Table("model", "versions", "champion", "candidate", "updated")
        for m in models:
            table.add_row(
                m.name, str(m.versions), m.champion or "-", m.candidate or "-", _time(m.updated_ms)
            )
        _out().print(table)

    _guard(body)


@app.command()
def show(
    ref: Annotated[str, typer.Argument(metavar="NAME[@ALIAS|/VERSION]", help="Model to show.")],
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """A model's versions: run, creation time, aliases, gate, gate metric and history."""

    def body() -> None:
        from engage.tracking.catalog import ModelRef, show_model

        view = show_model(_client(tracking_uri, home), ModelRef.parse(ref))
        out = _out()
        aliases = ", ".join(f"{a} -> {v}" for a, v in sorted(view.aliases.items())) or "none"
        out.print(f"[bold]{view.name}[/]  aliases: {aliases}", markup=True)
        if view.champion_history:
            out.print(f"champion history: {' -> '.join(view.champion_history)}")
        table = Table("version", "aliases", "run id", "created", "gate metric", "value", "gate")
        for v in view.versions:
            metric = f"{v.metric.name} ({v.metric.direction})" if v.metric else "-"
            value = f"{v.metric_value:.6g}" if v.metric_value is not None else "-"
            table.add_row(
                v.version,
                ", ".join(v.aliases) or "-",
                v.run_id or "-",
                _time(v.created_ms),
                metric,
                value,
                v.gate or "-",
            )
        out.print(table)
        for v in view.versions:
            if v.history:
                out.print(f"version {v.version}:")
                for key, value in v.history.items():
                    out.print(f"  {key} = {value}", markup=False)

    _guard(body)


@app.command()
def promote(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    reason: ReasonOption,
    version: Annotated[
        str | None, typer.Option("--version", help="Version to promote; default: @candidate.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Promote even if worse than the champion.")
    ] = False,
    metric: Annotated[
        str | None, typer.Option("--metric", help="Compare on this metric instead of the gate's.")
    ] = None,
    direction: Annotated[
        str | None, typer.Option("--direction", help="maximize or minimize (with --metric).")
    ] = None,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Make a version the champion if its gate metric is no worse than the champion's."""

    def body() -> None:
        from engage.tracking.promotion import promote as promote_version

        result = promote_version(
            _client(tracking_uri, home),
            name,
            reason,
            version=version,
            force=force,
            metric=metric,
            direction=direction,
        )
        was = f"was version {result.previous}" if result.previous else "first champion"
        forced = " [yellow](forced)[/]" if result.forced else ""
        _out().print(
            f"[green]✓[/] {result.name} version {result.version} is now the champion "
            f"({was}){forced}"
        )
        if result.comparison is not None:
            _out().print(f"  {result.comparison.explain()}", markup=False)
        _out().print(f"  reason: {result.reason}", markup=False)

    _guard(body)


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    reason: ReasonOption,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Move the champion back to the version that was champion before it."""

    def body() -> None:
        from engage.tracking.promotion import rollback as rollback_model

        result = rollback_model(_client(tracking_uri, home), name, reason)
        _out().print(
            f"[green]✓[/] {result.name} champion rolled back: version {result.rolled_back_from}"
            f" -> version {result.version}"
        )
        _out().print(f"  reason: {result.reason}", markup=False)

    _guard(body)


def _client(tracking_uri: str | None, home: Path | None, must_exist: bool = True) -> Any:
    """A client on the resolved store; a local store that does not exist is never created."""
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


def _guard(body: Callable[[], None]) -> None:
    # Imported here: main.py imports this module to register the sub-app.
    from engage.cli.main import _guarded

    _guarded(body)


def _out() -> Any:
    from engage.cli.main import out

    return out


def _time(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
