"""The scaling model's per-step terms measured on this node: DDP's own work, how the compute and
the in-step all-reduce spread (the median of a sum), and the waiting share of an all-reduce
that runs beside the backward pass. Pure arithmetic, by hand."""

from __future__ import annotations

import pytest

from engage.train.scaling.model import (
    Network,
    ScalingModel,
    StepProfile,
    median_of_sums,
    relative_spread,
)
from engage.train.scaling.netprobe import ProbeResult, ddp_overhead
from engage.train.scaling.planner import measured_overlap_share, on_this_node, work_share

MB = 1e6


def _model(**kw: object) -> ScalingModel:
    # compute(100) = 0.01 + 0.1 = 0.11 s; 2 workers all-reduce 10 MB at 1 GB/s: 0.01 s.
    step = StepProfile(1e-3, 0.01, 0.5, 10 * MB)
    return ScalingModel(step, Network(bandwidth=1e9, latency=0.0), overlap=0.0, **kw)


def test_median_of_sums_by_hand() -> None:
    # Sums over every pair: 1 2 3 11 12 13 -> median (3 + 11) / 2.
    assert median_of_sums((1.0, 2.0, 3.0), (0.0, 10.0)) == pytest.approx(7.0)
    assert median_of_sums((1.0, 2.0, 3.0), (5.0,)) == pytest.approx(7.0)
    # A long tail lifts the median of the sum above the sum of the medians (2 + 1 = 3).
    assert median_of_sums((1.0, 2.0, 3.0), (1.0, 1.0, 9.0)) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="samples"):
        median_of_sums((), (1.0,))


def test_relative_spread_is_over_the_median() -> None:
    assert relative_spread([2.0, 4.0, 8.0]) == pytest.approx((0.5, 1.0, 2.0))
    assert relative_spread([1.0, 3.0]) == pytest.approx((0.5, 1.5))
    assert relative_spread([]) == ()
    assert relative_spread([0.0, 0.0, 1.0]) == ()


def test_ddp_overhead_is_the_median_paired_difference() -> None:
    plain = [1.0, 1.0, 2.0, 1.0]
    ddp = [1.2, 1.3, 2.1, 5.0]  # differences 0.2 0.3 0.1 4.0 -> median 0.25
    assert ddp_overhead(plain, ddp) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="paired"):
        ddp_overhead([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="paired"):
        ddp_overhead([], [])


def test_ddp_overhead_lengthens_a_step_on_more_than_one_worker_only() -> None:
    base, with_ddp = _model(), _model(ddp_overhead=0.005)

    assert with_ddp.step_seconds(1, 100) == pytest.approx(0.11)
    assert with_ddp.step_seconds(2, 100) == pytest.approx(0.11 + 0.005 + 0.01)
    assert base.step_seconds(2, 100) == pytest.approx(0.12)
    # Not scaled by the device's speed: it is host-side work.
    assert with_ddp.with_(speed=2.0).step_seconds(2, 100) == pytest.approx(0.055 + 0.005 + 0.01)


def test_spreads_give_the_median_step_of_the_sum() -> None:
    # Compute 0.11 s x (1, 1, 1.2); all-reduce 0.01 s x (0.5, 1, 4), plus 0.005 s of DDP.
    m = _model(ddp_overhead=0.005, compute_spread=(1.0, 1.0, 1.2), comm_spread=(0.5, 1.0, 4.0))
    computes = (0.11, 0.11, 0.132)
    rest = (0.01, 0.015, 0.045)
    sums = sorted(c + r for c in computes for r in rest)

    assert m.step_seconds(2, 100) == pytest.approx(sums[4])
    assert m.step_seconds(2, 100) > _model(ddp_overhead=0.005).step_seconds(2, 100)
    assert m.step_seconds(1, 100) == pytest.approx(0.11)  # one worker: no spread applied


def test_on_this_node_clamps_a_negative_overhead_and_spreads_the_probe() -> None:
    two = ProbeResult(
        2, 64, {}, 0.1, ddp_overhead=-1e-4, local_times=(1.0, 2.0, 3.0), allreduce_times=(1.0, 4.0)
    )

    inputs = on_this_node(two)

    assert inputs["ddp_overhead"] == 0.0
    assert inputs["compute_spread"] == pytest.approx((0.5, 1.0, 1.5))
    assert inputs["comm_spread"] == pytest.approx((0.4, 1.6))


def test_work_share_is_back_to_back_over_in_step_all_reduce() -> None:
    step = StepProfile(1e-3, 0.0, 0.5, 20 * MB)
    fitted = Network(bandwidth=1e9, latency=0.0)  # 20 ms on 2 workers
    in_step = Network(bandwidth=0.25e9, latency=0.0)  # 80 ms inside the steps

    assert work_share(step, fitted, in_step) == pytest.approx(0.25)
    assert work_share(step, in_step, fitted) == 1.0  # capped


def test_on_a_cpu_node_only_the_waiting_share_beside_backward_is_hidden() -> None:
    # compute(100) = 0.1 s, backward 0.05 s; 20 MB at 1 GB/s: a 0.02 s all-reduce.
    step = StepProfile(1e-3, 0.0, 0.5, 20 * MB)
    net = Network(bandwidth=1e9, latency=0.0)

    # Half the all-reduce ran beside backward, three quarters of it waiting: 0.0075 s of the
    # backward's 0.05 s hide it.
    overlap, source = measured_overlap_share(step, net, 0.5, 100, 1.0, 1.0, True, 0.25)
    assert overlap == pytest.approx(0.0075 / 0.05)
    assert source.startswith("measured: 50% ")
    # All of it working: nothing hidden (the rule before the waiting share was measured).
    overlap, source = measured_overlap_share(step, net, 0.5, 100, 1.0, 1.0, True, 1.0)
    assert (overlap, source.split(":")[0]) == (0.0, "none")


def test_the_probe_summary_takes_the_slowest_worker_and_pools_ddp_pairs() -> None:
    from engage.train.scaling.netprobe import summarise

    def worker(local: list[float], bare: list[float], alone: list[float]) -> dict:
        return {
            "alone": alone,
            "local": local,
            "bare": bare,
            "ddp": [x + 1.0 for x in local],
            "span": [0.5, 0.5, 2.0],
            "comm": {"allreduce_seconds": 0.5},
        }

    timings = [{4: [0.1, 0.2, 0.3]}, {4: [0.2, 0.2, 0.2]}]
    steps = [worker([1.0, 1.0, 1.0], [1.1, 1.1, 1.1], [0.9] * 3), worker([2.0] * 3, [2.3] * 3, [])]

    two = summarise(2, 64, timings, steps)

    assert two.local_seconds == 2.0  # the slower worker
    assert two.local_times == (2.0, 2.0, 2.0)
    assert two.alone_seconds == 0.9  # rank 0's
    assert two.ddp_overhead == pytest.approx(0.2)  # median of 0.1 x3 and 0.3 x3
    assert two.allreduce_times == (0.5, 0.5, 2.0)
    assert two.allreduce == {4: 0.2}
