"""The federated server: rounds as a template method over small hooks (Flower's pattern).

``run_round`` samples clients, sends the global model, collects updates within the
timeout, passes them through the transit channel (honest or simulated attackers), verifies
each, scores the accepted ones, lets the policy decide, aggregates what is left and
evaluates the new global model. Each hook returns results; only ``run_round`` acts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engage.federated import wire
from engage.federated.aggregators import Aggregator
from engage.federated.attacks import Delivery, TransitChannel
from engage.federated.policy import Decision, QuarantinePolicy
from engage.federated.pools import ClientPool, FitOutcome
from engage.federated.scoring import ClientScore, UpdateScorer
from engage.federated.verify import UpdateVerdict, UpdateVerifier


@dataclass(frozen=True)
class ServerConfig:
    """The server's round settings, from the spec's ``federated`` section."""

    rounds: int
    clients_per_round: int | None
    min_clients: int
    timeout_seconds: float
    seed: int


@dataclass
class RoundResult:
    """Everything that happened in one round, for reporting and for tests."""

    round: int
    selected: list[str]
    verdicts: list[tuple[Delivery, UpdateVerdict]] = field(default_factory=list)
    scores: list[ClientScore] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    aggregated: list[str] = field(default_factory=list)
    stragglers: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    skipped: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rejected(self) -> list[UpdateVerdict]:
        """The verdicts that rejected an update."""
        return [v for _, v in self.verdicts if not v.accepted]

    @property
    def flagged(self) -> list[str]:
        """The clients whose update scoring flagged."""
        return [s.client for s in self.scores if s.flagged]


class FederatedServer:
    """Runs rounds over a pool of clients; holds the global model as a flat vector."""

    def __init__(
        self,
        config: ServerConfig,
        clients: list[str],
        pool: ClientPool,
        channel: TransitChannel,
        verifier: UpdateVerifier,
        aggregator: Aggregator,
        scorer: UpdateScorer | None,
        policy: QuarantinePolicy,
        evaluate: Callable[[np.ndarray], dict[str, float]],
        initial: np.ndarray,
    ) -> None:
        self.config = config
        self.clients = list(clients)
        self.pool, self.channel, self.verifier = pool, channel, verifier
        self.aggregator, self.scorer, self.policy = aggregator, scorer, policy
        self.evaluate = evaluate
        self.weights = initial.astype(np.float32)
        self._rng = np.random.default_rng([config.seed, 104729])

    # -- the template --------------------------------------------------------------------------
    def run_round(self, round_: int) -> RoundResult:
        """Run round ``round_``: sample, collect, verify, score, decide, aggregate,
        evaluate; returns what happened, the global model updated in place.
        """
        started = time.perf_counter()
        selected = self.sample(round_)
        result = RoundResult(round_, selected)
        self.verifier.begin_round(round_, set(selected), self.policy.quarantined)
        outcome = self.collect(round_, selected)
        result.stragglers, result.dropped = outcome.stragglers, outcome.dropped
        result.verdicts = self.verify(round_, outcome)
        accepted = [v.update for _, v in result.verdicts if v.accepted]
        result.scores = self.score(round_, accepted)
        result.decisions = self.policy.decide(result.scores)
        keep = {d.client for d in result.decisions if d.action == "aggregate"}
        if self.scorer is None:
            keep = {u.client for u in accepted}
        used = [u for u in accepted if u.client in keep]
        if len(used) < self.config.min_clients:
            result.skipped = True
        else:
            change, names = self.aggregate(used)
            self.weights = (self.weights + change).astype(np.float32)
            result.aggregated = names
            if self.scorer is not None:
                self.scorer.observe_global(change)
        result.metrics = self.evaluate(self.weights)
        result.seconds = time.perf_counter() - started
        return result

    # -- the hooks -----------------------------------------------------------------------------
    def sample(self, round_: int) -> list[str]:
        """Clients asked this round: not quarantined, not busy, ``clients_per_round`` of them."""
        out = set(self.policy.quarantined) | self.pool.busy()
        eligible = [c for c in self.clients if c not in out]
        k = self.config.clients_per_round or len(eligible)
        if k >= len(eligible):
            return eligible
        chosen = self._rng.choice(len(eligible), size=k, replace=False)
        return [eligible[i] for i in sorted(chosen)]

    def collect(self, round_: int, selected: list[str]) -> FitOutcome:
        """Send the global model to ``selected`` through the channel's planned delays."""
        delays = self.channel.plan(round_, selected)
        message = wire.encode_global(
            round_, self.weights, self.verifier.schema, self.verifier.session
        )
        return self.pool.fit(selected, message, delays, self.config.timeout_seconds)

    def verify(self, round_: int, outcome: FitOutcome) -> list[tuple[Delivery, UpdateVerdict]]:
        """Pass late and on-time messages through the channel, then verify each."""
        deliveries = [Delivery(c, raw, "late") for c, raw in outcome.late]
        deliveries += self.channel.deliver(round_, outcome.messages)
        return [(d, self.verifier.check(d.raw)) for d in deliveries]

    def score(self, round_: int, accepted: list) -> list[ClientScore]:
        """Anomaly scores of the accepted updates (none without a scorer)."""
        if self.scorer is None or not accepted:
            return []
        matrix = np.stack([u.vector for u in accepted])
        return self.scorer.score(round_, [u.client for u in accepted], matrix, self.weights)

    def aggregate(self, used: list) -> tuple[np.ndarray, list[str]]:
        """The aggregated change of ``used`` and the clients that contributed to it."""
        matrix = np.stack([u.vector for u in used])
        weights = np.array([u.num_samples for u in used], dtype=np.float64)
        result = self.aggregator.aggregate(matrix, weights)
        return result.vector, [used[i].client for i in result.used]
