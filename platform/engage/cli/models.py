"""``engage models``: list, show, promote and roll back registered model versions."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from engage.cli.clients import tracking_client
from engage.cli.console import guarded, out
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

    def _body() -> None:
        from engage.tracking.catalog import list_models

        client = tracking_client(tracking_uri, home, must_exist=False)
        models = list_models(client) if client is not None else []
        if not models:
            out.print("no registered models yet: a pipeline with tracking.registration adds one")
            return
        table = Table("model", "versions", "champion", "candidate", "updated")
        for m in models:
            table.add_row(
                m.name, str(m.versions), m.champion or "-", m.candidate or "-", _time(m.updated_ms)
            )
        out.print(table)

    guarded(_body)


@app.command()
def builders(
    module: Annotated[
        Path | None,
        typer.Option(
            "--module", help="Your Python file that registers builders (a spec's model.module)."
        ),
    ] = None,
) -> None:
    """Model builders a spec can name in model.name, with what each builds."""

    def _body() -> None:
        from engage.errors import SpecError
        from engage.train.builders import MODEL_BUILDERS
        from engage.train.plugins import ModelModuleError, import_model_module

        if module is not None:
            try:
                import_model_module(module)
            except ModelModuleError as exc:
                raise SpecError(f"--module {module}: {exc}") from None
        table = Table("name", "builds", "parameters")
        for name, builder in MODEL_BUILDERS.items():
            params = ", ".join(builder.params_model.model_fields) or "-"
            table.add_row(name, builder.description, params)
        out.print(table)

    guarded(_body)


@app.command()
def show(
    ref: Annotated[str, typer.Argument(metavar="NAME[@ALIAS|/VERSION]", help="Model to show.")],
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """A model's versions: run, creation time, aliases, gate, gate metric and history."""

    def _body() -> None:
        from engage.tracking.catalog import ModelRef, show_model

        view = show_model(tracking_client(tracking_uri, home), ModelRef.parse(ref))
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

    guarded(_body)


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

    def _body() -> None:
        from engage.tracking.promotion import promote as promote_version

        result = promote_version(
            tracking_client(tracking_uri, home),
            name,
            reason,
            version=version,
            force=force,
            metric=metric,
            direction=direction,
        )
        was = f"was version {result.previous}" if result.previous else "first champion"
        forced = " [yellow](forced)[/]" if result.forced else ""
        out.print(
            f"[green]✓[/] {result.name} version {result.version} is now the champion "
            f"({was}){forced}"
        )
        if result.comparison is not None:
            out.print(f"  {result.comparison.explain()}", markup=False)
        out.print(f"  reason: {result.reason}", markup=False)

    guarded(_body)


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="Registered model name.")],
    reason: ReasonOption,
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Move the champion back to the version that was champion before it."""

    def _body() -> None:
        from engage.tracking.promotion import rollback as rollback_model

        result = rollback_model(tracking_client(tracking_uri, home), name, reason)
        out.print(
            f"[green]✓[/] {result.name} champion rolled back: version {result.rolled_back_from}"
            f" -> version {result.version}"
        )
        out.print(f"  reason: {result.reason}", markup=False)

    guarded(_body)


def _time(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
