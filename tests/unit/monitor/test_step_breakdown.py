"""A worker's step split into data wait, host-to-device copy and compute, in the job's series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from engage.events import Event
from engage.monitor.metrics import JobMetrics

RUN = 'job="j",run_id="r"'


def _step(rank: str, wait: float, copy: float, compute: float) -> list[Event]:
    names = {
        "step_seconds": wait + copy + compute,
        "data_wait_seconds": wait,
        "host_to_device_seconds": copy,
        "compute_seconds": compute,
    }
    return [Event("metric", k, v, labels={"rank": rank}) for k, v in names.items()]


def _metrics() -> JobMetrics:
    return JobMetrics(CollectorRegistry(auto_describe=True), "j", "r")


def test_each_part_of_a_step_adds_up_per_worker() -> None:
    metrics = _metrics()
    metrics.observe(_step("0", 0.1, 0.02, 0.3) + _step("0", 0.1, 0.02, 0.3))
    metrics.observe(_step("1", 0.2, 0.01, 0.4))

    got = metrics.snapshot()

    rank0, rank1 = '{job="j",rank="0",run_id="r"}', '{job="j",rank="1",run_id="r"}'
    assert got[f"engage_data_wait_seconds_total{rank0}"] == pytest.approx(0.2)
    assert got[f"engage_host_to_device_seconds_total{rank0}"] == pytest.approx(0.04)
    assert got[f"engage_compute_seconds_total{rank0}"] == pytest.approx(0.6)
    assert got[f"engage_host_to_device_seconds_total{rank1}"] == pytest.approx(0.01)


def test_the_stall_ratio_counts_the_copy_as_step_time_not_as_waiting() -> None:
    metrics = _metrics()
    # 0.3 s waiting, 0.2 s copying, 0.5 s computing: 0.3 of each second is a data stall.
    metrics.observe(_step("0", 0.3, 0.2, 0.5))

    got = metrics.snapshot()

    assert got[f"engage_data_stall_ratio{{{RUN}}}"] == pytest.approx(0.3)


def test_a_worker_that_reports_no_copy_keeps_the_old_ratio() -> None:
    metrics = _metrics()
    events = [
        Event("metric", "data_wait_seconds", 0.25, labels={"rank": "0"}),
        Event("metric", "compute_seconds", 0.75, labels={"rank": "0"}),
    ]
    metrics.observe(events)

    assert metrics.snapshot()[f"engage_data_stall_ratio{{{RUN}}}"] == pytest.approx(0.25)
