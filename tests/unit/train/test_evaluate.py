"""Evaluation as sums: hand-computed metrics, and shards that add up to the whole."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from engage.train.evaluate import accumulate, finalize
from engage.train.models import MLP


class _Echo(nn.Module):
    """Returns its input's first time step: the test writes the model's outputs as x."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # accumulate reads the device from one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0, :]


def _logits(predicted: list[int], k: int, high: float = 2.0) -> torch.Tensor:
    x = torch.zeros(len(predicted), 1, k)
    x[torch.arange(len(predicted)), 0, torch.tensor(predicted)] = high
    return x


# Six samples, three classes; predictions 0 1 1 2 0 1 against labels 0 0 1 2 2 1.
PRED = [0, 1, 1, 2, 0, 1]
TRUE = [0, 0, 1, 2, 2, 1]


def test_classification_metrics_match_hand_computed_values() -> None:
    x, y = _logits(PRED, 3), torch.tensor(TRUE)

    metrics = finalize(
        accumulate(_Echo(), x, y, "classification", 3, batch_size=4), "classification", "val"
    )

    # Cross-entropy of logits (2, 0, 0): right class -log(e²/(e²+2)), wrong -log(1/(e²+2)).
    right = -math.log(math.exp(2) / (math.exp(2) + 2))
    wrong = -math.log(1 / (math.exp(2) + 2))
    assert metrics["val_loss"] == pytest.approx((4 * right + 2 * wrong) / 6)
    assert metrics["val_accuracy"] == pytest.approx(4 / 6)
    # Per class (tp, fp, fn): 0 -> (1, 1, 1) F1 1/2; 1 -> (2, 1, 0) F1 4/5; 2 -> (1, 0, 1) F1 2/3.
    assert metrics["val_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    assert set(metrics) == {"val_loss", "val_accuracy", "val_f1"}


def test_macro_f1_skips_a_class_never_seen_nor_predicted() -> None:
    x, y = _logits(PRED, 4), torch.tensor(TRUE)  # class 3: no samples, no predictions

    metrics = finalize(accumulate(_Echo(), x, y, "classification", 4, 64), "classification", "test")

    assert metrics["test_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)


def test_perfect_classifier_scores_one() -> None:
    x, y = _logits(TRUE, 3, high=50.0), torch.tensor(TRUE)

    metrics = finalize(accumulate(_Echo(), x, y, "classification", 3, 2), "classification", "val")

    assert metrics["val_accuracy"] == 1.0
    assert metrics["val_f1"] == 1.0
    assert metrics["val_loss"] == pytest.approx(0.0, abs=1e-12)


def _regression_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    predictions = torch.tensor([1.0, 2.0, 3.0, 4.0])
    targets = torch.tensor([1.5, 2.0, 2.0, 5.0])
    return predictions.reshape(4, 1, 1), targets


def test_regression_metrics_match_hand_computed_values() -> None:
    x, y = _regression_inputs()

    metrics = finalize(
        accumulate(_Echo(), x, y, "regression", 0, batch_size=3), "regression", "test"
    )

    # errors -0.5, 0, 1, -1: |e| sums to 2.5, e² to 2.25; ȳ = 2.625, SS_tot = 7.6875.
    assert metrics["test_loss"] == pytest.approx(2.25 / 4)
    assert metrics["test_mae"] == pytest.approx(2.5 / 4)
    assert metrics["test_rmse"] == pytest.approx(math.sqrt(2.25 / 4))
    assert metrics["test_r2"] == pytest.approx(1 - 2.25 / 7.6875)


def test_r2_only_for_the_test_split() -> None:
    x, y = _regression_inputs()

    metrics = finalize(accumulate(_Echo(), x, y, "regression", 0, 8), "regression", "val")

    assert set(metrics) == {"val_loss", "val_mae", "val_rmse"}


def test_r2_is_nan_for_a_constant_target() -> None:
    x, _ = _regression_inputs()
    y = torch.full((4,), 3.0)

    metrics = finalize(accumulate(_Echo(), x, y, "regression", 0, 8), "regression", "test")

    assert math.isnan(metrics["test_r2"])


@pytest.mark.parametrize(("task", "outputs"), [("classification", 3), ("regression", 1)])
def test_shard_sums_add_up_to_the_whole(task: str, outputs: int) -> None:
    """What the all-reduce relies on: sum over workers' shards == sums over the whole set."""
    torch.manual_seed(0)
    model = MLP(window=4, features=2, outputs=outputs, hidden=8, layers=1, dropout=0.0)
    x = torch.randn(37, 4, 2)
    y = torch.randint(0, 3, (37,)) if task == "classification" else torch.randn(37)
    k = outputs if task == "classification" else 0

    whole = accumulate(model, x, y, task, k, batch_size=5)
    shards = accumulate(model, x[::2], y[::2], task, k, 5) + accumulate(
        model, x[1::2], y[1::2], task, k, 7
    )

    torch.testing.assert_close(shards, whole)
    assert finalize(shards, task, "test") == pytest.approx(finalize(whole, task, "test"))


def test_accumulate_restores_training_mode() -> None:
    model = MLP(window=2, features=1, outputs=2, hidden=4, layers=1, dropout=0.5)
    model.train()

    accumulate(model, torch.randn(3, 2, 1), torch.tensor([0, 1, 0]), "classification", 2, 2)

    assert model.training


@pytest.mark.parametrize(("task", "width"), [("classification", 3 + 3 * 3), ("regression", 6)])
def test_empty_input_gives_zero_sums_and_no_metrics(task: str, width: int) -> None:
    model = MLP(window=2, features=1, outputs=3, hidden=4, layers=1, dropout=0.0)
    x, y = torch.zeros(0, 2, 1), torch.zeros(0)

    sums = accumulate(model, x, y, task, 3, batch_size=4)

    assert sums.shape == (width,)
    assert sums.abs().sum() == 0
    assert finalize(sums, task, "val") == {}
