"""The equivalence check catches a file that does not compute what torch computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from engage.errors import ExportError
from engage.export import OnnxExport, check_equivalence, export_onnx
from engage.export.equivalence import _abs_diff, _batches
from tests.unit.export.conftest import servable


def _perturb_largest_initializer(exported: OnnxExport, delta: float) -> OnnxExport:
    proto = onnx.load(str(exported.path))
    init = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
    values = numpy_helper.to_array(init).copy()
    values.flat[0] += delta
    init.CopyFrom(numpy_helper.from_array(values, init.name))
    broken = exported.path.with_name("broken.onnx")
    onnx.save(proto, str(broken))
    return OnnxExport(broken, exported.opset, exported.input_name, exported.output_name, True)


def test_a_perturbed_initializer_fails_naming_format_diff_and_tolerance(
    windows: np.ndarray, tmp_path: Path
) -> None:
    model = servable("mlp")
    good = export_onnx(model, windows[:5], tmp_path / "model.onnx")
    broken = _perturb_largest_initializer(good, delta=0.5)

    check = check_equivalence(model, broken, windows, tolerance=1e-4)

    assert not check.passed
    assert check.max_abs_diff > 1e-4
    with pytest.raises(ExportError) as info:
        check.raise_if_failed()
    message = info.value.message
    assert "onnx" in message
    assert f"{check.max_abs_diff:.3g}" in message
    assert "tolerance 0.0001" in message


def test_batches_cover_every_window_once_at_sizes_one_seven_and_64() -> None:
    x = np.arange(100)

    batches = list(_batches(x))

    assert [len(b) for b in batches] == [1, 7, 64, 28]
    assert np.array_equal(np.concatenate(batches), x)


def test_a_nan_on_one_side_only_is_an_infinite_difference() -> None:
    expected = np.array([1.0, np.nan, np.nan], dtype=np.float32)
    got = np.array([1.0, np.nan, 2.0], dtype=np.float32)

    assert _abs_diff(expected, got).tolist() == [0.0, 0.0, np.inf]


def test_an_output_of_the_wrong_shape_is_an_error(windows: np.ndarray) -> None:
    class Frozen:
        format, runtime = "onnx", "fake"

        def runner(self):
            return lambda x: np.zeros((5, 3), dtype=np.float32)

    with pytest.raises(ExportError, match="batch axis"):
        check_equivalence(servable("mlp"), Frozen(), windows)
