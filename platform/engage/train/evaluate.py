"""Evaluation as sums, so shards on several workers combine with one all-reduce.

``accumulate`` returns a 1-D tensor of sums over a shard; ``finalize`` turns the (reduced)
sums into metrics. Classification sums: loss, n, correct, then true positives, false
positives and false negatives per class. Regression sums: loss, n, |err|, err², y, y².

A regression model wrapped in :class:`~engage.train.models.TargetScaled` answers in target
units, so MAE, RMSE and R² are in target units; its loss is the training objective, the
mean squared error in standardised units, comparable with ``train_loss``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from engage.train.models import TargetScaled


def loss_function(task: str) -> nn.Module:
    """The training loss of ``task``: cross-entropy for classification, else mean squared error."""
    return nn.CrossEntropyLoss() if task == "classification" else nn.MSELoss()


def targets_for_loss(y: torch.Tensor, task: str) -> torch.Tensor:
    """``y`` as :func:`loss_function` expects it: class indices, or a ``(n, 1)`` float column."""
    return y.long() if task == "classification" else y.float().unsqueeze(1)


def training_loss(
    model: nn.Module, out: torch.Tensor, y: torch.Tensor, task: str, loss_fn: nn.Module
) -> torch.Tensor:
    """``loss_fn`` of the outputs ``out`` of ``model`` against targets ``y`` (as
    :func:`targets_for_loss` gives them), in standardised units when ``model`` (or the
    module a DDP wrapper holds) is a :class:`TargetScaled`: the gradient the network sees
    is the same whatever the target's offset and scale.
    """
    core = getattr(model, "module", model)
    if task != "classification" and isinstance(core, TargetScaled):
        return loss_fn(core.standardize(out), core.standardize(y))
    return loss_fn(out, y)


@torch.no_grad()
def accumulate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: str, n_classes: int, batch_size: int
) -> torch.Tensor:
    """Sums of the evaluation statistics of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    loss_fn = loss_function(task)
    sums = empty_sums(task, n_classes)
    device = next(model.parameters()).device
    for start in range(0, len(x), batch_size):
        xb = x[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        out = model(xb)
        loss = training_loss(model, out, targets_for_loss(yb, task), task, loss_fn)
        sums[0] += loss.item() * len(xb)
        add_predictions(sums, out.cpu(), yb.cpu(), task, n_classes)
    model.train(was_training)
    return sums


def empty_sums(task: str, n_classes: int) -> torch.Tensor:
    """Zero sums of the width :func:`accumulate` returns for ``task``."""
    return torch.zeros(3 + 3 * n_classes if task == "classification" else 6, dtype=torch.float64)


def add_predictions(
    sums: torch.Tensor, out: torch.Tensor, y: torch.Tensor, task: str, n_classes: int
) -> None:
    """Add the count and the statistics of outputs ``out`` against ``y`` to ``sums`` (all but
    the loss): class scores ``(n, k)`` for classification, values ``(n, 1)`` for regression.
    """
    sums[1] += len(y)
    if task == "classification":
        _add_confusion(sums, out.argmax(dim=1), y.long(), n_classes)
    else:
        err = out.squeeze(1).double() - y.double()
        yd = y.double()
        sums[2:] += torch.stack([err.abs().sum(), (err**2).sum(), yd.sum(), (yd**2).sum()])


def _add_confusion(sums: torch.Tensor, pred: torch.Tensor, true: torch.Tensor, k: int) -> None:
    sums[2] += (pred == true).sum()
    classes = torch.arange(k)
    hit = pred.unsqueeze(1) == classes
    is_true = true.unsqueeze(1) == classes
    sums[3 : 3 + k] += (hit & is_true).sum(dim=0)
    sums[3 + k : 3 + 2 * k] += (hit & ~is_true).sum(dim=0)
    sums[3 + 2 * k : 3 + 3 * k] += (~hit & is_true).sum(dim=0)


def finalize(sums: torch.Tensor, task: str, prefix: str) -> dict[str, float]:
    """Metrics named ``{prefix}_loss``, ``{prefix}_accuracy`` … from reduced sums."""
    s = sums.tolist()
    n = s[1]
    if n == 0:
        return {}
    out = {f"{prefix}_loss": s[0] / n}
    if task == "classification":
        k = (len(s) - 3) // 3
        tp, fp, fn = s[3 : 3 + k], s[3 + k : 3 + 2 * k], s[3 + 2 * k :]
        f1s = [2 * t / (2 * t + p + f) for t, p, f in zip(tp, fp, fn, strict=True) if 2 * t + p + f]
        out[f"{prefix}_accuracy"] = s[2] / n
        out[f"{prefix}_f1"] = sum(f1s) / len(f1s) if f1s else 0.0
    else:
        out[f"{prefix}_mae"] = s[2] / n
        out[f"{prefix}_rmse"] = math.sqrt(s[3] / n)
        if prefix == "test":
            variance = s[5] - s[4] ** 2 / n
            out["test_r2"] = 1.0 - s[3] / variance if variance > 0 else float("nan")
    return out
