"""Spans (``adaptive.span_hours``): rounds of short cuts of fresh scenarios, not whole ones."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engage.errors import SpecError
from engage.runtime.options import RunOptions
from engage.spec import parse_spec
from engage.train.adaptive import acquisition
from engage.train.adaptive.job import AdaptiveJob, _round_record
from engage.train.adaptive.loop import run_rounds, split_spans
from engage.train.adaptive.world import cut_spans, simulate_frames, windows_of
from tests.unit.train._adaptive_spec import DATA_AND_MODEL

SPEC = (
    DATA_AND_MODEL
    + """\
train: {epochs: 1, batch_size: 64}
adaptive:
  sampler: SAMPLER
  acquisition: out_of_bag
  rounds: 2
  initial_scenarios: 2
  scenarios_per_round: 1
  households: 1
  days: 2
  span_hours: 6
  test_scenarios: 2
  ensemble: 2
"""
)


def _loaded(sampler: str = "adaptive", *overrides: str):
    return parse_spec(SPEC.replace("SAMPLER", sampler), overrides=overrides)


def _rounds(loaded):
    data = AdaptiveJob(loaded, RunOptions(home=Path("unused"))).prepare()
    return run_rounds(loaded, data.held_out)[0]


def test_windows_carry_the_minute_of_the_day_of_their_label() -> None:
    data = _loaded().spec.data  # window 20, stride 20, horizon 0: labels at rows 19, 39, ...
    frames = simulate_frames(np.full((1, 18), 0.3), households=1, days=2, seeds=np.array([5]))

    w = windows_of(frames, data, (0, 1))

    assert w.minutes[:3].tolist() == [19, 39, 59]
    assert w.minutes[71:73].tolist() == [1439, 19]  # the second day starts again at 19
    assert w.minutes.max() < 1440


def test_a_span_is_the_whole_scenario_s_rows_there_and_its_windows_are_its_windows() -> None:
    data = _loaded().spec.data
    frames = simulate_frames(
        np.full((2, 18), 0.3), households=2, days=2, seeds=np.array([3, 4])
    )  # no dropouts at 0.3: the gap filling cannot differ

    spans = cut_spans(frames, np.array([100, 1500]), 360)

    for frame, span, start in zip(frames, spans, (100, 1500), strict=True):
        assert len(span) == 2 * 360  # both households, 6 hours each
        for _, rows in span.groupby("household"):
            whole = frame[frame["household"] == rows["household"].iloc[0]]
            expected = whole.iloc[start : start + 360].reset_index(drop=True)
            assert rows.reset_index(drop=True).equals(expected)
    w = windows_of(spans[:1], data, (0, 1))
    assert len(w) == 2 * 18  # labels at span rows 19, 39, ..., 359 per household
    assert w.minutes[:2].tolist() == [119, 139]  # minute 100 + 19 of the day
    assert w.rows == 720


def test_out_of_bag_error_by_hour_and_span_start_probabilities() -> None:
    loss = np.array([1.0, 3.0, np.nan, 0.5])
    minutes = np.array([0, 59, 60, 23 * 60 + 5])

    hourly = acquisition.by_hour(loss, minutes)

    assert hourly[0] == 2.0
    assert hourly[23] == 0.5
    assert hourly[5] == pytest.approx(1.25)  # no window: the mean of the hours that have one
    p = acquisition.span_starts(np.eye(24)[7] * 3.0, 2, mix=0.5)
    assert p.sum() == pytest.approx(1.0)
    # a 2 h span covers hour 7 when it starts at 6 or 7: those share the error's half
    assert p[6] == p[7] == pytest.approx(0.25 + 0.5 / 24)
    assert p[8] == pytest.approx(0.5 / 24)
    assert np.allclose(acquisition.span_starts(np.zeros(24), 2, mix=0.5), 1 / 24)
    assert acquisition.span_starts(np.eye(24)[23], 2, mix=1.0)[23] == pytest.approx(0.5)


@pytest.mark.parametrize("sampler", ["adaptive", "uniform", "lhs"])
def test_a_round_of_spans_keeps_the_round_s_scenario_hours_as_fresh_scenarios(sampler) -> None:
    rounds = _rounds(_loaded(sampler))

    first, second = rounds
    assert len(first.start_minutes) == 0
    assert len(first.points) == 2
    spans = split_spans(_loaded(sampler).spec.adaptive, 1)
    assert spans == 8  # 1 scenario of 2 days = 48 h, in spans of 6 h
    assert len(second.points) == len(second.seeds) == len(second.start_minutes) == spans
    assert second.rows == 48 * 60  # what a whole scenario of the round would have kept
    assert np.all((second.start_minutes >= 0) & (second.start_minutes <= 2 * 1440 - 360))
    # labels at span rows 19, 39, ..., 359: 18 windows per span
    assert second.new_samples == 18 * spans
    assert second.samples == first.samples + second.new_samples
    if sampler == "adaptive":  # the drawn start hours' probabilities
        assert np.all((second.scores > 0) & (second.scores < 1))
    else:
        assert len(second.scores) == 0


def test_the_spans_a_round_records_are_those_it_trained_on() -> None:
    rounds = _rounds(_loaded("adaptive"))
    second = rounds[1]

    frames = simulate_frames(second.points, households=1, days=2, seeds=second.seeds)
    spans = cut_spans(frames, second.start_minutes, 360)

    assert sum(len(s) for s in spans) == second.rows
    # the round's digest covers its span tables, so the record reproduces them
    data = _loaded().spec.data
    assert windows_of(spans, data, (0, 1)).digest == second.digest


def test_round_json_has_each_span_s_start() -> None:
    second = _rounds(_loaded("uniform"))[1]

    record = _round_record(second)

    assert record["start_minutes"] == second.start_minutes.tolist()
    assert len(record["scenarios"]) == 8


@pytest.mark.parametrize(
    ("overrides", "hint"),
    [
        (("adaptive.span_hours=48",), "it must be below days x 24 (48)"),
        (("adaptive.acquisition=disagreement",), "acquisition: out_of_bag"),
    ],
)
def test_spans_that_cannot_work_are_a_located_spec_error(overrides, hint) -> None:
    with pytest.raises(SpecError) as caught:
        _loaded("adaptive", *overrides)

    assert "adaptive.span_hours: got " in caught.value.message
    assert hint in caught.value.message


def test_uniform_spans_need_no_acquisition() -> None:
    spec = _loaded("uniform", "adaptive.acquisition=disagreement").spec.adaptive

    assert spec.span_hours == 6


def test_the_job_says_a_round_of_spans_added_spans() -> None:
    job = AdaptiveJob(_loaded(), RunOptions(home=Path("unused")))
    said: list[str] = []
    run = SimpleNamespace(
        child=lambda *a: SimpleNamespace(
            log_dict=lambda *a: None, log_metric_events=lambda *a: None, end=lambda *a: None
        )
    )
    ctx = SimpleNamespace(
        run=run,
        reporter=SimpleNamespace(metrics=lambda *a, **k: None, flush=lambda: None),
        message=lambda name, text: said.append(text),
    )
    second = _rounds(_loaded("uniform"))[1]

    job._round(ctx, second)

    assert said[0].startswith("round 2/2: +8 spans, ")


def test_even_start_hours_change_only_the_starts_so_the_control_is_paired() -> None:
    chosen = _rounds(_loaded("adaptive", "adaptive.span_mix=1"))[1]
    even = _rounds(_loaded("adaptive", "adaptive.span_mix=0"))[1]

    assert np.array_equal(chosen.points, even.points)
    assert np.array_equal(chosen.seeds, even.seeds)
    assert np.allclose(even.scores, 1 / 24)  # every hour as likely
    assert not np.array_equal(chosen.start_minutes, even.start_minutes)
