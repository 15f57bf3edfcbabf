"""TorchScript export of every builder's servable model: reloads, dynamic batch, same outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engage.export import check_equivalence, export_torchscript
from tests.unit.export.conftest import BUILDERS, servable


@pytest.mark.parametrize("name", BUILDERS)
def test_every_builder_traces_with_a_dynamic_batch_and_matches_torch(
    name: str, windows: np.ndarray, tmp_path: Path
) -> None:
    model = servable(name)

    exported = export_torchscript(model, windows[:5], tmp_path / "model.pt")
    check = check_equivalence(model, exported, windows, tolerance=1e-4)

    assert exported.path.is_file()
    assert exported.dynamic_batch
    assert check.passed, check.explain()
    assert check.max_abs_diff < 1e-4
    assert "torch.jit" in check.runtime


@pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")  # torch.export, on GRU
@pytest.mark.parametrize("name", BUILDERS)
def test_a_registered_pt2_graph_traces_with_a_dynamic_batch(
    name: str, windows: np.ndarray, tmp_path: Path
) -> None:
    # A pt2 graph reads the batch size with aten.sym_size.int, which a plain trace bakes in
    # (the GRU's initial state then only fits the example's batch of 5).
    import torch

    model = servable(name)
    program = torch.export.export(
        model, (torch.from_numpy(windows[:5]),), dynamic_shapes=({0: torch.export.Dim.AUTO},)
    )

    exported = export_torchscript(program.module(), windows[:5], tmp_path / "model.pt")

    assert check_equivalence(model, exported, windows).passed
