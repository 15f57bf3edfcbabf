"""Short probes (``probe_hours``): a probe is the start of a scenario, the chosen are continued."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engage.errors import SpecError
from engage.runtime.options import RunOptions
from engage.spec import parse_spec
from engage.train.adaptive.job import AdaptiveJob
from engage.train.adaptive.loop import run_rounds, split_hours
from engage.train.adaptive.world import simulate_frames, split_prefix, windows_of
from tests.unit.train._adaptive_spec import DATA_AND_MODEL

SPEC = (
    DATA_AND_MODEL
    + """\
train: {epochs: 1, batch_size: 64}
adaptive:
  sampler: SAMPLER
  rounds: 2
  initial_scenarios: 2
  scenarios_per_round: 2
  households: 1
  days: 1
  candidates: 4
  probe_hours: 3
  test_scenarios: 2
  ensemble: 2
"""
)


def _loaded(sampler: str = "adaptive", *overrides: str):
    return parse_spec(SPEC.replace("SAMPLER", sampler), overrides=overrides)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # 4 scenarios of 2 days = 192 h: 16 probes of 4 h leave 128 h, 2 continuations of
        # 44 h; the 40 h left over probe 10 more candidates.
        (("adaptive.candidates=16", "adaptive.probe_hours=4"), (26, 2)),
        (("adaptive.candidates=12", "adaptive.probe_hours=4"), (15, 3)),
        (("adaptive.candidates=32", "adaptive.probe_hours=2"), (50, 2)),
    ],
)
def test_a_round_with_short_probes_spends_exactly_its_hours(overrides, expected) -> None:
    spec = _loaded(
        "adaptive", "adaptive.days=2", "adaptive.scenarios_per_round=4", *overrides
    ).spec.adaptive

    probes, keep = split_hours(spec, 4)

    assert (probes, keep) == expected
    assert probes * spec.probe_hours + keep * (48 - spec.probe_hours) <= 4 * 48
    assert 4 * 48 - probes * spec.probe_hours - keep * (48 - spec.probe_hours) < spec.probe_hours


def test_a_round_cut_to_one_scenario_probes_one_candidate_and_continues_it() -> None:
    spec = _loaded("adaptive").spec.adaptive  # 1-day scenarios, 3 h probes

    assert split_hours(spec, 1) == (1, 1)  # 24 h: a 3 h probe and its 21 h continuation
    assert split_hours(spec, 2) == (9, 1)


@pytest.mark.parametrize(
    ("overrides", "field_hint"),
    [
        (("adaptive.probe_hours=24",), "it must be below days x 24 (24)"),
        (("adaptive.candidates=20",), "candidates x probe_hours (20 x 3 h) must leave"),
    ],
)
def test_probes_that_do_not_fit_a_round_are_a_located_spec_error(overrides, field_hint) -> None:
    with pytest.raises(SpecError) as caught:
        _loaded("adaptive", *overrides)

    assert "adaptive.probe_hours: got " in caught.value.message
    assert field_hint in caught.value.message
    _loaded("uniform", *overrides)  # only the adaptive sampler probes


def test_a_probe_and_its_continuation_hold_the_windows_of_the_whole_scenario() -> None:
    data = _loaded().spec.data
    frames = simulate_frames(
        np.full((2, 18), 0.3), households=2, days=1, seeds=np.array([3, 4])
    )  # no dropouts at 0.3: the gap filling cannot differ

    probe, rest = split_prefix(frames, data, (0, 1), 180)
    whole = [windows_of([f], data, (0, 1)) for f in frames]

    assert probe.rows == 2 * 2 * 180
    assert [r.rows for r in rest] == [2 * (1440 - 180)] * 2
    # per household: labels at rows 19, 39, ...; 179 is the last inside 3 hours: 9 windows
    assert len(probe) == 2 * 2 * 9
    for i in range(2):
        head = probe.x[probe.groups == i]
        assert len(head) + len(rest[i]) == len(whole[i])
        joined = np.concatenate([head[:9], rest[i].x[: len(whole[i]) // 2 - 9]])
        assert np.allclose(joined, whole[i].x[: len(whole[i]) // 2])


def test_short_probes_are_trained_on_and_the_round_simulates_what_uniform_does() -> None:
    rounds = {}
    for sampler in ("adaptive", "uniform"):
        loaded = _loaded(sampler)
        data = AdaptiveJob(loaded, RunOptions(home=Path("unused"))).prepare()
        rounds[sampler], _ = run_rounds(loaded, data.held_out)

    adaptive, uniform = rounds["adaptive"][1], rounds["uniform"][1]
    # 48 h: 4 probes of 3 h and one continuation of 21 h leave 15 h: 5 more probes of 3 h
    assert len(adaptive.probe_points) == 9
    assert len(adaptive.points) == 1
    assert adaptive.rows == uniform.rows == 2 * 1440
    assert adaptive.new_samples == pytest.approx(uniform.new_samples, abs=2)
    assert 0 < adaptive.probe_samples < adaptive.new_samples
    assert adaptive.samples == rounds["adaptive"][0].samples + adaptive.new_samples
    chosen = np.flatnonzero((adaptive.probe_points == adaptive.points[0]).all(axis=1))
    assert len(chosen) == 1  # the continued scenario is one of the probed candidates
