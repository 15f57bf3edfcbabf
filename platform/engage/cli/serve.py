"""``engage deploy`` and ``engage serve status | stop``: thin, they call engage.serve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from engage.cli.console import guarded, out
from engage.cli.options import HomeOption, SetOption, TrackingOption
from engage.cli.options import ServeAddressOption as AddressOption

serve_app = typer.Typer(
    name="serve",
    help="Served models: status of the Serve apps, and stopping them.",
    no_args_is_help=True,
)


def deploy(
    model: Annotated[
        str, typer.Argument(metavar="MODEL[@ALIAS|/VERSION]", help="Registered model to serve.")
    ],
    spec: Annotated[
        Path | None, typer.Option("--spec", help="Pipeline spec whose deploy section to use.")
    ] = None,
    set_: SetOption = None,
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
    tracking_uri: TrackingOption = None,
    home: HomeOption = None,
) -> None:
    """Serve a registered model over HTTP (a second deploy swaps versions with no downtime)."""

    def _body() -> None:
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
        out.print(f"[bold]engage[/] deploying [cyan]{model}[/] ...")
        home_dir = env_vars.engage_home(home)
        result = deploy_model(
            DeployOptions(model, deploy_spec, home_dir, tracking_uri or spec_uri, address)
        )
        out.print(
            f"[green]✓[/] serving {result.model} version {result.version} as app "
            f"[cyan]{result.app}[/] at {result.url}/predict ({result.seconds:.1f} s)"
        )
        _print_listener(deploy_spec, result)
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
        _print_example(result, home_dir, tracking_uri or spec_uri)
        out.print(
            f"  try: curl {result.url}/metadata ; engage serve status ; engage serve stop {result.app}"
        )

    guarded(_body)


@serve_app.command()
def status(home: HomeOption = None, address: AddressOption = None) -> None:
    """Serving apps: model, versions and traffic shares, replicas, URL, health."""

    def _body() -> None:
        from engage import env_vars
        from engage.serve import serve_status

        apps = serve_status(env_vars.engage_home(home), address)
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

    guarded(_body)


@serve_app.command()
def stop(
    app: Annotated[
        str | None, typer.Argument(help="App to stop; default: every engage app.")
    ] = None,
    home: HomeOption = None,
    address: AddressOption = None,
) -> None:
    """Stop serving an app (or all); the local head engage started stops when none is left."""

    def _body() -> None:
        from engage import env_vars
        from engage.serve import stop_serving

        stopped = stop_serving(env_vars.engage_home(home), app, address)
        out.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was served")

    guarded(_body)


def _print_listener(spec: Any, result: Any) -> None:
    """Where the app really listens, whether it needs a token, and when that is not as asked."""
    auth = (
        f"bearer token from ${result.token_env} required"
        if result.token_env
        else "no token: loopback only"
    )
    out.print(f"  listening on {result.listener} ({auth})", markup=False)
    requested = f"{spec.host}:{spec.port}"
    if result.listener and result.listener != requested:
        out.print(
            f"  [yellow]note[/]: Serve on this cluster already listened on {result.listener} "
            f"when this deploy asked for {requested}; --host and --port apply when serving "
            "starts (`engage serve stop` ends every app, then deploy again)"
        )


def _print_example(result: Any, home: Path, tracking_uri: str | None) -> None:
    """Write the version's first logged window as ``example.json`` and say how to send it."""
    from engage.serve.model import logged_example
    from engage.serve.scoring import curl_command, example_body, write_example
    from engage.tracking.store import resolve_tracking_uri

    uri = resolve_tracking_uri(None, tracking_uri, home)
    body = example_body(logged_example(uri, result.model, result.version))
    if body is None:
        out.print(
            f"  no input example is logged with version {result.version}: "
            f"see {result.url}/metadata for the inputs the model takes",
            markup=False,
        )
        return
    path = write_example(home, result.app, body)
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    # soft_wrap: a path or a command cut by a line break cannot be copied and pasted
    out.print(
        f"  request body: {shown} (/predict and /invocations take it)",
        markup=False,
        soft_wrap=True,
    )
    out.print(
        f"  {curl_command(result.url, shown, result.token_env)}", markup=False, soft_wrap=True
    )


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
