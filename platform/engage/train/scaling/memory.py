"""Per-worker memory of a training step: an estimate from the meta device, a measurement on CPU.

The estimate builds nothing real. It runs one forward pass of the model on the ``meta``
device (shapes only, no storage) and adds up the bytes autograd saves for the backward pass:
those activations, plus parameters, gradients and optimiser state (Adam and AdamW keep two
fp32 moments per parameter, SGD with momentum one), is what a DDP worker holds at its peak.

The measurement runs one real step on CPU under a dispatch mode that follows every tensor
storage an operator creates until it is freed, so the peak is the true peak of live tensor
bytes (what the allocator is asked for, without its own slack).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

OPTIMIZER_STATE_PER_PARAM = {"adam": 2, "adamw": 2, "sgd": 1}
"""fp32 values of optimiser state kept per parameter (SGD: momentum 0.9, as engage sets it)."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one worker holds at the peak of a step, by kind (``activations`` at batch size)."""

    params: int
    grads: int
    optimizer: int
    activations: int
    batch: int

    @property
    def total(self) -> int:
        """Everything at once: parameters, gradients, optimiser state and activations."""
        return self.params + self.grads + self.optimizer + self.activations

    def at_batch(self, batch: int) -> MemoryEstimate:
        """The same model at another per-worker batch (activations scale with the batch)."""
        act = round(self.activations * batch / self.batch)
        return MemoryEstimate(self.params, self.grads, self.optimizer, act, batch)

    def sharded(self, workers: int) -> MemoryEstimate:
        """Per worker under FSDP (ZeRO-3): parameters, gradients and state split ``workers`` ways."""

        def part(n: int) -> int:
            """One worker's share of ``n`` bytes, rounded up."""
            return -(-n // workers)

        return MemoryEstimate(
            part(self.params), part(self.grads), part(self.optimizer), self.activations, self.batch
        )


def _activation_bytes(model: nn.Module, example: torch.Tensor) -> int:
    """Bytes of the tensors autograd saves in one forward pass (parameters left out), plus
    the backward pass's working set: the gradients flowing into and out of the layer with
    the largest saved activation that needs a gradient (not the input), two buffers of its size.
    """
    params = {id(p) for p in model.parameters()}
    seen: set[int] = set()
    total = largest = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        """Count a tensor autograd saves (once per storage); keep it as it is."""
        nonlocal total, largest
        base = t._base if t._base is not None else t
        # A weight saved for backward (or its transpose) is counted with the parameters.
        if id(t) not in params and id(base) not in params and id(base) not in seen:
            seen.add(id(base))
            size = base.numel() * base.element_size()
            total += size
            largest = max(largest, size if t.requires_grad else 0)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(example)
    return total + 2 * largest


def estimate_memory(
    build: Callable[[], nn.Module], input_shape: tuple[int, ...], optimizer: str = "adam"
) -> MemoryEstimate:
    """Estimate one worker's peak memory for a batch of ``input_shape`` (batch first).

    ``build`` makes the model; it is called under the meta device, so a model of any size
    is estimated without allocating it.

    Raises
    ------
    KeyError
        If ``optimizer`` is not adam, adamw or sgd.
    """
    per_param = OPTIMIZER_STATE_PER_PARAM[optimizer]
    with torch.device("meta"):
        model = build()
        example = torch.empty(input_shape)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return MemoryEstimate(
        params=param_bytes,
        grads=grad_bytes,
        optimizer=per_param * grad_bytes,
        activations=_activation_bytes(model.train(), example),
        batch=input_shape[0],
    )


class _LiveBytes(TorchDispatchMode):
    """Follows each storage an operator creates until it is freed; keeps the peak of the sum.

    An operator's output that shares storage with one of its inputs (an in-place update, a
    view such as a transposed weight) is not a new allocation and is not counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self._seen or key in inputs or key == 0:
            return
        self._seen.add(key)
        size = storage.nbytes()
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, size)

    def _free(self, key: int, size: int) -> None:
        self.live -= size
        self._seen.discard(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self._track(t, inputs)
        return out


def measure_peak_memory(
    model: nn.Module,
    x: torch.Tensor,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
) -> int:
    """Measured peak bytes of one real training step on CPU, model and optimiser state included.

    A first step (unmeasured) creates the optimiser state, as in training after step one;
    the second is measured: the bytes held before it (parameters, optimiser state, the input
    batch, which a training loop allocates each step) plus the peak of what the step
    allocates (activations, gradients, temporaries).
    """
    model = copy.deepcopy(model)  # the caller's model and optimiser are not stepped
    optimizer = type(optimizer)(model.parameters(), **optimizer.defaults)

    def one_step() -> None:
        """One training step: zero the gradients, forward, backward, optimiser."""
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x)).backward()
        optimizer.step()

    one_step()
    optimizer.zero_grad(set_to_none=True)
    held = x.numel() * x.element_size()
    held += sum(p.numel() * p.element_size() for p in model.parameters())
    for state in optimizer.state.values():
        held += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v))
    tracker = _LiveBytes()
    with tracker:
        one_step()
    return held + tracker.peak
