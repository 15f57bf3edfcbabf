"""Deploy, inspect and stop serving apps: what ``engage deploy`` and ``engage serve`` call.

An app is one Serve deployment, ``Ingress`` (engage.serve.app), whose replicas answer HTTP
and run the routed model versions in-process. A deploy resolves the version(s) in the
registry, checks auth and CPUs before touching the cluster, writes the app's route table
(with an optional canary share), starts the deployment on first deploy (or when its
settings change), and waits until every replica answers by the new table: each loads the
new version next to the old one and swaps in one assignment. So a promotion swaps the
served version with no failed request and no replica restart.

``build_ingress`` builds the same deployment for a declarative Serve config
(``engage.serve.app:build_app``), with the routes fixed in it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from engage.errors import ClusterError, EngageError
from engage.spec.models import DeploySpec

_ACK_TIMEOUT_S = 180.0  # every replica loads the new version (download + load) meanwhile
EXPERIMENT = "engage-serving"


@dataclass(frozen=True)
class DeployOptions:
    model: str  # NAME, NAME@alias or NAME/version
    spec: DeploySpec = field(default_factory=DeploySpec)
    home: Path = field(default_factory=lambda: Path(".engage").resolve())
    tracking_uri: str | None = None
    address: str | None = None  # an existing cluster; None: the engage-managed local head
    hooks: bool = True  # False: no monitoring hooks (only the serving benchmark's A/B arm)


@dataclass(frozen=True)
class DeployResult:
    app: str
    url: str
    model: str
    version: str
    canary: str | None
    canary_weight: float
    replaced: tuple[str, ...]  # versions no longer served
    cluster: str
    started_cluster: bool
    run_id: str | None
    seconds: float


@dataclass(frozen=True)
class AppStatus:
    app: str
    status: str
    model: str | None
    versions: dict[str, float]  # version -> traffic share
    replicas: dict[str, int]  # deployment -> running replicas
    url: str | None
    health: str
    metrics: tuple[str, ...]


def deploy(options: DeployOptions) -> DeployResult:
    """Serve ``options.model``; a second deploy of the same app swaps or splits versions."""
    from engage.serve import auth
    from engage.tracking.catalog import ModelRef
    from engage.tracking.store import open_client, resolve_tracking_uri

    started = time.perf_counter()
    spec, home = options.spec, options.home
    digest = auth.token_digest(spec.host, spec.token_env)  # refuse before any work
    ref = ModelRef.parse(options.model)
    uri = resolve_tracking_uri(None, options.tracking_uri, home)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        from engage.errors import TrackingError

        raise TrackingError(
            f"no MLflow store at {uri}",
            hint="register a model first (`engage run`), or pass --tracking-uri / --home",
        )
    primary, canary = _resolve(open_client(uri), ref, spec)
    app = spec.app or _app_name(ref.name)
    cluster_name, started_cluster = _connect(options)
    running = _running_apps()
    was_running = app in running and running[app].status == "RUNNING"
    _check_fits(spec, app, running)
    import logging

    from ray import serve

    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # per-call "connecting" chatter
    serve.start(http_options={"host": spec.host, "port": spec.port})
    state = _read_state(home, app)
    run_local, run_id = _monitoring_run(home, uri, app, primary, state)
    routes = _routes(spec, primary, canary)
    generation = _set_routes(app, routes)
    settings = _ingress_settings(app, spec, digest, home, run_local, run_id, uri, options.hooks)
    fingerprint = _ensure_ingress(app, spec, settings, state, was_running)
    _wait_for_acks(app, generation)
    served = {r.target.version: r.weight for r in routes}
    replaced = [v for v in state.get("versions", {}) if was_running and v not in served]
    url = f"http://{spec.host}:{spec.port}{spec.route_prefix.rstrip('/')}"
    _write_state(
        home, app,
        {
            "app": app, "model": ref.name, "url": url, "route_prefix": spec.route_prefix,
            "token_env": spec.token_env if digest else None, "run_local_id": run_local,
            "run_id": run_id, "tracking_uri": uri, "settings": fingerprint,
            "versions": served, "cluster": cluster_name, "managed": options.address is None,
        },
    )  # fmt: skip
    return DeployResult(
        app, url, ref.name, primary.version,
        canary.version if canary else None, spec.canary.weight if canary else 0.0,
        tuple(replaced), cluster_name, started_cluster, run_id, time.perf_counter() - started,
    )  # fmt: skip


def _resolve(client, ref, spec: DeploySpec) -> tuple[Any, Any]:
    """The primary version ``ref`` names (or the spec's alias) and the spec's canary."""
    from engage.serve.model import resolve
    from engage.tracking.catalog import ModelRef

    alias = ref.alias or (spec.alias if ref.version is None else None)
    primary = resolve(client, ref.name, ref.version, alias)
    canary = None
    if spec.canary is not None:
        c = ModelRef.parse(
            f"{ref.name}/{spec.canary.model}"
            if spec.canary.model.isdigit()
            else f"{ref.name}@{spec.canary.model}"
        )
        canary = resolve(client, c.name, c.version, c.alias)
        if canary.version == primary.version:
            raise EngageError(
                f"canary {spec.canary.model} is version {canary.version}, the version already served"
            )
    return primary, canary


def _app_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in model)


def _connect(options: DeployOptions) -> tuple[str, bool]:
    from engage.serve.cluster import connect, ensure_cluster

    if options.address:
        connect(options.address, options.home)
        return options.address, False
    cluster, started = ensure_cluster(options.home)
    connect(cluster.address, options.home, cluster.env())
    return cluster.address, started


def _check_fits(spec: DeploySpec, app: str, running: dict[str, Any]) -> None:
    """Say up front when the replicas cannot fit (Ray would wait for CPUs silently)."""
    import ray

    if app in running:
        return  # a rollout loads versions into the replicas it has
    total = float(ray.cluster_resources().get("CPU", 0.0))
    free = float(ray.available_resources().get("CPU", 0.0))
    needed = _replicas(spec) * spec.cpus_per_replica
    if needed > free + 1e-9:
        raise ClusterError(
            f"the deployment needs {needed:g} CPUs ({_replicas(spec)} replica(s) x "
            f"{spec.cpus_per_replica:g} CPU), but only {free:g} of the cluster's {total:g} "
            "are free",
            hint="lower deploy.replicas or deploy.cpus_per_replica, stop another app "
            "(`engage serve stop APP`), or wait for a training job to finish: Serve and Train "
            "share the cluster's CPUs and whoever asks last waits forever",
        )


def _replicas(spec: DeploySpec) -> int:
    return spec.autoscaling.min_replicas or 1 if spec.autoscaling else spec.replicas


def _running_apps() -> dict[str, Any]:
    from ray import serve

    try:
        return dict(serve.status().applications)
    except Exception:
        return {}


def _routes(spec: DeploySpec, primary, canary) -> list:
    from engage.serve.routes import Route

    weight = spec.canary.weight if canary is not None else 0.0
    routes = [Route(primary, 1.0 - weight, "primary")]
    if canary is not None:
        routes.append(Route(canary, weight, "canary"))
    return routes


def _set_routes(app: str, routes: list) -> int:
    import ray

    from engage.serve.routes import table_actor

    return ray.get(table_actor(app, create=True).set.remote(tuple(routes)))


def _ingress_settings(
    app, spec: DeploySpec, digest, home: Path, run_local, run_id, uri=None, hooks: bool = True
):
    from engage.serve.app import IngressSettings
    from engage.serve.hooks import HookSettings

    hook_settings = HookSettings(
        app, str(home), run_local, run_id or run_local or "none",
        spec.sampling.rate, spec.sampling.queue_size, tuple(spec.sampling.consumers),
        spec.metrics_every_seconds, uri, spec.drift,
    )  # fmt: skip
    return IngressSettings(
        app, spec.max_body_bytes, spec.nan_policy, digest, hook_settings,
        spec.max_batch_size, spec.batch_wait_timeout_s, None, hooks,
    )  # fmt: skip


def _deployment_options(spec: DeploySpec) -> dict[str, Any]:
    from engage.serve.app import DEPLOYMENT

    options: dict[str, Any] = {
        "name": DEPLOYMENT,
        "ray_actor_options": {"num_cpus": spec.cpus_per_replica},
        # The replica is the HTTP entry: it holds every open request, batched or not.
        "max_ongoing_requests": max(256, spec.max_batch_size * 4),
        "health_check_period_s": 5,
    }
    if spec.autoscaling:
        options["autoscaling_config"] = spec.autoscaling.model_dump()
    else:
        options["num_replicas"] = spec.replicas
    return options


def _fingerprint(settings, options: dict[str, Any]) -> str:
    import hashlib

    return hashlib.sha256(
        json.dumps([asdict(settings), options], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]


def _ensure_ingress(app: str, spec: DeploySpec, settings, state: dict, running: bool) -> str:
    """Start the deployment unless it runs as asked (a rollout leaves it alone).

    Returns the fingerprint of its settings and options."""
    from ray import serve

    from engage.serve.app import Ingress

    options = _deployment_options(spec)
    fingerprint = _fingerprint(settings, options)
    if running and state.get("settings") == fingerprint:
        return fingerprint
    deployment = serve.deployment(Ingress).options(**options)
    _run(deployment.bind(settings), app, spec.route_prefix)
    return fingerprint


def _run(bound, name: str, route_prefix: str | None) -> None:
    """``serve.run`` that turns a failed start into one message pointing at the logs."""
    from ray import serve

    try:
        serve.run(
            bound, name=name, route_prefix=route_prefix, logging_config={"enable_access_log": False}
        )
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise EngageError(
            f"Serve could not start {name}: {first}",
            hint="the replica's traceback is in the Ray session's logs/serve/ folder "
            "(the managed head's is under its temp dir, see <home>/serve/cluster.json)",
        ) from None


def _wait_for_acks(app: str, generation: int) -> None:
    """Until every running replica answers by ``generation`` (old versions are then gone)."""
    import ray
    from ray import serve

    from engage.serve.app import DEPLOYMENT
    from engage.serve.cluster import wait_until
    from engage.serve.routes import table_actor

    actor = table_actor(app)

    def done() -> bool:
        acks = ray.get(actor.acked.remote())
        info = serve.status().applications.get(app)
        replicas = 1
        if info is not None and DEPLOYMENT in info.deployments:
            counts = info.deployments[DEPLOYMENT].replica_states
            replicas = max(1, counts.get("RUNNING", 0))
        return sum(1 for g in acks.values() if g >= generation) >= replicas

    if not wait_until(done, _ACK_TIMEOUT_S, 0.1):
        raise EngageError(
            f"the replicas of {app} did not take the new routes within {_ACK_TIMEOUT_S:g} s",
            hint="`engage serve status` shows its state; the old version keeps serving "
            "(a replica that cannot load the new version logs why in logs/serve/)",
        )


# -- the declarative app (engage.serve.app:build_app) -----------------------------------------
class BuildArgs(DeploySpec):
    """``args`` of ``engage.serve.app:build_app``: a deploy section plus where the model is."""

    model: str = Field(min_length=1, description="NAME@alias, NAME/version or NAME")
    tracking_uri: str | None = Field(None, description="MLflow tracking URI")
    tracking_uri_env: str = Field(
        "MLFLOW_TRACKING_URI", description="variable holding the URI when tracking_uri is unset"
    )
    home: str | None = Field(None, description="replicas' engage home; default ENGAGE_HOME")
    host: str = Field(
        "0.0.0.0", min_length=1, description="where the Serve config's http_options bind"
    )


def build_ingress(args: BuildArgs):
    """The Serve application ``engage deploy`` would run for ``args``, routes fixed in it."""
    from ray import serve

    from engage import env_vars
    from engage.serve import auth
    from engage.serve.app import Ingress
    from engage.tracking.catalog import ModelRef
    from engage.tracking.store import open_client

    digest = auth.token_digest(args.host, args.token_env)
    uri = args.tracking_uri or os.environ.get(args.tracking_uri_env)
    if not uri:
        raise EngageError(
            f"no MLflow tracking URI: set args.tracking_uri or ${args.tracking_uri_env}",
            hint="the RayService passes it from the engage-env ConfigMap",
        )
    ref = ModelRef.parse(args.model)
    primary, canary = _resolve(open_client(uri), ref, args)
    app = args.app or _app_name(ref.name)
    home = env_vars.engage_home(args.home)
    settings = _ingress_settings(app, args, digest, home, None, None, uri)
    from dataclasses import replace

    settings = replace(settings, routes=tuple(_routes(args, primary, canary)))
    return serve.deployment(Ingress).options(**_deployment_options(args)).bind(settings)


def _monitoring_run(
    home: Path, uri: str, app: str, target, state: dict
) -> tuple[str | None, str | None]:
    """One MLflow run per deployment (kept across rollouts), created through the spool."""
    from engage.tracking import Drainer, PipelineRun, Spool

    spool = Spool(home / "spool.db")
    try:
        if state.get("run_local_id"):
            run = PipelineRun(spool, state["run_local_id"], uri, EXPERIMENT)
        else:
            tags = {"engage.serve.app": app, "engage.serve.model": target.name}
            run = PipelineRun.start(
                spool,
                uri,
                EXPERIMENT,
                f"serve-{app}-{time.strftime('%Y%m%d-%H%M%S')}",
                tags,
                Path.cwd(),
            )
        run.set_tags(
            {
                "engage.serve.version": target.version,
                f"engage.serve.deployed.{int(time.time())}": target.label,
            }
        )
        drainer = Drainer(spool.path).start()
        try:
            run_id = run.wait_for_run_id(10.0)
        finally:
            drainer.stop(final_drain_s=2.0)
        return run.local_id, run_id
    finally:
        spool.close()


# -- state under <home>/serve/<app>/ ----------------------------------------------------------
def _state_path(home: Path, app: str) -> Path:
    return home / "serve" / app / "deployment.json"


def _read_state(home: Path, app: str) -> dict:
    path = _state_path(home, app)
    return json.loads(path.read_text()) if path.is_file() else {}


def _write_state(home: Path, app: str, data: dict) -> None:
    path = _state_path(home, app)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def known_apps(home: Path) -> list[str]:
    folder = home / "serve"
    return (
        sorted(p.parent.name for p in folder.glob("*/deployment.json")) if folder.is_dir() else []
    )
