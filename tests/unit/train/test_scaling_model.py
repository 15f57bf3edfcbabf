"""The analytic scaling model: the ring all-reduce formula by hand, efficiency, the network fit."""

from __future__ import annotations

import itertools

import pytest

from engage.train.scaling.calibrate import fit_step, powersgd_ratio
from engage.train.scaling.model import (
    Network,
    ScalingModel,
    StepProfile,
    ring_allreduce_seconds,
    straggler_factor,
)
from engage.train.scaling.netprobe import fit_network

MB = 1e6


def _model(**kw: float) -> ScalingModel:
    step = StepProfile(
        seconds_per_sample=1e-3, step_overhead=0.01, backward_fraction=0.5, grad_bytes=100 * MB
    )
    return ScalingModel(step, Network(bandwidth=1e9, latency=1e-5), **kw)


def test_ring_allreduce_by_hand() -> None:
    # 4 workers, 100 MB at 1 GB/s, 10 µs per hop, 2 buckets:
    # 2*3/4 * 0.1 s = 0.15 s, plus 2 buckets * 2*3 hops * 10 µs = 120 µs.
    assert ring_allreduce_seconds(4, 100 * MB, 1e9, 1e-5, buckets=2) == pytest.approx(0.15012)
    assert ring_allreduce_seconds(1, 100 * MB, 1e9, 1e-5) == 0.0


def test_ring_allreduce_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="workers"):
        ring_allreduce_seconds(0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="bandwidth"):
        ring_allreduce_seconds(2, 1.0, 0.0, 0.0)


def test_step_time_by_hand() -> None:
    m = _model(overlap=1.0)
    # compute(100) = 0.01 + 0.1 = 0.11 s; backward 0.055 s hides part of the all-reduce.
    # comm(2): 100 MB / 1 GB/s = 0.1 s + 4 buckets (100 MB / 25 MiB) * 2 hops * 10 µs.
    comm = 0.1 + 4 * 2 * 1e-5
    assert m.comm_seconds(2) == pytest.approx(comm)
    assert m.step_seconds(2, 100) == pytest.approx(0.11 + comm - 0.055)
    assert m.step_seconds(1, 100) == pytest.approx(0.11)


def test_efficiency_is_one_on_one_worker_and_falls_with_workers() -> None:
    m = _model(overlap=0.5)
    effs = [m.efficiency(n, 64) for n in (1, 2, 4, 8, 16, 64, 256)]

    assert effs[0] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(effs))
    assert effs[-1] < 0.9


def test_full_overlap_hides_a_small_all_reduce() -> None:
    m = _model(overlap=1.0).with_(compression=0.01)

    assert m.efficiency(8, 64) == pytest.approx(1.0)


def test_compression_and_speed_move_efficiency_the_expected_way() -> None:
    m = _model(overlap=0.0)

    assert m.with_(compression=0.5).efficiency(16, 64) > m.efficiency(16, 64)
    # A faster device leaves the all-reduce a larger share of the step.
    assert m.with_(speed=10.0).efficiency(16, 64) < m.efficiency(16, 64)


def test_strong_scaling_splits_the_global_batch() -> None:
    m = _model(overlap=0.0)

    assert m.per_worker_batch(4, 256, "strong") == 64
    assert m.per_worker_batch(4, 256, "weak") == 256
    # Each worker's share shrinks, so the fixed costs weigh more than at a fixed per-worker batch.
    assert m.efficiency(8, 256, "strong") < m.efficiency(8, 256, "weak")


def test_fit_network_recovers_bandwidth_and_latency() -> None:
    bw, alpha = 2e9, 50e-6
    timings = {s: ring_allreduce_seconds(2, s, bw, alpha) for s in (4096, 65536, 1 << 20, 1 << 22)}

    net = fit_network(2, timings)

    assert net.bandwidth == pytest.approx(bw, rel=1e-6)
    assert net.latency == pytest.approx(alpha, rel=1e-6)


def test_fit_network_needs_two_workers_and_sizes() -> None:
    with pytest.raises(ValueError, match="2 workers"):
        fit_network(1, {1: 1.0, 2: 2.0})


