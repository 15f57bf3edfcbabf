"""Which model versions an app's ingress sends requests to, and in what shares.

Each model version runs as its own Serve application (``<app>--v<version>``, no HTTP
route); the ingress routes by weight, deterministically per request id. The table lives in
a detached actor per app that every ingress replica polls, so a rollout or a canary change
never restarts the ingress: the new version starts, the table moves, the old one drains.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from engage.serve.model import ModelTarget

NAMESPACE = "engage-serve"


@dataclass(frozen=True)
class Route:
    """One served version and its share of the traffic."""

    model_app: str  # the Serve application running this version
    target: ModelTarget
    weight: float
    role: str  # "primary" or "canary"


@dataclass(frozen=True)
class RouteTable:
    generation: int
    routes: tuple[Route, ...]

    def pick(self, request_id: str) -> Route:
        """The route of ``request_id``: a stable hash of the id, cut by the weights."""
        point = bucket(request_id)
        total = sum(r.weight for r in self.routes) or 1.0
        edge = 0.0
        for route in self.routes:
            edge += route.weight / total
            if point < edge:
                return route
        return self.routes[-1]


def bucket(request_id: str) -> float:
    """A number in [0, 1) that depends only on the id (same id, same version)."""
    h = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def model_app_name(app: str, version: str) -> str:
    return f"{app}--v{version}"


def table_actor_name(app: str) -> str:
    return f"routes:{app}"


class RouteTableActor:
    """A detached actor body holding one app's current table (set by the CLI, read by replicas)."""

    def __init__(self) -> None:
        self._table = RouteTable(0, ())
        self._acks: dict[str, int] = {}

    def set(self, routes: tuple[Route, ...]) -> int:
        self._table = RouteTable(self._table.generation + 1, tuple(routes))
        return self._table.generation

    def get(self, replica: str = "", applied: int = 0) -> RouteTable:
        if replica:
            self._acks[replica] = applied
        return self._table

    def acked(self) -> dict[str, int]:
        """Per ingress replica, the generation it routes by."""
        return dict(self._acks)


def table_actor(app: str, create: bool = False):
    """The app's table actor (created when asked and missing)."""
    import ray

    name = table_actor_name(app)
    if create:
        return (
            ray.remote(num_cpus=0)(RouteTableActor)
            .options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True)
            .remote()
        )
    return ray.get_actor(name, namespace=NAMESPACE)
