"""The CPU capacity other processes leave, as ``engage profile`` reads it before measuring.

The 1-minute load average counted the profiling process itself: a benchmark that had been
computing for a minute read one core taken on an idle 2-core node, and the profile then
predicted that a loader worker could not overlap the step (0.87x; measured 1.10x). The
capacity is now sampled from ``/proc/stat`` over a short interval, less this process's own
CPU time over it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engage.profiler import measure


def test_others_busy_is_the_nodes_busy_time_less_this_processs_own() -> None:
    # Two cores over 2 s: 3.0 core-seconds busy in all, 1.5 of them this process's.
    free = measure.capacity_left(busy_s=3.0, own_s=1.5, seconds=2.0, cores=2)

    assert free == pytest.approx(2 - (3.0 - 1.5) / 2.0)


def test_the_capacity_left_stays_within_one_core_and_the_usable_cores() -> None:
    assert measure.capacity_left(busy_s=9.0, own_s=0.0, seconds=1.0, cores=2) == 1.0
    assert measure.capacity_left(busy_s=0.5, own_s=2.0, seconds=1.0, cores=2) == 2.0


def test_this_process_computing_does_not_count_as_other_load(monkeypatch) -> None:
    # Over the 0.5 s sample the node's two cores were busy 1.0 core-seconds, 0.9 of them
    # this process's own (a benchmark's thread still computing): others took 0.1.
    node = iter([100.0, 101.0])
    own = iter([5.0, 5.9])
    clock = iter([10.0, 10.5])
    fake = SimpleNamespace(
        process_time=lambda: next(own), perf_counter=lambda: next(clock), sleep=lambda s: None
    )
    monkeypatch.setattr(measure, "time", fake)
    monkeypatch.setattr(measure, "node_busy_seconds", lambda: next(node))
    monkeypatch.setattr(measure, "usable_cores", lambda: 2)

    assert measure.free_cpus(interval=0.5) == pytest.approx(2 - 0.1 / 0.5)


def test_the_node_busy_time_is_read_from_proc_stat() -> None:
    first = measure.node_busy_seconds()
    sum(range(2_000_000))  # some CPU time of this process, at least
    second = measure.node_busy_seconds()

    assert 0.0 < first <= second
    assert 1.0 <= measure.free_cpus(interval=0.1) <= measure.usable_cores()
