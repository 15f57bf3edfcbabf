"""Builds a federated server and its clients from a spec: one place for the runner, the
benchmark and the tests, so all three run the same code."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from engage.federated.aggregators import make_aggregator
from engage.federated.attacks import make_channel
from engage.federated.client import (
    AttackPlan,
    FederatedClient,
    LocalTraining,
    build_model,
    client_actor,
    get_vector,
    model_schema,
    set_vector,
)
from engage.federated.keys import KeyStore
from engage.federated.partition import FederatedData
from engage.federated.policy import QuarantinePolicy
from engage.federated.pools import LocalPool, RayPool
from engage.federated.scoring import ScoringConfig, UpdateScorer
from engage.federated.server import FederatedServer, ServerConfig
from engage.federated.verify import UpdateVerifier
from engage.spec.models import FederatedSpec, ModelSpec


@dataclass(frozen=True)
class Simulation:
    """A built federated setup: the server (with its pool of clients) and who attacks."""

    server: FederatedServer
    malicious: dict[str, str]  # client -> attack kind (empty without client attacks)


def malicious_clients(fed: FederatedSpec, clients: list[str]) -> dict[str, str]:
    """Which clients attack (a seeded choice of ``fraction`` of them, at least one)."""
    attack = fed.attacks.clients if fed.attacks else None
    if attack is None:
        return {}
    k = max(1, round(attack.fraction * len(clients)))
    rng = np.random.default_rng([fed.attacks.seed, 31337])
    chosen = sorted(rng.choice(len(clients), size=min(k, len(clients)), replace=False))
    return {clients[i]: attack.kind for i in chosen}


def local_training(fed: FederatedSpec, model: ModelSpec, data: FederatedData) -> LocalTraining:
    """The local-training settings every client uses, from the spec."""
    return LocalTraining(
        model.name,
        dict(model.params),
        data.shape,
        data.task,
        fed.local_epochs,
        fed.batch_size,
        fed.optimizer,
        fed.learning_rate,
        fed.strategy,
        fed.mu,
        fed.seed,
        fed.max_update_bytes,
        model.module,
    )


def build(
    fed: FederatedSpec,
    model: ModelSpec,
    data: FederatedData,
    keys: KeyStore,
    *,
    use_ray: bool,
    actor_cpus: float = 0.0,
) -> Simulation:
    """The server with its clients (Ray actors or in-process), keys already provisioned."""
    training = local_training(fed, model, data)
    malicious = malicious_clients(fed, data.ids)
    attack = fed.attacks.clients if fed.attacks else None
    plans = {
        c: AttackPlan(attack.kind, dict(attack.params), attack.start_round, fed.attacks.seed)
        for c in malicious
    }
    make = client_actor(actor_cpus).remote if use_ray else FederatedClient
    clients = {
        c.client: make(
            c.client,
            training,
            c.train.x,
            c.train.y,
            fed.signing,
            keys.secret(c.client, fed.signing),
            plans.get(c.client),
        )
        for c in data.clients
    }
    pool = RayPool(clients) if use_ray else LocalPool(clients)
    model_ = build_model(training)
    schema = model_schema(model_)
    scoring = fed.scoring
    scorer = None
    if scoring.enabled:
        probe = None
        if scoring.validation:
            probe = ValidationLoss(training, data, scoring.validation_samples, fed.seed)
        scorer = UpdateScorer(
            ScoringConfig(
                z_threshold=scoring.z_threshold,
                cosine_min=scoring.cosine_min,
                duplicate_cosine=scoring.duplicate_cosine,
                history_decay=scoring.history_decay,
                outlier_z=scoring.outlier_z,
                validation_z=scoring.validation_z,
            ),
            probe,
        )
    server = FederatedServer(
        ServerConfig(
            fed.rounds, fed.clients_per_round, fed.min_clients, fed.timeout_seconds, fed.seed
        ),
        data.ids,
        pool,
        make_channel(
            list(fed.attacks.in_transit) if fed.attacks else [],
            fed.attacks.seed if fed.attacks else 0,
        ),
        UpdateVerifier(
            keys.keyring(data.ids, fed.signing),
            schema,
            fed.max_update_bytes,
            session=secrets.token_hex(16),  # one per run: updates never verify in another
            samples={c.client: len(c.train.y) for c in data.clients},
        ),
        make_aggregator(fed.aggregator.name, dict(fed.aggregator.params)),
        scorer,
        QuarantinePolicy(fed.quarantine_after, scoring.enabled and scoring.exclude_flagged),
        Evaluator(training, data, "val"),
        get_vector(model_, schema),
    )
    return Simulation(server, malicious)


class Evaluator:
    """The global model's metrics on the union of the clients' ``split`` windows."""

    def __init__(self, training: LocalTraining, data: FederatedData, split: str) -> None:
        import torch

        self.training = training
        self.model = build_model(training)
        self.schema = model_schema(self.model)
        x, y = data.union(split)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.split = split

    def __call__(self, vector: np.ndarray) -> dict[str, float]:
        from engage.train.evaluate import accumulate, finalize

        set_vector(self.model, self.schema, vector)
        t = self.training
        sums = accumulate(self.model, self.x, self.y, t.task, t.shape.outputs, 4096)
        return finalize(sums, t.task, self.split)


class ValidationLoss:
    """The server's validation check of single updates: the change of the loss on a small
    server-held validation sample when one update alone is applied to the global model.

    The sample is a seeded draw of ``samples`` windows from the validation windows the
    server holds to watch the global model's health. An honest update from an unusual
    household may raise this loss a little; a label-flipping client's raises it a lot.
    """

    def __init__(self, training: LocalTraining, data: FederatedData, samples: int, seed: int):
        import torch

        self.training = training
        self.model = build_model(training).eval()
        self.schema = model_schema(self.model)
        x, y = data.union("val")
        rng = np.random.default_rng([seed, 2718])
        pick = np.sort(rng.choice(len(y), size=min(samples, len(y)), replace=False))
        self.x, self.y = torch.from_numpy(x[pick]), torch.from_numpy(y[pick])

    def loss(self, vector: np.ndarray) -> float:
        """The loss of the model holding ``vector`` on the validation sample."""
        import torch

        from engage.train.evaluate import loss_function, targets_for_loss

        set_vector(self.model, self.schema, vector.astype(np.float32))
        with torch.no_grad():
            out = self.model(self.x)
            task = self.training.task
            return float(loss_function(task)(out, targets_for_loss(self.y, task)))

    def __call__(self, weights: np.ndarray, updates: np.ndarray) -> np.ndarray:
        base = self.loss(weights)
        return np.array([self.loss(weights + u) - base for u in updates])


def to_model(training: LocalTraining, vector: np.ndarray) -> Any:
    """A model of the local-training spec holding the flat ``vector``."""
    model = build_model(training)
    set_vector(model, model_schema(model), vector)
    return model.eval()


def served_model(training: LocalTraining, vector: np.ndarray, data: FederatedData) -> Any:
    """The global model as engage serves models: on raw windows, standardised with the
    clients' pooled statistics (:func:`engage.federated.partition.pooled_normalization`)."""
    import torch

    from engage.federated.partition import pooled_normalization
    from engage.train.models import Standardized

    norm = pooled_normalization(data)
    features = data.shape.features
    mean = torch.zeros(features) if norm is None else torch.from_numpy(norm.mean)
    std = torch.ones(features) if norm is None else torch.from_numpy(norm.std)
    return Standardized(to_model(training, vector), mean, std).eval()


def served_metrics(training: LocalTraining, model: Any, data: FederatedData) -> dict[str, float]:
    """``served_test_*``: the served model's metrics on every client's raw test windows."""
    import torch

    from engage.federated.partition import raw_windows
    from engage.train.evaluate import accumulate, finalize

    x = np.concatenate([raw_windows(c, "test") for c in data.clients])
    y = np.concatenate([c.test.y for c in data.clients])
    t = training
    sums = accumulate(
        model, torch.from_numpy(x), torch.from_numpy(y), t.task, t.shape.outputs, 4096
    )
    return {f"served_{k}": v for k, v in finalize(sums, t.task, "test").items()}
