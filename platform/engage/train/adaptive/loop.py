"""The adaptive-sampling loop: pick scenarios, simulate them, retrain, test, until the budget.

:func:`run_rounds` runs the spec's ``adaptive`` section without tracking or Ray, so the
job (:mod:`engage.train.adaptive.job`) and the benchmark (benchmarks/adaptive_sampling.py)
share it. Round 1 simulates ``initial_scenarios`` points (a Latin hypercube; uniform for
the uniform sampler); every later round simulates as many household-days as
``scenarios_per_round`` scenarios, whatever the sampler: uniform or Latin hypercube
points, or, for adaptive, one of three ways of spending the round:

* short probes (``probe_hours`` set; the pipeline's choice): at least ``candidates``
  uniform points are simulated for the first ``probe_hours`` of their scenario, scored by
  :mod:`engage.train.adaptive.acquisition` with the current ensemble, and the best far
  enough apart are continued to their full ``days`` (:func:`split_hours`); a probe is the
  start of its scenario, so a continued candidate costs what any scenario costs;
* day probes (``probe_days``): ``candidates`` uniform points probed with one household for
  ``probe_days`` each, and the best simulated in full, with fresh households, with what the
  probes left of the round (:func:`split_round`);
* no probes (``acquisition: out_of_bag``): the scenarios simulated so far are scored by the
  ensemble's out-of-bag error; a ``revisit`` share of the round continues the worst (the
  same households, their next days), the rest are the best of ``candidates`` uniform
  points by a kernel surrogate of that error over the parameter space.

With ``span_hours`` set, every sampler spends its rounds after the first on spans
instead of whole scenarios (:func:`split_spans`): as many spans of ``span_hours`` as the
round's scenario-hours buy, each a fresh scenario (the sampler's point, its own seed) cut
to ``span_hours`` from a start minute; uniform and Latin hypercube start anywhere in the
scenario, adaptive (``acquisition: out_of_bag``) starts a span in an hour of the day
drawn by the ensemble's out-of-bag error per hour (:func:`acquisition.span_starts`,
``span_mix`` of it, the rest even). More scenarios for the same windows: per window, the
model sees more of the space.

Probes are labelled simulations: they are trained on and counted as samples like every
other window, so every sampler is compared at the same simulated samples. After each round
the ensemble is retrained on every window so far and tested on the held-out set. The loop
stops after ``rounds`` rounds or when the next round would pass ``budget`` simulated
windows (it then adds only the scenarios that fit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engage.data.simulator import SCENARIO_SPACE
from engage.data.simulator.routines import MINUTES
from engage.spec import LoadedSpec
from engage.spec.models import AdaptiveSpec
from engage.train.adaptive import acquisition
from engage.train.adaptive.ensemble import Ensemble, held_out_metrics, train_ensemble
from engage.train.adaptive.samplers import SAMPLERS, latin_hypercube, uniform
from engage.train.adaptive.world import (
    Windows,
    cut_spans,
    merge,
    simulate_frames,
    simulate_windows,
    split_prefix,
    windows_of,
)

DIMENSIONS = len(SCENARIO_SPACE)


@dataclass(frozen=True)
class RoundResult:
    """One round: what was simulated, why, and how the retrained ensemble tests.

    ``scores`` are the chosen points' acquisition scores (empty for uniform and LHS);
    ``samples`` counts every simulated window so far (all are trained on), ``new_samples``
    this round's, of which ``probe_samples`` came from probing ``probe_points`` (adaptive's
    candidates; ``rows`` and ``digest`` cover the probes too). ``first_days`` is each point's
    first simulated day: above 0 where the round continues a scenario simulated before
    (``acquisition: out_of_bag``; the same seed, so the same households, later days).
    ``start_minutes`` is, with ``span_hours``, each point's span start (minutes since its
    scenario's first minute; empty when the round simulated whole scenarios).
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
    first_days: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    start_minutes: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


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
    book = _Scenarios()
    household_days = 0  # simulated so far, probes included
    for r in range(1, spec.rounds + 1):
        n = spec.initial_scenarios if r == 1 else spec.scenarios_per_round
        if spec.budget is not None and train is not None:
            per_scenario = len(train) / household_days * spec.households * spec.days
            n = min(n, int((spec.budget - len(train)) // per_scenario))
        if n <= 0:
            break
        state = _State(train, ensemble, book)
        choice = _choose(loaded, spec, rng, r, n, state, held_out)
        seeds = rng.integers(0, 2**31 - 1, len(choice.points))
        if choice.seeds is not None:  # simulated (probed) already, with these seeds
            seeds = choice.seeds
        again = choice.sources >= 0
        seeds[again] = book.seeds[choice.sources[again]]
        first_days = np.zeros(len(choice.points), dtype=np.int64)
        first_days[again] = book.next_day[choice.sources[again]]
        chosen = choice.windows
        if choice.starts is not None:  # spans: cut each fresh scenario to its span
            frames = simulate_frames(
                choice.points, households=spec.households, days=spec.days, seeds=seeds
            )
            assert spec.span_hours is not None
            chosen = windows_of(
                cut_spans(frames, choice.starts, spec.span_hours * 60),
                loaded.spec.data,
                held_out.classes,
            )
        if chosen is None:
            chosen = simulate_windows(
                choice.points,
                loaded.spec.data,
                households=spec.households,
                days=spec.days,
                seeds=seeds,
                classes=held_out.classes,
                first_days=first_days,
            )
        probe = choice.probe
        new = chosen if probe is None else merge([probe[1], chosen])
        household_days += new.rows / MINUTES  # probes included
        if choice.starts is None:
            index = book.add(choice.points, seeds, choice.sources, spec.days)
            owners = index[chosen.groups]
        else:  # a span is not a scenario to continue: its windows belong to none
            owners = np.full(len(chosen), -1)
        if probe is not None:
            owners = np.concatenate([np.full(len(probe[1]), -1), owners])
        book.owners = owners if train is None else np.concatenate([book.owners, owners])
        train = new if train is None else merge([train, new])
        ensemble = train_ensemble(
            loaded, train.x, train.y, spec.ensemble, loaded.spec.train.seed, held_out.outputs
        )
        predictions = ensemble.predict(held_out.windows.x)
        metrics = held_out_metrics(predictions, held_out.windows.y, loaded.spec.data.task)
        result = RoundResult(
            r,
            choice.points,
            seeds,
            choice.scores,
            len(new),
            len(train),
            0 if probe is None else len(probe[1]),
            new.rows,
            new.digest,
            metrics,
            np.empty((0, DIMENSIONS)) if probe is None else probe[0],
            first_days,
            np.empty(0, dtype=np.int64) if choice.starts is None else choice.starts,
        )
        results.append(result)
        on_round(result)
    assert ensemble is not None  # round 1 always runs: initial_scenarios >= 1
    return results, ensemble


@dataclass
class _Scenarios:
    """Every scenario simulated in full so far (probes are not), to continue the worst.

    ``owners`` maps every training window to its scenario's row here (-1: a probe window).
    """

    points: np.ndarray = field(default_factory=lambda: np.empty((0, DIMENSIONS)))
    seeds: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    next_day: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    owners: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def add(self, points: np.ndarray, seeds: np.ndarray, sources: np.ndarray, days: int):
        """Book a round's scenarios (``sources``: the row each continues, -1 for a new one);
        returns each one's row."""
        index = sources.copy()
        fresh = sources < 0
        index[fresh] = len(self.points) + np.arange(int(fresh.sum()))
        self.points = np.concatenate([self.points, points[fresh]])
        self.seeds = np.concatenate([self.seeds, seeds[fresh]])
        self.next_day = np.concatenate([self.next_day, np.zeros(int(fresh.sum()), dtype=np.int64)])
        np.add.at(self.next_day, index, days)
        return index


@dataclass(frozen=True)
class _State:
    """What a round's choice may read: the windows so far, the ensemble, the scenarios."""

    train: Windows | None
    ensemble: Ensemble | None
    book: _Scenarios


@dataclass(frozen=True)
class _Choice:
    """A round's points, their scores, the probes (points, windows), and per point the
    scenario row it continues (-1: a new scenario); with short probes, also the points'
    seeds and what continuing them to their full days added (``windows``); with spans,
    each point's span start (``starts``, minutes since its scenario's first minute)."""

    points: np.ndarray
    scores: np.ndarray
    probe: tuple[np.ndarray, Windows] | None
    sources: np.ndarray
    seeds: np.ndarray | None = None
    windows: Windows | None = None
    starts: np.ndarray | None = None


def _new(points: np.ndarray, scores: np.ndarray, probe=None) -> _Choice:
    return _Choice(points, scores, probe, np.full(len(points), -1))


def _choose(
    loaded: LoadedSpec,
    spec: AdaptiveSpec,
    rng: np.random.Generator,
    r: int,
    n: int,
    state: _State,
    held_out: HeldOut,
) -> _Choice:
    """The round's points, their acquisition scores, the probes, and what they continue."""
    ensemble = state.ensemble
    if spec.span_hours is not None and r > 1 and ensemble is not None:
        return _spans(loaded, spec, rng, n, state)
    if spec.sampler != "adaptive":
        return _new(SAMPLERS[spec.sampler](rng, n, DIMENSIONS), np.empty(0))
    if r == 1 or ensemble is None:
        return _new(latin_hypercube(rng, n, DIMENSIONS), np.empty(0))
    if spec.acquisition == "out_of_bag":
        return _out_of_bag(loaded, spec, rng, n, state)
    if spec.probe_hours is not None:
        return _short_probes(loaded, spec, rng, n, ensemble, held_out)
    probes, keep = split_round(spec, n)
    if probes == 0:
        return _new(uniform(rng, keep, DIMENSIONS), np.empty(0))
    pool = uniform(rng, probes, DIMENSIONS)
    probe = simulate_windows(
        pool,
        loaded.spec.data,
        households=1,
        days=spec.probe_days,
        seeds=rng.integers(0, 2**31 - 1, len(pool)),
        classes=held_out.classes,
    )
    scores = _probe_scores(loaded, spec, ensemble, probe, len(pool))
    chosen = acquisition.pick(scores, pool, min(keep, probes), _APART)
    # More scenarios to choose than candidates probed: the best ones again, best first
    # (each with its own seed, so another household of the same scenario).
    chosen = np.resize(chosen, keep)
    return _new(pool[chosen], scores[chosen], (pool, probe))


def _probe_scores(
    loaded: LoadedSpec, spec: AdaptiveSpec, ensemble: Ensemble, probe: Windows, n: int
) -> np.ndarray:
    """The ``n`` probed candidates' scores by the spec's acquisition."""
    predictions = ensemble.predict(probe.x)
    if spec.acquisition == "disagreement":
        return acquisition.disagreement(predictions, probe.groups, n)
    return acquisition.error(predictions, probe.y, probe.groups, n, loaded.spec.data.task)


def split_hours(spec: AdaptiveSpec, n: int) -> tuple[int, int]:
    """An adaptive round worth ``n`` scenarios with short probes: (candidates to probe,
    candidates to continue).

    Counted in scenario-hours (each of a scenario's households alike): the round has
    ``n x days x 24``; a probe costs ``probe_hours``, continuing a probed candidate the
    rest of its days. As many candidates are continued as the round affords after
    ``candidates`` probes (at least one, at most ``n``), and what is left over probes more
    candidates. A round cut short by the budget may afford fewer than ``candidates``.
    """
    assert spec.probe_hours is not None
    whole = spec.days * 24
    budget, rest = n * whole, whole - spec.probe_hours
    # At least one continuation; at most n, so there are as many probes as continuations
    # (k continuations leave room for k probes exactly when k <= n).
    keep = min(max(1, (budget - spec.candidates * spec.probe_hours) // rest), n)
    return (budget - keep * rest) // spec.probe_hours, keep


def _short_probes(
    loaded: LoadedSpec,
    spec: AdaptiveSpec,
    rng: np.random.Generator,
    n: int,
    ensemble: Ensemble,
    held_out: HeldOut,
) -> _Choice:
    """Probe many candidates for their first ``probe_hours``, continue the best to their
    full days (the probe's windows are the start of the scenario, never simulated twice)."""
    probes, keep = split_hours(spec, n)
    pool = uniform(rng, probes, DIMENSIONS)
    seeds = rng.integers(0, 2**31 - 1, probes)
    frames = simulate_frames(pool, households=spec.households, days=spec.days, seeds=seeds)
    probe, rest = split_prefix(frames, loaded.spec.data, held_out.classes, spec.probe_hours * 60)
    scores = _probe_scores(loaded, spec, ensemble, probe, probes)
    chosen = acquisition.pick(scores, pool, keep, _APART)
    return _Choice(
        pool[chosen],
        scores[chosen],
        (pool, probe),
        np.full(len(chosen), -1),
        seeds[chosen],
        merge([rest[i] for i in chosen]),
    )


def _out_of_bag(
    loaded: LoadedSpec, spec: AdaptiveSpec, rng: np.random.Generator, n: int, state: _State
) -> _Choice:
    """No probes: continue the scenarios the members get most wrong out of bag, and add the
    fresh uniform candidates a surrogate of that error scores highest."""
    assert state.train is not None
    assert state.ensemble is not None
    book = state.book
    predictions = state.ensemble.predict(state.train.x)
    loss = acquisition.out_of_bag(
        predictions, state.train.y, state.ensemble.bags, loaded.spec.data.task
    )
    mine = book.owners >= 0
    scores = acquisition.per_group(loss[mine], book.owners[mine], len(book.points))
    again = min(round(spec.revisit * n), len(book.points))
    ranked = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")[:again]
    pool = uniform(rng, spec.candidates, DIMENSIONS)
    guess = acquisition.surrogate(book.points, scores, pool, 0.5 * _APART)
    fresh = acquisition.pick(guess, pool, min(n - again, len(pool)), _APART)
    fresh = np.resize(fresh, n - again) if len(fresh) else fresh
    return _Choice(
        np.concatenate([book.points[ranked], pool[fresh]]),
        np.concatenate([scores[ranked], guess[fresh]]),
        None,
        np.concatenate([ranked, np.full(len(fresh), -1)]),
    )


def split_spans(spec: AdaptiveSpec, n: int) -> int:
    """Spans of ``span_hours`` a round worth ``n`` scenarios buys: its ``n x days x 24``
    scenario-hours (each of a scenario's households alike) over ``span_hours``, at least 1."""
    assert spec.span_hours is not None
    return max(1, n * spec.days * 24 // spec.span_hours)


def _spans(
    loaded: LoadedSpec, spec: AdaptiveSpec, rng: np.random.Generator, n: int, state: _State
) -> _Choice:
    """A round of spans: fresh points of the sampler (uniform for adaptive), each with a
    start minute: anywhere for uniform and LHS; for adaptive, in an hour of the day drawn by
    the ensemble's out-of-bag error per hour (scores: the drawn hour's probability)."""
    assert spec.span_hours is not None
    count = split_spans(spec, n)
    span = spec.span_hours * 60
    last = spec.days * MINUTES - span  # the latest start that fits the scenario
    draw = SAMPLERS.get(spec.sampler, uniform)
    points = draw(rng, count, DIMENSIONS)
    if spec.sampler != "adaptive":
        return _Choice(
            points, np.empty(0), None, np.full(count, -1), starts=rng.integers(0, last + 1, count)
        )
    assert state.train is not None
    assert state.ensemble is not None
    loss = acquisition.out_of_bag(
        state.ensemble.predict(state.train.x),
        state.train.y,
        state.ensemble.bags,
        loaded.spec.data.task,
    )
    weights = acquisition.span_starts(
        acquisition.by_hour(loss, state.train.minutes), spec.span_hours, spec.span_mix
    )
    hour = rng.choice(24, count, p=weights)
    day = rng.integers(0, spec.days, count)
    starts = day * MINUTES + hour * 60 + rng.integers(0, 60, count)
    # A span that would run past the scenario's end starts a day earlier (same hour of the
    # day) where the scenario has one, else at the latest start that fits.
    late = starts > last
    starts[late & (day > 0)] -= MINUTES
    starts = np.minimum(starts, last)
    return _Choice(points, weights[hour], None, np.full(count, -1), starts=starts)


# Half the typical distance of two random points of the cube: close enough to count as the
# same region, far enough that a round covers several.
_APART = 0.5 * math.sqrt(DIMENSIONS / 6)
