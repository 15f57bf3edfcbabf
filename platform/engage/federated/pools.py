"""Where clients run: Ray actors (a real job) or in-process objects (tests, benchmarks).

Both run :class:`~engage.federated.client.FederatedClient` and exchange only bytes. The
Ray pool waits for a round's updates with ``ray.wait(timeout=...)``: what has not arrived
is a straggler, its update is collected when it lands and delivered late (the verifier
rejects it as stale); a client whose actor died is a dropout.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FitOutcome:
    """A round's collection: updates in time, late ones from earlier rounds, who is missing."""

    messages: dict[str, bytes] = field(default_factory=dict)
    late: list[tuple[str, bytes]] = field(default_factory=list)
    stragglers: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # client -> why


class ClientPool(ABC):
    """Where a round's clients train: sends them the global model, collects their updates."""

    @abstractmethod
    def fit(
        self, clients: list[str], message: bytes, delays: dict[str, float], timeout_s: float
    ) -> FitOutcome:
        """Ask ``clients`` to train on the global-model ``message`` and collect their updates
        within ``timeout_s``; ``delays`` holds clients back (simulated stragglers)."""

    def busy(self) -> set[str]:
        """Clients still working on an earlier round (not sampled until they finish)."""
        return set()

    def close(self) -> None:  # noqa: B027 - nothing to release unless a pool says so
        """Release the clients (Ray actors); in-process clients need nothing."""


class LocalPool(ClientPool):
    """Clients as plain objects, called one after the other; a delay past the timeout is
    a straggler without the wait."""

    def __init__(self, clients: dict[str, Any]) -> None:
        self.clients = clients

    def fit(self, clients, message, delays, timeout_s):
        """Call each client in turn; a delay past the timeout makes a straggler,
        a raising client a dropout.
        """
        out = FitOutcome()
        for c in clients:
            if delays.get(c, 0.0) > timeout_s:
                out.stragglers.append(c)
                continue
            try:
                out.messages[c] = self.clients[c].fit(message, 0.0)
            except Exception as exc:  # a crashing client is a dropout, not the end of the job
                out.dropped[c] = f"{type(exc).__name__}: {exc}"
        return out


class RayPool(ClientPool):
    """One Ray actor per client."""

    def __init__(self, actors: dict[str, Any], start_timeout_s: float = 120.0) -> None:
        self.actors = actors
        self._pending: dict[Any, str] = {}  # refs of stragglers -> client
        self._start_timeout_s = start_timeout_s
        self._started = False

    def fit(self, clients, message, delays, timeout_s):
        """Send the round to every client's actor and wait up to ``timeout_s``; updates
        of earlier stragglers that landed meanwhile come back as ``late``.
        """
        import ray

        self._await_start()
        out = FitOutcome()
        refs = {self.actors[c].fit.remote(message, delays.get(c, 0.0)): c for c in clients}
        deadline = time.monotonic() + timeout_s
        ready, waiting = ray.wait(
            list(refs), num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic())
        )
        for ref in ready:
            self._collect(ref, refs[ref], out.messages, out.dropped)
        for ref in waiting:
            out.stragglers.append(refs[ref])
            self._pending[ref] = refs[ref]
        self._collect_late(out)
        return out

    def _await_start(self) -> None:
        """Before the first round: wait (bounded) until the actors are constructed.

        An actor's start (a worker process importing torch) can take longer than a round's
        timeout on a busy machine; it is not the client being slow, so it must not make every
        client a straggler of round 1. An actor still not up after ``start_timeout_s`` takes
        its chances in the round like any slow client.
        """
        import ray

        if self._started:
            return
        self._started = True
        refs = [actor.__ray_ready__.remote() for actor in self.actors.values()]
        ray.wait(refs, num_returns=len(refs), timeout=self._start_timeout_s)

    def _collect(self, ref: Any, client: str, into: dict, dropped: dict) -> None:
        import ray

        try:
            into[client] = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            dropped[client] = type(exc).__name__

    def _collect_late(self, out: FitOutcome) -> None:
        import ray

        if not self._pending:
            return
        done, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        for ref in done:
            client = self._pending.pop(ref)
            got: dict[str, bytes] = {}
            self._collect(ref, client, got, out.dropped)
            out.late += list(got.items())

    def busy(self) -> set[str]:
        """Clients whose update from an earlier round has not landed yet."""
        import ray

        if not self._pending:
            return set()
        done, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        return {c for ref, c in self._pending.items() if ref not in done}

    def close(self) -> None:
        """Kill every client actor."""
        import ray

        for actor in self.actors.values():
            ray.kill(actor)
