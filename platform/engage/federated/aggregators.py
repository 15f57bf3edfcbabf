"""Aggregators: one abstract :class:`Aggregator`, registered by name, over flat updates.

Each takes the accepted updates of a round as rows of a ``(k, d)`` array (model changes,
not models) with their sample counts, and returns the change applied to the global model.
FedProx needs no aggregator of its own: its proximal term lives in the client's loss and
its server step is FedAvg's.

Adding one is a subclass of :class:`Aggregator` with a docstring, a ``name``, a
``description`` (and a ``params_model`` if it takes parameters), decorated with
``@AGGREGATORS.register()``; the spec then accepts its name under
``federated.aggregator.name``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engage.errors import FederatedError
from engage.registry import Registry


class AggregatorParams(BaseModel):
    """An aggregator's parameters (none by default); subclasses add validated fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Aggregate:
    """The aggregated change and the rows that contributed to it."""

    vector: np.ndarray
    used: tuple[int, ...]


class Aggregator(ABC):
    """Combines a round's updates into one change of the global model."""

    name: ClassVar[str]
    description: ClassVar[str]
    params_model: ClassVar[type[AggregatorParams]] = AggregatorParams

    def __init__(self, params: AggregatorParams | None = None) -> None:
        self.params = params or self.params_model()

    @abstractmethod
    def aggregate(self, updates: np.ndarray, weights: np.ndarray) -> Aggregate:
        """``updates``: ``(k, d)`` float32, ``k >= 1``; ``weights``: ``(k,)`` sample counts."""


#: Every aggregator, by name; an unknown name raises :class:`FederatedError` listing them.
AGGREGATORS: Registry[type[Aggregator]] = Registry("aggregator", FederatedError)


def make_aggregator(name: str, params: dict[str, Any] | None = None) -> Aggregator:
    """The registered aggregator ``name`` with validated ``params``.

    Raises
    ------
    FederatedError
        An unknown name (the hint lists the registered ones) or invalid parameters.
    """
    cls = AGGREGATORS.get(name)
    try:
        return cls(cls.params_model.model_validate(params or {}))
    except ValidationError as exc:
        raise FederatedError(f"bad parameters for aggregator {name!r}: {exc}") from None


@AGGREGATORS.register()
class FedAvg(Aggregator):
    """FedAvg: the mean of the updates weighted by each client's sample count."""

    name = "fedavg"
    description = "mean weighted by sample counts (FedAvg; FedProx's server step too)"

    def aggregate(self, updates: np.ndarray, weights: np.ndarray) -> Aggregate:
        """The sample-weighted mean (uniform when every weight is 0)."""
        w = np.asarray(weights, dtype=np.float64)
        w = w / w.sum() if w.sum() > 0 else np.full(len(updates), 1 / len(updates))
        return Aggregate((w @ updates.astype(np.float64)).astype(np.float32), _all(updates))


@AGGREGATORS.register()
class Median(Aggregator):
    """Coordinate-wise median: each coordinate stays among the honest values while fewer
    than half the updates are malicious."""

    name = "median"
    description = "coordinate-wise median (breaks down at half the clients)"

    def aggregate(self, updates: np.ndarray, weights: np.ndarray) -> Aggregate:
        """The coordinate-wise median; weights are ignored."""
        return Aggregate(np.median(updates, axis=0).astype(np.float32), _all(updates))


class TrimParams(AggregatorParams):
    """Trimmed mean: the share of values cut from each end per coordinate."""

    trim: float = Field(0.2, ge=0.0, lt=0.5, description="share cut from each end per coordinate")


@AGGREGATORS.register()
class TrimmedMean(Aggregator):
    """Coordinate-wise trimmed mean: drops the ``floor(trim * k)`` largest and smallest
    values of each coordinate, then averages the rest."""

    name = "trimmed_mean"
    description = "coordinate-wise mean after cutting `trim` of the values at each end"
    params_model = TrimParams

    def aggregate(self, updates: np.ndarray, weights: np.ndarray) -> Aggregate:
        """The coordinate-wise mean of the values left after trimming."""
        k = len(updates)
        cut = min(int(np.floor(self.params.trim * k)), (k - 1) // 2)
        ordered = np.sort(updates, axis=0)[cut : k - cut]
        return Aggregate(ordered.mean(axis=0, dtype=np.float64).astype(np.float32), _all(updates))


class KrumParams(AggregatorParams):
    """Krum and Multi-Krum: malicious clients tolerated, updates averaged."""

    byzantine: int = Field(1, ge=0, description="malicious clients tolerated (f)")
    select: int | None = Field(
        None, ge=1, description="Multi-Krum: updates averaged (m); default k - f"
    )


@AGGREGATORS.register()
class Krum(Aggregator):
    """Krum: the update whose ``k - f - 2`` nearest neighbours are closest (sum of squared
    distances). Needs ``k > 2f + 2``; with fewer updates ``f`` shrinks to fit."""

    name = "krum"
    description = "the one update nearest its k - f - 2 neighbours (needs k > 2f + 2)"
    params_model = KrumParams

    def aggregate(self, updates: np.ndarray, weights: np.ndarray) -> Aggregate:
        """The best-scored update (Multi-Krum: the mean of the ``m`` best)."""
        order = np.argsort(krum_scores(updates, self._f(len(updates))), kind="stable")
        chosen = order[: self._m(len(updates))]
        vector = updates[chosen].astype(np.float64).mean(axis=0).astype(np.float32)
        return Aggregate(vector, tuple(int(i) for i in chosen))

    def _f(self, k: int) -> int:
        return max(0, min(self.params.byzantine, (k - 3) // 2))

    def _m(self, k: int) -> int:
        return 1


@AGGREGATORS.register()
class MultiKrum(Krum):
    """Multi-Krum: the mean of the ``m`` updates with the best Krum scores."""

    name = "multi_krum"
    description = "mean of the m best Krum scores (default m = k - f)"

    def _m(self, k: int) -> int:
        m = self.params.select or k - self._f(k)
        return max(1, min(m, k))


def krum_scores(updates: np.ndarray, f: int) -> np.ndarray:
    """Each update's sum of squared distances to its ``k - f - 2`` nearest others."""
    x = updates.astype(np.float64)
    sq = (x * x).sum(axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    np.fill_diagonal(d2, np.inf)
    near = max(1, len(x) - f - 2)
    return np.sort(d2, axis=1)[:, :near].sum(axis=1)


def _all(updates: np.ndarray) -> tuple[int, ...]:
    return tuple(range(len(updates)))
