"""Does an exported file compute what the torch model computes? Measured, not assumed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engage.errors import ExportError

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

DEFAULT_TOLERANCE = 1e-4
# Batch sizes the held-out windows are fed in: one, an odd size, then large batches, so
# a batch axis that was frozen at export time shows up as an error or a difference.
_BATCH_SIZES = (1, 7, 64)


class Exported(Protocol):
    """What :func:`check_equivalence` needs of an exported file: its format name, the
    runtime that runs it and a function that runs it."""

    format: str

    @property
    def runtime(self) -> str:
        """The inference runtime and its version, as messages name it."""

    def runner(self) -> Callable[[np.ndarray], np.ndarray]:
        """Load the file once and return a function from a float32 batch to the outputs."""


@dataclass(frozen=True)
class Equivalence:
    """How far an exported model's outputs are from torch's on the same inputs."""

    format: str
    max_abs_diff: float
    mean_abs_diff: float
    n: int
    tolerance: float
    batch_sizes: tuple[int, ...]
    runtime: str
    # The largest |torch output|, at least 1: the tolerance is absolute for outputs up to 1
    # and relative above, since float32 keeps ~7 significant digits at any magnitude (a
    # regression answering in ppm near 1000 cannot match to 1e-4 absolute).
    scale: float = 1.0

    @property
    def allowed(self) -> float:
        """The largest difference that passes: the tolerance times the output scale."""
        return self.tolerance * self.scale

    @property
    def passed(self) -> bool:
        """Whether the largest difference is within the tolerance; a NaN difference never is."""
        return self.max_abs_diff <= self.allowed  # NaN never passes

    def _bound(self) -> str:
        scaled = f" x output scale {self.scale:.3g}" if self.scale > 1.0 else ""
        return f"tolerance {self.tolerance:g}{scaled}"

    def explain(self) -> str:
        """One line for people: the format, the largest difference, the runtime and the verdict."""
        verdict = "within" if self.passed else "above"
        return (
            f"{self.format}: max |difference| {self.max_abs_diff:.3g} over {self.n} held-out "
            f"windows on {self.runtime}, {verdict} the {self._bound()}"
        )

    def raise_if_failed(self) -> None:
        """Turn a failed check into an error; a passed one returns quietly.

        Raises
        ------
        ExportError
            If :attr:`passed` is false.
        """
        if not self.passed:
            raise ExportError(
                f"the {self.format} export differs from the torch model: max absolute "
                f"difference {self.max_abs_diff:.3g} > {self._bound()} "
                f"(over {self.n} held-out windows on {self.runtime})",
                hint="the exported file does not compute what torch computes; do not ship it. "
                "Raise export.tolerance (--tolerance) only if the difference is expected",
            )


def check_equivalence(
    torch_model: nn.Module,
    exported: Exported,
    inputs: np.ndarray,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Equivalence:
    """Run ``inputs`` through torch and the exported file, batch by batch, and compare.

    Never raises on a difference (results, then decisions): call ``raise_if_failed``.

    Parameters
    ----------
    torch_model : nn.Module
        The model the export was made from, in eval mode.
    exported : Exported
        The exported file (an :class:`~engage.export.onnx.OnnxExport` or a
        :class:`~engage.export.torchscript.TorchScriptExport`).
    inputs : numpy.ndarray
        Held-out windows ``(n, window, features)``, fed in batches of 1, 7, then 64.
    tolerance : float
        The largest difference that still passes, absolute for outputs up to 1 in size and
        relative to the largest output above (see :attr:`Equivalence.scale`).

    Raises
    ------
    ExportError
        If ``inputs`` is empty, the runtime cannot load the file, or the file returns
        another shape than torch (a batch axis frozen at export time).
    """
    import torch

    x = np.ascontiguousarray(inputs, dtype=np.float32)
    if len(x) == 0:
        raise ExportError("no held-out inputs to check the export on", hint="pass some windows")
    try:
        run = exported.runner()
    except Exception as exc:  # e.g. onnxruntime refusing an opset it does not implement
        raise ExportError(
            f"{exported.runtime} cannot load the {exported.format} export: "
            f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}",
            hint="for onnx, pick an opset this onnxruntime implements (export.opset)",
        ) from None
    diffs, sizes, scale = [], [], 1.0
    with torch.no_grad():
        for batch in _batches(x):
            expected = torch_model(torch.from_numpy(batch)).numpy()
            got = np.asarray(run(batch))
            if got.shape != expected.shape:
                raise ExportError(
                    f"the {exported.format} export returned shape {got.shape} for a batch of "
                    f"{len(batch)}; torch returned {expected.shape}",
                    hint="its batch axis was probably frozen at export time",
                )
            diffs.append(_abs_diff(expected, got).ravel())
            finite = np.abs(expected[np.isfinite(expected)])
            scale = max(scale, float(finite.max())) if finite.size else scale
            sizes.append(len(batch))
    diff = np.concatenate(diffs)
    return Equivalence(
        exported.format,
        float(diff.max()),
        float(diff.mean()),
        len(x),
        tolerance,
        tuple(dict.fromkeys(sizes)),
        exported.runtime,
        scale,
    )


def _batches(x: np.ndarray) -> Iterator[np.ndarray]:
    start, i = 0, 0
    while start < len(x):
        size = _BATCH_SIZES[min(i, len(_BATCH_SIZES) - 1)]
        yield x[start : start + size]
        start, i = start + size, i + 1


def _abs_diff(expected: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|expected - got|, with NaN where exactly one side is NaN counted as infinite."""
    diff = np.abs(expected.astype(np.float64) - got.astype(np.float64))
    both_nan = np.isnan(expected) & np.isnan(got)
    return np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
