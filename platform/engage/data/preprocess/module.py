"""The serving form of fitted preprocessing: ``nn.Module`` wrappers saved with the model.

Imported only when a model is assembled (it needs torch at import); the logged model is
``Standardized(Preprocessed(core, PreprocessModule(...)), mean, std)``, so a served raw
window is standardised, preprocessed and scored exactly as in training.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engage.data.preprocess.base import FittedStep


class PreprocessModule(torch.nn.Module):
    """Fitted window preprocessing as a module: raw (standardised) windows in, model input out.

    The fitted state is registered as buffers (``step<i>_<name>``), so it moves with
    ``.to(device)`` and is saved with the model.
    """

    def __init__(self, steps: Sequence[FittedStep]) -> None:
        super().__init__()
        self.ops = [s.op for s in steps]
        self.keys = [sorted(s.state) for s in steps]
        for i, s in enumerate(steps):
            for key, value in s.state.items():
                self.register_buffer(f"step{i}_{key}", value.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply every step in order (no augmentation)."""
        for i, op in enumerate(self.ops):
            state = {k: getattr(self, f"step{i}_{k}") for k in self.keys[i]}
            x = op.transform(x, state)
        return x


class Preprocessed(torch.nn.Module):
    """A model that takes raw windows: ``model(preprocess(x))``."""

    def __init__(self, model: torch.nn.Module, preprocess: PreprocessModule) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Preprocess ``x`` and run the wrapped model on the result."""
        return self.model(self.preprocess(x))
