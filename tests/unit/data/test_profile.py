"""``engage profile`` classifies constructed jobs: storage-, preprocessing- and compute-bound.

Each job is tiny (one simulated household, two days, a few timed steps) so the three
measured profiles take a few seconds; the bound is made unmistakable by construction.
"""

from __future__ import annotations

import time
from functools import cache

import pytest

from engage.data import prepare
from engage.errors import SpecError
from engage.profiler import (
    COMPUTE,
    PREPROCESSING,
    STORAGE,
    StageTimes,
    classify,
    parse_bandwidth,
    profile_job,
    remedies,
)
from engage.spec.models import PipelineSpec

HEAVY = [
    {"op": "rolling", "params": {"size": 20, "stats": ["mean", "std", "min", "max"]}},
    {"op": "lag", "params": {"lags": [1, 2, 4, 8, 16]}},
    {"op": "spectral", "params": {"append": False}},
    {"op": "jitter", "params": {"std": 0.1}},
]


def _spec(model: dict, preprocess: list | None = None) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": "tiny",
            "data": {
                "source": {"type": "synthetic", "households": 1, "days": 2},
                "features": ["temperature", "co2", "power"],
                "target": "occupied",
                "task": "classification",
                "window": 30,
                "stride": 5,
                "preprocess": preprocess or [],
            },
            "model": model,
            "train": {"batch_size": 32, "num_workers": 1},
        }
    )


@cache
def _prepared(heavy: bool):
    return prepare(_spec({"name": "mlp"}, HEAVY if heavy else None).data, ".")


def test_throttled_reads_make_a_storage_bound_job() -> None:
    spec = _spec({"name": "mlp", "params": {"hidden": 8, "layers": 1}})

    # 50KB/s: each 11.6 KB batch waits ~0.23 s on the rate, four times the 59 ms a read and
    # decode once took under CI load (at 300KB/s the 39 ms wait lost to it).
    report = profile_job(spec, _prepared(False), bandwidth=parse_bandwidth("50KB/s"), steps=3)

    assert report.verdict == STORAGE, report.times  # the stage times, when it fails
    assert report.times.read > 0.5 * report.times.storage
    # The step timed after idling as long as the default's reads and 4x faster storage's.
    read = report.times.read
    assert [g for g, _ in report.times.idle_penalty] == pytest.approx([read / 4, read])
    assert all(extra >= 0 for _, extra in report.times.idle_penalty)
    assert report.remedies[0].name == "cache decoded windows"


def test_heavy_window_operators_make_a_preprocessing_bound_job() -> None:
    spec = _spec({"name": "mlp", "params": {"hidden": 1, "layers": 0}}, HEAVY)

    # 20 steps: the times are means (throughput), and one stalled step of 5 on a loaded
    # machine could outweigh a 4-10x margin (preprocessing 1.3-2.7 ms, compute 0.2-0.4 ms).
    report = profile_job(spec, _prepared(True), steps=20)

    assert report.verdict == PREPROCESSING, report.times  # the stage times, when it fails
    assert report.times.preprocess > report.times.compute


def test_a_large_model_on_light_data_is_compute_bound() -> None:
    spec = _spec({"name": "mlp", "params": {"hidden": 1024, "layers": 3}})

    report = profile_job(spec, _prepared(False), steps=5)

    assert report.verdict == COMPUTE, report.times  # the stage times, when it fails
    assert "a larger batch may help" in report.advice


def _times(**kw: float) -> StageTimes:
    base = {"batch": 100, "storage": 1.0, "read": 0.8, "cache": 0.01, "preprocess": 2.0,
            "preprocess_gpu": 0.1, "compute": 1.0, "compute_large": 1.5, "cores": 3,
            "bandwidth": 1e6}  # fmt: skip
    return StageTimes(**(base | kw))


def test_remedy_predictions_follow_the_stage_times() -> None:
    t = _times()
    got = {r.name: r.speedup for r in remedies(t)}

    assert classify(t) == PREPROCESSING
    assert got["3 CPU loader worker(s)"] == pytest.approx(4.0 / 1.0)  # max(1, .8, 3/3)
    assert got["cache decoded windows"] == pytest.approx(4.0 / 3.01)
    assert got["preprocess on the GPU"] == pytest.approx(4.0 / 2.1)
    assert got["double the batch"] == pytest.approx(4.0 / (3.0 + 0.75))
    assert got["4x faster storage"] == pytest.approx(4.0 / (0.4 + 3.0))
    assert t.stall_ratio == pytest.approx(0.75)


def test_no_gpu_means_no_gpu_prediction() -> None:
    fixes = remedies(_times(preprocess_gpu=None))

    gpu = next(r for r in fixes if r.name == "preprocess on the GPU")
    assert gpu.speedup is None
    assert gpu.note == "no GPU here"


