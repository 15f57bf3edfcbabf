"""Evaluation as sums, so shards on several workers combine with one all-reduce.

``accumulate`` returns a 1-D tensor of sums over a shard; ``finalize`` turns the (reduced)
sums into metrics. Classification sums: loss, n, correct, then true positives, false
positives and false negatives per class. Regression sums: loss, n, |err|, err², y, y².
"""

from __future__ import annotations

import math

import torch
from torch import nn


def loss_function(task: str) -> nn.Module:
    """The training loss of ``task``: cross-entropy for classification, else mean squared error."""
    return nn.CrossEntropyLoss() if task == "classification" else nn.MSELoss()


def targets_for_loss(y: torch.Tensor, task: str) -> torch.Tensor:
    """``y`` as :func:`loss_function` expects it: class indices, or a ``(n, 1)`` float column."""
    return y.long() if task == "classification" else y.float().unsqueeze(1)


@torch.no_grad()
def accumulate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: str, n_classes: int, batch_size: int
) -> torch.Tensor:
    """Sums of the evaluation statistics of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    loss_fn = loss_function(task)
    width = 3 + 3 * n_classes if task == "classification" else 6
    sums = torch.zeros(width, dtype=torch.float64)
    device = next(model.parameters()).device
    for start in range(0, len(x), batch_size):
        xb = x[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        out = model(xb)
        loss = loss_fn(out, targets_for_loss(yb, task)).item() * len(xb)
        sums[0] += loss
        sums[1] += len(xb)
        if task == "classification":
            _add_confusion(sums, out.argmax(dim=1).cpu(), yb.long().cpu(), n_classes)
        else:
            err = out.squeeze(1).double().cpu() - yb.double().cpu()
            yd = yb.double().cpu()
            sums[2:] += torch.stack([err.abs().sum(), (err**2).sum(), yd.sum(), (yd**2).sum()])
    model.train(was_training)
    return sums


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
