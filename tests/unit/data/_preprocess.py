"""Shared pieces of the preprocessing tests: devices to run on and small windows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"),
    ),
]
"""Every operator test runs on the CPU, and on a GPU where there is one."""


def windows(n: int = 6, window: int = 12, features: int = 3, seed: int = 0) -> np.ndarray:
    """float32 windows ``(n, window, features)`` with a distinct scale per feature."""
    rng = np.random.default_rng(seed)
    scale = np.arange(1, features + 1, dtype=np.float32)
    return (rng.normal(size=(n, window, features)) * scale).astype(np.float32)


def run(op, x: np.ndarray, device: str, state=None, generator=None) -> np.ndarray:
    """``op.transform`` of ``x`` on ``device``, back as numpy."""
    state = {k: v.to(device) for k, v in (state or {}).items()}
    out = op.transform(torch.from_numpy(x).to(device), state, generator)
    return out.cpu().numpy()
