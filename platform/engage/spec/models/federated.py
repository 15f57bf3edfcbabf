"""The ``federated`` section: clients, aggregation, scoring and simulated attacks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from engage.spec.models.base import Name, StrictModel

ClientAttackKind = Literal[
    "sign_flip", "boosting", "gaussian_noise", "label_flip", "free_ride", "sybil"
]
TransitAttackKind = Literal["bit_flip", "scaling", "substitution", "replay", "delay", "drop"]


class ClientAttackSpec(StrictModel):
    """Malicious clients: a share of the clients poison their updates the same way."""

    kind: ClientAttackKind = Field(
        description="sign_flip, boosting, gaussian_noise, label_flip, free_ride (zero or "
        "stale update) or sybil (colluding clients sending identical updates)"
    )
    fraction: float = Field(0.3, gt=0.0, lt=1.0, description="share of clients that are malicious")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the attack's parameters (factor, std, mode, norm); see docs/spec.md",
    )
    start_round: int = Field(1, ge=1, description="first round the malicious clients attack")


class TransitAttackSpec(StrictModel):
    """An attacker on the network between clients and server."""

    kind: TransitAttackKind = Field(
        description="bit_flip, scaling, substitution, replay, delay or drop"
    )
    probability: float = Field(
        0.1, ge=0.0, le=1.0, description="chance that one update in transit is hit"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="bits, factor, rounds or seconds, by kind"
    )


class AttacksSpec(StrictModel):
    """Attack and fault simulation, to test the defences. Leave unset for a normal run."""

    seed: int = Field(0, ge=0, description="which clients are malicious, which updates are hit")
    clients: ClientAttackSpec | None = Field(None, description="poisoning by malicious clients")
    in_transit: list[TransitAttackSpec] = Field(
        default_factory=list, description="tampering with updates on their way to the server"
    )


class AggregatorSpec(StrictModel):
    """A registered aggregator and its parameters."""

    name: Name = Field("median", description="fedavg, median, trimmed_mean, krum or multi_krum")
    params: dict[str, Any] = Field(
        default_factory=dict, description="the aggregator's parameters (trim, byzantine, select)"
    )


class ScoringSpec(StrictModel):
    """Anomaly scoring of every accepted update, and what a flag does. The defaults are
    calibrated on benign non-IID runs (docs/BENCHMARKS.md, federated section)."""

    enabled: bool = Field(True, description="score updates and flag outliers")
    z_threshold: float = Field(
        5.0, gt=0.0, le=100.0, description="robust z-score of an update's log norm that flags"
    )
    outlier_z: float = Field(
        10.0,
        gt=0.0,
        le=1000.0,
        description="robust z-score of the distance to the nearest half of the updates that flags",
    )
    cosine_min: float = Field(
        0.0,
        ge=-1.0,
        le=1.0,
        description="flag a client whose cosine to the round centres, averaged over its "
        "history, falls below this",
    )
    duplicate_cosine: float = Field(
        0.9999, gt=0.0, le=1.0, description="updates this similar to another or a past one flag"
    )
    validation: bool = Field(
        True,
        description="check each update on a server-held validation sample: the loss change "
        "when it alone is applied to the global model",
    )
    validation_samples: int = Field(
        512, ge=16, le=1_000_000, description="validation windows the server checks updates on"
    )
    validation_z: float = Field(
        4.0,
        gt=0.0,
        le=1000.0,
        description="robust z-score of the validation-loss change, averaged over the client's "
        "history, that flags (one round alone flags at twice this)",
    )
    exclude_flagged: bool = Field(
        True, description="leave flagged updates out of this round's aggregate"
    )
    history_decay: float = Field(
        0.8, ge=0.0, lt=1.0, description="weight of the past in each client's score history"
    )


class FederatedSpec(StrictModel):
    """Train with federated learning instead of Ray Train: one client per household."""

    partition: Literal["household"] = Field(
        "household", description="one client per series of the data (household, or `group`)"
    )
    clients: int | None = Field(
        None, ge=2, le=10_000, description="use the first N households; default all"
    )
    rounds: int = Field(10, ge=1, le=100_000, description="server rounds")
    clients_per_round: int | None = Field(
        None, ge=1, description="clients sampled each round; default all"
    )
    local_epochs: int = Field(1, ge=1, le=1000, description="passes over local data per round")
    batch_size: int = Field(64, ge=1, le=1_000_000, description="local batch size")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="local optimiser")
    learning_rate: float = Field(0.003, gt=0.0, le=10.0, description="local step size")
    strategy: Literal["fedavg", "fedprox"] = Field(
        "fedavg", description="fedprox adds mu/2 * |w - w_global|^2 to the local loss"
    )
    mu: float = Field(0.01, ge=0.0, le=100.0, description="FedProx proximal weight")
    aggregator: AggregatorSpec = Field(
        default_factory=AggregatorSpec, description="how accepted updates are combined"
    )
    timeout_seconds: float = Field(
        60.0, gt=0.0, le=86_400.0, description="a round waits this long; later updates are stale"
    )
    min_clients: int = Field(
        2, ge=1, description="fewer accepted updates than this skip the round's aggregation"
    )
    signing: Literal["hmac-sha256", "ed25519"] = Field(
        "hmac-sha256", description="update signatures; keys under ENGAGE_HOME/fl/keys"
    )
    max_update_bytes: int = Field(
        16 * 2**20, ge=1024, le=2**31, description="larger updates are rejected unread"
    )
    scoring: ScoringSpec = Field(default_factory=ScoringSpec, description="anomaly scoring")
    quarantine_after: int = Field(
        3, ge=0, le=100_000, description="quarantine a client after this many flags; 0 never"
    )
    seed: int = Field(0, ge=0, description="client sampling and local training seed")
    attacks: AttacksSpec | None = Field(None, description="attack simulation; unset: none")

    @model_validator(mode="after")
    def _enough_per_round(self) -> FederatedSpec:
        per_round = self.clients_per_round
        if per_round is not None and per_round < self.min_clients:
            raise ValueError(
                f"clients_per_round {per_round} is below min_clients {self.min_clients}; "
                "no round could aggregate"
            )
        return self
