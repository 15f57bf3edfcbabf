"""``train.strategy: auto``: the decision (a pure function of the estimate and the memory), the
spec the workers then run (same global batch), and the same answer from ``engage plan``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engage.errors import TrainingError
from engage.spec.models import CommSpec, ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob
from engage.train.scaling import strategy
from engage.train.scaling.inputs import resolve_device
from engage.train.scaling.memory import MemoryEstimate
from engage.train.scaling.planner import auto_choice
from engage.train.scaling.strategy import apply_choice, decide, plan_for, resolve

GIB = 2**30
# 4 GiB of parameters: with gradients and Adam's two moments 16 GiB before activations.
STATE = dict(params=4 * GIB, grads=4 * GIB, optimizer=8 * GIB)


def _est(activations_gib: float, batch: int = 64) -> MemoryEstimate:
    return MemoryEstimate(**STATE, activations=int(activations_gib * GIB), batch=batch)


@pytest.mark.parametrize(
    ("activations_gib", "strategy_", "ckpt", "batch", "accum"),
    [
        (1, "ddp", False, 512, 1),
        (25, "ddp", True, 512, 1),  # checkpointing keeps a third: 16 + 8.3 GiB fit in 36
        (90, "fsdp", True, 512, 1),
        (300, "fsdp", True, 128, 4),  # 21 samples per worker fit; 16 divides the 64
    ],
)
def test_the_choice_becomes_spec_values_with_the_same_global_batch(
    activations_gib: float, strategy_: str, ckpt: bool, batch: int, accum: int
) -> None:
    train = TrainSpec(num_workers=8, batch_size=512, strategy="auto")

    choice = decide(_est(activations_gib), train, 40 * GIB, "test")
    run = apply_choice(train, choice)

    assert (choice.strategy, choice.activation_checkpointing) == (strategy_, ckpt)
    assert (run.strategy, run.activation_checkpointing) == (strategy_, ckpt)
    assert (run.batch_size, run.grad_accumulation) == (batch, accum)
    assert run.batch_size * run.grad_accumulation == 512  # the global batch per optimiser step


def test_micro_batches_divide_the_batch_and_keep_the_spec_accumulation() -> None:
    train = TrainSpec(num_workers=2, batch_size=96, grad_accumulation=3, strategy="auto")
    # 48 per worker. FSDP with checkpointing: 2 GiB of state, 1/6 GiB of activations per
    # sample; 5.4 GiB usable leave room for 20 samples: 48 = 3 steps of 16, not 20 + 20 + 8.
    est = MemoryEstimate(GIB, GIB, 2 * GIB, 24 * GIB, batch=48)

    choice = decide(est, train, 6 * GIB)

    assert (choice.memory.micro_batch, choice.memory.accumulation) == (16, 3)
    assert (choice.batch_size, choice.grad_accumulation) == (32, 9)


def test_a_model_without_layer_stacks_skips_checkpointing() -> None:
    train = TrainSpec(num_workers=8, batch_size=512, strategy="auto")

    choice = decide(_est(25), train, 40 * GIB, checkpointable=False)

    assert (choice.strategy, choice.activation_checkpointing) == ("fsdp", False)


def test_checkpointing_the_spec_asks_for_stays_on() -> None:
    train = TrainSpec(num_workers=2, strategy="auto", activation_checkpointing=True)

    assert decide(_est(1), train, 40 * GIB).activation_checkpointing


def test_nothing_fits_is_one_clear_error() -> None:
    train = TrainSpec(num_workers=1, batch_size=64, strategy="auto")

    with pytest.raises(TrainingError, match=r"one worker needs .* GiB .* may use 9.00 GiB \(gpu\)"):
        decide(_est(1), train, 10 * GIB, "gpu")


def _job(strategy_: str = "auto", **train: object) -> TrainJob:
    spec = TrainSpec(num_workers=2, batch_size=64, strategy=strategy_, **train)
    return TrainJob(
        spec, ModelSpec(name="mlp"), "classification", ModelShape(8, 3, 2), None, None, ""
    )


def test_resolve_applies_auto_and_leaves_a_named_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 KiB per worker: the quickstart-sized MLP does not fit replicated, it fits sharded.
    monkeypatch.setattr(strategy, "worker_capacity", lambda train: (60_000, "test"))
    named = _job("ddp")

    job, choice = resolve(_job())

    assert resolve(named) == (named, None)
    assert choice is not None
    assert job.train.strategy == choice.strategy != "auto"
    assert job.train.batch_size * job.train.grad_accumulation == 64
    tags = choice.tags()
    assert tags["engage.strategy"] == choice.strategy
    assert int(tags["engage.memory.estimate_bytes"]) == choice.estimate.total
    assert tags["engage.memory.capacity_source"] == "test"


def test_plan_reports_what_the_trainer_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategy, "worker_capacity", lambda train: (60_000, "test"))
    monkeypatch.setattr("engage.train.scaling.planner.worker_capacity", strategy.worker_capacity)
    job = _job()
    trainer = plan_for(job)

    planned, error = auto_choice(job, trainer.estimate, resolve_device("cpu")[0])

    assert error == ""
    assert planned == trainer


def test_cpu_capacity_is_a_share_of_host_memory_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategy, "host_memory_bytes", lambda: 64 * GIB)

    cap, source = strategy.worker_capacity(TrainSpec(num_workers=4))

    assert cap == 64 * GIB * strategy.HOST_MEMORY_SHARE / 4
    assert "64.0 GiB host memory / 4 worker(s)" in source


def test_gpu_capacity_is_the_device_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategy, "_gpu_memory", lambda: (80 * GIB, "H100"))
    train = TrainSpec(use_gpu=True, resources_per_worker={"CPU": 1, "GPU": 0.5})

    assert strategy.worker_capacity(train) == (40 * GIB, "H100, 80 GiB x 0.5")


def test_fsdp_refuses_a_ddp_compression_hook() -> None:
    with pytest.raises(
        ValidationError, match=r"comm\.compression fp16 is a DDP communication hook"
    ):
        TrainSpec(strategy="fsdp", comm=CommSpec(compression="fp16"))
    TrainSpec(strategy="fsdp", comm=CommSpec(bucket_cap_mb=5))  # no hook: accepted