def test_fit_step_separates_overhead_from_per_sample_cost() -> None:
    step = fit_step((128, 0.002 + 128e-5), (32, 0.002 + 32e-5), 0.5, 400.0)

    assert step.seconds_per_sample == pytest.approx(1e-5)
    assert step.step_overhead == pytest.approx(0.002)


def test_fit_step_without_a_positive_slope_charges_everything_per_sample() -> None:
    step = fit_step((128, 0.001), (32, 0.002), 0.5, 400.0)

    assert step.step_overhead == 0.0
    assert step.seconds_per_sample == pytest.approx(0.001 / 128)


def test_powersgd_ratio_by_hand() -> None:
    # A 100x50 matrix at rank 2 sends 2*(100+50) = 300 of 5000 values; a 50-vector all of it.
    assert powersgd_ratio(((100, 50), (50,)), 2) == pytest.approx((300 + 50) / (5000 + 50))
    # A rank so high that compressing would send more: sent whole.
    assert powersgd_ratio(((4, 4),), 8) == 1.0


def test_straggler_factor_by_hand() -> None:
    # Step times 0.5 and 1.5 (mean 1): the slower of two draws is 1.5 with probability 3/4.
    assert straggler_factor((0.5, 1.5), 2) == pytest.approx(0.5 / 4 + 1.5 * 3 / 4)
    assert straggler_factor((0.5, 1.5), 1) == 1.0
    assert straggler_factor((1.0, 1.0, 1.0), 64) == pytest.approx(1.0)
    assert straggler_factor((), 8) == 1.0


def test_stragglers_slow_a_synchronous_step() -> None:
    m = _model(overlap=1.0).with_(compression=0.0001)

    assert m.with_(jitter=(0.5, 1.5)).efficiency(2, 64) < m.efficiency(2, 64)


def test_node_contention_lengthens_the_compute_of_more_than_one_worker() -> None:
    m = _model(overlap=1.0, contention=1.5)
    # compute(100) = 0.11 s alone, 0.165 s beside another worker; backward 0.0825 s hides part.
    comm = 0.1 + 4 * 2 * 1e-5

    assert m.step_seconds(1, 100) == pytest.approx(0.11)
    assert m.step_seconds(2, 100) == pytest.approx(0.165 + comm - 0.0825)
    assert m.efficiency(2, 100) < _model(overlap=1.0).efficiency(2, 100)


def test_contention_is_the_shared_step_over_the_lone_one() -> None:
    from engage.train.scaling.netprobe import ProbeResult, contention

    def probe(workers: int, local: float) -> ProbeResult:
        return ProbeResult(workers, 64, {}, 0.1, local_seconds=local)

    assert contention(probe(1, 0.04), probe(2, 0.07)) == pytest.approx(1.75)
    assert contention(probe(1, 0.0), probe(2, 0.07)) == 1.0  # not measured


def test_a_measured_hidden_share_of_all_reduce_becomes_a_share_of_backward() -> None:
    from engage.train.scaling.planner import backward_share

    # compute(100) = 0.1 s, backward 0.05 s; 20 MB at 1 GB/s on 2 workers: 0.02 s all-reduce.
    step = StepProfile(1e-3, 0.0, 0.5, 20 * MB)
    net = Network(bandwidth=1e9, latency=0.0)

    assert backward_share(step, net, 0.5, 100) == pytest.approx(0.01 / 0.05)
    assert backward_share(step, net, 0.5, 100, contention=2.0) == pytest.approx(0.01 / 0.1)
    assert backward_share(step, Network(1e8, 0.0), 1.0, 100) == 1.0  # capped at all of it


def test_on_a_busy_cpu_node_an_all_reduce_beside_backward_is_not_hidden() -> None:
    from engage.train.scaling.planner import measured_overlap_share

    step = StepProfile(1e-3, 0.0, 0.5, 20 * MB)
    net = Network(bandwidth=1e9, latency=0.0)

    overlap, source = measured_overlap_share(step, net, 0.5, 100, 1.0, 1.0, cpu_node=True)
    assert (overlap, source.split(":")[0]) == (0.0, "none")
    assert measured_overlap_share(step, net, 0.5, 100, 1.0, 1.0, cpu_node=False) == (
        pytest.approx(0.2),
        "measured",
    )
