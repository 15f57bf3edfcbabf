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
        """The torch version whose ``torch.jit`` runs the file, on CPU."""
        import torch

        return f"torch.jit {torch.__version__.split('+')[0]} (CPU)"

    def runner(self) -> Callable[[np.ndarray], np.ndarray]:
        """Load the file on CPU once and return a function from a float32 batch to the outputs."""
        import torch

        loaded = torch.jit.load(str(self.path), map_location="cpu").eval()

        def run(x: np.ndarray) -> np.ndarray:
            """Run the loaded module on ``x`` without gradients."""
            with torch.no_grad():
                return loaded(torch.from_numpy(x)).numpy()

        return run


def export_torchscript(model: nn.Module, example: np.ndarray, path: Path) -> TorchScriptExport:
    """Trace ``model`` on ``example``, save it to ``path``, reload it and run a new batch size.

    Tracing, not scripting: it also works on ``ExportedProgram.module()`` graphs, which
    ``torch.jit.script`` cannot compile. Our models have no data-dependent control flow,
    so a trace is the whole model; the reload check proves the batch axis stayed dynamic.

    Raises
    ------
    ExportError
        If tracing, saving or reloading fails, or the reloaded file refuses a new batch size.
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
            traced = torch.jit.trace(_traceable(_eval(model)), (x,), check_trace=False)
            torch.jit.save(traced, str(path))
            reloaded = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise ExportError(
            f"torch could not export the model to TorchScript: {_first_line(exc)}",
            hint="export only onnx (export.formats) or report the model's architecture",
        ) from None
    other = torch.cat([x, x[:1]])  # a batch size the trace never saw
    try:
        with torch.no_grad():
            dynamic = tuple(reloaded(other).shape[:1]) == (other.shape[0],)
    except Exception:
        dynamic = False
    if not dynamic:
        raise ExportError(
            f"the TorchScript trace froze the batch size at {x.shape[0]}",
            hint="export only onnx (export.formats / --format onnx)",
        )
    return TorchScriptExport(path, dynamic)


# Factory ops of a pt2 graph that take a size list; their torch.* twins keep a traced size.
_FACTORIES = {"zeros.default": "zeros", "ones.default": "ones", "full.default": "full"}


def _traceable(model: nn.Module) -> nn.Module:
    """A copy of a pt2 graph (``ExportedProgram.module()``) whose sizes trace as sizes.

    Such a graph reads the batch size with ``aten.sym_size.int``, which the tracer sees as
    a plain int and bakes in (a GRU's initial state then only fits the example's batch).
    ``x.size(d)`` and ``torch.zeros(...)`` are recorded as graph values instead.
    Any other module is returned as it is.
    """
    import copy

    import torch
    from torch import fx

    if not isinstance(model, fx.GraphModule):
        return model
    model = copy.deepcopy(model)
    graph = model.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.sym_size.int:
            with graph.inserting_before(node):
                size = graph.call_method("size", node.args)
            node.replace_all_uses_with(size)
            graph.erase_node(node)
        elif name := _FACTORIES.get(_op_name(node.target)):
            node.target = getattr(torch, name)
    model.recompile()
    return model


def _op_name(target: object) -> str:
    """``zeros.default`` for ``torch.ops.aten.zeros.default``; "" for anything else."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.name.startswith("aten::"):
        return ""
    return f"{schema.name.removeprefix('aten::')}.{schema.overload_name or 'default'}"
