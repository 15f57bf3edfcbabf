"""FSDP on CPU: two gloo processes train the same steps as DDP, and its full state round-trips.

The loop Ray Train runs (:func:`make_worker`, :func:`train_epoch`) in two forked processes on
loopback, without Ray: each trains the same job under DDP and under FSDP (with activation
checkpointing, which the memory plan combines with it), gathers the FSDP run's full state,
loads it into the plain model and into a fresh sharded worker, and trains one more epoch on
both sharded workers. The validation shards differ by a row, so the ranks evaluate unequal
batch counts (what :func:`engage.train.sharding.evaluation` allows). With gradient
accumulation, FSDP reduces gradients once per optimiser step, as DDP's ``no_sync`` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import ModelSpec, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, build_model, make_optimizer, make_worker, train_epoch
from engage.train.sharding import gather_state, is_sharded, load_state, shard_units, wrap_fsdp

WORLD = 2


class _Drop:
    """A transport that keeps nothing: the test reads the returned metrics."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(129, 6, 3)).astype(np.float32)
    y = (x[:, -1, 0] + x[:, 0, 1] > 0).astype(np.int64)
    # 64 training rows; 65 validation rows: shards of 33 and 32, evaluated in batches of
    # 4 x 8 = 32 rows, so rank 0 runs 2 batches and rank 1 one.
    return {"train_x": x[:64], "train_y": y[:64], "val_x": x[64:], "val_y": y[64:]}


def _job(strategy: str) -> TrainJob:
    spec = TrainSpec(
        num_workers=WORLD,
        batch_size=16,
        epochs=2,
        seed=5,
        learning_rate=0.01,
        strategy=strategy,
        activation_checkpointing=strategy == "fsdp",
    )
    model = ModelSpec(name="mlp", params={"hidden": 32, "layers": 2})
    return TrainJob(spec, model, "classification", ModelShape(6, 3, 2), None, None, "")


def _train(job: TrainJob, rank: int, prepare, epochs: range):  # type: ignore[no-untyped-def]
    w = make_worker(job, _data(), Reporter(_Drop()), rank=rank, world=WORLD, prepare=prepare)
    sampler = ResourceSampler("cpu", every_s=3600.0)
    return w, [train_epoch(w, e, sampler) for e in epochs]


def _accumulated(rank: int) -> dict[str, float]:
    """One epoch of 4 micro-batches per worker, 2 per optimiser step, under FSDP and DDP:
    how many gradient reductions FSDP ran, and its weights against DDP's."""
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as group

    reductions = 0
    reduce = group.foreach_reduce

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal reductions
        reductions += 1
        return reduce(*args, **kwargs)

    def job(strategy: str) -> TrainJob:
        plain = _job(strategy)
        train = plain.train.model_copy(
            update={"grad_accumulation": 2, "activation_checkpointing": False}
        )
        return dataclasses.replace(plain, train=train)

    group.foreach_reduce = counted
    try:
        fsdp, _ = _train(job("fsdp"), rank, wrap_fsdp, range(1, 2))
    finally:
        group.foreach_reduce = reduce
    ddp, _ = _train(job("ddp"), rank, nn.parallel.DistributedDataParallel, range(1, 2))
    state = gather_state(fsdp.model, fsdp.optimizer)[0]
    diff = max((state[k] - v).abs().max().item() for k, v in ddp.model.module.state_dict().items())
    return {"accum_reductions": reductions, "accum_diff_vs_ddp": diff}


def _run(rank: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, init_method=f"file://{store}")
    ddp, ddp_metrics = _train(_job("ddp"), rank, nn.parallel.DistributedDataParallel, range(1, 2))
    fsdp, fsdp_metrics = _train(_job("fsdp"), rank, wrap_fsdp, range(1, 2))
    model_sd, optim_sd = gather_state(fsdp.model, fsdp.optimizer)
    plain = build_model(_job("fsdp"))
    plain.load_state_dict(model_sd)  # strict: the plain module's own keys
    resumed, _ = _train(_job("fsdp"), rank, wrap_fsdp, range(0))
    load_state(resumed.model, resumed.optimizer, model_sd, optim_sd)
    sampler = ResourceSampler("cpu", every_s=3600.0)
    rng = torch.get_rng_state()  # dropout draws: a restored checkpoint restores them too
    after_resume = []
    for w in (fsdp, resumed):
        torch.set_rng_state(rng)
        after_resume.append(train_epoch(w, 2, sampler)["train_loss"])
    after = [gather_state(w.model, w.optimizer)[0] for w in (fsdp, resumed)]
    ddp_sd = ddp.model.module.state_dict()
    accumulated = _accumulated(rank)
    if rank == 0:
        result = {
            "sharded": is_sharded(fsdp.model),
            "units": len(list(shard_units(build_model(_job("fsdp"))))),
            "max_diff_vs_ddp": max((model_sd[k] - v).abs().max().item() for k, v in ddp_sd.items()),
            "loss_diff": max(
                abs(a["train_loss"] - b["train_loss"])
                for a, b in zip(ddp_metrics, fsdp_metrics, strict=True)
            ),
            "val_diff": abs(ddp_metrics[-1]["val_loss"] - fsdp_metrics[-1]["val_loss"]),
            "optim_keys": sorted(optim_sd["state"]) == list(range(len(list(plain.parameters())))),
            "after_resume_losses": after_resume,
            "resume_diff": max((after[0][k] - after[1][k]).abs().max().item() for k in after[0]),
            "plain_equal": all(torch.equal(plain.state_dict()[k], v) for k, v in model_sd.items()),
            **accumulated,
        }
        Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()


def test_fsdp_trains_like_ddp_and_its_full_state_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    # torch's first optimiser takes seconds to import what it needs: once here, not per child.
    make_optimizer(_job("ddp").train, [nn.Parameter(torch.zeros(1))])
    env = dict(os.environ)
    try:
        os.environ["OMP_NUM_THREADS"] = "1"
        mp.start_processes(
            _run, args=(str(tmp_path / "store"), str(out)), nprocs=WORLD, start_method="fork"
        )
    finally:
        os.environ.clear()
        os.environ.update(env)
    r = json.loads(out.read_text())

    assert r["sharded"]
    assert r["units"] == 3
    assert r["max_diff_vs_ddp"] < 1e-5
    assert r["loss_diff"] < 1e-5
    assert r["val_diff"] < 1e-5
    assert r["optim_keys"]
    assert r["plain_equal"]
    assert r["after_resume_losses"][0] == r["after_resume_losses"][1]
    assert r["resume_diff"] == 0.0
    # grad_accumulation 2: FSDP reduces its 3 units' gradients once per optimiser step (2
    # steps), not at every micro-batch (4), and trains like DDP with no_sync.
    assert r["accum_reductions"] == 3 * 2
    assert r["accum_diff_vs_ddp"] < 1e-5


def test_shard_units_are_the_layer_blocks() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    stack = nn.Sequential(nn.Linear(3, 8), nn.TransformerEncoder(layer, 2))
    gru = build_model(dataclasses.replace(_job("ddp"), model=ModelSpec(name="gru")))

    assert [type(u).__name__ for u in shard_units(stack)] == [
        "Linear",
        "TransformerEncoderLayer",
        "TransformerEncoderLayer",
    ]
    assert [type(u).__name__ for u in shard_units(gru)] == ["GRU"]
