"""Activation checkpointing of a model's layer stacks, when the spec asks for it.

``train.activation_checkpointing`` trades compute for memory: the forward pass keeps only
the input of each block, and the backward pass runs each block's forward again
(``torch.utils.checkpoint``, non-reentrant, with the RNG state restored so that dropout
draws the same masks) to get the activations it needs. That is what ``engage plan`` counts
as "ddp + activation checkpointing".

Blocks are found generically, so any builder's model works if it is made of layer stacks:

- an ``nn.Sequential`` is cut into blocks, each starting at a child with parameters (a
  Linear or a Conv with the activation and dropout after it: the MLP and CNN builders);
- each item of an ``nn.ModuleList`` is one block (transformer-style stacks);
- a recurrent layer (``nn.RNN``, ``nn.GRU``, ``nn.LSTM``) is one block: its gates at every
  time step are recomputed from its input.

The model's modules are not wrapped: each chosen module's ``forward`` is replaced on the
instance, so parameter names, state dicts and checkpoints stay exactly as without it, and
evaluation (``model.eval()`` or ``torch.no_grad()``) runs the plain forward.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from engage.errors import SpecError

FIELD = "train.activation_checkpointing"


def _recomputing(module: nn.Module) -> bool:
    """Checkpoint only where a backward pass will follow."""
    return module.training and torch.is_grad_enabled()


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def blocks(sequential: nn.Sequential) -> list[list[nn.Module]]:
    """The children of ``sequential`` cut into blocks, each starting at a child with parameters.

    Parameter-free children before the first such child (a Flatten) join the first block.
    """
    out: list[list[nn.Module]] = []
    for child in sequential:
        if not out or (_has_params(child) and any(_has_params(m) for m in out[-1])):
            out.append([child])
        else:
            out[-1].append(child)
    return out


def _chain(modules: list[nn.Module], x: Any) -> Any:
    for module in modules:
        x = module(x)
    return x


def _sequential_forward(self: nn.Sequential, x: Any) -> Any:
    """Run each block under ``checkpoint`` while training (the instance's new ``forward``)."""
    if not _recomputing(self):
        return nn.Sequential.forward(self, x)
    for block in blocks(self):
        x = checkpoint(functools.partial(_chain, block), x, use_reentrant=False)
    return x


def _whole_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """Run the module's own forward under ``checkpoint`` while training."""
    forward = type(self).forward
    if not _recomputing(self):
        return forward(self, *args, **kwargs)
    return checkpoint(forward, self, *args, use_reentrant=False, **kwargs)


def _targets(module: nn.Module) -> Iterator[tuple[nn.Module, Any]]:
    """The modules to checkpoint under ``module`` and the forward each gets (outermost first)."""
    if isinstance(module, nn.Sequential) and len(module) > 1 and _has_params(module):
        yield module, _sequential_forward
    elif isinstance(module, nn.ModuleList):
        for item in module:
            if _has_params(item):
                yield item, _whole_forward
    elif isinstance(module, nn.RNNBase):
        yield module, _whole_forward
    else:
        for child in module.children():
            yield from _targets(child)


def apply_activation_checkpointing(model: nn.Module, name: str = "model") -> int:
    """Make ``model`` recompute its blocks' activations in backward; returns the modules changed.

    Parameters
    ----------
    model : nn.Module
        The model as its builder made it (before DDP wraps it); changed in place.
    name : str
        The model's name in the spec, for the error message.

    Raises
    ------
    SpecError
        If the model has no layer stack to checkpoint (no ``nn.Sequential`` of layers with
        parameters, no ``nn.ModuleList``, no recurrent layer).
    """
    targets = list(_targets(model))
    if not targets:
        raise SpecError(
            f"{FIELD}: model {name!r} ({type(model).__name__}) has no layer stack to "
            "checkpoint (an nn.Sequential of layers, an nn.ModuleList of blocks or a "
            "recurrent layer)",
            hint=f"set {FIELD}: false, or build the model's layers as an nn.Sequential",
        )
    for module, forward in targets:
        # A bound method on the instance, not a closure: deepcopy and pickle copy it with
        # the module (a closure would keep calling the original module).
        module.forward = types.MethodType(forward, module)
    return len(targets)
