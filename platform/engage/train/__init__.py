"""Training: model builders, the Ray Train loop, checkpoints.

Only the light registry is imported here; the loop (which imports torch and Ray) is
imported where it runs.
"""

from engage.train.builders import (
    MODEL_BUILDERS,
    ModelBuilder,
    ModelShape,
    builder_names,
    get_builder,
    register_builder,
)
from engage.train.metrics import PRIMARY_VAL_METRIC, task_metrics

__all__ = [
    "MODEL_BUILDERS",
    "PRIMARY_VAL_METRIC",
    "ModelBuilder",
    "ModelShape",
    "builder_names",
    "get_builder",
    "register_builder",
    "task_metrics",
]
