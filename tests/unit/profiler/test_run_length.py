"""A timed run lasts long enough that one descheduling does not decide its rate."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline


def test_a_fast_run_goes_on_past_its_steps_until_it_has_lasted_its_minimum(
    tmp_path: Path,
) -> None:
    store = WindowStore(np.zeros((64, 4, 2), np.float32), np.zeros(64, np.int64), tmp_path)
    calls: list[float] = []

    def step(x, y) -> None:
        calls.append(time.perf_counter())
        time.sleep(0.001)

    stats = run_pipeline(store, LoaderConfig("cache", 0, "none", 8), None, step, 3, 2, 0.05)

    timed = calls[2:]
    assert len(timed) > 3  # 3 steps asked for, ~1 ms each: more to fill 50 ms
    assert timed[-1] - timed[0] >= 0.05 - 0.005
    assert 0.001 <= stats.step < 0.01  # still a mean per step
    assert stats.process_cpu >= 0.0


def test_without_a_minimum_a_run_times_exactly_its_steps(tmp_path: Path) -> None:
    store = WindowStore(np.zeros((64, 4, 2), np.float32), np.zeros(64, np.int64), tmp_path)
    calls: list[int] = []

    run_pipeline(
        store, LoaderConfig("cache", 0, "none", 8), None, lambda x, y: calls.append(1), 5, 2
    )

    assert len(calls) == 7
