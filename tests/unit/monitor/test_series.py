"""SeriesBuffer and the PromQL functions: Prometheus 2.x semantics where the rules need them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from engage.events import Event
from engage.monitor.metrics import JobMetrics
from engage.monitor.series import (
    SeriesBuffer,
    count_by,
    deriv,
    labels_of,
    max_by,
    max_over_time,
    min_over_time,
    nan_max,
    nan_min,
)

RUN = labels_of({"job": "j", "run_id": "r"})
finite = st.floats(-1e6, 1e6, allow_nan=False)


def _buffer(points: list[tuple[float, float]], **kwargs) -> SeriesBuffer:
    buffer = SeriesBuffer(**kwargs)
    for t, v in points:
        buffer.add("x", {"job": "j", "run_id": "r"}, t, v)
    return buffer


def test_instant_takes_the_latest_sample_within_the_lookback_both_ends_inclusive() -> None:
    buffer = _buffer([(0.0, 1.0), (60.0, 2.0)])

    assert buffer.instant("x", 59.0) == {RUN: 1.0}
    assert buffer.instant("x", 60.0) == {RUN: 2.0}
    assert buffer.instant("x", 360.0) == {RUN: 2.0}  # exactly the 5 min lookback
    assert buffer.instant("x", 360.5) == {}


def test_window_holds_the_samples_in_the_closed_range() -> None:
    buffer = _buffer([(float(t), float(t)) for t in range(0, 700, 60)])

    (points,) = buffer.window("x", 600.0, 600.0).values()

    assert points[0] == (0.0, 0.0)
    assert points[-1] == (600.0, 600.0)
    assert len(points) == 11


def test_retention_drops_old_samples_and_names_filter_what_is_kept() -> None:
    buffer = _buffer([(float(t), 1.0) for t in range(0, 2000, 10)], retention_seconds=100.0)
    buffer.add("ignored", {}, 0.0, 1.0)
    kept = SeriesBuffer(names={"x"})
    kept.add("ignored", {}, 0.0, 1.0)

    (points,) = buffer.window("x", 1990.0, 10_000.0).values()

    assert points[0][0] == 1890.0
    assert kept.instant("ignored", 0.0) == {}


def test_matchers_select_by_label_value() -> None:
    buffer = SeriesBuffer()
    buffer.add("loss", {"job": "j", "run_id": "r", "split": "train"}, 0.0, 1.0)
    buffer.add("loss", {"job": "j", "run_id": "r", "split": "val"}, 0.0, 2.0)

    assert list(buffer.instant("loss", 0.0, split="val").values()) == [2.0]


def _filled_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    metrics = JobMetrics(registry, "j", "r")
    metrics.set_stage("train")
    metrics.observe(
        [
            Event("metric", "step_seconds", 0.05, labels={"rank": "0"}),
            Event("metric", "samples", 64.0, labels={"rank": "0"}),
            Event("metric", "train_loss", math.nan),
        ]
    )
    return registry


def test_sampling_a_registry_and_its_exposition_text_give_the_same_series() -> None:
    registry = _filled_registry()
    direct, scraped = SeriesBuffer(), SeriesBuffer()

    direct.sample_registry(registry, 10.0)
    scraped.sample_text(generate_latest(registry).decode(), 10.0)

    for name in ("engage_steps_total", "engage_samples_total", "engage_stage"):
        assert direct.instant(name, 10.0) == scraped.instant(name, 10.0) != {}
    (loss,) = scraped.instant("engage_loss", 10.0, split="train").values()
    assert math.isnan(loss)


@given(st.lists(st.one_of(finite, st.just(math.nan)), min_size=1))
def test_min_and_max_skip_nan_unless_every_value_is_nan(values: list[float]) -> None:
    numbers = [v for v in values if not math.isnan(v)]

    if numbers:
        assert nan_min(values) == min(numbers)
        assert nan_max(values) == max(numbers)
    else:
        assert math.isnan(nan_min(values))
        assert math.isnan(nan_max(values))


def test_over_time_functions_reduce_each_window() -> None:
    points = [(0.0, 3.0), (60.0, math.nan), (120.0, 1.0)]

    assert min_over_time(points) == 1.0
    assert max_over_time(points) == 3.0


@given(finite, st.floats(-100, 100), st.integers(2, 30))
def test_deriv_recovers_the_slope_of_a_line(start: float, slope: float, n: int) -> None:
    points = [(1000.0 + 15 * i, start + slope * 15 * i) for i in range(n)]

    assert deriv(points) == pytest.approx(slope, abs=1e-6)


def test_deriv_is_zero_for_a_constant_series_and_absent_under_two_samples() -> None:
    assert deriv([(0.0, 0.1), (60.0, 0.1), (120.0, 0.1)]) == 0.0
    assert deriv([(0.0, 5.0)]) is None


def test_aggregation_groups_by_job_and_run_and_drops_empty_labels() -> None:
    vector = {
        labels_of({"job": "j", "run_id": "r", "rank": "0"}): 1.0,
        labels_of({"job": "j", "run_id": "r", "rank": "1"}): 5.0,
        labels_of({"job": "k"}): 2.0,
    }

    assert max_by(vector) == {RUN: 5.0, (("job", "k"),): 2.0}
    assert count_by(vector) == {RUN: 2.0, (("job", "k"),): 1.0}
