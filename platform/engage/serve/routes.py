"""Which model versions an app's replicas answer with, and in what shares.

An app is one Serve deployment whose replicas hold the routed versions in-process and pick
one per request by weight, deterministically per request id. The table lives in a detached
actor per app that every replica polls, so a rollout or a canary change never restarts a
replica: each loads the new version next to the one it serves, swaps in one assignment
and acknowledges the table's generation; the deploy returns once every replica has.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

from engage.serve.model import ModelTarget

NAMESPACE = "engage-serve"


@dataclass(frozen=True)
class Route:
    """One served version and its share of the traffic."""

    target: ModelTarget
    weight: float
    role: str  # "primary" or "canary"


@dataclass(frozen=True)
class RouteTable:
    """The versions an app routes to, with their shares, at one generation."""

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


def table_actor_name(app: str) -> str:
    """The name of ``app``'s route-table actor (in the engage-serve namespace)."""
    return f"routes:{app}"


class RouteTableActor:
    """A detached async actor body holding one app's current table (set by the CLI, followed
    by the replicas with long polls: ``wait`` answers at once when the caller is behind,
    else when the table changes or after ``timeout_s``)."""

    def __init__(self) -> None:
        import asyncio

        self._table = RouteTable(0, ())
        self._acks: dict[str, int] = {}
        self._changed = asyncio.Event()

    async def set(self, routes: tuple[Route, ...]) -> int:
        """Replace the routes; returns the new generation and wakes every waiting replica."""
        import asyncio

        self._table = RouteTable(self._table.generation + 1, tuple(routes))
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return self._table.generation

    async def get(self, replica: str = "", applied: int = 0) -> RouteTable:
        """The current table; a replica passes its name and the generation it has applied."""
        if replica:
            self._acks[replica] = applied
        return self._table

    async def wait(self, replica: str, applied: int, timeout_s: float) -> RouteTable:
        """The table once it is not generation ``applied`` (what ``replica`` answers by)."""
        import asyncio

        self._acks[replica] = applied
        if self._table.generation == applied:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
        return self._table

    async def acked(self) -> dict[str, int]:
        """Per replica, the generation it answers by."""
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
