"""Export a torch model to ONNX with a dynamic batch axis, and check the file.

We use torch's ``torch.export``-based exporter (``dynamo=True``), not the legacy
TorchScript-based one: the legacy exporter is deprecated, and it refuses the registered
models, which MLflow loads as ``ExportedProgram.module()`` graphs ("Calling train() is
not supported"). The new exporter implements opset 18 and later; asking it for 17 runs a
version conversion that fails on CNN1D's ReduceMean and silently keeps 18, so 18 is our
floor and the opset we record is the one read back from the file.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from engage.errors import ExportError

if TYPE_CHECKING:
    from torch import nn

MIN_OPSET = 18
INPUT_NAME = "input"
OUTPUT_NAME = "output"


@dataclass(frozen=True)
class OnnxExport:
    """An ONNX file on disk and what an inference runtime needs to call it."""

    path: Path
    opset: int
    input_name: str
    output_name: str
    dynamic_batch: bool
    format: ClassVar[str] = "onnx"

    @property
    def runtime(self) -> str:
        """The onnxruntime version and execution provider the file is checked on."""
        import onnxruntime

        return f"onnxruntime {onnxruntime.__version__} (CPUExecutionProvider)"

    def runner(self) -> Callable[[np.ndarray], np.ndarray]:
        """A function from a float32 batch to the model's output, on onnxruntime's CPU EP."""
        import onnxruntime

        session = onnxruntime.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        return lambda x: session.run([self.output_name], {self.input_name: x})[0]


def export_onnx(model: nn.Module, example: np.ndarray, path: Path, opset: int = 18) -> OnnxExport:
    """Write ``model`` as ONNX to ``path`` with batch axis 0 dynamic, and validate the file.

    Parameters
    ----------
    model
        A module taking one float32 tensor ``(batch, window, features)``; an
        ``ExportedProgram.module()`` (what ``mlflow.pytorch.load_model`` returns for a
        pt2 model) works too.
    example
        Example inputs; only their shape and dtype matter.
    path
        Where the ``.onnx`` file goes (its folder is created).
    opset
        The ONNX opset to target, at least 18.

    Raises
    ------
    ExportError
        If ``opset`` is below 18, torch cannot export the model or the written file fails
        ONNX's checker.
    """
    import onnx
    import torch

    if opset < MIN_OPSET:
        raise ExportError(
            f"ONNX opset {opset} is not supported by torch's exporter",
            hint=f"use export.opset >= {MIN_OPSET}",
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = torch.from_numpy(_batched(example))
    try:
        with _quiet():
            program = torch.onnx.export(
                _eval(model),
                (x,),
                dynamo=True,
                opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: torch.export.Dim("batch")},),
                verbose=False,
            )
        program.save(str(path))
        proto = onnx.load(str(path))
        onnx.checker.check_model(proto, full_check=True)
    except ExportError:
        raise
    except Exception as exc:  # the exporter raises many types; all mean the same to a user
        raise ExportError(
            f"torch could not export the model to ONNX (opset {opset}): {_first_line(exc)}",
            hint="try another export.opset, or export only torchscript (export.formats)",
        ) from None
    return OnnxExport(
        path,
        _opset_of(proto),
        proto.graph.input[0].name,
        proto.graph.output[0].name,
        _dynamic_batch(proto),
    )


def _eval(model: nn.Module) -> nn.Module:
    """``model`` in eval mode; an ``ExportedProgram.module()`` refuses mode changes, and
    needs none: it was captured in eval mode."""
    try:
        return model.eval()
    except NotImplementedError:
        return model


def _opset_of(proto: Any) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def _dynamic_batch(proto: Any) -> bool:
    dim = proto.graph.input[0].type.tensor_type.shape.dim[0]
    return bool(dim.dim_param) and not dim.HasField("dim_value")


def _batched(example: np.ndarray) -> np.ndarray:
    """At least two rows: torch.export specialises a batch of one to a constant."""
    x = np.ascontiguousarray(example, dtype=np.float32)
    return x if x.shape[0] >= 2 else np.concatenate([x, x])[:2]


@contextmanager
def _quiet():
    # The exporter logs missing torchvision ops and warns about internals (deprecated
    # pytree specs, GRU weights "assigned during export") that a user cannot act on;
    # what matters is checked afterwards: the file validates and matches torch.
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for category in (UserWarning, FutureWarning, DeprecationWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        logger.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
