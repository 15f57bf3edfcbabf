"""A federated client: trains the global model on its own partition and signs the change.

:class:`FederatedClient` is plain Python (tests and the benchmark call it in-process);
:func:`client_actor` wraps it as a Ray actor. It receives the global model as wire bytes
and returns its update as signed wire bytes: nothing it exchanges is pickled.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engage.federated import wire
from engage.federated.attacks import AttackContext, make_client_attack
from engage.federated.signing import make_signer
from engage.train.builders import ModelShape, get_builder
from engage.train.plugins import import_model_module


@dataclass(frozen=True)
class LocalTraining:
    """How every client trains locally; the same for all clients of a job."""

    model_name: str
    model_params: dict[str, Any]
    shape: ModelShape
    task: str
    local_epochs: int
    batch_size: int
    optimizer: str
    learning_rate: float
    strategy: str  # fedavg | fedprox
    mu: float
    seed: int
    max_update_bytes: int
    model_module: str | None = None  # the spec's ``model.module`` (absolute): a user's builder


@dataclass(frozen=True)
class AttackPlan:
    """A malicious client's attack: kind, parameters, first round, the colluders' seed."""

    kind: str
    params: dict[str, Any]
    start_round: int
    shared_seed: int


def build_model(training: LocalTraining):
    """A fresh model of the local-training spec, seeded so every client starts alike."""
    import torch

    if training.model_module:  # a Ray actor is a fresh process: register the user's builder
        import_model_module(Path(training.model_module))
    torch.manual_seed(training.seed)
    return get_builder(training.model_name).build(training.shape, training.model_params)


def model_schema(model: Any) -> wire.Schema:
    """The wire schema of ``model``'s floating-point tensors, in ``state_dict`` order."""
    return wire.Schema.of({k: v for k, v in model.state_dict().items() if v.is_floating_point()})


def get_vector(model: Any, schema: wire.Schema) -> np.ndarray:
    """The model's tensors of ``schema`` as one flat float32 vector."""
    state = model.state_dict()
    return np.concatenate([state[t.name].detach().cpu().numpy().ravel() for t in schema.tensors])


def set_vector(model: Any, schema: wire.Schema, vector: np.ndarray) -> None:
    """Load the flat ``vector`` into ``model``'s tensors of ``schema``."""
    import torch

    tensors = {k: torch.from_numpy(np.array(v)) for k, v in schema.split(vector).items()}
    model.load_state_dict(tensors, strict=False)


class FederatedClient:
    """One client: its partition, its key, and (in a simulation) its attack."""

    def __init__(
        self,
        client: str,
        training: LocalTraining,
        x: np.ndarray,
        y: np.ndarray,
        scheme: str,
        secret: bytes,
        attack: AttackPlan | None = None,
    ) -> None:
        import torch

        torch.set_num_threads(1)  # many clients share few cores
        self.client = client
        self.training = training
        self._signer = make_signer(scheme, client, secret)
        self.attack = attack
        self._attack = make_client_attack(attack.kind, attack.params) if attack else None
        n_classes = training.shape.outputs if training.task == "classification" else None
        if self._attack is not None:
            y = self._attack.labels(y, n_classes)
        self._x, self._y = torch.from_numpy(x), torch.from_numpy(y)
        self.model = build_model(training)
        self.schema = model_schema(self.model)
        self._last_global: np.ndarray | None = None
        self._last_change: np.ndarray | None = None
        self._warm_up()

    def _warm_up(self) -> None:
        """Load now what the first :meth:`fit` would: the first optimizer a process builds
        imports ``torch._dynamo`` (3-4 s on two loaded cores), its first step the profiler
        hooks, and the loss helpers load lazily. One step on a scratch tensor loads them.

        A Ray pool waits for its clients to start outside the round's timeout
        (:meth:`~engage.federated.pools.RayPool._await_start`), so round 1 then times the
        client's training, not its imports: an honest client is no straggler of a round
        with a short timeout.
        """
        import torch

        from engage.train.evaluate import loss_function

        loss_function(self.training.task)
        scratch = torch.zeros(1, requires_grad=True)  # not the model: its state stays as built
        opt = _optimizer(self.training, [scratch])
        (scratch * 2).sum().backward()
        opt.step()

    def fit(self, global_message: bytes, delay_seconds: float = 0.0) -> bytes:
        """Train on the global model in ``global_message``; return the signed update."""
        round_, start, session = wire.decode_global(
            global_message, self.schema, self.training.max_update_bytes
        )
        if self._last_global is not None:
            self._last_change = start - self._last_global
        self._last_global = start
        delta = self._train(start, round_) if self._trains(round_) else np.zeros_like(start)
        if self._attack is not None and round_ >= self.attack.start_round:
            ctx = AttackContext(
                round_,
                np.random.default_rng(
                    [self.training.seed, round_, zlib.crc32(self.client.encode())]
                ),
                self._last_change,
                self.attack.shared_seed,
            )
            delta = self._attack.update(delta, ctx).astype(np.float32)
        if delay_seconds > 0:
            time.sleep(delay_seconds)  # a slow link (the transit attack "delay")
        return wire.encode_update(
            self._signer, round_, delta, self.schema, len(self._y), session=session
        )

    def _trains(self, round_: int) -> bool:
        return (
            self.attack is None
            or self.attack.kind != "free_ride"
            or round_ < self.attack.start_round
        )

    def _train(self, start: np.ndarray, round_: int) -> np.ndarray:
        import torch

        from engage.train.evaluate import loss_function, targets_for_loss

        t = self.training
        set_vector(self.model, self.schema, start)
        anchor = [p.detach().clone() for p in self.model.parameters()]
        opt = _optimizer(t, self.model.parameters())
        loss_fn = loss_function(t.task)
        g = torch.Generator().manual_seed(t.seed * 1_000_003 + round_ * 7919 + len(self._y))
        self.model.train()
        for _ in range(t.local_epochs):
            order = torch.randperm(len(self._y), generator=g)
            for i in range(0, len(order), t.batch_size):
                idx = order[i : i + t.batch_size]
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(self.model(self._x[idx]), targets_for_loss(self._y[idx], t.task))
                if t.strategy == "fedprox" and t.mu > 0:
                    prox = sum(
                        ((p - a) ** 2).sum()
                        for p, a in zip(self.model.parameters(), anchor, strict=True)
                    )
                    loss = loss + 0.5 * t.mu * prox
                loss.backward()
                opt.step()
        return (get_vector(self.model, self.schema) - start).astype(np.float32)


def _optimizer(t: LocalTraining, params: Any):
    import torch

    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.learning_rate, momentum=0.9)
    return torch.optim.Adam(params, lr=t.learning_rate)


def client_actor(num_cpus: float = 0.0) -> Any:
    """The Ray actor class of :class:`FederatedClient` (fractional or zero CPUs)."""
    import ray

    return ray.remote(num_cpus=num_cpus)(FederatedClient)
