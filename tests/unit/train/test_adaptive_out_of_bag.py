"""The out-of-bag acquisition: its math, its spec fields, and a loop that continues scenarios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engage.errors import SpecError
from engage.runtime.options import RunOptions
from engage.spec import parse_spec
from engage.train.adaptive.acquisition import out_of_bag, per_group, surrogate
from engage.train.adaptive.ensemble import train_ensemble
from engage.train.adaptive.job import AdaptiveJob
from engage.train.adaptive.loop import run_rounds
from engage.train.adaptive.world import simulate_frames
from tests.unit.train._adaptive_spec import DATA_AND_MODEL

SPEC = (
    DATA_AND_MODEL
    + """\
train: {epochs: 1, batch_size: 64}
adaptive:
  sampler: adaptive
  acquisition: out_of_bag
  rounds: 2
  initial_scenarios: 2
  scenarios_per_round: 2
  households: 1
  days: 1
  candidates: 8
  test_scenarios: 2
  ensemble: 2
"""
)


def _loaded(*overrides: str):
    return parse_spec(SPEC, overrides=overrides)


def test_out_of_bag_loss_uses_only_the_members_that_did_not_train_on_a_window() -> None:
    # Two members, three windows, two classes; member 0 drew rows 0, 0, 1, member 1 rows 1, 2, 2.
    predictions = np.array(
        [
            [[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]],
            [[0.6, 0.4], [0.5, 0.5], [0.7, 0.3]],
        ]
    )
    y = np.array([0, 1, 1])
    bags = [np.array([0, 0, 1]), np.array([1, 2, 2])]

    loss = out_of_bag(predictions, y, bags, "classification")

    assert loss[0] == pytest.approx(-np.log(0.6))  # only member 1 left window 0 out
    assert np.isnan(loss[1])  # both members trained on window 1
    assert loss[2] == pytest.approx(-np.log(0.8))  # only member 0 left window 2 out


def test_out_of_bag_loss_averages_the_left_out_members_and_does_regression() -> None:
    predictions = np.array([[[1.0], [2.0]], [[3.0], [2.0]], [[8.0], [5.0]]])
    bags = [np.array([1, 1]), np.array([1, 1]), np.array([0, 0])]

    loss = out_of_bag(predictions, np.array([0.0, 2.0]), bags, "regression")

    assert loss[0] == pytest.approx(2.0)  # members 0 and 1: mean 2.0 against 0.0
    assert loss[1] == pytest.approx(3.0)  # member 2 only: 5.0 against 2.0


def test_per_group_means_leave_out_nan_and_empty_groups() -> None:
    values = np.array([1.0, np.nan, 3.0, 4.0, np.nan])
    groups = np.array([0, 0, 0, 1, 2])

    means = per_group(values, groups, 4)

    assert means[:2].tolist() == [2.0, 4.0]
    assert np.isnan(means[2])  # only a NaN
    assert np.isnan(means[3])  # no window


def test_the_surrogate_scores_a_candidate_by_its_nearest_scored_scenarios() -> None:
    known = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])
    scores = np.array([1.0, 0.0, np.nan])
    candidates = np.array([[0.05, 0.0], [0.95, 1.0], [0.5, 0.5], [50.0, 50.0]])

    guess = surrogate(known, scores, candidates, 0.2)

    assert guess[0] > 0.99  # next to the wrong scenario
    assert guess[1] < 0.01  # next to the right one
    assert guess[2] == pytest.approx(0.5)  # halfway: the NaN-scored point does not count
    assert np.isfinite(guess[3])  # far from all: no 0/0
    assert surrogate(known, np.full(3, np.nan), candidates, 0.2).tolist() == [0.0] * 4


def test_a_continued_scenario_is_simulated_from_its_next_day() -> None:
    point = np.full((1, 18), 0.5)

    seeds = np.array([7])
    first = simulate_frames(point, households=1, days=1, seeds=seeds, first_days=np.array([0]))
    later = simulate_frames(point, households=1, days=1, seeds=seeds, first_days=np.array([1]))

    assert (later[0]["timestamp"].iloc[0] - first[0]["timestamp"].iloc[0]).days == 1
    assert len(later[0]) == len(first[0]) == 1440


def test_revisit_outside_zero_to_one_is_a_located_spec_error() -> None:
    with pytest.raises(SpecError) as caught:
        _loaded("adaptive.revisit=1.5")

    assert "adaptive.revisit" in caught.value.message


def test_out_of_bag_spends_nothing_on_probes_so_any_candidate_pool_is_accepted() -> None:
    spec = _loaded("adaptive.candidates=4096").spec.adaptive

    assert spec.acquisition == "out_of_bag"
    with pytest.raises(SpecError, match="candidates"):  # probes would: the old check stands
        _loaded("adaptive.acquisition=disagreement", "adaptive.candidates=4096")


@pytest.mark.parametrize("revisit", [0.0, 1.0])
def test_the_loop_continues_the_worst_scenarios_or_adds_fresh_ones(revisit: float) -> None:
    loaded = _loaded(f"adaptive.revisit={revisit}")
    data = AdaptiveJob(loaded, RunOptions(home=Path("unused"))).prepare()

    rounds, _ = run_rounds(loaded, data.held_out)

    first, second = rounds
    assert first.first_days.tolist() == [0, 0]
    assert second.probe_samples == 0
    assert len(second.points) == 2
    assert len(second.scores) == 2
    assert second.samples == first.samples + second.new_samples
    if revisit == 1.0:  # both scenarios again, their second day, the same households
        assert second.first_days.tolist() == [1, 1]
        assert sorted(second.seeds.tolist()) == sorted(first.seeds.tolist())
        assert sorted(map(tuple, second.points)) == sorted(map(tuple, first.points))
    else:  # two fresh points from the candidate pool
        assert second.first_days.tolist() == [0, 0]
        assert not set(second.seeds.tolist()) & set(first.seeds.tolist())


def test_the_ensemble_keeps_each_members_bootstrap_rows_and_restores_torch_threads() -> None:
    import torch

    loaded = _loaded()
    x = np.random.default_rng(0).normal(size=(40, 20, 3)).astype(np.float32)
    y = np.arange(40) % 2
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not the 1 the ensemble trains with (tests/conftest.py sets 1)
    try:
        ensemble = train_ensemble(loaded, x, y, 2, 0, 2)
        threads_after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)

    assert threads_after == 2
    assert len(ensemble.bags) == 2
    assert all(len(rows) == 40 and rows.max() < 40 for rows in ensemble.bags)
    assert not np.array_equal(ensemble.bags[0], ensemble.bags[1])
