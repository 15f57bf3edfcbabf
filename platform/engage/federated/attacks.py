"""Attack simulation, registered by name: poisoning at malicious clients, tampering in transit.

Client attacks change what a malicious client trains on (``labels``) or sends
(``update``); they run inside the client, after honest local training, and the result is
signed like any update, so only scoring can catch them. Transit attacks act on the signed
bytes between client and server (:class:`TransitChannel`), so the verifier must.

Adding one is a subclass of :class:`ClientAttack` or :class:`TransitAttack` with a
docstring, a ``name`` and a ``description``, decorated with
``@CLIENT_ATTACKS.register()`` or ``@TRANSIT_ATTACKS.register()``, and its name added to
the spec's ``ClientAttackKind`` or ``TransitAttackKind``.
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
from engage.registry import Registry

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


#: Every client attack, by name; an unknown name raises ValueError listing them.
CLIENT_ATTACKS: Registry[type[ClientAttack]] = Registry("client attack", ValueError)


@CLIENT_ATTACKS.register()
class SignFlip(ClientAttack):
    """Sign flipping: the client sends ``-factor`` times its honest update, pulling the
    global model backwards.
    """

    name, description = "sign_flip", "sends -factor times its honest update"
    defaults = MappingProxyType({"factor": 1.0})

    def update(self, delta, ctx):
        """``-factor * delta``."""
        return -self.params["factor"] * delta


@CLIENT_ATTACKS.register()
class Boosting(ClientAttack):
    """Boosting (model replacement): the client scales its honest update by ``factor`` so
    it outweighs the others.
    """

    name, description = "boosting", "scales its update by factor (model replacement)"
    defaults = MappingProxyType({"factor": 10.0})

    def update(self, delta, ctx):
        """``factor * delta``."""
        return self.params["factor"] * delta


@CLIENT_ATTACKS.register()
class GaussianNoise(ClientAttack):
    """Noise injection: the client adds N(0, ``std``) noise to every coordinate."""

    name, description = "gaussian_noise", "adds N(0, std) noise to every coordinate"
    defaults = MappingProxyType({"std": 0.1})

    def update(self, delta, ctx):
        """``delta`` plus fresh Gaussian noise."""
        return delta + ctx.rng.normal(0.0, self.params["std"], delta.shape).astype(np.float32)


@CLIENT_ATTACKS.register()
class LabelFlip(ClientAttack):
    """Label flipping (data poisoning): the client trains honestly on flipped labels."""

    name, description = "label_flip", "trains on flipped labels (class k -> K-1-k)"

    def labels(self, y, n_classes):
        """Class ``k`` becomes ``K-1-k``; regression targets are mirrored."""
        if n_classes is None:  # regression: mirror the targets
            return -y
        return (n_classes - 1 - y).astype(y.dtype)

    def update(self, delta, ctx):
        """The honest update of the poisoned training, unchanged."""
        return delta


@CLIENT_ATTACKS.register()
class FreeRide(ClientAttack):
    """Free riding: the client trains nothing and sends zeros (``mode: zero``) or the last
    round's global change (``mode: stale``).
    """

    name, description = "free_ride", "trains nothing: sends zeros or last round's global change"
    defaults = MappingProxyType({"mode": "zero"})

    def update(self, delta, ctx):
        """Zeros, or a copy of the previous global change."""
        if self.params["mode"] == "stale" and ctx.previous_global_change is not None:
            return ctx.previous_global_change.copy()
        return np.zeros_like(delta)


@CLIENT_ATTACKS.register()
class Sybil(ClientAttack):
    """Sybil attack: colluding clients send one identical crafted update, derived from what
    they share, pushing the model back along its last change.
    """

    name, description = "sybil", "colluding clients send one identical crafted update"
    defaults = MappingProxyType({"factor": 3.0})

    def update(self, delta, ctx):
        """The crafted update every Sybil of this round sends alike."""
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
    """The registered client attack ``kind`` with ``params``.

    Raises
    ------
    ValueError
        An unknown kind (the message lists the registered ones) or parameter.
    """
    return CLIENT_ATTACKS.get(kind)(params)


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
        """How long the client holds its message back (0: no delay at the client)."""
        return 0.0

    @abstractmethod
    def apply(
        self, raw: bytes, client: str, round_: int, rng: np.random.Generator, state: ChannelState
    ) -> list[bytes]:
        """The messages delivered now in place of ``raw`` from ``client`` in ``round_``
        (none when the attack holds or loses it); ``state`` keeps what it captured."""


#: Every attack in transit, by name; an unknown name raises ValueError listing them.
TRANSIT_ATTACKS: Registry[type[TransitAttack]] = Registry("transit attack", ValueError)


@TRANSIT_ATTACKS.register()
class BitFlip(TransitAttack):
    """Bit flips: ``bits`` random bits anywhere in the signed message."""

    name, description = "bit_flip", "flips random bits anywhere in the message"
    defaults = MappingProxyType({"bits": 1})

    def apply(self, raw, client, round_, rng, state):
        """The message with ``bits`` random bits flipped."""
        data = bytearray(raw)
        for _ in range(int(self.params["bits"])):
            i = int(rng.integers(0, len(data)))
            data[i] ^= 1 << int(rng.integers(0, 8))
        return [bytes(data)]


def _split(raw: bytes) -> tuple[bytes, bytes]:
    head_len = int.from_bytes(raw[4:8], "little")
    return raw[: 8 + head_len], raw[8 + head_len :]


@TRANSIT_ATTACKS.register()
class Scaling(TransitAttack):
    """Scaling: multiplies the payload's floats by ``factor`` and leaves the header alone, so
    the payload hash no longer matches.
    """

    name, description = "scaling", "multiplies the payload's floats, header untouched"
    defaults = MappingProxyType({"factor": 10.0})

    def apply(self, raw, client, round_, rng, state):
        """The message with its payload scaled."""
        head, payload = _split(raw)
        return [head + wire.to_payload(wire.from_payload(payload) * self.params["factor"])]


@TRANSIT_ATTACKS.register()
class Substitution(TransitAttack):
    """Substitution: swaps in a payload of its own and fixes the header's payload hash, so
    only the signature can catch it.
    """

    name, description = "substitution", "swaps in its own payload and fixes the payload hash"

    def apply(self, raw, client, round_, rng, state):
        """The message with a fake payload and a matching hash (unparsable messages pass)."""
        try:
            header, payload = wire.unpack(raw, len(raw))
        except wire.WireError:
            return [raw]
        fake = wire.to_payload(rng.normal(0, 0.1, len(payload) // 4))
        digest = hashlib.sha256(fake).hexdigest()
        return [wire.pack(replace(header, payload_sha256=digest), fake)]


@TRANSIT_ATTACKS.register()
class Replay(TransitAttack):
    """Replay: delivers the message and a replay of one captured earlier."""

    name, description = "replay", "delivers the message and a replay of a captured one"

    def apply(self, raw, client, round_, rng, state):
        """The message and a captured one (itself when nothing was captured yet)."""
        old = state.captured[int(rng.integers(0, len(state.captured)))] if state.captured else raw
        return [raw, old]


@TRANSIT_ATTACKS.register()
class Delay(TransitAttack):
    """Delay: holds the message back ``rounds`` rounds, or ``seconds`` at the client (a
    straggler once past the round's timeout).
    """

    name, description = "delay", "holds the message back rounds, or seconds at the client"
    defaults = MappingProxyType({"rounds": 1, "seconds": 0.0})

    def delay_seconds(self) -> float:
        """The client-side delay, ``seconds``."""
        return float(self.params["seconds"])

    def apply(self, raw, client, round_, rng, state):
        """Nothing now (held for a later round), or the message when delayed at the client."""
        if self.params["seconds"] > 0:
            return [raw]  # already delayed at the client (a straggler if past the timeout)
        state.held.append((round_ + int(self.params["rounds"]), client, raw))
        return []


@TRANSIT_ATTACKS.register()
class Drop(TransitAttack):
    """Drop: the message is lost in transit."""

    name, description = "drop", "loses the message"

    def apply(self, raw, client, round_, rng, state):
        """Nothing."""
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
    """The channel for the spec's ``attacks.in_transit`` list (empty: an honest network).

    Raises
    ------
    ValueError
        An unknown attack kind (the message lists the registered ones) or parameter.
    """
    attacks = [TRANSIT_ATTACKS.get(s.kind)(s.probability, dict(s.params)) for s in specs]
    return TransitChannel(attacks, seed)
