"""Model architectures: pure torch, no Ray, no MLflow.

Every model maps a batch of windows ``(batch, window, features)`` to ``(batch, outputs)``:
class logits for classification, one value for regression.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Flattens the window and applies fully connected layers."""

    def __init__(
        self, window: int, features: int, outputs: int, hidden: int, layers: int, dropout: float
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = [nn.Flatten()]
        width = window * features
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        blocks.append(nn.Linear(width, outputs))
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``(batch, window, features)`` to ``(batch, outputs)``."""
        return self.net(x)


class GRUNet(nn.Module):
    """A GRU over the time axis; the last hidden state feeds a linear head."""

    def __init__(
        self, features: int, outputs: int, hidden: int, layers: int, dropout: float
    ) -> None:
        super().__init__()
        self.gru = nn.GRU(
            features,
            hidden,
            num_layers=layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the GRU over the window and apply the head to the last step's output."""
        out, _ = self.gru(x)
        return self.head(out[:, -1, :])


class CNN1D(nn.Module):
    """1-D convolutions over time, global average pooling, a linear head."""

    def __init__(
        self,
        features: int,
        outputs: int,
        channels: int,
        layers: int,
        kernel_size: int,
        dropout: float,
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        width = features
        for _ in range(layers):
            blocks += [
                nn.Conv1d(width, channels, kernel_size, padding=kernel_size // 2),
                nn.ReLU(),
                nn.Dropout(dropout),
            ]
            width = channels
        self.conv = nn.Sequential(*blocks)
        self.head = nn.Linear(width, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolve over time (channels are the features), average over time, apply the head."""
        h = self.conv(x.transpose(1, 2))
        return self.head(h.mean(dim=2))


class Standardized(nn.Module):
    """Wraps a model so it takes raw inputs: standardises with the training statistics.

    The logged and served model is this wrapper, so callers never normalise by hand.
    """

    def __init__(self, model: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("mean", mean.reshape(1, 1, -1).float())
        self.register_buffer("std", std.reshape(1, 1, -1).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Standardise raw ``x`` with the stored training mean and std, then run the model."""
        return self.model((x - self.mean) / self.std)


class TargetScaled(nn.Module):
    """Wraps a regression network trained on standardised targets; answers in target units.

    The network learns ``(y - mean) / std`` with mean and std from the training split, so a
    target far from zero (CO2 near 400 ppm) trains as well as one near zero. The forward
    pass applies ``out * std + mean``; the two statistics are buffers, so they travel in
    every checkpoint and every exported copy (ONNX, TorchScript) answers in original units.
    """

    def __init__(self, model: nn.Module, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("target_mean", torch.tensor(float(mean)))
        self.register_buffer("target_std", torch.tensor(float(std)))

    def fit(self, y: torch.Tensor) -> TargetScaled:
        """Set the statistics from the training targets ``y`` (a zero std becomes 1)."""
        yd = y.double()
        std = float(yd.std(unbiased=False)) if len(yd) else 1.0
        mean = float(yd.mean()) if len(yd) else 0.0
        self.target_mean.fill_(mean)
        self.target_std.fill_(std if std > 0 else 1.0)
        return self

    def standardize(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` (or a prediction in target units) in the standardised units the net learns."""
        return (y - self.target_mean) / self.target_std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the network and map its standardised output back to target units."""
        return self.model(x) * self.target_std + self.target_mean
