"""The adaptive-sampling loop: pick scenarios, simulate them, retrain, test, until the budget.

:func:`run_rounds` runs the spec's ``adaptive`` section without tracking or Ray, so the
job (:mod:`engage.train.adaptive.job`) and the benchmark (benchmarks/adaptive_sampling.py)
share it. Round 1 simulates ``initial_scenarios`` points (a Latin hypercube; uniform for
the uniform sampler); every later round simulates as many household-days as
``scenarios_per_round`` scenarios, whatever the sampler: uniform or Latin hypercube
points, or, for adaptive, ``candidates`` uniform points probed with one household for
``probe_days`` each (explore), scored by :mod:`engage.train.adaptive.acquisition` with the
current ensemble, and the best far enough apart simulated in full with what the probes
left of the round (exploit; :func:`split_round`). Probes are labelled simulations: they
are trained on and counted as samples like every other window, so every sampler is
compared at the same simulated samples. After each round the ensemble is retrained on
every window so far and tested on the held-out set. The loop stops after ``rounds``
rounds or when the next round would pass ``budget`` simulated windows (it then adds only
the scenarios that fit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engage.data.simulator import SCENARIO_SPACE
from engage.spec import LoadedSpec
from engage.spec.models import AdaptiveSpec
from engage.train.adaptive import acquisition
from engage.train.adaptive.ensemble import Ensemble, held_out_metrics, train_ensemble
from engage.train.adaptive.samplers import SAMPLERS, latin_hypercube, uniform
from engage.train.adaptive.world import Windows, merge, simulate_windows

DIMENSIONS = len(SCENARIO_SPACE)


@dataclass(frozen=True)
class RoundResult:
    """One round: what was simulated, why, and how the retrained ensemble tests.

    ``scores`` are the chosen points' acquisition scores (empty for uniform and LHS);
    ``samples`` counts every simulated window so far (all are trained on), ``new_samples``
    this round's, of which ``probe_samples`` came from probing ``probe_points`` (adaptive's
    candidates; ``rows`` and ``digest`` cover the probes too).
    """

    round: int
    points: np.ndarray
    seeds: np.ndarray
    scores: np.ndarray
    new_samples: int
    samples: int
    probe_samples: int
    rows: int
    digest: str
    metrics: dict[str, float] = field(default_factory=dict)
    probe_points: np.ndarray = field(default_factory=lambda: np.empty((0, DIMENSIONS)))


@dataclass(frozen=True)
class HeldOut:
    """The broad held-out test set: windows and the sorted class labels (None: regression)."""

    windows: Windows
    classes: tuple | None

    @property
    def outputs(self) -> int:
        """Model outputs: the number of classes, or 1 for regression."""
        return len(self.classes) if self.classes else 1


def held_out_points(spec: AdaptiveSpec) -> tuple[np.ndarray, np.ndarray]:
    """The held-out scenarios (a Latin hypercube over the whole space) and their seeds,
    drawn from a stream of their own so every sampler is tested on the same set."""
    rng = np.random.default_rng([spec.seed, 1])
    points = latin_hypercube(rng, spec.test_scenarios, DIMENSIONS)
    return points, rng.integers(0, 2**31 - 1, spec.test_scenarios)


def split_round(spec: AdaptiveSpec, n: int) -> tuple[int, int]:
    """An adaptive round worth ``n`` scenarios: (candidates to probe, scenarios to choose).

    The round simulates ``n x households x days`` household-days, as the other samplers'
    rounds do. Probes (one household for ``probe_days`` each) come first, as many of the
    ``candidates`` as leave room for one chosen scenario; the rest of the round buys
    chosen scenarios (the best candidates again, in turn, when there are more of them
    than candidates). A round too small for any probe chooses one scenario uniformly.
    """
    scenario = spec.households * spec.days
    room = (n - 1) * scenario
    probes = min(spec.candidates, max(0, room) // spec.probe_days)
    return probes, (n * scenario - probes * spec.probe_days) // scenario


def run_rounds(
    loaded: LoadedSpec,
    held_out: HeldOut,
    on_round: Callable[[RoundResult], None] = lambda r: None,
) -> tuple[list[RoundResult], Ensemble]:
    """Every round of ``loaded.spec.adaptive``; ``on_round`` sees each as it ends.

    Raises
    ------
    TrainingError
        A member's loss became NaN or infinite.
    """
    spec = loaded.spec.adaptive
    assert spec is not None  # only the adaptive kind and its benchmark call this
    rng = np.random.default_rng([spec.seed, 2])
    results: list[RoundResult] = []
    train: Windows | None = None
    ensemble: Ensemble | None = None
    household_days = 0  # simulated so far, probes included
    for r in range(1, spec.rounds + 1):
        n = spec.initial_scenarios if r == 1 else spec.scenarios_per_round
        if spec.budget is not None and train is not None:
            per_scenario = len(train) / household_days * spec.households * spec.days
            n = min(n, int((spec.budget - len(train)) // per_scenario))
        if n <= 0:
            break
        points, scores, probe = _choose(loaded, spec, rng, r, n, ensemble, held_out)
        seeds = rng.integers(0, 2**31 - 1, len(points))
        chosen = simulate_windows(
            points,
            loaded.spec.data,
            households=spec.households,
            days=spec.days,
            seeds=seeds,
            classes=held_out.classes,
        )
        new = chosen if probe is None else merge([probe[1], chosen])
        household_days += len(points) * spec.households * spec.days
        if probe is not None:
            household_days += len(probe[0]) * spec.probe_days
        train = new if train is None else merge([train, new])
        ensemble = train_ensemble(
            loaded, train.x, train.y, spec.ensemble, loaded.spec.train.seed, held_out.outputs
        )
        predictions = ensemble.predict(held_out.windows.x)
        metrics = held_out_metrics(predictions, held_out.windows.y, loaded.spec.data.task)
        result = RoundResult(
            r,
            points,
            seeds,
            scores,
            len(new),
            len(train),
            0 if probe is None else len(probe[1]),
            new.rows,
            new.digest,
            metrics,
            np.empty((0, DIMENSIONS)) if probe is None else probe[0],
        )
        results.append(result)
        on_round(result)
    assert ensemble is not None  # round 1 always runs: initial_scenarios >= 1
    return results, ensemble


def _choose(
    loaded: LoadedSpec,
    spec: AdaptiveSpec,
    rng: np.random.Generator,
    r: int,
    n: int,
    ensemble: Ensemble | None,
    held_out: HeldOut,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, Windows] | None]:
    """The round's points, their acquisition scores, and the probes (points, windows)."""
    if spec.sampler != "adaptive":
        return SAMPLERS[spec.sampler](rng, n, DIMENSIONS), np.empty(0), None
    if r == 1 or ensemble is None:
        return latin_hypercube(rng, n, DIMENSIONS), np.empty(0), None
    probes, keep = split_round(spec, n)
    if probes == 0:
        return uniform(rng, keep, DIMENSIONS), np.empty(0), None
    pool = uniform(rng, probes, DIMENSIONS)
    probe = simulate_windows(
        pool,
        loaded.spec.data,
        households=1,
        days=spec.probe_days,
        seeds=rng.integers(0, 2**31 - 1, len(pool)),
        classes=held_out.classes,
    )
    predictions = ensemble.predict(probe.x)
    if spec.acquisition == "disagreement":
        scores = acquisition.disagreement(predictions, probe.groups, len(pool))
    else:
        scores = acquisition.error(
            predictions, probe.y, probe.groups, len(pool), loaded.spec.data.task
        )
    # Half the typical distance of two random points of the cube: close enough to count
    # as the same region, far enough that a round covers several.
    chosen = acquisition.pick(scores, pool, min(keep, probes), 0.5 * math.sqrt(DIMENSIONS / 6))
    # More scenarios to choose than candidates probed: the best ones again, best first
    # (each with its own seed, so another household of the same scenario).
    chosen = np.resize(chosen, keep)
    return pool[chosen], scores[chosen], (pool, probe)
