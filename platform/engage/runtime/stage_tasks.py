"""Stages that run on the cluster as one Ray task: the data stage with ``data.resources``,
the evaluation with ``evaluate.resources``.

:func:`run_in_task` runs a stage body in a named Ray task that reserves the stage's
resources (so Ray places it on a node that offers them; the State API lists it by name),
and :func:`check_stage_requests` refuses, before any of them runs, a stage request that no
node can ever hold (the training workers' own check is
:func:`engage.train.trainer.check_fits`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from engage.errors import EngageError
from engage.spec.models import PipelineSpec
from engage.train.placement import check_stage_fits, ray_options, stage_request

R = TypeVar("R")


def alive_nodes() -> list[dict[str, float]]:
    """Each alive node's total resources, as Ray lists them (needs a Ray session)."""
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def check_stage_requests(spec: PipelineSpec, nodes: list[dict[str, float]]) -> None:
    """Refuse the data stage's, the evaluation's and (when the job serves after training)
    the replicas' resource requests that ``nodes`` can never hold, before any stage runs.

    Raises
    ------
    ClusterError
        Naming the stage, its spec field, what it asked and what each node has.
    """
    if spec.data.resources is not None:
        asked = stage_request(spec.data.resources)
        check_stage_fits("the data stage", "data.resources", asked, nodes)
    if spec.evaluate.resources is not None:
        asked = stage_request(spec.evaluate.resources)
        check_stage_fits("the evaluation", "evaluate.resources", asked, nodes)
    deploy = spec.deploy
    if deploy.after_training and deploy.resources_per_replica is not None:
        replicas = (deploy.autoscaling.min_replicas or 1) if deploy.autoscaling else deploy.replicas
        field = "deploy.resources_per_replica"
        check_stage_fits("serving", field, deploy.replica_resources, nodes, replicas)


def run_in_task(
    name: str, resources: Mapping[str, float], body: Callable[..., R], *args: Any, **kwargs: Any
) -> R:
    """``body(*args, **kwargs)`` in one Ray task named ``engage.<name>`` that reserves
    ``resources`` (one CPU unless they name a CPU amount); its result comes back through
    the object store.

    Raises
    ------
    EngageError
        The engage error ``body`` raised in the task, as itself (not wrapped by Ray).
    """
    import ray
    from ray.exceptions import RayTaskError

    options = ray_options(stage_request(resources))
    # Ray's defaults: retried when its worker or node dies, never for an error it raised.
    task = ray.remote(body).options(name=f"engage.{name}", **options)
    try:
        return ray.get(task.remote(*args, **kwargs))
    except RayTaskError as exc:
        if isinstance(exc.cause, EngageError):
            raise exc.cause from None
        raise
