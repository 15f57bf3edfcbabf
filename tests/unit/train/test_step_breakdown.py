"""Each training step's time split into data wait, host-to-device copy and compute."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import FaultSpec, ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, make_worker, train_epoch
from engage.train.step_times import RAY_DATA_STATS, report_ray_data_stats, step_breakdown

PARTS = ("data_wait_seconds", "host_to_device_seconds", "compute_seconds")


class _Keep:
    """A transport that keeps every event it is sent."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, events: list[Event], wait: bool = False) -> None:
        self.events.extend(events)


def test_the_three_parts_are_the_intervals_between_the_readings() -> None:
    got = step_breakdown(10.0, 10.5, 10.75, 12.0)

    assert got == {
        "step_seconds": 2.0,
        "data_wait_seconds": 0.5,
        "host_to_device_seconds": 0.25,
        "compute_seconds": 1.25,
    }


def _epoch(delay: float = 0.0) -> tuple[list[Event], dict[str, float]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] > 0).astype(np.int64)
    data = {"train_x": x[:64], "train_y": y[:64], "val_x": x[64:], "val_y": y[64:]}
    faults = FaultSpec(data_delay_seconds=delay) if delay else None
    train = TrainSpec(epochs=1, batch_size=16, num_workers=1, faults=faults)
    job = TrainJob(
        train, ModelSpec(name="mlp"), "classification", ModelShape(4, 2, 2), None, None, ""
    )
    keep = _Keep()
    w = make_worker(job, data, Reporter(keep))
    metrics = train_epoch(w, 1, ResourceSampler("cpu", every_s=3600.0))
    w.reporter.flush(wait=True)
    return keep.events, metrics


def test_every_step_reports_its_breakdown_and_the_parts_sum_to_the_step() -> None:
    events, _ = _epoch()

    steps: dict[int, dict[str, float]] = {}
    for e in events:
        if e.kind == "metric" and e.name in (*PARTS, "step_seconds"):
            steps.setdefault(e.step, {})[e.name] = e.value
    assert sorted(steps) == [1, 2, 3, 4]
    for got in steps.values():
        assert all(got[k] >= 0.0 for k in PARTS)
        assert sum(got[k] for k in PARTS) == pytest.approx(got["step_seconds"])


def test_a_slow_input_pipeline_shows_as_data_wait_and_the_epoch_sums_it() -> None:
    started = time.perf_counter()
    events, metrics = _epoch(delay=0.02)

    waits = [e.value for e in events if e.name == "data_wait_seconds"]
    assert min(waits) >= 0.02
    assert metrics["epoch_data_wait_seconds"] == pytest.approx(sum(waits))
    assert metrics["epoch_host_to_device_seconds"] >= 0.0
    assert metrics["epoch_compute_seconds"] > 0.0
    parts = sum(metrics[f"epoch_{k}"] for k in PARTS)
    assert parts <= metrics["epoch_seconds"] <= time.perf_counter() - started


class _Shard:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def stats(self) -> str:
        if self.fail:
            raise RuntimeError("coordinator gone")
        return "Operator 1 ReadRange: 4 tasks executed"


def test_ray_datas_own_statistics_travel_as_one_event_for_the_run_artifact() -> None:
    keep = _Keep()

    report_ray_data_stats(Reporter(keep), _Shard())
    report_ray_data_stats(Reporter(keep), _Shard(fail=True))

    first, second = keep.events
    assert (first.kind, first.name) == ("lifecycle", "ray_data_stats")
    assert first.data == {
        "text": "Operator 1 ReadRange: 4 tasks executed",
        "artifact_file": RAY_DATA_STATS,
    }
    assert "could not be read: RuntimeError: coordinator gone" in second.data["text"]
