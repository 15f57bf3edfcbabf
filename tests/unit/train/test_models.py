"""Model architectures: output shapes and the Standardized wrapper that serves raw inputs."""

from __future__ import annotations

import pytest
import torch

from engage.train.models import CNN1D, MLP, GRUNet, Standardized


@pytest.mark.parametrize(
    "model",
    [
        MLP(window=6, features=3, outputs=4, hidden=8, layers=2, dropout=0.0),
        MLP(window=6, features=3, outputs=4, hidden=8, layers=0, dropout=0.0),
        GRUNet(features=3, outputs=4, hidden=5, layers=2, dropout=0.1),
        CNN1D(features=3, outputs=4, channels=5, layers=2, kernel_size=3, dropout=0.0),
        CNN1D(features=3, outputs=4, channels=5, layers=1, kernel_size=4, dropout=0.0),
    ],
    ids=["mlp", "linear", "gru", "cnn1d", "cnn1d-even-kernel"],
)
@pytest.mark.parametrize("batch", [1, 5])
def test_model_maps_batch_window_features_to_batch_outputs(
    model: torch.nn.Module, batch: int
) -> None:
    x = torch.randn(batch, 6, 3)

    out = model.eval()(x)

    assert out.shape == (batch, 4)


def test_gru_uses_the_last_time_step() -> None:
    torch.manual_seed(0)
    model = GRUNet(features=2, outputs=1, hidden=4, layers=1, dropout=0.0).eval()
    x = torch.randn(2, 5, 2)
    changed = x.clone()
    changed[:, -1, :] += 1.0

    assert not torch.allclose(model(x), model(changed))


def test_standardized_equals_the_model_on_standardized_input() -> None:
    torch.manual_seed(0)
    core = MLP(window=4, features=3, outputs=2, hidden=8, layers=1, dropout=0.0).eval()
    mean = torch.tensor([20.0, -1.0, 400.0])
    std = torch.tensor([2.0, 0.5, 50.0])
    x = torch.randn(6, 4, 3) * std + mean

    wrapped = Standardized(core, mean, std).eval()
    manual = core((x - mean.reshape(1, 1, 3)) / std.reshape(1, 1, 3))

    torch.testing.assert_close(wrapped(x), manual)


def test_standardized_statistics_travel_in_the_state_dict() -> None:
    core = MLP(window=2, features=2, outputs=1, hidden=3, layers=1, dropout=0.0)
    wrapped = Standardized(core, torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))

    state = wrapped.state_dict()

    assert state["mean"].flatten().tolist() == [1.0, 2.0]
    assert state["std"].flatten().tolist() == [3.0, 4.0]
    assert state["mean"].dtype == torch.float32


def test_standardized_accepts_float64_statistics() -> None:
    """Normalization statistics come from numpy as float64; inputs are float32."""
    core = MLP(window=2, features=2, outputs=1, hidden=3, layers=1, dropout=0.0)
    wrapped = Standardized(
        core, torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    )

    out = wrapped(torch.randn(3, 2, 2))

    assert out.dtype == torch.float32
