"""Preprocessing declared in the spec (``data.preprocess``): operators, fitting, placement.

Row operators (``resample``) reshape the validated table before windowing; window
operators (``clip``, ``rolling``, ``lag``, ``spectral``, and the training-only augmentations
``jitter`` and ``scale``) are torch operations on ``(batch, window, features)`` tensors,
fitted on the training split and run on the CPU or a GPU (``data.preprocess_device``).
Importing this package does not import torch.
"""

from engage.data.preprocess import augment, rows, windows  # noqa: F401 - registers operators
from engage.data.preprocess.base import (
    OPERATORS,
    FittedStep,
    Operator,
    OperatorParams,
    make_operator,
    register_operator,
)
from engage.data.preprocess.device import Placement, guard, resolve_device
from engage.data.preprocess.fitted import FittedPreprocess, fit_in_parts, fit_preprocess
from engage.data.preprocess.plan import (
    apply_rows,
    build_operators,
    check_streamable,
    preprocess_problems,
    stream_refusals,
)

__all__ = [
    "OPERATORS",
    "FittedPreprocess",
    "FittedStep",
    "Operator",
    "OperatorParams",
    "Placement",
    "apply_rows",
    "build_operators",
    "check_streamable",
    "fit_in_parts",
    "fit_preprocess",
    "guard",
    "make_operator",
    "preprocess_problems",
    "register_operator",
    "resolve_device",
    "stream_refusals",
]
