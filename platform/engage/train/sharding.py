"""Sharded data-parallel training (FSDP): wrap a model, gather and load its full state, evaluate.

``train.strategy: fsdp`` shards each worker's parameters, gradients and optimiser state over
the workers (ZeRO-3), with torch's per-parameter FSDP (``fully_shard``, "FSDP2"). That one runs
on CPU with gloo as well as on GPUs with NCCL; torch's older ``FullyShardedDataParallel`` and
Ray Train's ``prepare_model(parallel_strategy="fsdp")`` (which wraps with it) refuse a CPU
("FSDP needs a non-CPU accelerator device") or crash on it (SIGSEGV with ``device_id=cpu``).

Each layer block is a shard unit (an item of an ``nn.ModuleList``, a child with parameters of
an ``nn.Sequential``, a recurrent layer), so only one block's parameters are gathered at a
time, and the root holds the rest. Parameters stay the module's own attributes (as
``DTensor``\\ s) under their own names, so the state dict keys are those of the plain model.

Checkpoints hold the *full* state, in the format of the plain model and a plain optimiser
(:func:`gather_state`, every rank takes part; rank 0 writes it), so a checkpoint of a sharded
run loads into the plain module for evaluation, export and registration, and back into a
sharded one on resume (:func:`load_state`, each rank cuts its own shard, no communication).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def shard_units(module: nn.Module) -> Iterator[nn.Module]:
    """The blocks under ``module`` that become their own shard unit: each child with
    parameters of an ``nn.Sequential`` or ``nn.ModuleList`` (searched inside when it holds a
    stack of its own) and each recurrent layer. A unit's forward must be called as a module:
    a layer whose parent reads its weights directly (an attention's ``out_proj``) is left to
    the parent."""
    for child in module.children():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and _has_params(child):
            if any(isinstance(m, (nn.ModuleList, nn.Sequential)) for m in child.modules()):
                yield from shard_units(child)  # a stack inside: shard its blocks
            else:
                yield child
        elif isinstance(child, nn.RNNBase):
            yield child
        else:
            yield from shard_units(child)


def wrap_fsdp(model: nn.Module) -> nn.Module:
    """Shard ``model`` over the default process group in place (each block, then the root).

    The process group must be initialised (Ray Train does it) and the model already on its
    device. Returns ``model`` itself: FSDP2 changes its class, not its attributes.
    """
    from torch.distributed.fsdp import fully_shard

    for unit in list(shard_units(model)):
        fully_shard(unit)
    fully_shard(model)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is an FSDP module (its parameters are ``DTensor`` shards)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _map_tensors(value: Any, fn: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor in its dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value)
    return value


def _full(t: torch.Tensor) -> torch.Tensor:
    """A plain CPU tensor of the whole of ``t`` (an all-gather when ``t`` is a shard)."""
    from torch.distributed.tensor import DTensor

    # A copy of a plain tensor too (Adam's step counters): the state must not move on with
    # the live optimiser once gathered.
    whole = t.full_tensor() if isinstance(t, DTensor) else t.detach().clone()
    return whole.detach().cpu()


def gather_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The full model and optimiser state dicts of a sharded ``model``, as the plain model and
    a plain optimiser over it would give them (plain CPU tensors, integer parameter ids).

    A collective: every rank must call it, in step; each gets the full state.
    """
    return _map_tensors(model.state_dict(), _full), _map_tensors(optimizer.state_dict(), _full)


def _shard_like(full: Any, template: Any) -> Any:
    """``full`` (plain tensors) cut into the shards ``template`` holds where it holds DTensors."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(template, DTensor):
        local = full.to(device=template.device, dtype=template.dtype)
        # src_data_rank=None: every rank read the same checkpoint, so none needs to send.
        return distribute_tensor(
            local, template.device_mesh, template.placements, src_data_rank=None
        )
    if isinstance(full, dict) and isinstance(template, dict):
        return {k: _shard_like(v, template[k]) if k in template else v for k, v in full.items()}
    return full


def load_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
) -> None:
    """Load full state dicts (from :func:`gather_state` or a plain run) into a sharded model
    and its optimiser; each rank keeps its shard.

    Each saved optimiser moment is cut like its parameter (the optimiser's own state, when it
    has any yet, is the layout to follow).

    Raises
    ------
    RuntimeError
        If the state does not match the model (missing or unexpected keys, other shapes).
    """
    current = model.state_dict()
    model.load_state_dict(_shard_like(model_state, current))
    template = optimizer.state_dict()["state"]
    if not template:
        template = {
            i: {"exp_avg": p, "exp_avg_sq": p, "momentum_buffer": p}
            for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])
        }
    shards = {i: _shard_like(s, template.get(i, {})) for i, s in optim_state["state"].items()}
    optimizer.load_state_dict({**optim_state, "state": shards})


@contextlib.contextmanager
def evaluation(model: nn.Module) -> Iterator[None]:
    """Gather a sharded ``model``'s parameters once for evaluation, and shard them after.

    Inside, forward passes run no collective: each rank may evaluate a different number of
    batches (the validation shards differ by a row). Every rank must enter and leave it.
    """
    if not is_sharded(model):
        yield
        return
    units = [m for m in model.modules() if is_sharded(m)]
    for unit in units:
        unit.set_reshard_after_forward(False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True)


def prepare(model: nn.Module, strategy: str, ddp_kwargs: dict[str, Any]) -> nn.Module:
    """Ray Train's ``prepare_model`` for ``strategy``: DDP (with ``ddp_kwargs``), or the model
    moved to the worker's device and sharded with :func:`wrap_fsdp` when more than one worker
    trains (one worker has nothing to shard over, as DDP leaves one worker unwrapped).
    """
    import ray.train
    import ray.train.torch

    if strategy != "fsdp" or ray.train.get_context().get_world_size() < 2:
        return ray.train.torch.prepare_model(model, parallel_strategy_kwargs=ddp_kwargs or None)
    return wrap_fsdp(ray.train.torch.prepare_model(model, parallel_strategy=None))
