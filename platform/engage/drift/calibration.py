"""False-alarm calibration: a detector's knob for a target rate, and a rate all can reach.

Comparing detectors by how fast they catch a change means nothing unless they raise the same
number of false alarms on a stream where nothing changed. Every detector set has one knob
that trades the two (a CUSUM's threshold scale, ``bocpd``'s posterior threshold, a batch
test's significance level) and a range of false-alarm rates that knob can reach: a set that
alarms only when a regime unknown to the reference appears has a *ceiling* (lowering its
threshold does not make it alarm on in-control rows much more often), one with a companion
check that cannot be tuned (``quality``'s range check) has a *floor*. The helpers here are
pure functions of measured rates:

- :func:`renewal_rates`: the false-alarm rate per row at each level of a threshold, from
  renewal episodes (running maxima of statistic / threshold from a restart);
- :func:`pick_level`: the most sensitive level whose measured rate, and that of every
  stricter level, is at or under the target (noisy, non-monotone measurements do not let
  a lucky level through);
- :func:`common_target`: the rate every set can reach: the nominal rate, lowered to the
  lowest ceiling, and checked against the highest floor.

``benchmarks/drift_detection.py`` uses them to put every detector set at one rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def renewal_rates(maxima: Sequence[np.ndarray], levels: np.ndarray) -> np.ndarray:
    """False alarms per row at each level, from renewal episodes.

    Parameters
    ----------
    maxima : sequence of arrays
        One array per episode: the running maximum of statistic / threshold, row by row,
        from a restart (non-decreasing). An episode that never reaches a level is censored
        at its length.
    levels : array
        Threshold multipliers to evaluate.

    Returns
    -------
    array
        ``alarms / rows exposed`` per level: an episode is one alarm at the first row where
        its maximum reaches the level, else its whole length of exposure without one.
    """
    levels = np.asarray(levels, dtype=float)
    events, exposure = np.zeros(len(levels)), np.zeros(len(levels))
    for m in maxima:
        first = np.searchsorted(m, levels, "left")
        hit = first < len(m)
        events += hit
        exposure += np.where(hit, first + 1, len(m))
    return events / np.maximum(exposure, 1)


def pick_level(levels: Sequence[float], rates: Sequence[float], target: float) -> float | None:
    """The most sensitive level whose rate, and every stricter level's, is at most ``target``.

    Parameters
    ----------
    levels : sequence of float
        Knob settings ordered from the most sensitive (most alarms) to the strictest.
    rates : sequence of float
        Measured false-alarm rate at each level (same order, same unit as ``target``).
    target : float
        The false-alarm rate not to exceed.

    Returns
    -------
    float or None
        The chosen level; None when even the strictest level is above the target.

    Raises
    ------
    ValueError
        If ``levels`` and ``rates`` differ in length or are empty.
    """
    if len(levels) != len(rates) or not len(levels):
        raise ValueError(
            f"pick_level needs one rate per level, got {len(levels)} levels, {len(rates)} rates"
        )
    chosen = None
    for level, rate in zip(reversed(list(levels)), reversed(list(rates)), strict=True):
        if rate > target:
            break  # a stricter level already passed the target: no more sensitive one counts
        chosen = float(level)
    return chosen


def common_target(
    nominal: float,
    ceilings: Mapping[str, float] | None = None,
    floors: Mapping[str, float] | None = None,
) -> tuple[float, str]:
    """The false-alarm rate every detector set can be calibrated to.

    Parameters
    ----------
    nominal : float
        The rate wanted (e.g. ``1 / ERT``).
    ceilings : mapping of name to float
        Highest rate each capped set reaches over its knob's range (sets whose knob reaches
        any rate are left out).
    floors : mapping of name to float
        Lowest rate each set with an untunable companion check reaches.

    Returns
    -------
    (float, str)
        The target, and what set it: ``"nominal"`` or the name of the set whose ceiling did.

    Raises
    ------
    ValueError
        If the target is not positive, or some set's floor lies above it (no common rate).
    """
    target, by = float(nominal), "nominal"
    for name, ceiling in (ceilings or {}).items():
        if ceiling < target:
            target, by = float(ceiling), name
    if target <= 0:
        raise ValueError(f"no common false-alarm rate: {by} reaches {target:g} at most")
    above = {n: f for n, f in (floors or {}).items() if f > target}
    if above:
        names = ", ".join(f"{n} ({f:g})" for n, f in sorted(above.items()))
        raise ValueError(
            f"no common false-alarm rate: target {target:g} (set by {by}) is below the "
            f"floor of {names}"
        )
    return target, by
