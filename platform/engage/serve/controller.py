"""Deploy, inspect and stop serving apps: what ``engage deploy`` and ``engage serve`` call.

A deploy resolves the version in the registry, checks auth and CPUs before touching the
cluster, starts the version as its own Serve application, points the app's route table at
it (with an optional canary share), starts the ingress on first deploy, waits until every
ingress replica routes by the new table, and only then deletes versions nobody routes to.
So a promotion swaps the served version with no failed request.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engage.errors import ClusterError, EngageError
from engage.spec.models import DeploySpec

_ACK_TIMEOUT_S = 30.0
INGRESS_CPUS = 0.1
EXPERIMENT = "engage-serving"


@dataclass(frozen=True)
class DeployOptions:
    model: str  # NAME, NAME@alias or NAME/version
    spec: DeploySpec = field(default_factory=DeploySpec)
    home: Path = field(default_factory=lambda: Path(".engage").resolve())
    tracking_uri: str | None = None
    address: str | None = None  # an existing cluster; None: the engage-managed local head


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
    from engage.serve.model import resolve
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
    client = open_client(uri)
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
    app = spec.app or _app_name(ref.name)
    cluster_name, started_cluster = _connect(options)
    _check_fits(spec, primary, canary, app)
    import logging

    from ray import serve

    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # per-call "connecting" chatter
    serve.start(http_options={"host": spec.host, "port": spec.port})
    state = _read_state(home, app)
    run_local, run_id = _monitoring_run(home, uri, app, primary, state)
    routes = _start_versions(app, spec, home, primary, canary)
    generation = _set_routes(app, routes)
    settings = _ingress_settings(app, spec, digest, home, run_local, run_id, uri)
    _ensure_ingress(app, spec, settings, state)
    _wait_for_acks(app, generation)
    kept = {r.model_app for r in routes}
    replaced = _delete_versions(app, kept)
    url = f"http://{spec.host}:{spec.port}{spec.route_prefix.rstrip('/')}"
    _write_state(
        home, app,
        {
            "app": app, "model": ref.name, "url": url, "route_prefix": spec.route_prefix,
            "token_env": spec.token_env if digest else None, "run_local_id": run_local,
            "run_id": run_id, "tracking_uri": uri, "settings": _fingerprint(settings),
            "versions": {r.target.version: r.weight for r in routes},
            "cluster": cluster_name, "managed": options.address is None,
        },
    )  # fmt: skip
    return DeployResult(
        app, url, ref.name, primary.version,
        canary.version if canary else None, spec.canary.weight if canary else 0.0,
        tuple(replaced), cluster_name, started_cluster, run_id, time.perf_counter() - started,
    )  # fmt: skip


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


def _check_fits(spec: DeploySpec, primary, canary, app: str) -> None:
    """Say up front when the replicas cannot fit (Ray would wait for CPUs silently)."""
    import ray

    from engage.serve.routes import model_app_name

    total = float(ray.cluster_resources().get("CPU", 0.0))
    free = float(ray.available_resources().get("CPU", 0.0))
    per_version = _replicas(spec) * spec.cpus_per_replica
    running = _running_apps()
    new = [
        v
        for v in (primary, canary)
        if v is not None and model_app_name(app, v.version) not in running
    ]
    needed = per_version * len(new) + (INGRESS_CPUS if app not in running else 0.0)
    if needed > free + 1e-9:
        raise ClusterError(
            f"the deployment needs {needed:g} CPUs ({len(new)} new version(s) x {_replicas(spec)} "
            f"replica(s) x {spec.cpus_per_replica:g} CPU"
            + (f" + {INGRESS_CPUS:g} for the ingress" if app not in running else "")
            + f"), but only {free:g} of the cluster's {total:g} are free",
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


def _start_versions(app: str, spec: DeploySpec, home: Path, primary, canary) -> list:
    from ray import serve

    from engage.serve.app import ModelServer
    from engage.serve.routes import Route, model_app_name

    running = _running_apps()
    routes = []
    weight = spec.canary.weight if canary is not None else 0.0
    for target, role, share in ((primary, "primary", 1.0 - weight), (canary, "canary", weight)):
        if target is None:
            continue
        name = model_app_name(app, target.version)
        if name not in running or running[name].status != "RUNNING":
            options: dict[str, Any] = {
                "name": "ModelServer",
                "ray_actor_options": {"num_cpus": spec.cpus_per_replica},
                "max_ongoing_requests": max(spec.max_batch_size * 2, 8),
                "health_check_period_s": 5,
            }
            if spec.autoscaling:
                options["autoscaling_config"] = spec.autoscaling.model_dump()
            else:
                options["num_replicas"] = spec.replicas
            deployment = serve.deployment(ModelServer).options(**options)
            bound = deployment.bind(
                target, str(home), spec.max_batch_size, spec.batch_wait_timeout_s
            )
            _run(bound, name, None)
        routes.append(Route(name, target, share, role))
    return routes


def _set_routes(app: str, routes: list) -> int:
    import ray

    from engage.serve.routes import table_actor

    return ray.get(table_actor(app, create=True).set.remote(tuple(routes)))


def _ingress_settings(app, spec: DeploySpec, digest, home: Path, run_local, run_id, uri=None):
    from engage.serve.app import IngressSettings
    from engage.serve.hooks import HookSettings

    hooks = HookSettings(
        app, str(home), run_local, run_id or run_local or "none",
        spec.sampling.rate, spec.sampling.queue_size, tuple(spec.sampling.consumers),
        spec.metrics_every_seconds, uri, spec.drift,
    )  # fmt: skip
    return IngressSettings(app, spec.max_body_bytes, spec.nan_policy, digest, hooks)


def _fingerprint(settings) -> str:
    import hashlib

    return hashlib.sha256(
        json.dumps(asdict(settings), sort_keys=True, default=str).encode()
    ).hexdigest()[:16]


def _ensure_ingress(app: str, spec: DeploySpec, settings, state: dict) -> None:
    """Start the ingress unless it runs with the same settings (a rollout leaves it alone)."""
    from ray import serve

    from engage.serve.app import Ingress

    running = _running_apps()
    if (
        app in running
        and running[app].status == "RUNNING"
        and state.get("settings") == _fingerprint(settings)
    ):
        return
    deployment = serve.deployment(Ingress).options(
        name="Ingress", ray_actor_options={"num_cpus": INGRESS_CPUS}, max_ongoing_requests=256
    )
    _run(deployment.bind(settings), app, spec.route_prefix)


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
    """Until every running ingress replica routes by ``generation`` (old versions may go)."""
    import ray
    from ray import serve

    from engage.serve.cluster import wait_until
    from engage.serve.routes import table_actor

    actor = table_actor(app)

    def done() -> bool:
        acks = ray.get(actor.acked.remote())
        info = serve.status().applications.get(app)
        replicas = 1
        if info is not None and "Ingress" in info.deployments:
            counts = info.deployments["Ingress"].replica_states
            replicas = max(1, counts.get("RUNNING", 0))
        return sum(1 for g in acks.values() if g >= generation) >= replicas

    if not wait_until(done, _ACK_TIMEOUT_S, 0.1):
        raise EngageError(
            f"the ingress of {app} did not take the new routes within {_ACK_TIMEOUT_S:g} s",
            hint="`engage serve status` shows its state; the old version keeps serving",
        )


def _delete_versions(app: str, keep: set[str]) -> list[str]:
    """Delete this app's version apps not in ``keep`` (Serve drains their requests first)."""
    from ray import serve

    gone = []
    for name in _running_apps():
        if name.startswith(f"{app}--v") and name not in keep:
            serve.delete(name)
            gone.append(name.rsplit("--v", 1)[1])
    return gone


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
