"""Pieces of engage.monitor.views that the seeded pages do not reach."""

from __future__ import annotations

import pandas as pd
import pytest

from engage.monitor.views.drift import _detectors, _split
from engage.monitor.views.federated import _union


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("drift_statistic_mmd_online_co2", ("mmd_online", "co2")),
        ("drift_statistic_mmd_co2_ppm", ("mmd", "co2_ppm")),
        ("drift_statistic_cusum_all", ("cusum", "all")),
        ("drift_statistic_nosuch_co2", None),
        (
            "drift_statistic_prediction_shift_confidence_drop",
            ("prediction_shift", "confidence_drop"),
        ),
    ],
)
def test_metric_keys_split_into_the_longest_detector_name_and_the_feature(key, expected) -> None:
    found = ["drift_detected_mmd_online", "drift_detected_mmd", "drift_detected_prediction_shift"]
    detectors = _detectors(found)

    assert _split(key, "drift_statistic_", detectors) == expected


def test_child_run_rows_fill_in_what_the_events_lack_without_duplicating() -> None:
    columns = ["round", "client", "score", "flagged", "action", "reasons"]
    events = pd.DataFrame([(1, "a", 0.1, False, "aggregate", "")], columns=columns)
    children = pd.DataFrame(
        [(1, "a", 0.1, False, "", ""), (1, "b", 3.0, True, "", "")], columns=columns
    )

    merged = _union(events, children, ["round", "client"])

    assert merged[["client", "action"]].values.tolist() == [["a", "aggregate"], ["b", ""]]


def _points(values: list[float], every_s: float = 1.0) -> pd.DataFrame:
    start = pd.Timestamp("2026-01-01 12:00:00")
    times = [start + pd.Timedelta(seconds=every_s * i) for i in range(len(values))]
    return pd.DataFrame({"time": times, "value": values})


def test_job_series_bins_steps_into_step_time_throughput_and_stall_ratio() -> None:
    from engage.monitor.views.job import MAX_POINTS, job_series

    n = 3 * MAX_POINTS  # three steps per bin
    history = {
        "step_seconds": _points([0.1] * n),
        "data_wait_seconds": _points([0.025] * n),
        "samples": _points([32.0] * n),
    }

    series = job_series(history)

    by = {name: part["value"] for name, part in series.groupby("series")}
    assert len(by["step time"]) == MAX_POINTS
    assert by["step time"].to_numpy() == pytest.approx(0.1)
    assert by["throughput"].to_numpy() == pytest.approx(320.0)  # 32 samples per 0.1 s
    assert by["data stall"].to_numpy() == pytest.approx(0.25)
    assert "all-reduce" not in by  # a run without train.comm timing has no all-reduce series


def test_job_series_shows_the_share_of_step_time_copying_batches_to_the_device() -> None:
    from engage.monitor.views.job import MAX_POINTS, SERIES, job_series

    n = 3 * MAX_POINTS
    history = {
        "step_seconds": _points([0.1] * n),
        "data_wait_seconds": _points([0.02] * n),
        "host_to_device_seconds": _points([0.01] * n),
    }

    series = job_series(history)

    by = {name: part["value"] for name, part in series.groupby("series")}
    assert len(by["host-to-device"]) == MAX_POINTS
    assert by["host-to-device"].to_numpy() == pytest.approx(0.1)
    assert by["data stall"].to_numpy() == pytest.approx(0.2)
    assert SERIES["host-to-device"][1] == "share"


def test_job_series_shows_the_share_of_step_time_blocked_on_allreduce() -> None:
    from engage.monitor.views.job import MAX_POINTS, SERIES, job_series

    n = 3 * MAX_POINTS
    history = {
        "step_seconds": _points([0.1] * n),
        "allreduce_blocked_seconds": _points([0.04] * n),
    }

    series = job_series(history)

    blocked = series.loc[series["series"] == "all-reduce", "value"]
    assert len(blocked) == MAX_POINTS
    assert blocked.to_numpy() == pytest.approx(0.4)
    order = list(dict.fromkeys(series["series"]))
    assert order == [name for name in SERIES if name in order]


def test_with_grad_accumulation_allreduce_joins_the_step_it_was_reported_with() -> None:
    from engage.monitor.views.job import job_series

    # Two batches per optimiser step: all-reduce only at steps 2, 4, 6, 8 (same timestamps).
    steps = _points([0.1] * 8)
    history = {
        "step_seconds": steps,
        "allreduce_blocked_seconds": steps.iloc[1::2].assign(value=0.05),
    }

    series = job_series(history)

    blocked = series.loc[series["series"] == "all-reduce", "value"].tolist()
    assert blocked == pytest.approx([0.0, 0.5] * 4)


def test_job_series_turns_cumulative_cpu_into_cores_and_skips_a_restart() -> None:
    from engage.monitor.views.job import job_series

    history = {
        "worker_cpu_seconds": _points([0.0, 2.0, 4.0, 0.5, 2.5], every_s=2.0),
        "worker_resident_memory_bytes": _points([2.0**20 * 300] * 5, every_s=2.0),
    }

    series = job_series(history)

    cpu = series.loc[series["series"] == "cpu", "value"].tolist()
    assert cpu == pytest.approx([1.0, 1.0, 1.0])  # the drop to 0.5 (a new worker) is skipped
    assert set(series.loc[series["series"] == "memory", "value"]) == {300.0}
    assert list(dict.fromkeys(series["series"])) == ["cpu", "memory"]


@pytest.mark.parametrize(
    ("detected", "feature", "moved", "expected"),
    [
        (1.0, "co2", ("co2",), True),
        (1.0, "humidity", ("co2",), False),
        (0.0, "co2", ("co2",), False),
        (1.0, "all", (), True),
        (1.0, "co2", (), None),  # drift, but no alert has named the features yet
        (float("nan"), "co2", ("co2",), None),  # the check failed
        (None, "co2", ("co2",), None),
    ],
)
def test_a_features_drift_verdict_is_its_own(detected, feature, moved, expected) -> None:
    from engage.monitor.views.drift import _feature_drifts

    assert _feature_drifts(detected, feature, moved) is expected


def test_a_job_detail_joins_the_jobs_live_endpoint_view() -> None:
    from engage.monitor.live import JobView, LiveView
    from engage.monitor.views.job import job_detail
    from engage.monitor.views.jobs import JobRow

    row = JobRow("r1", "train", "running", 1.0)
    now = JobView("train", "r1", "running", "http://127.0.0.1:9/metrics", stall_ratio=0.4)
    other = JobView("other", "r2", "running")

    detail = job_detail(row, None, LiveView([other, now], [], 2.0))

    assert detail.live is now
    assert detail.running
    assert not detail.in_mlflow  # no MLflow store: no curves, and the page says why
    assert detail.series.empty


def test_the_experiments_view_hides_the_experiment_the_serving_replicas_log_to() -> None:
    from engage.monitor.views.experiments import MONITORING_EXPERIMENT
    from engage.serve.controller import EXPERIMENT

    assert MONITORING_EXPERIMENT == EXPERIMENT