@pytest.mark.parametrize(
    ("text", "rate"), [("50MB/s", 50e6), ("1.5GiB/s", 1.5 * 2**30), ("800", 800.0)]
)
def test_bandwidth_text_is_bytes_per_second(text: str, rate: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(rate)


def test_a_bad_bandwidth_names_the_option() -> None:
    with pytest.raises(SpecError, match="--bandwidth: got 'fast'"):
        parse_bandwidth("fast")


def test_loader_workers_gain_nothing_without_spare_cpu() -> None:
    busy = {r.name: r.speedup for r in remedies(_times(free_cpus=1.0))}

    # All CPU work (storage 0.2 of it, preprocessing 2, compute 1) on one free core.
    assert busy["3 CPU loader worker(s)"] == pytest.approx(4.0 / 3.2)


def test_one_descheduled_step_does_not_make_a_stage_slow(monkeypatch) -> None:
    from types import SimpleNamespace

    from engage.profiler import measure

    # The profiler's clock advances by what each step costs: 1 ms a step, and one 100 ms
    # stall (the host took the core) among the timed ones. A clock of its own, not sleeps:
    # under the suite's load a 1 ms sleep itself took 7 ms (a rehearsal at load 15).
    now = [0.0]
    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    calls = iter(range(1_000))

    def step() -> None:
        now[0] += 0.100 if next(calls) == 7 else 0.001

    seconds = measure.time_per_call(step, steps=20)

    assert seconds == pytest.approx(0.001)  # every timed step, the stall included: 1.9 ms


def test_a_loader_worker_pays_the_batch_transfer_on_its_side_and_the_cores() -> None:
    got = {r.name: r.speedup for r in remedies(_times(transfer=0.6))}
    busy = {r.name: r.speedup for r in remedies(_times(transfer=0.6, free_cpus=1.0))}

    # Worker side (storage 1 + preprocessing 2 + transfer 0.6) / 3 workers = 1.2 > compute 1.
    assert got["3 CPU loader worker(s)"] == pytest.approx(4.0 / 1.2)
    # On one free core: storage's CPU 0.2 + preprocessing 2 + transfer 0.6 + compute 1.
    assert busy["3 CPU loader worker(s)"] == pytest.approx(4.0 / 3.8)


def test_double_the_batch_uses_the_preprocessing_measured_at_that_batch() -> None:
    got = {r.name: r.speedup for r in remedies(_times(preprocess_large=5.0))}

    # Per window: (2 x storage 1 + preprocessing at 200 windows 5 + compute 1.5) / 200.
    assert got["double the batch"] == pytest.approx(0.04 / (8.5 / 200))


def test_the_transfer_probe_times_what_a_worker_process_adds() -> None:
    import numpy as np

    from engage.profiler.measure import time_transfer

    # 8 MB a batch: crossing to another process copies it into shared memory and back.
    seconds = time_transfer(np.ones((256, 128, 64), dtype=np.float32), steps=5)

    assert 0.0 < seconds < 1.0


def test_a_cheap_stage_is_timed_over_rounds_longer_than_a_scheduler_slice() -> None:
    from engage.profiler.measure import time_per_call

    calls = []

    def step() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.001)

    seconds = time_per_call(step, steps=3, warmup=1, min_round_s=0.05)

    # 3 steps asked for (1 a round), but each of the 3 rounds runs >= 50 ms of ~1 ms calls.
    assert len(calls) > 1 + 3 * 2
    assert calls[-1] - calls[1] >= 3 * 0.05 - 0.02  # the last call's own time not counted
    assert 0.001 <= seconds < 0.025  # a mean over the round, not its 50 ms


def test_the_stages_are_timed_in_interleaved_rounds_so_a_burst_of_load_meets_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from engage.profiler import measure

    # The profiler's clock: preprocessing costs 2 ms a call and compute 0.3 ms, but the host
    # is busy for the first 0.25 s (every call then takes 10x): timed one stage after the
    # other, every round of the stage timed first fell in the busy spell (CI saw a 0.3 ms
    # model timed slower than 2 ms of preprocessing, and the job called compute-bound).
    now = [0.0]
    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    order: list[str] = []

    def stage(name: str, cost: float):
        def call() -> None:
            order.append(name)
            now[0] += cost * (10 if now[0] < 0.25 else 1)

        return call

    got = measure.time_interleaved(
        {"compute": stage("compute", 0.0003), "preprocess": stage("preprocess", 0.002)},
        steps=20,
        rounds=5,
    )

    assert got["compute"] == pytest.approx(0.0003)
    assert got["preprocess"] == pytest.approx(0.002)
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    # A warm-up call of each (C P), then 5 rounds, in reverse order on odd rounds:
    # C P | P C | C P | P C | C P, so the runs of one stage are C P C P C P C P.
    assert runs == ["compute", "preprocess"] * 4


