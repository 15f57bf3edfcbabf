"""Ray resource requests of one stage: the data stage, the evaluation, a serving replica.

A stage with resources in the spec (``data.resources``, ``evaluate.resources``,
``deploy.resources_per_replica``) runs as one Ray task or as Serve replicas reserving them;
:func:`ray_options` turns the request into Ray's options and :func:`check_stage_fits`
refuses, before anything runs, a request no node of the cluster can ever hold (Ray would
wait on it forever). The training workers' check (:func:`engage.train.trainer.check_fits`)
shares :func:`check_offered` and :func:`node_room` with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engage.errors import ClusterError

#: Resources every Ray node has; any other name is a custom one someone must configure.
BUILTIN = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
#: Byte amounts: too long to be worth listing in a message.
BYTES = frozenset({"memory", "object_store_memory"})
#: Ray's own keyword for each built-in resource a task or actor reserves.
_KEYWORDS = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


def stage_request(resources: Mapping[str, float]) -> dict[str, float]:
    """What one Ray task asking for ``resources`` reserves: one CPU unless it names its own
    CPU amount (Ray's default for a task), then ``resources``."""
    return {"CPU": 1.0, **resources}


def ray_options(resources: Mapping[str, float]) -> dict[str, Any]:
    """Ray's task or actor options that reserve ``resources``.

    ``CPU``, ``GPU`` and ``memory`` become ``num_cpus``, ``num_gpus`` and ``memory``; every
    other name (a node label, ``accelerator_type:A100``) goes into ``resources``, which
    Ray refuses to hold the built-in ones.
    """
    options: dict[str, Any] = {_KEYWORDS[k]: v for k, v in resources.items() if k in _KEYWORDS}
    custom = {k: v for k, v in resources.items() if k not in _KEYWORDS}
    if custom:
        options["resources"] = custom
    return options


def check_offered(field: str, asked: Mapping[str, float], cluster: Mapping[str, float]) -> None:
    """Refuse a custom resource (a node label, an accelerator type) that no node offers.

    Raises
    ------
    ClusterError
        If ``asked`` (the request of spec field ``field``) names a custom resource the
        cluster's totals ``cluster`` do not hold.
    """
    missing = sorted(k for k in asked if k not in BUILTIN and cluster.get(k, 0.0) <= 0)
    if not missing:
        return
    offered = ", ".join(f"{k}: {v:g}" for k, v in sorted(cluster.items()) if k not in BYTES)
    raise ClusterError(
        f"{field} asks for {', '.join(missing)} ({dict(asked)}), which no node of "
        f"the cluster offers (the cluster has {offered or 'nothing'})",
        hint="start a node that offers it (`ray start --resources '{\"NAME\": N}'`) or remove "
        f"it from {field}",
    )


def node_room(
    asked: Mapping[str, float], nodes: Sequence[Mapping[str, float]], unbounded: int
) -> int:
    """How many requests of ``asked`` the ``nodes`` hold, each request on one node (a
    request cannot span two nodes); ``unbounded`` per node when ``asked`` reserves nothing."""
    wanted = {k: v for k, v in asked.items() if v > 0}
    return sum(
        min((int((node.get(k, 0.0) + 1e-9) // v) for k, v in wanted.items()), default=unbounded)
        for node in nodes
    )


def describe_nodes(asked: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> str:
    """What each node has of the resources in ``asked`` (``node 1: CPU 1, node_b 0; ...``),
    byte amounts left out."""
    shown = [k for k in sorted(asked) if asked[k] > 0 and k not in BYTES]
    return "; ".join(
        f"node {i}: " + ", ".join(f"{k} {node.get(k, 0.0):g}" for k in shown)
        for i, node in enumerate(nodes, 1)
    )


def check_stage_fits(
    stage: str,
    field: str,
    asked: Mapping[str, float],
    nodes: Sequence[Mapping[str, float]],
    count: int = 1,
) -> None:
    """Refuse up front a stage request no node of the cluster can ever hold.

    Parameters
    ----------
    stage : str
        The stage as the message names it (``"the data stage"``, ``"serving"``).
    field : str
        The spec field the request comes from (``data.resources``).
    asked : mapping of str to float
        What one task or replica reserves (:func:`stage_request` for a task).
    nodes : sequence of mappings
        Each alive node's total resources (``ray.nodes()``' ``Resources``).
    count : int, optional
        How many of them must run at once (a deployment's replicas).

    Raises
    ------
    ClusterError
        If ``asked`` names a custom resource no node offers, or the nodes cannot hold
        ``count`` requests one node at a time.
    """
    totals: dict[str, float] = {}
    for node in nodes:
        for k, v in node.items():
            totals[k] = totals.get(k, 0.0) + v
    check_offered(field, asked, totals)
    room = node_room(asked, nodes, count)
    if room >= count:
        return
    what = f"{count} x {dict(asked)}" if count > 1 else str(dict(asked))
    raise ClusterError(
        f"{stage} asks for {what} ({field}), and the nodes can hold {room} of that at most, "
        f"one node each ({describe_nodes(asked, nodes)})",
        hint=f"a task or replica runs on one node: ask for no more than one node has ({field}), "
        "or add a node that offers it",
    )
