"""The pipeline's export stage: write each format, check it against torch, log it, decide."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engage.export.equivalence import Equivalence, check_equivalence
from engage.export.onnx import OnnxExport, export_onnx
from engage.export.torchscript import TorchScriptExport, export_torchscript

if TYPE_CHECKING:
    from torch import nn

    from engage.spec.models import ExportSpec
    from engage.tracking import PipelineRun

ARTIFACT_PATH = "export"
FILE_NAMES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt"}
OPSET_TAG = "engage.export.onnx_opset"
_EXAMPLE_ROWS = 5


@dataclass(frozen=True)
class ExportReport:
    """What was exported where, and how close each file is to torch."""

    directory: Path
    exports: dict[str, OnnxExport | TorchScriptExport]
    equivalence: dict[str, Equivalence]

    @property
    def passed(self) -> bool:
        """Whether every exported format is within the tolerance of torch."""
        return all(e.passed for e in self.equivalence.values())

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, one entry per format: the export's fields, its file name
        and size, and its equivalence figures with the verdict.
        """
        out: dict[str, Any] = {}
        for fmt, exported in self.exports.items():
            check = self.equivalence[fmt]
            out[fmt] = {
                **{k: v for k, v in asdict(exported).items() if k != "path"},
                "file": exported.path.name,
                "bytes": exported.path.stat().st_size,
                **asdict(check),
                "passed": check.passed,
            }
        return out


def export_all(
    model: nn.Module,
    example: np.ndarray,
    inputs: np.ndarray,
    directory: Path,
    formats: list[str],
    opset: int,
    tolerance: float,
) -> ExportReport:
    """Export ``model`` in each of ``formats`` into ``directory`` and check each on ``inputs``.

    Never raises on a difference: the caller records the report, then decides. The report
    is also written to ``directory/equivalence.json``.

    Parameters
    ----------
    example : numpy.ndarray
        A few windows the exporters trace with (only shape and dtype matter).
    inputs : numpy.ndarray
        Held-out windows each export is compared with torch on.
    formats : list of str
        ``"onnx"`` and/or ``"torchscript"``.

    Raises
    ------
    ExportError
        If a format cannot be exported or loaded (not for a difference above tolerance).
    """
    directory = Path(directory)
    exports: dict[str, OnnxExport | TorchScriptExport] = {}
    checks: dict[str, Equivalence] = {}
    for fmt in formats:
        path = directory / FILE_NAMES[fmt]
        if fmt == "onnx":
            exports[fmt] = export_onnx(model, example, path, opset)
        else:
            exports[fmt] = export_torchscript(model, example, path)
        checks[fmt] = check_equivalence(model, exports[fmt], inputs, tolerance)
    report = ExportReport(directory, exports, checks)
    (directory / "equivalence.json").write_text(json.dumps(report.to_dict(), indent=2, default=str))
    return report


def export_stage(
    model: nn.Module, test_inputs: np.ndarray, spec: ExportSpec, run: PipelineRun
) -> ExportReport | None:
    """Export the servable model, check it on held-out windows, log it with the run.

    ``test_inputs`` are raw (not standardised) test-split windows, as the model is called.
    Files go under the run's ``export/`` artifacts; metrics ``export_<format>_max_abs_diff``
    and tag ``engage.export.onnx_opset`` record the outcome. Raises ``ExportError`` (after
    logging) when a format is above ``spec.tolerance``. Returns None when no format is asked.
    """
    from engage.events import Event
    from engage.tracking import artifacts_dir

    if not spec.formats:
        return None
    inputs = np.ascontiguousarray(test_inputs[: spec.samples], dtype=np.float32)
    directory = artifacts_dir(run.spool, run.local_id, ARTIFACT_PATH)
    report = export_all(
        model, inputs[:_EXAMPLE_ROWS], inputs, directory, spec.formats, spec.opset, spec.tolerance
    )
    run.log_artifacts(directory, ARTIFACT_PATH)
    run.log_metric_events(
        [
            Event("metric", f"export_{fmt}_{stat}", getattr(check, stat), step=0)
            for fmt, check in report.equivalence.items()
            for stat in ("max_abs_diff", "mean_abs_diff")
        ]
    )
    tags = {"engage.export.formats": ",".join(spec.formats)}
    if isinstance(onnx := report.exports.get("onnx"), OnnxExport):
        tags[OPSET_TAG] = str(onnx.opset)
    run.set_tags(tags)
    for check in report.equivalence.values():
        check.raise_if_failed()
    return report
