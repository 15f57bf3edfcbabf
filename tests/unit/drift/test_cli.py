"""``engage drift check`` as cron and CI run it: exit 0 clean, 8 drift, 9 detector error."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from engage.cli.exit_codes import EXIT_CODES
from engage.errors import DriftCheckError, DriftDetected

main = importlib.import_module("engage.cli.main")


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory, gaussian_reference):
    return gaussian_reference.save(tmp_path_factory.mktemp("ref"))


def _csv(tmp_path, shift: float = 0.0, nan: bool = False, drop: str | None = None):
    rng = np.random.default_rng(4)
    x = rng.normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(300, 3))
    x[:, 2] += shift * 5.0
    frame = pd.DataFrame(x, columns=["a", "b", "c"]).assign(household="h00")
    if nan:
        frame.loc[:, "a"] = np.nan
    if drop:
        frame = frame.drop(columns=drop)
    path = tmp_path / "current.csv"
    frame.to_csv(path, index=False)
    return path


def _run(*args: str):
    return CliRunner().invoke(main.app, ["drift", "check", *args])


def test_exit_codes_are_documented() -> None:
    assert (DriftDetected.exit_code, DriftCheckError.exit_code) == (8, 9)
    assert {8, 9} <= set(EXIT_CODES)


def test_clean_data_exits_0_with_a_per_feature_table(ref_dir, tmp_path) -> None:
    result = _run(
        "--reference", str(ref_dir), "--data", str(_csv(tmp_path)), "--detectors", "quality,cusum"
    )

    assert result.exit_code == 0, result.output
    assert "cusum" in result.output
    assert "no drift" in result.output


def test_drift_exits_8_and_names_the_feature(ref_dir, tmp_path) -> None:
    result = _run(
        "--reference",
        str(ref_dir),
        "--data",
        str(_csv(tmp_path, shift=1.0)),
        "--detectors",
        "cusum",
    )

    assert result.exit_code == 8, result.output
    assert "drift detected" in result.output
    assert "cusum in c" in result.output


def test_a_missing_feature_is_a_quality_failure(ref_dir, tmp_path) -> None:
    result = _run(
        "--reference",
        str(ref_dir),
        "--data",
        str(_csv(tmp_path, drop="b")),
        "--detectors",
        "quality,cusum",
    )

    assert result.exit_code == 8, result.output
    assert "skipped" in result.output


def test_a_detector_error_exits_9_never_0(ref_dir, tmp_path) -> None:
    """All-NaN column: quality flags it, but KS on nothing must not read as no drift."""
    result = _run(
        "--reference", str(ref_dir), "--data", str(_csv(tmp_path, nan=True)), "--detectors", "cusum"
    )

    assert result.exit_code == 9, result.output
    assert "no verdict" in result.output


def test_an_unknown_detector_lists_the_valid_ones(ref_dir, tmp_path) -> None:
    result = _run("--reference", str(ref_dir), "--data", str(_csv(tmp_path)), "--detectors", "nope")

    assert result.exit_code == 9
    assert "registered: bocpd, bocpd_daily, cusum" in " ".join(result.output.split())


def test_model_and_reference_are_exclusive(tmp_path) -> None:
    assert _run("--data", str(_csv(tmp_path))).exit_code == 3
