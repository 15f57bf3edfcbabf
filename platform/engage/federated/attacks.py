"""Attack simulation, registered by name: poisoning at malicious clients, tampering in transit.

Client attacks change what a malicious client trains on (``labels``) or sends
(``update``); they run inside the client, after honest local training, and the result is
signed like any update, so only scoring can catch them. Transit attacks act on the signed
bytes between client and server (:class:`TransitChannel`), so the verifier must.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from engage.federated import wire

# -- at malicious clients ----------------------------------------------------------------------


@dataclass(frozen=True)
class AttackContext:
    """What a malicious client knows when it crafts its update."""

    round: int
    rng: np.random.Generator
    previous_global_change: np.ndarray | None  # what the server applied last round
    shared_seed: int  # common to colluding clients


class ClientAttack(ABC):
    """A way a malicious client poisons its update."""

    name: ClassVar[str]
    description: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        unknown = set(params or {}) - set(self.defaults)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {sorted(unknown)}")
        self.params = {**self.defaults, **(params or {})}

    def labels(self, y: np.ndarray, n_classes: int | None) -> np.ndarray:
        """The labels the client trains on (honest: unchanged)."""
        return y

    @abstractmethod
    def update(self, delta: np.ndarray, ctx: AttackContext) -> np.ndarray:
        """The update sent instead of the honest ``delta``."""


CLIENT_ATTACKS: dict[str, type[ClientAttack]] = {}


def _client_attack(cls: type[ClientAttack]) -> type[ClientAttack]:
    CLIENT_ATTACKS[cls.name] = cls
    return cls


@_client_attack
class SignFlip(ClientAttack):
    name, description = "sign_flip", "sends -factor times its honest update"
    defaults = MappingProxyType({"factor": 1.0})

    def update(self, delta, ctx):
        return -self.params["factor"] * delta


@_client_attack
class Boosting(ClientAttack):
    name, description = "boosting", "scales its update by factor (model replacement)"
    defaults = MappingProxyType({"factor": 10.0})

    def update(self, delta, ctx):
        return self.params["factor"] * delta


@_client_attack
class GaussianNoise(ClientAttack):
    name, description = "gaussian_noise", "adds N(0, std) noise to every coordinate"
    defaults = MappingProxyType({"std": 0.1})

    def update(self, delta, ctx):
        return delta + ctx.rng.normal(0.0, self.params["std"], delta.shape).astype(np.float32)


@_client_attack
class LabelFlip(ClientAttack):
    name, description = "label_flip", "trains on flipped labels (class k -> K-1-k)"

    def labels(self, y, n_classes):
        if n_classes is None:  # regression: mirror the targets
            return -y
        return (n_classes - 1 - y).astype(y.dtype)

    def update(self, delta, ctx):
        return delta


@_client_attack
class FreeRide(ClientAttack):
    name, description = "free_ride", "trains nothing: sends zeros or last round's global change"
    defaults = MappingProxyType({"mode": "zero"})

    def update(self, delta, ctx):
        if self.params["mode"] == "stale" and ctx.previous_global_change is not None:
            return ctx.previous_global_change.copy()
        return np.zeros_like(delta)


@_client_attack
class Sybil(ClientAttack):
    name, description = "sybil", "colluding clients send one identical crafted update"
    defaults = MappingProxyType({"factor": 3.0})

    def update(self, delta, ctx):
        # Every Sybil derives the same update from what they share: the seed, the round and
        # the last global change (pushed backwards), so their messages are identical.
        shared = np.random.default_rng([ctx.shared_seed, ctx.round])
        direction = shared.normal(size=delta.shape).astype(np.float32)
        if ctx.previous_global_change is not None:
            direction = -ctx.previous_global_change + 0.1 * direction * float(
                np.linalg.norm(ctx.previous_global_change) / np.sqrt(delta.size)
            )
        else:
            direction *= 0.01
        return (self.params["factor"] * direction).astype(np.float32)


def make_client_attack(kind: str, params: dict[str, Any] | None = None) -> ClientAttack:
    try:
        return CLIENT_ATTACKS[kind](params)
    except KeyError:
        raise ValueError(
            f"unknown client attack {kind!r}; use one of {sorted(CLIENT_ATTACKS)}"
        ) from None


# -- in transit --------------------------------------------------------------------------------


@dataclass
class ChannelState:
    """What a network attacker has seen and holds back."""

    captured: list[bytes] = field(default_factory=list)
    held: list[tuple[int, str, bytes]] = field(default_factory=list)  # (release round, client, raw)


class TransitAttack(ABC):
    """Tampering with one message on its way; returns the messages delivered now."""

    name: ClassVar[str]
    description: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def __init__(self, probability: float, params: dict[str, Any] | None = None) -> None:
        unknown = set(params or {}) - set(self.defaults)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {sorted(unknown)}")
        self.probability = probability
        self.params = {**self.defaults, **(params or {})}

    def delay_seconds(self) -> float:
        return 0.0

    @abstractmethod
    def apply(
        self, raw: bytes, client: str, round_: int, rng: np.random.Generator, state: ChannelState
    ) -> list[bytes]: ...


TRANSIT_ATTACKS: dict[str, type[TransitAttack]] = {}


def _transit(cls: type[TransitAttack]) -> type[TransitAttack]:
    TRANSIT_ATTACKS[cls.name] = cls
    return cls


@_transit
class BitFlip(TransitAttack):
    name, description = "bit_flip", "flips random bits anywhere in the message"
    defaults = MappingProxyType({"bits": 1})

    def apply(self, raw, client, round_, rng, state):
        data = bytearray(raw)
        for _ in range(int(self.params["bits"])):
            i = int(rng.integers(0, len(data)))
            data[i] ^= 1 << int(rng.integers(0, 8))
        return [bytes(data)]


def _split(raw: bytes) -> tuple[bytes, bytes]:
    head_len = int.from_bytes(raw[4:8], "little")
    return raw[: 8 + head_len], raw[8 + head_len :]


@_transit
class Scaling(TransitAttack):
    name, description = "scaling", "multiplies the payload's floats, header untouched"
    defaults = MappingProxyType({"factor": 10.0})

    def apply(self, raw, client, round_, rng, state):
        head, payload = _split(raw)
        return [head + wire.to_payload(wire.from_payload(payload) * self.params["factor"])]


@_transit
class Substitution(TransitAttack):
    name, description = "substitution", "swaps in its own payload and fixes the payload hash"

    def apply(self, raw, client, round_, rng, state):
        try:
            header, payload = wire.unpack(raw, len(raw))
        except wire.WireError:
            return [raw]
        fake = wire.to_payload(rng.normal(0, 0.1, len(payload) // 4))
        digest = hashlib.sha256(fake).hexdigest()
        return [wire.pack(replace(header, payload_sha256=digest), fake)]


@_transit
class Replay(TransitAttack):
    name, description = "replay", "delivers the message and a replay of a captured one"

    def apply(self, raw, client, round_, rng, state):
        old = state.captured[int(rng.integers(0, len(state.captured)))] if state.captured else raw
        return [raw, old]


@_transit
class Delay(TransitAttack):
    name, description = "delay", "holds the message back rounds, or seconds at the client"
    defaults = MappingProxyType({"rounds": 1, "seconds": 0.0})

    def delay_seconds(self) -> float:
        return float(self.params["seconds"])

    def apply(self, raw, client, round_, rng, state):
        if self.params["seconds"] > 0:
            return [raw]  # already delayed at the client (a straggler if past the timeout)
        state.held.append((round_ + int(self.params["rounds"]), client, raw))
        return []


@_transit
class Drop(TransitAttack):
    name, description = "drop", "loses the message"

    def apply(self, raw, client, round_, rng, state):
        return []


@dataclass(frozen=True)
class Delivery:
    """A message as it reaches the server: the client it came from and the attack it met."""

    client: str
    raw: bytes
    attack: str | None


class TransitChannel:
    """The network between clients and server, with the configured attackers on it."""

    def __init__(self, attacks: list[TransitAttack], seed: int) -> None:
        self.attacks = attacks
        self._rng = np.random.default_rng([seed, 7919])
        self.state = ChannelState()
        self._plan: dict[tuple[int, str], TransitAttack] = {}

    def plan(self, round_: int, clients: list[str]) -> dict[str, float]:
        """Choose which messages of the round get hit; returns client-side delays (seconds)."""
        delays = {}
        for client in clients:
            for attack in self.attacks:
                if self._rng.random() < attack.probability:
                    self._plan[(round_, client)] = attack
                    if attack.delay_seconds() > 0:
                        delays[client] = attack.delay_seconds()
                    break
        return delays

    def deliver(self, round_: int, messages: dict[str, bytes]) -> list[Delivery]:
        """What reaches the server this round: released held messages, then this round's."""
        out = [Delivery(c, raw, "delay") for r, c, raw in self.state.held if r <= round_]
        self.state.held = [h for h in self.state.held if h[0] > round_]
        for client, raw in messages.items():
            attack = self._plan.pop((round_, client), None)
            if attack is None:
                out.append(Delivery(client, raw, None))
            else:
                out += [
                    Delivery(client, m, attack.name)
                    for m in attack.apply(raw, client, round_, self._rng, self.state)
                ]
        self.state.captured = (self.state.captured + list(messages.values()))[-200:]
        return out


def make_channel(specs: list[Any], seed: int) -> TransitChannel:
    """The channel for the spec's ``attacks.in_transit`` list (empty: an honest network)."""
    attacks = [TRANSIT_ATTACKS[s.kind](s.probability, dict(s.params)) for s in specs]
    return TransitChannel(attacks, seed)
