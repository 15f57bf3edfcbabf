"""The plan's decisions: the cheapest configuration for a deadline, the remedy that pays, the
memory strategy; and the SVG plot is well-formed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from engage.train.scaling.memory import MemoryEstimate
from engage.train.scaling.model import Network, ScalingModel, StepProfile
from engage.train.scaling.plan import Economics, cheapest, choose_memory, curve, make_plan, remedies
from engage.train.scaling.plot import plan_svg

GIB = 2**30


def _model(grad_mb: float = 100.0, overlap: float = 0.0) -> ScalingModel:
    step = StepProfile(1e-3, 0.0, 0.5, grad_mb * 1e6)
    return ScalingModel(step, Network(1.25e9, 5e-6), overlap=overlap)  # 10 Gb/s


def test_cheapest_meeting_the_deadline() -> None:
    m = _model(grad_mb=10)
    # 100 samples/step at 1 ms each: 1000 samples/s on one worker; 100k samples take 100 s.
    econ = Economics(epochs=1, samples=100_000, price=3600.0, deadline_s=40.0)

    rows = curve(m, [1, 2, 4, 8, 16], 100, "weak", econ)
    best = cheapest(rows)

    assert [r.meets_deadline for r in rows] == [False, False, True, True, True]
    # Efficiency falls with workers, so cost (workers x time) rises: the fewest that make it.
    assert best is not None
    assert best.workers == 4
    assert rows[0].cost == pytest.approx(100.0)  # 100 s at $1/s


def test_no_configuration_meets_an_impossible_deadline() -> None:
    econ = Economics(1, 1_000_000, 1.0, deadline_s=0.001)
    est = MemoryEstimate(1, 1, 2, 10, 100)

    plan = make_plan(_model(), [1, 2, 4], 100, "weak", econ, {1: 0.05}, est, GIB)

    assert plan.best is None
    assert "no configuration meets the deadline" in plan.reason
    assert plan.remedies_at == 4  # weighed at the largest worker count instead


def test_compression_pays_when_communication_bound() -> None:
    comm_bound = remedies(_model(grad_mb=400), 64, 100, "weak", {1: 0.05})
    compute_bound = remedies(_model(grad_mb=0.01, overlap=1.0), 64, 100, "weak", {1: 0.05})

    by_name = {r.name: r for r in comm_bound}
    assert by_name["fp16 compression"].pays
    assert by_name["PowerSGD rank 1"].gain > by_name["fp16 compression"].gain
    assert not any(r.pays for r in compute_bound)


@pytest.mark.parametrize(
    ("activations_gib", "workers", "strategy"),
    [
        (1, 8, "ddp"),
        (25, 8, "ddp + activation checkpointing"),
        (90, 8, "fsdp + activation checkpointing"),
        (300, 8, "fsdp + activation checkpointing, micro-batches"),
    ],
)
def test_memory_ladder(activations_gib: float, workers: int, strategy: str) -> None:
    # 4 GiB of parameters: with grads and Adam state 16 GiB before activations; 36 GiB usable.
    est = MemoryEstimate(4 * GIB, 4 * GIB, 8 * GIB, int(activations_gib * GIB), batch=64)

    choice = choose_memory(est, workers, capacity_bytes=40 * GIB)

    assert choice.strategy == strategy
    assert choice.fits
    assert choice.micro_batch * choice.accumulation >= 64


def test_fsdp_when_the_model_state_alone_is_too_big() -> None:
    est = MemoryEstimate(20 * GIB, 20 * GIB, 40 * GIB, GIB, batch=8)

    assert choose_memory(est, 8, 40 * GIB).strategy == "fsdp"
    assert not choose_memory(est, 1, 40 * GIB).fits  # one worker cannot shard


def test_plot_is_well_formed_svg() -> None:
    svg = plan_svg(
        "engage plan: <quickstart>",
        [1, 2, 4],
        {"predicted": [1.0, 0.9, 0.8], "ideal": [1.0, 1.0, 1.0]},
        {"cost": [1.0, 1.1, 1.3]},
        chosen=2,
    )

    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) == 3
    assert "&lt;quickstart&gt;" in svg


def test_remedies_are_weighed_where_there_is_traffic() -> None:
    econ = Economics(1, 1000, 1.0, deadline_s=None)  # one worker is cheapest: it sends nothing
    est = MemoryEstimate(1, 1, 2, 10, 100)

    plan = make_plan(_model(), [1, 2, 8], 100, "weak", econ, {1: 0.05}, est, GIB)

    assert plan.best is not None
    assert plan.best.workers == 1
    assert plan.remedies_at == 8
    assert any(r.pays for r in plan.remedies)


@pytest.mark.parametrize(
    ("strategy", "micro", "steps", "hint"),
    [
        ("ddp", 128, 1, ""),
        (
            "ddp + activation checkpointing",
            128,
            1,
            "set train.activation_checkpointing: true, or train.strategy: auto",
        ),
        (
            "fsdp + activation checkpointing, micro-batches",
            16,
            8,
            "set train.strategy: fsdp, train.activation_checkpointing: true, micro-batches of "
            "16 per worker (train.batch_size / workers) x train.grad_accumulation: 8, or "
            "train.strategy: auto",
        ),
    ],
)
def test_the_memory_choice_names_the_spec_fields_that_apply_it(
    strategy: str, micro: int, steps: int, hint: str
) -> None:
    from engage.cli.plan_output import memory_hint
    from engage.train.scaling.plan import MemoryChoice

    assert memory_hint(MemoryChoice(strategy, micro, steps, 1, 2)) == hint
