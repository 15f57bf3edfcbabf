"""Deploy, inspect and stop serving apps: what ``engage deploy`` and ``engage serve`` call.

An app is one Serve deployment, ``Ingress`` (engage.serve.app), whose replicas answer HTTP
and run the routed model versions in-process. A deploy resolves the version(s) in the
registry, checks auth and CPUs before touching the cluster, writes the app's route table
(with an optional canary share), starts the deployment on first deploy (or when its
settings change), and waits until every replica answers by the new table: each loads the
new version next to the old one and swaps in one assignment. So a promotion swaps the
served version with no failed request and no replica restart.

``engage.serve.build`` builds the deployment, here and for a declarative Serve config
(``engage.serve.build:build_app``, the routes fixed in it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engage.errors import ClusterError, EngageError
from engage.serve.auth import Listener
from engage.serve.proxy_wait import until_proxies_ready
from engage.spec.models import DeploySpec

_ACK_TIMEOUT_S = 180.0  # every replica loads the new version (download + load) meanwhile
EXPERIMENT = "engage-serving"


@dataclass(frozen=True)
class DeployOptions:
    """What ``engage deploy`` asks for: the model, its deploy section, where and how."""

    model: str  # NAME, NAME@alias or NAME/version
    spec: DeploySpec = field(default_factory=DeploySpec)
    home: Path = field(default_factory=lambda: Path(".engage").resolve())
    tracking_uri: str | None = None
    address: str | None = None  # an existing cluster; None: the engage-managed local head
    hooks: bool = True  # False: no monitoring hooks (only the serving benchmark's A/B arm)


@dataclass(frozen=True)
class DeployResult:
    """What a deploy did: the app, its URL and real listener, versions, cluster, run."""

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
    listener: str = ""  # host:port Serve's HTTP entry really listens on
    token_env: str | None = None  # the variable holding the bearer token; None: no auth
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (see PHASES)


#: The steps of a deploy, timed in :attr:`DeployResult.phases` and ``deployment.json``.
PHASES = ("registry", "cluster", "serve start", "monitoring run", "replicas", "routes")


@dataclass(frozen=True)
class AppStatus:
    """One serving app as ``engage serve status`` shows it."""

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
    from engage.serve import auth, build
    from engage.tracking import mask_uri
    from engage.tracking.catalog import ModelRef
    from engage.tracking.store import open_client, resolve_tracking_uri

    started = time.perf_counter()
    phases: dict[str, float] = {}
    spec, home = options.spec, options.home
    auth.token_digest(spec.host, spec.token_env)  # what was asked: refuse before any work
    ref = ModelRef.parse(options.model)
    uri = resolve_tracking_uri(None, options.tracking_uri, home)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        from engage.errors import TrackingError

        raise TrackingError(
            f"no MLflow store at {uri}",
            hint="register a model first (`engage run`), or pass --tracking-uri / --home",
        )
    with _timed(phases, "registry"):
        primary, canary = build.resolve_versions(open_client(uri), ref, spec)
    app = spec.app or build.app_name(ref.name)
    with _timed(phases, "cluster"):
        cluster_name, started_cluster = _connect(options)
    running = _running_apps()
    was_running = app in running and running[app].status == "RUNNING"
    _check_fits(spec, app, running)
    import logging

    from ray import serve

    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # per-call "connecting" chatter
    with _timed(phases, "serve start"):
        until_proxies_ready(
            lambda: serve.start(http_options={"host": spec.host, "port": spec.port})
        )
    # Serve keeps the listener of its first start: auth is decided by it, not by the spec.
    listener = serve_listener()
    digest = auth.listener_digest(listener, spec.host, spec.token_env)
    state = _read_state(home, app)
    with _timed(phases, "monitoring run"):
        run_local, run_id = _monitoring_run(home, uri, app, primary, state)
    routes = build.routes_for(spec, primary, canary)
    generation = _set_routes(app, routes)
    settings = build.ingress_settings(
        app, spec, digest, home, run_local, run_id, uri, options.hooks
    )
    with _timed(phases, "replicas"):
        fingerprint = _ensure_ingress(app, spec, settings, state, was_running)
    with _timed(phases, "routes"):
        _wait_for_acks(app, generation)
    served = {r.target.version: r.weight for r in routes}
    replaced = [v for v in state.get("versions", {}) if was_running and v not in served]
    url = listener.url(spec.route_prefix)
    token_env = spec.token_env if digest else None
    _write_state(
        home, app,
        {
            "app": app, "model": ref.name, "url": url, "route_prefix": spec.route_prefix,
            "listener": listener.address, "auth": digest is not None,
            "token_env": token_env, "run_local_id": run_local,
            "run_id": run_id, "tracking_uri": mask_uri(uri), "settings": fingerprint,
            "versions": served, "cluster": cluster_name, "managed": options.address is None,
            "phases": phases,
        },
    )  # fmt: skip
    return DeployResult(
        app, url, ref.name, primary.version,
        canary.version if canary else None, spec.canary.weight if canary else 0.0,
        tuple(replaced), cluster_name, started_cluster, run_id, time.perf_counter() - started,
        listener.address, token_env, phases,
    )  # fmt: skip


@contextmanager
def _timed(phases: dict[str, float], name: str) -> Iterator[None]:
    """Record the seconds the block took as ``phases[name]`` (also when it raises)."""
    began = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = round(time.perf_counter() - began, 3)


def prepare(spec: DeploySpec, home: Path, address: str | None = None) -> None:
    """Join the cluster and start Serve's controller and proxies ahead of :func:`deploy`.

    What a deploy does first, before it knows the model: the deploy that follows in this
    process finds the driver connected, Serve running and its modules imported, and waits
    only for its replicas.

    Raises
    ------
    EngageError
        As :func:`deploy` would for the same step (token, busy port, cluster, proxies).
    """
    from engage.serve import auth

    auth.token_digest(spec.host, spec.token_env)
    _connect(DeployOptions(model="", spec=spec, home=home, address=address))
    from ray import serve

    until_proxies_ready(lambda: serve.start(http_options={"host": spec.host, "port": spec.port}))
    # Imported now, while the job trains, rather than by the deploy (MLflow alone takes
    # seconds): the registry lookup, the monitoring run, the app's build.
    import mlflow.tracking  # noqa: F401

    from engage.serve import build, model  # noqa: F401
    from engage.tracking import Drainer, PipelineRun  # noqa: F401


def serve_listener() -> Listener:
    """Where the running Serve instance's HTTP entry listens (its first start decided it).

    Asked of Serve's controller, so it is right however Serve was started (this deploy, an
    earlier one, or someone else's on an ``--address`` cluster). The replicas' own HTTP
    ports (direct ingress behind HAProxy) bind the same host.
    """
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    config = ray.get(controller.get_http_config.remote())
    return Listener(str(config.host), int(config.port))


def _connect(options: DeployOptions) -> tuple[str, bool]:
    from engage.serve.cluster import connect, ensure_cluster
    from engage.serve.ports import check_serving_port

    if options.address:
        connect(options.address, options.home)
        return options.address, False
    spec = options.spec
    # Before the head starts: a busy port would fail only once Serve binds it, head left up.
    check_serving_port(
        options.home, spec.host, spec.port,
        hint=f"serve on another port with `--port N` (`deploy.port` in a spec), or stop the "
        f"process listening on {spec.port}",
    )  # fmt: skip
    cluster, started = ensure_cluster(options.home, secret_vars=(options.spec.token_env,))
    connect(cluster.address, options.home, cluster.env())
    return cluster.address, started


def _check_fits(spec: DeploySpec, app: str, running: dict[str, Any]) -> None:
    """Say up front when the replicas cannot fit (Ray would wait for CPUs silently), or
    when ``deploy.resources_per_replica`` asks for more than any node can ever hold."""
    import ray

    if app in running:
        return  # a rollout loads versions into the replicas it has
    if spec.resources_per_replica is not None:
        from engage.train.placement import check_stage_fits

        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        field = "deploy.resources_per_replica"
        check_stage_fits("serving", field, spec.replica_resources, nodes, _replicas(spec))
    total = float(ray.cluster_resources().get("CPU", 0.0))
    free = float(ray.available_resources().get("CPU", 0.0))
    cpus = spec.replica_resources["CPU"]
    needed = _replicas(spec) * cpus
    if needed > free + 1e-9:
        raise ClusterError(
            f"the deployment needs {needed:g} CPUs ({_replicas(spec)} replica(s) x "
            f"{cpus:g} CPU), but only {free:g} of the cluster's {total:g} "
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


def _set_routes(app: str, routes: list) -> int:
    import ray

    from engage.serve.routes import table_actor

    return ray.get(table_actor(app, create=True).set.remote(tuple(routes)))


def _fingerprint(settings, options: dict[str, Any]) -> str:
    import hashlib

    return hashlib.sha256(
        json.dumps([asdict(settings), options], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]


def _ensure_ingress(app: str, spec: DeploySpec, settings, state: dict, running: bool) -> str:
    """Start the deployment unless it runs as asked (a rollout leaves it alone).

    Returns the fingerprint of its settings and options."""
    from engage.serve import build

    fingerprint = _fingerprint(settings, build.deployment_options(spec))
    if running and state.get("settings") == fingerprint:
        return fingerprint
    _run(build.bind_ingress(spec, settings), app, spec.route_prefix)
    return fingerprint


def _run(bound, name: str, route_prefix: str | None) -> None:
    """``serve.run`` that turns a failed start into one message pointing at the logs."""
    from ray import serve

    try:
        until_proxies_ready(
            lambda: serve.run(
                bound,
                name=name,
                route_prefix=route_prefix,
                logging_config={"enable_access_log": False},
            )
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

    def _done() -> bool:
        acks = ray.get(actor.acked.remote())
        info = serve.status().applications.get(app)
        replicas = 1
        if info is not None and DEPLOYMENT in info.deployments:
            counts = info.deployments[DEPLOYMENT].replica_states
            replicas = max(1, counts.get("RUNNING", 0))
        return sum(1 for g in acks.values() if g >= generation) >= replicas

    if not wait_until(_done, _ACK_TIMEOUT_S, 0.1):
        raise EngageError(
            f"the replicas of {app} did not take the new routes within {_ACK_TIMEOUT_S:g} s",
            hint="`engage serve status` shows its state; the old version keeps serving "
            "(a replica that cannot load the new version logs why in logs/serve/)",
        )


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
        # A thread: this drainer lives seconds, and MLflow is already imported here.
        drainer = Drainer(spool.path, in_process=True).start()
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
    """The apps ``home`` has deployment state for (``<home>/serve/<app>/deployment.json``)."""
    folder = home / "serve"
    return (
        sorted(p.parent.name for p in folder.glob("*/deployment.json")) if folder.is_dir() else []
    )
