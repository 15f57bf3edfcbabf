"""``engage deploy`` and ``engage serve status | stop``: thin, they call engage.serve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

serve_app = typer.Typer(
    name="serve",
    help="Served models: status of the Serve apps, and stopping them.",
    no_args_is_help=True,
)

HomeOption = Annotated[
    Path | None,
    typer.Option("--home", help="Folder for engage's files; default: ENGAGE_HOME or ./.engage."),
]
AddressOption = Annotated[
    str | None,
    typer.Option(help="An existing Ray cluster (host:port); default: a local head engage manages."),
]


def deploy(
    model: Annotated[
        str, typer.Argument(metavar="MODEL[@ALIAS|/VERSION]", help="Registered model to serve.")
    ],
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Pipeline spec whose deploy section to use.")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="Override a spec field: --set deploy.replicas=2."),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default 8000).")] = None,
    replicas: Annotated[int | None, typer.Option(help="Model replicas.")] = None,
    canary: Annotated[
        str | None, typer.Option(help="Alias or version answering a share of requests.")
    ] = None,
    canary_weight: Annotated[
        float | None, typer.Option(help="Share of requests for the canary (0-1).")
    ] = None,
    app: Annotated[str | None, typer.Option(help="Serve app name; default: the model's.")] = None,
    address: AddressOption = None,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow tracking URI; overrides env.")
    ] = None,
    home: HomeOption = None,
) -> None:
    """Serve a registered model over HTTP (a second deploy swaps versions with no downtime)."""

    def body() -> None:
        from engage import env_vars
        from engage.serve import DeployOptions, deploy_model

        deploy_spec, spec_uri = _deploy_spec(spec, set_ or [])
        flags = {
            "host": host, "port": port, "replicas": replicas, "app": app,
        }  # fmt: skip
        changes: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
        if canary is not None or canary_weight is not None:
            from engage.spec.models import CanarySpec

            base = deploy_spec.canary
            if canary is None and base is None:
                raise _usage("--canary-weight needs --canary (an alias or a version)")
            changes["canary"] = CanarySpec(
                model=canary or base.model,
                weight=canary_weight
                if canary_weight is not None
                else (base.weight if base else 0.1),
            )
        deploy_spec = _with(deploy_spec, changes)
        out = _out()
        out.print(f"[bold]engage[/] deploying [cyan]{model}[/] ...")
        result = deploy_model(
            DeployOptions(
                model, deploy_spec, env_vars.engage_home(home), tracking_uri or spec_uri, address
            )
        )
        out.print(
            f"[green]✓[/] serving {result.model} version {result.version} as app "
            f"[cyan]{result.app}[/] at {result.url}/predict ({result.seconds:.1f} s)"
        )
        if result.canary:
            out.print(
                f"  canary: version {result.canary} answers {result.canary_weight:.0%} of requests"
            )
        if result.replaced:
            out.print(
                f"  no longer served: version(s) {', '.join(result.replaced)} (drained, no request failed)"
            )
        if result.started_cluster:
            out.print(f"  started a local Ray head for serving at {result.cluster}")
        if result.run_id:
            out.print(f"  monitoring run: {result.run_id}")
        out.print(
            f"  try: curl {result.url}/metadata ; engage serve status ; engage serve stop {result.app}"
        )

    _guard(body)


@serve_app.command()
def status(home: HomeOption = None, address: AddressOption = None) -> None:
    """Serving apps: model, versions and traffic shares, replicas, URL, health."""

    def body() -> None:
        from engage import env_vars
        from engage.serve import serve_status

        apps = serve_status(env_vars.engage_home(home), address)
        out = _out()
        if not apps:
            out.print("nothing is served: `engage deploy MODEL` starts serving")
            return
        table = Table("app", "status", "model", "versions (share)", "replicas", "url", "health")
        for a in apps:
            versions = ", ".join(f"v{v} ({w:.0%})" for v, w in a.versions.items()) or "-"
            replicas = ", ".join(
                f"{d.split('/')[-1] if '--v' not in d else d.split('--')[1].split('/')[0]}: {n}"
                for d, n in a.replicas.items()
            )
            table.add_row(
                a.app, a.status, a.model or "-", versions, replicas, a.url or "-", a.health
            )
        out.print(table)
        for a in apps:
            for url in a.metrics:
                out.print(f"metrics of {a.app}: {url}")

    _guard(body)


@serve_app.command()
def stop(
    app: Annotated[
        str | None, typer.Argument(help="App to stop; default: every engage app.")
    ] = None,
    home: HomeOption = None,
    address: AddressOption = None,
) -> None:
    """Stop serving an app (or all); the local head engage started stops when none is left."""

    def body() -> None:
        from engage import env_vars
        from engage.serve import stop_serving

        stopped = stop_serving(env_vars.engage_home(home), app, address)
        _out().print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was served")

    _guard(body)


def _deploy_spec(spec: Path | None, sets: list[str]):
    from engage.spec.models import DeploySpec

    if spec is None:
        if sets:
            raise _usage("--set needs --spec (the pipeline spec whose deploy section it changes)")
        return DeploySpec(), None
    from engage.spec import load_spec

    loaded = load_spec(spec, sets)
    return loaded.spec.deploy, loaded.spec.tracking.tracking_uri


def _with(spec, changes: dict[str, Any]):
    from pydantic import ValidationError

    from engage.errors import SpecError
    from engage.spec.models import DeploySpec

    try:
        return DeploySpec.model_validate({**spec.model_dump(), **changes})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"--{field.replace('_', '-')}: {first['msg']}") from None


def _usage(message: str):
    from engage.errors import SpecError

    return SpecError(message)


def _guard(body) -> None:
    # Imported here: main.py imports this module to register the commands.
    from engage.cli.main import _guarded

    _guarded(body)


def _out() -> Any:
    from engage.cli.main import out

    return out
