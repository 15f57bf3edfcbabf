"""Augmentation operators: jitter and scaling, applied to the training split only.

Both draw from an explicit seeded ``torch.Generator`` (never the global one), so the same
seed gives the same training windows on the same device; evaluation and serving skip them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from engage.data.preprocess.base import Operator, OperatorParams, State, register_operator

if TYPE_CHECKING:
    import torch


class NoiseParams(OperatorParams):
    """The noise scale and the seed of the augmentation's generator."""

    std: float = Field(gt=0.0, le=10.0, description="standard deviation of the noise")
    seed: int = Field(0, ge=0, description="seed of this operator's random generator")


def _normal(
    shape: tuple[int, ...], like: torch.Tensor, gen: torch.Generator | None
) -> torch.Tensor:
    """Standard normal draws shaped ``shape`` on ``like``'s device and dtype."""
    import torch

    return torch.randn(shape, generator=gen, device=like.device, dtype=like.dtype)


@register_operator
class Jitter(Operator):
    """Add independent Gaussian noise ``N(0, std)`` to every value (training only)."""

    name = "jitter"
    Params = NoiseParams
    train_only = True

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``x + std * z`` with ``z`` drawn from ``generator`` (scaled and added in place
        on the fresh draws: one pass and one batch-sized buffer fewer, the same values)."""
        return _normal(tuple(x.shape), x, generator).mul_(self.params.std).add_(x)


@register_operator
class Scale(Operator):
    """Multiply each window's features by a factor drawn from ``N(1, std)`` (training only)."""

    name = "scale"
    Params = NoiseParams
    train_only = True

    def transform(
        self, x: torch.Tensor, state: State, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``x * (1 + std * z)`` with one ``z`` per window and feature."""
        factor = _normal((x.shape[0], 1, x.shape[2]), x, generator).mul_(self.params.std)
        return x * factor.add_(1.0)
