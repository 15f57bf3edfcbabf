"""The all-reduce step metrics (engage.train.comm) in a job's Prometheus families."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from engage.events import Event
from engage.monitor.metrics import JobMetrics

RUN = 'job="j",run_id="r"'


def _step(rank: str, wait: float, compute: float, at: float | None = None, **comm: float):
    names = {"data_wait_seconds": wait, "compute_seconds": compute, **comm}
    stamp = {} if at is None else {"timestamp_ms": int(at * 1000)}
    return [
        Event("metric", name, value, labels={"rank": rank}, **stamp)
        for name, value in names.items()
    ]


def _metrics() -> JobMetrics:
    return JobMetrics(CollectorRegistry(auto_describe=True), "j", "r")


def test_allreduce_step_metrics_add_up_per_worker() -> None:
    metrics = _metrics()
    comm = {"allreduce_seconds": 0.02, "allreduce_blocked_seconds": 0.01}
    metrics.observe(_step("0", 0.0, 0.1, **comm, allreduce_buckets=2.0, allreduce_overlap=0.5))
    metrics.observe(_step("0", 0.0, 0.1, **comm, allreduce_buckets=2.0, allreduce_overlap=0.75))
    metrics.observe(_step("1", 0.0, 0.1, **comm, allreduce_buckets=2.0, allreduce_overlap=0.25))

    got = metrics.snapshot()

    rank0 = '{job="j",rank="0",run_id="r"}'
    rank1 = '{job="j",rank="1",run_id="r"}'
    assert got[f"engage_allreduce_seconds_total{rank0}"] == pytest.approx(0.04)
    assert got[f"engage_allreduce_blocked_seconds_total{rank0}"] == pytest.approx(0.02)
    assert got[f"engage_allreduce_buckets_total{rank0}"] == 4.0
    assert got[f"engage_allreduce_overlap_ratio{rank0}"] == 0.75  # the latest step's
    assert got[f"engage_allreduce_overlap_ratio{rank1}"] == 0.25


def test_the_blocked_ratio_is_the_share_of_step_time_over_the_stall_window() -> None:
    metrics = _metrics()
    # Two workers, 0.1 s of data wait and 0.9 s of compute each; 0.3 s of each compute
    # was spent blocked on all-reduce: 0.6 of 2.0 s busy.
    for rank in ("0", "1"):
        metrics.observe(_step(rank, 0.1, 0.9, allreduce_blocked_seconds=0.3))

    got = metrics.snapshot()

    assert got[f"engage_comm_blocked_ratio{{{RUN}}}"] == pytest.approx(0.3)
    assert got[f"engage_data_stall_ratio{{{RUN}}}"] == pytest.approx(0.1)


def test_a_job_that_does_not_time_allreduce_exports_no_blocked_ratio() -> None:
    metrics = _metrics()
    metrics.observe(_step("0", 0.1, 0.9))

    got = metrics.snapshot()

    assert f"engage_data_stall_ratio{{{RUN}}}" in got
    assert not any(key.startswith("engage_comm_blocked_ratio{") for key in got)
    assert got.get('engage_allreduce_seconds_total{job="j",rank="0",run_id="r"}') is None


def test_old_blocked_time_leaves_the_window_with_its_steps(monkeypatch) -> None:
    import engage.monitor.metrics as module

    metrics = _metrics()
    now = [1000.0]
    monkeypatch.setattr(module.time, "time", lambda: now[0])
    metrics.observe(_step("0", 0.0, 1.0, at=now[0], allreduce_blocked_seconds=0.8))
    now[0] += module.STALL_WINDOW_S + 1
    metrics.observe(_step("0", 0.0, 1.0, at=now[0], allreduce_blocked_seconds=0.1))

    assert metrics.snapshot()[f"engage_comm_blocked_ratio{{{RUN}}}"] == pytest.approx(0.1)