def test_a_loader_worker_pays_what_running_beside_the_step_costs_both() -> None:
    alone = {r.name: r.speedup for r in remedies(_times(transfer=0.6))}
    beside = {
        r.name: r.speedup
        for r in remedies(_times(transfer=0.6, corun_preprocess=1.5, corun_compute=1.2))
    }

    # Worker side (storage 1 + preprocessing 2 x 1.5 + transfer 0.6) / 3 = 1.53 > compute 1.2.
    assert beside["3 CPU loader worker(s)"] == pytest.approx(4.0 / (4.6 / 3))
    assert alone["3 CPU loader worker(s)"] == pytest.approx(4.0 / 1.2)
    # Only the overlap pays it: the inline remedies run one stage at a time.
    assert beside["cache decoded windows"] == alone["cache decoded windows"]
    # A compute-side slowdown alone makes the step the bound: 1 x 1.8 > (1 + 2 + 0.6) / 3.
    slow_step = {r.name: r.speedup for r in remedies(_times(transfer=0.6, corun_compute=1.8))}
    assert slow_step["3 CPU loader worker(s)"] == pytest.approx(4.0 / 1.8)


def test_the_corun_probe_times_the_step_here_and_the_preprocessing_in_a_worker() -> None:
    import os

    from engage.profiler.measure import time_corun

    pids = set()

    def preprocess() -> None:
        pids.add(os.getpid())  # in the worker: this process's set stays empty
        time.sleep(0.004)

    compute, prep = time_corun(lambda: time.sleep(0.002), preprocess, steps=5)

    assert pids == set()
    assert 0.002 <= compute < 0.05
    assert 0.004 <= prep < 0.05


def test_a_step_after_an_idle_wait_for_reads_pays_the_measured_penalty() -> None:
    # The step takes 0.5 longer after 0.2 idle, 1.0 longer after 0.8 (the default's reads).
    t = _times(idle_penalty=((0.2, 0.5), (0.8, 1.0)))
    got = {r.name: r.speedup for r in remedies(t)}

    assert t.after_idle(0.0) == 0.0
    assert t.after_idle(0.1) == pytest.approx(0.25)  # linear from no penalty at no wait
    assert t.after_idle(0.4) == pytest.approx(0.5 + 0.5 * 0.2 / 0.6)
    assert t.after_idle(5.0) == pytest.approx(1.0)  # the longest gap's beyond it
    assert t.step == pytest.approx(5.0)  # storage 1 + preprocessing 2 + compute 1 + 1.0
    assert got["cache decoded windows"] == pytest.approx(5.0 / 3.01)  # no wait, no penalty
    # Reads 4x faster: storage 1 - 0.8 x 3/4 = 0.4, and a quarter of the wait (0.2) idle.
    assert got["4x faster storage"] == pytest.approx(5.0 / (0.4 + 0.5 + 3.0))
    # Twice the batch waits 1.6 for its reads: the longest measured gap's penalty.
    assert got["double the batch"] == pytest.approx((5.0 / 100) / ((2 + 4 + 1.5 + 1.0) / 200))
    assert got["preprocess on the GPU"] == pytest.approx(5.0 / (1 + 0.1 + 1 + 1.0))
    # Without a measured penalty every prediction is what it was.
    assert _times().step == pytest.approx(4.0)


def test_the_idle_probe_times_the_step_after_each_gap_in_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from engage.profiler import measure

    # A step costs 1 ms after another step and 3 ms after any sleep of 5 ms or more; 2 ms
    # after a shorter one. The profiler's own clock: sleeps advance it, nothing waits.
    now, slept, gaps = [0.0], [0.0], []

    def sleep(s: float) -> None:
        slept[0] = s
        now[0] += s

    def step() -> None:
        gaps.append(slept[0])
        now[0] += 0.001 if slept[0] == 0 else 0.003 if slept[0] >= 0.005 else 0.002
        slept[0] = 0.0

    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=lambda: now[0], sleep=sleep))
    got = measure.time_after_idle(step, (0.002, 0.04, 5.0), steps=4)

    assert got == pytest.approx({0.0: 0.001, 0.002: 0.002, 0.04: 0.003, 5.0: 0.003})
    assert max(gaps) == measure.MAX_IDLE_S  # a 5 s gap is slept for the cap only
    # A warm-up step, then the gaps in turn, in reverse order on odd steps.
    assert gaps[1:9] == [0.0, 0.002, 0.04, 0.1, 0.1, 0.04, 0.002, 0.0]


def test_the_compute_stage_steps_on_distinct_batches_in_turn(monkeypatch) -> None:
    import numpy as np

    from engage.profiler import measure

    seen = []
    monkeypatch.setattr(measure, "make_step", lambda spec, shape: lambda x, t: seen.append(x))
    inputs = np.arange(100 * 3 * 2, dtype=np.float32).reshape(100, 3, 2)
    call = measure.compute_call(None, inputs, np.zeros(100, dtype=np.int64), 2, batch=10)
    for _ in range(2 * measure.ROTATE_BATCHES):
        call()

    firsts = [float(x[0, 0, 0]) for x in seen]
    # Batch i holds rows 10i..10i+9 (6 values a row), and the batches come round in turn.
    assert firsts == [60.0 * i for i in range(measure.ROTATE_BATCHES)] * 2
    few = measure.compute_call(None, inputs[:15], np.zeros(15, dtype=np.int64), 2, batch=10)
    few()
    assert seen[-1].shape == (10, 3, 2)  # fewer rows than two batches: one batch, repeated
