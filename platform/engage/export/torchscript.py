"""Export a torch model to TorchScript by tracing, and check the saved file reloads."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from engage.errors import ExportError
from engage.export.onnx import _batched, _eval, _first_line

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class TorchScriptExport:
    """A TorchScript file on disk, loadable with ``torch.jit.load`` and no engage code."""

    path: Path
    dynamic_batch: bool
    format: ClassVar[str] = "torchscript"

    @property
    def runtime(self) -> str:
        import torch

        return f"torch.jit {torch.__version__.split('+')[0]} (CPU)"

    def runner(self) -> Callable[[np.ndarray], np.ndarray]:
        import torch

        loaded = torch.jit.load(str(self.path), map_location="cpu").eval()

        def run(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return loaded(torch.from_numpy(x)).numpy()

        return run


def export_torchscript(model: nn.Module, example: np.ndarray, path: Path) -> TorchScriptExport:
    """Trace ``model`` on ``example``, save it to ``path``, reload it and run a new batch size.

    Tracing, not scripting: it also works on ``ExportedProgram.module()`` graphs, which
    ``torch.jit.script`` cannot compile. Our models have no data-dependent control flow,
    so a trace is the whole model; the reload check proves the batch axis stayed dynamic.
    """
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = torch.from_numpy(_batched(example))
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # torch.jit is in maintenance mode and says so on every call; the file still
            # loads in any torch >= the one that wrote it.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            # A pt2 graph's shape asserts trace as constants: harmless, the shapes are fixed.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            traced = torch.jit.trace(_eval(model), (x,), check_trace=False)
            torch.jit.save(traced, str(path))
            reloaded = torch.jit.load(str(path), map_location="cpu")
            other = torch.cat([x, x[:1]])  # a batch size the trace never saw
            dynamic = tuple(reloaded(other).shape[:1]) == (other.shape[0],)
    except Exception as exc:
        raise ExportError(
            f"torch could not export the model to TorchScript: {_first_line(exc)}",
            hint="export only onnx (export.formats) or report the model's architecture",
        ) from None
    return TorchScriptExport(path, dynamic)
