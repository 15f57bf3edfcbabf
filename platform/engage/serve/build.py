"""Build the ``Ingress`` deployment from a deploy section: for ``engage deploy`` and for Serve.

Two callers build the same Serve application: ``engage deploy`` (``engage.serve.controller``),
which then follows a route-table actor, and a declarative Serve config or KubeRay RayService
(``import_path: engage.serve.build:build_app``), which fixes the routes in the built app. The
pieces they share live here, so the replica code (``engage.serve.app``) and the deploy
orchestration (``engage.serve.controller``) never import each other.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from engage.errors import EngageError
from engage.serve.hooks import HookSettings
from engage.serve.routes import Route
from engage.spec.models import DeploySpec

if TYPE_CHECKING:  # Ray is imported only once a deploy has joined its cluster (cluster.connect)
    from ray import serve

    from engage.serve.app import IngressSettings


class BuildArgs(DeploySpec):
    """``args`` of ``engage.serve.build:build_app``: a deploy section plus where the model is."""

    model: str = Field(min_length=1, description="NAME@alias, NAME/version or NAME")
    tracking_uri: str | None = Field(None, description="MLflow tracking URI")
    tracking_uri_env: str = Field(
        "MLFLOW_TRACKING_URI", description="variable holding the URI when tracking_uri is unset"
    )
    home: str | None = Field(None, description="replicas' engage home; default ENGAGE_HOME")
    host: str = Field(
        "0.0.0.0", min_length=1, description="where the Serve config's http_options bind"
    )


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve's application builder: the app ``engage deploy`` runs, from ``args``.

    ``args`` (a Serve config's ``args``, e.g. in deploy/kuberay/rayservice.yaml):

    - ``model``: ``NAME@alias``, ``NAME/version`` or ``NAME`` (then ``alias``, default
      ``candidate``), resolved once, here, so every replica serves the same version;
    - ``tracking_uri``, or ``tracking_uri_env`` naming the variable that holds it
      (default ``MLFLOW_TRACKING_URI``);
    - ``token_env`` (default ``ENGAGE_SERVE_TOKEN``): the bearer token's variable, required
      unless ``host`` is loopback; ``host`` (default ``0.0.0.0``) is where the config's
      ``http_options`` bind;
    - ``home`` (default ``ENGAGE_HOME`` or ``./.engage``): the replicas' model cache and
      samples; ``app`` (default the model's name);
    - any other field of a spec's ``deploy`` section: ``replicas``, ``autoscaling``,
      ``cpus_per_replica``, ``resources_per_replica``, ``max_batch_size``,
      ``batch_wait_timeout_s``, ``max_body_bytes``, ``nan_policy``, ``canary``,
      ``sampling``, ``drift``.

    The routes are fixed in the built app (no route-table actor, no MLflow monitoring run;
    the replicas' Prometheus metrics and drift samples work as with ``engage deploy``): a
    promotion is a new config, which Serve rolls out replica by replica.

    Raises
    ------
    pydantic.ValidationError
        When ``args`` is not a valid deploy section.
    EngageError
        See :func:`build_ingress`.
    """
    return build_ingress(BuildArgs.model_validate(args))


def build_ingress(args: BuildArgs) -> serve.Application:
    """The Serve application ``engage deploy`` would run for ``args``, routes fixed in it.

    Raises
    ------
    EngageError
        When ``args.host`` is not loopback and no bearer token is set, when no tracking URI
        is given, or when the model version (or the canary) cannot be resolved.
    """
    from engage import env_vars
    from engage.serve import auth
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
    primary, canary = resolve_versions(open_client(uri), ref, args)
    app = args.app or app_name(ref.name)
    home = env_vars.engage_home(args.home)
    settings = ingress_settings(app, args, digest, home, None, None, uri)
    settings = replace(settings, routes=tuple(routes_for(args, primary, canary)))
    return bind_ingress(args, settings)


def bind_ingress(spec: DeploySpec, settings: IngressSettings) -> serve.Application:
    """The ``Ingress`` deployment with ``spec``'s options, bound to ``settings``."""
    from ray import serve

    from engage.serve.app import Ingress

    return serve.deployment(Ingress).options(**deployment_options(spec)).bind(settings)


def resolve_versions(client: Any, ref: Any, spec: DeploySpec) -> tuple[Any, Any]:
    """The primary version ``ref`` names (or the spec's alias) and the spec's canary.

    Returns
    -------
    tuple
        ``(primary, canary)`` model targets; ``canary`` is None without a canary section.

    Raises
    ------
    EngageError
        When a version cannot be resolved, or the canary is the version already served.
    """
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


def app_name(model: str) -> str:
    """The default Serve app name of a registered model: its name, made safe for Serve."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in model)


def routes_for(spec: DeploySpec, primary: Any, canary: Any) -> list[Route]:
    """The route table: the primary version, plus the canary with its share of requests."""
    weight = spec.canary.weight if canary is not None else 0.0
    routes = [Route(primary, 1.0 - weight, "primary")]
    if canary is not None:
        routes.append(Route(canary, weight, "canary"))
    return routes


def ingress_settings(
    app: str,
    spec: DeploySpec,
    digest: str | None,
    home: Path,
    run_local: str | None,
    run_id: str | None,
    uri: str | None = None,
    hooks: bool = True,
) -> IngressSettings:
    """What every replica of ``app`` gets: limits, the token's digest and the hooks' settings.

    Parameters
    ----------
    digest
        SHA-256 of the bearer token, or None for no auth (loopback listeners only).
    run_local, run_id
        The monitoring run's spool and MLflow ids (None for a declarative app).
    hooks
        False only for the serving benchmark's hooks-off arm.
    """
    hook_settings = HookSettings(
        app, str(home), run_local, run_id or run_local or "none",
        spec.sampling.rate, spec.sampling.queue_size, tuple(spec.sampling.consumers),
        spec.metrics_every_seconds, uri, spec.drift,
    )  # fmt: skip
    from engage.serve.app import IngressSettings

    return IngressSettings(
        app, spec.max_body_bytes, spec.nan_policy, digest, hook_settings,
        spec.max_batch_size, spec.batch_wait_timeout_s, None, hooks,
    )  # fmt: skip


def deployment_options(spec: DeploySpec) -> dict[str, Any]:
    """``serve.deployment(...).options`` for ``spec``: name, each replica's Ray resources
    (``cpus_per_replica`` and ``resources_per_replica``: CPUs, GPUs, memory, custom ones),
    replicas or autoscaling."""
    from engage.serve.app import DEPLOYMENT
    from engage.train.placement import ray_options

    options: dict[str, Any] = {
        "name": DEPLOYMENT,
        "ray_actor_options": ray_options(spec.replica_resources),
        # The replica is the HTTP entry: it holds every open request, batched or not.
        "max_ongoing_requests": max(256, spec.max_batch_size * 4),
        "health_check_period_s": 5,
    }
    if spec.autoscaling:
        options["autoscaling_config"] = spec.autoscaling.model_dump()
    else:
        options["num_replicas"] = spec.replicas
    return options
