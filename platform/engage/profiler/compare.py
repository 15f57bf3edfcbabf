"""A measured speedup of one pipeline over another, in an order that cancels the order.

Two runs back to back do not see the same machine: on a shared node, other processes'
load comes and goes, and run as A B A B ..., every remedy takes the second place of its
pair, so whatever that place gets shows up as a speedup or a slowdown (three such pairs put
the default pipeline at 1.14x over itself, under load, on the benchmark's 2-core host; 12
pairs on the quiet host gave 0.99 +- 0.01). :func:`abba` runs each round as base, other,
other, base, so both sides take the first and the last place alike, and a drift that is
linear over the round cancels too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median
from typing import Any


@dataclass(frozen=True)
class Comparison:
    """What :func:`abba` measured.

    Attributes
    ----------
    ratio : float
        The median over the rounds of ``other``'s mean rate over ``base``'s.
    ratios : tuple of float
        Each round's ratio, in order.
    base, other : tuple
        Every run's result (two a round each), in the order they ran.
    """

    ratio: float
    ratios: tuple[float, ...]
    base: tuple[Any, ...]
    other: tuple[Any, ...]

    def by_order(self, rate: Callable[[Any], float] = lambda r: r.samples_per_s) -> tuple:
        """``(base first, other first)``: the median over the rounds of the ratio of each
        half of a round alone, the first half (base then other: the A B order) and the
        second (other then base). Apart, they show what the order does."""
        first = [rate(b) / rate(a) for a, b in zip(self.base[::2], self.other[::2], strict=True)]
        second = [rate(b) / rate(a) for a, b in zip(self.base[1::2], self.other[1::2], strict=True)]
        return float(median(first)), float(median(second))


def abba(
    base: Callable[[], Any],
    other: Callable[[], Any],
    rounds: int,
    rate: Callable[[Any], float] = lambda r: r.samples_per_s,
) -> Comparison:
    """Run ``base`` and ``other`` as base, other, other, base, ``rounds`` times.

    Parameters
    ----------
    base, other : callable
        One run each (a :func:`~engage.profiler.loader.run_pipeline` call, say).
    rounds : int
        Rounds of four runs.
    rate : callable
        The throughput of a run's result (samples/s of a ``RunStats`` by default).

    Raises
    ------
    ValueError
        If ``rounds`` is not positive.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be positive, got {rounds}")
    bases: list[Any] = []
    others: list[Any] = []
    ratios: list[float] = []
    for _ in range(rounds):
        a1, b1 = base(), other()
        b2, a2 = other(), base()
        bases += [a1, a2]
        others += [b1, b2]
        ratios.append((rate(b1) + rate(b2)) / (rate(a1) + rate(a2)))
    return Comparison(float(median(ratios)), tuple(ratios), tuple(bases), tuple(others))
