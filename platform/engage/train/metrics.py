"""The metrics a task produces, with the direction in which each improves.

Training reports the ``val_*`` metrics every epoch; evaluation reports the ``test_*`` ones
once. A registration gate may name any of them (the final value is compared).
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["maximize", "minimize"]

_COMMON: dict[str, Direction] = {
    "train_loss": "minimize",
    "val_loss": "minimize",
    "test_loss": "minimize",
}
_CLASSIFICATION: dict[str, Direction] = {
    "val_accuracy": "maximize",
    "val_f1": "maximize",
    "test_accuracy": "maximize",
    "test_f1": "maximize",
}
_REGRESSION: dict[str, Direction] = {
    "val_mae": "minimize",
    "val_rmse": "minimize",
    "test_mae": "minimize",
    "test_rmse": "minimize",
    "test_r2": "maximize",
}

# The validation metric shown in progress displays, per task.
PRIMARY_VAL_METRIC = {"classification": "val_accuracy", "regression": "val_mae"}


def task_metrics(task: str) -> dict[str, Direction]:
    """Every gateable metric of ``task`` ('classification' or 'regression')."""
    specific = _CLASSIFICATION if task == "classification" else _REGRESSION
    return {**_COMMON, **specific}
