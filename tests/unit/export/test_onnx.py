"""ONNX export of every builder's servable model: dynamic batch, valid file, same outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from engage.errors import ExportError
from engage.export import check_equivalence, export_onnx
from tests.unit.export.conftest import BUILDERS, servable


@pytest.mark.parametrize("name", BUILDERS)
def test_every_builder_exports_with_a_dynamic_batch_and_matches_torch(
    name: str, windows: np.ndarray, tmp_path: Path
) -> None:
    model = servable(name)

    exported = export_onnx(model, windows[:5], tmp_path / "model.onnx", opset=18)
    check = check_equivalence(model, exported, windows, tolerance=1e-4)

    assert exported.opset == 18
    assert exported.dynamic_batch
    assert (exported.input_name, exported.output_name) == ("input", "output")
    onnx.checker.check_model(onnx.load(str(exported.path)))
    assert check.passed, check.explain()
    assert check.max_abs_diff < 1e-4
    assert check.n == 100
    assert set(check.batch_sizes) >= {1, 7}
    assert 5 not in check.batch_sizes
    assert "onnxruntime" in check.runtime


def test_a_registered_pt2_graph_exports_too(windows: np.ndarray, tmp_path: Path) -> None:
    # mlflow.pytorch.load_model returns ExportedProgram.module() for pt2 models, which
    # refuses .eval() and the legacy exporter; the dynamo exporter takes it as it is.
    import torch

    model = servable("mlp")
    program = torch.export.export(
        model, (torch.from_numpy(windows[:5]),), dynamic_shapes=({0: torch.export.Dim.AUTO},)
    )

    exported = export_onnx(program.module(), windows[:5], tmp_path / "model.onnx")

    assert check_equivalence(model, exported, windows).passed


def test_a_batch_of_one_example_still_gives_a_dynamic_batch(
    windows: np.ndarray, tmp_path: Path
) -> None:
    exported = export_onnx(servable("cnn1d"), windows[:1], tmp_path / "model.onnx")

    assert exported.dynamic_batch


def test_an_opset_below_18_is_refused_with_a_fix(windows: np.ndarray, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="opset 17") as info:
        export_onnx(servable("mlp"), windows[:5], tmp_path / "model.onnx", opset=17)

    assert "18" in info.value.hint
