"""The adaptive loop end to end in this process (tiny), and the job's rounds as child runs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engage.errors import SpecError
from engage.runtime.kinds import kind_of
from engage.runtime.options import RunOptions
from engage.spec import parse_spec
from engage.train.adaptive.job import AdaptiveJob
from engage.train.adaptive.loop import RoundResult, held_out_points, run_rounds, split_round
from tests.unit.train._adaptive_spec import DATA_AND_MODEL

SPEC = (
    DATA_AND_MODEL
    + """\
train: {epochs: 1, batch_size: 64}
adaptive:
  sampler: SAMPLER
  rounds: 3
  initial_scenarios: 2
  scenarios_per_round: 2
  households: 1
  days: 1
  candidates: 1
  test_scenarios: 2
  ensemble: 2
"""
)


def _loaded(sampler: str = "adaptive", *overrides: str):
    return parse_spec(SPEC.replace("SAMPLER", sampler), overrides=overrides)


def _prepare(loaded):
    return AdaptiveJob(loaded, RunOptions(home=Path("unused"))).prepare()


def test_a_spec_with_an_adaptive_section_runs_as_the_adaptive_kind() -> None:
    assert kind_of(_loaded().spec) == "adaptive"


@pytest.mark.parametrize("sampler", ["adaptive", "lhs"])
def test_the_loop_adds_scenarios_each_round_and_tests_on_the_held_out_set(sampler: str) -> None:
    loaded = _loaded(sampler, "adaptive.rounds=2")
    data = _prepare(loaded)
    seen: list[RoundResult] = []

    rounds, ensemble = run_rounds(loaded, data.held_out, seen.append)

    assert [r.round for r in rounds] == [1, 2] == [r.round for r in seen]
    assert rounds[-1].samples == sum(r.new_samples for r in rounds)
    assert 0.0 <= rounds[-1].metrics["test_accuracy"] <= 1.0
    assert len(ensemble.members) == 2
    if sampler == "adaptive":  # round 2 probed 1 candidate (1 day) and chose 1 scenario
        assert [len(r.points) for r in rounds] == [2, 1]
        assert rounds[0].probe_samples == 0
        assert 0 < rounds[1].probe_samples < rounds[1].new_samples
        assert len(rounds[1].probe_points) == 1
        assert len(rounds[1].scores) == 1
    else:
        assert [len(r.points) for r in rounds] == [2, 2]
        assert all(r.probe_samples == 0 for r in rounds)


def test_probes_are_trained_on_and_a_round_simulates_as_much_for_every_sampler() -> None:
    """Adaptive's probe windows count as samples, and its round costs what uniform's does."""
    rounds = {}
    for sampler in ("adaptive", "uniform"):
        loaded = _loaded(sampler, "adaptive.rounds=2")
        rounds[sampler], _ = run_rounds(loaded, _prepare(loaded).held_out)

    adaptive, uniform = rounds["adaptive"][1], rounds["uniform"][1]
    assert adaptive.rows == uniform.rows == 2 * 1440  # two household-days each
    assert adaptive.samples == rounds["adaptive"][0].samples + adaptive.new_samples
    assert adaptive.new_samples == pytest.approx(uniform.new_samples, abs=2)


@pytest.mark.parametrize(
    ("n", "expected"),
    [(4, (4, 2)), (3, (4, 1)), (2, (2, 1)), (1, (0, 1))],
)
def test_an_adaptive_round_spends_part_of_its_simulation_on_probes(n: int, expected) -> None:
    spec = _loaded(
        "adaptive", "adaptive.days=2", "adaptive.scenarios_per_round=4", "adaptive.candidates=4"
    ).spec.adaptive

    assert split_round(spec, n) == expected


def test_probes_that_leave_no_room_for_a_chosen_scenario_are_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:
        _loaded("adaptive", "adaptive.candidates=2")  # 2 probe-days of a 2-day round

    assert "adaptive" in caught.value.message
    assert "candidates" in caught.value.message
    _loaded("uniform", "adaptive.candidates=2")  # only the adaptive sampler probes


def test_the_loop_stops_before_passing_the_budget() -> None:
    loaded = _loaded("uniform", "adaptive.budget=200")
    data = _prepare(loaded)

    rounds, _ = run_rounds(loaded, data.held_out)

    assert rounds[-1].samples <= 200
    assert len(rounds) < 3


def test_every_sampler_is_tested_on_the_same_held_out_scenarios() -> None:
    a, b = _loaded("adaptive").spec.adaptive, _loaded("uniform").spec.adaptive

    assert np.array_equal(held_out_points(a)[0], held_out_points(b)[0])


def test_a_feature_the_simulator_does_not_make_is_a_located_spec_error() -> None:
    loaded = _loaded("adaptive", "data.features=[temperature,pressure]")

    with pytest.raises(SpecError) as caught:
        _prepare(loaded)

    assert "data.features" in caught.value.message
    assert "pressure" in caught.value.message


class FakeRun:
    def __init__(self) -> None:
        self.children: list[FakeRun] = []
        self.tags: dict = {}
        self.dicts: dict = {}
        self.points: list = []
        self.status = None

    def child(self, name, tags, where):
        run = FakeRun()
        run.name, run.tags = name, dict(tags)
        self.children.append(run)
        return run

    def log_dict(self, data, name) -> None:
        self.dicts[name] = json.loads(json.dumps(data))

    def log_metric_events(self, events) -> None:
        self.points.extend(events)

    def end(self, status) -> None:
        self.status = status


def test_each_round_is_a_child_run_with_its_scenarios_fingerprint_and_metrics() -> None:
    job = AdaptiveJob(_loaded(), RunOptions(home=Path("unused")))
    run, reported, said = FakeRun(), [], []
    ctx = SimpleNamespace(
        run=run,
        reporter=SimpleNamespace(
            metrics=lambda v, step: reported.append((step, v)), flush=lambda: None
        ),
        message=lambda name, text: said.append(text),
    )
    result = RoundResult(
        2,
        np.full((1, 18), 0.5),
        np.array([7]),
        np.array([0.3]),
        100,
        250,
        40,
        1440,
        "abc",
        {"test_accuracy": 0.8},
    )

    job._round(ctx, result)

    child = run.children[0]
    assert (child.name, child.status) == ("round-0002", "FINISHED")
    assert child.tags["engage.adaptive.data_digest"] == "abc"
    record = child.dicts["round.json"]
    assert record["scenarios"][0]["household_size"] == 4  # 1 + 0.5 * (6 - 1), rounded
    assert record["scores"] == [0.3]
    assert {e.name for e in child.points} == {"test_accuracy", "adaptive_samples"}
    assert reported[0][0] == 2
    assert reported[0][1]["adaptive_samples"] == 250.0
    assert said == ["round 2/3: +1 scenarios, 250 samples, test_accuracy 0.8000"]


def test_a_round_choosing_more_scenarios_than_it_probed_repeats_the_best_candidates() -> None:
    loaded = _loaded(
        "adaptive", "adaptive.rounds=2", "adaptive.scenarios_per_round=3", "adaptive.candidates=1"
    )

    rounds, _ = run_rounds(loaded, _prepare(loaded).held_out)

    assert len(rounds[1].probe_points) == 1
    assert len(rounds[1].points) == 2  # 3 household-days: 1 probed, 2 chosen
    assert np.array_equal(rounds[1].points[0], rounds[1].probe_points[0])
    assert rounds[1].rows == 3 * 1440
