"""The pipeline's export stage: files spooled as artifacts, diffs as metrics, a failing gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engage.errors import ExportError
from engage.export import export_stage
from engage.spec.models import ExportSpec
from engage.tracking import PipelineRun, Spool
from tests.unit.export.conftest import servable


def _run(tmp_path: Path) -> PipelineRun:
    spool = Spool(tmp_path / "spool.db")
    local_id = spool.create_run("sqlite:///unused.db", "export", "r", {})
    return PipelineRun(spool, local_id, "sqlite:///unused.db", "export")


def _pending(run: PipelineRun) -> list:
    return run.spool.pending(run.local_id, 1000)


def test_the_stage_spools_files_metrics_and_the_opset(windows: np.ndarray, tmp_path: Path) -> None:
    run = _run(tmp_path)

    report = export_stage(servable("mlp"), windows, ExportSpec(samples=50), run)

    entries = _pending(run)
    (op,) = [e for e in entries if e.kind == "artifacts"]
    assert op.value["artifact_path"] == "export"
    files = {p.name for p in Path(op.value["local_dir"]).iterdir()}
    assert files == {"model.onnx", "model.torchscript.pt", "equivalence.json"}
    metrics = {e.key: e.value for e in entries if e.kind == "metric"}
    assert metrics["export_onnx_max_abs_diff"] < 1e-4
    assert metrics["export_torchscript_max_abs_diff"] < 1e-4
    tags = {e.key: e.value for e in entries if e.kind == "tag"}
    assert tags["engage.export.onnx_opset"] == "18"
    assert report.passed
    assert report.equivalence["onnx"].n == 50


def test_above_tolerance_the_stage_logs_then_fails(windows: np.ndarray, tmp_path: Path) -> None:
    # onnxruntime's kernels round differently from torch's (~1e-7); a tolerance below that
    # stands in for a broken file here (the perturbed-file case is in test_equivalence).
    run = _run(tmp_path)
    spec = ExportSpec(formats=["torchscript", "onnx"], tolerance=1e-12, samples=20)

    with pytest.raises(ExportError, match=r"the onnx export .* > tolerance 1e-12"):
        export_stage(servable("cnn1d"), windows, spec, run)

    entries = _pending(run)
    metrics = {e.key: e.value for e in entries if e.kind == "metric"}
    assert metrics["export_onnx_max_abs_diff"] > 1e-12
    assert metrics["export_torchscript_max_abs_diff"] == 0.0  # same kernels: exact
    assert any(e.kind == "artifacts" for e in entries)


def test_no_formats_exports_nothing(windows: np.ndarray, tmp_path: Path) -> None:
    run = _run(tmp_path)

    assert export_stage(servable("mlp"), windows, ExportSpec(formats=[]), run) is None
    assert _pending(run) == []
