"""Servable models from every registered builder, and held-out windows for them."""

from __future__ import annotations

import numpy as np
import pytest

from engage.train.builders import MODEL_BUILDERS, ModelShape, get_builder

SHAPE = ModelShape(window=12, features=4, outputs=3)
BUILDERS = sorted(MODEL_BUILDERS)


def servable(name: str, seed: int = 0):
    """A builder's model wrapped in Standardized, as the pipeline logs it."""
    import torch

    from engage.train.models import Standardized

    torch.manual_seed(seed)
    core = get_builder(name).build(SHAPE, {})
    mean, std = torch.randn(SHAPE.features) * 10, torch.rand(SHAPE.features) * 5 + 0.5
    return Standardized(core, mean, std).eval()


@pytest.fixture(scope="session")
def windows() -> np.ndarray:
    """Raw held-out windows: 100 of them, at the scale the model was standardised for."""
    rng = np.random.default_rng(1)
    return (rng.normal(size=(100, SHAPE.window, SHAPE.features)) * 5).astype(np.float32)
