"""Mixed precision for the training loop: the autocast context and the gradient scaler.

``train.precision`` picks it: ``fp32`` (no autocast), ``bf16`` (autocast on CPU or GPU;
bf16 keeps fp32's exponent range, so gradients need no scaling) or ``fp16`` (autocast on a
GPU with a :class:`torch.amp.GradScaler`, whose loss scaling keeps small fp16 gradients from
flushing to zero). Weights, gradients and optimiser state stay in fp32 in every mode.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from engage.errors import TrainingError

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Precision:
    """How one worker runs forward, backward and the optimiser step in ``name`` precision."""

    name: str
    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context forward and loss run in (a no-op for fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss``, scaled first when a gradient scaler is in use."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """One optimiser step; with a scaler, skipped when a gradient is not finite."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state for a checkpoint (empty without a scaler)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (ignored without a scaler)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def make_precision(name: str, device: Any) -> Precision:
    """The :class:`Precision` for ``train.precision`` ``name`` on ``device``.

    Raises
    ------
    TrainingError
        If ``name`` is ``fp16`` and ``device`` is not a GPU (the spec check refuses that
        combination first; this guards direct callers).
    """
    device_type = torch.device(device).type
    if name not in _DTYPES:
        raise TrainingError(f"unknown precision {name!r}", hint=f"use one of {sorted(_DTYPES)}")
    if name == "fp16" and device_type != "cuda":
        raise TrainingError(
            f"train.precision fp16 needs a GPU, the worker runs on {device_type}",
            hint="set train.use_gpu: true, or use train.precision: bf16 on CPU",
        )
    scaler = torch.amp.GradScaler(device_type) if name == "fp16" else None
    return Precision(name, device_type, _DTYPES[name], scaler)
