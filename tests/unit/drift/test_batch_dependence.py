"""``engage drift check`` on autocorrelated tables: the model's own training, validation
and test tables exit 0 with the defaults; a really shifted table exits 8.

The process is sensor-like: a daily cycle (96 rows a day) plus AR(1) noise (r = 0.95).
Training is the first 4,000 rows, validation and test the next 1,000 each. A plain KS
test on such rows finds the slices "different" (the old default did, exit 8)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from engage.drift import capture_reference, make_detector
from tests.unit.drift.conftest import FEATURES, MODEL, _register

main = importlib.import_module("engage.cli.main")


def _process(n: int = 6000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    cycle = np.sin(2 * np.pi * t / 96)[:, None] * np.array([2.0, 5.0, 10.0])
    noise = np.zeros((n, 3))
    for i in range(1, n):
        noise[i] = 0.95 * noise[i - 1] + rng.normal(0, [0.3, 0.6, 1.5])
    return cycle + noise + np.array([20.0, 50.0, 400.0])


@pytest.fixture(scope="module")
def series() -> np.ndarray:
    return _process()


@pytest.fixture(scope="module")
def sensor_store(tmp_path_factory, series) -> Iterator[str]:
    root = tmp_path_factory.mktemp("drift-dependence")
    uri = (root / "mlruns").as_uri()
    reference = capture_reference(series[:4000], None, FEATURES)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        mp.chdir(root)
        from engage.tracking.store import open_client

        _register(open_client(uri), reference.save(root / "reference"))
        yield uri


def _table(tmp_path: Path, rows: np.ndarray, name: str) -> Path:
    path = tmp_path / f"{name}.parquet"
    pd.DataFrame(rows, columns=list(FEATURES)).to_parquet(path)
    return path


def _check(store: str, data: Path, *extra: str):
    args = ["drift", "check", "--model", f"{MODEL}@champion", "--data", str(data)]
    result = CliRunner().invoke(main.app, [*args, "--tracking-uri", store, *extra])
    return result


@pytest.mark.parametrize(
    ("name", "start", "stop"), [("train", 0, 4000), ("val", 4000, 5000), ("test", 5000, 6000)]
)
def test_the_models_own_tables_do_not_alarm(sensor_store, series, tmp_path, name, start, stop):
    result = _check(sensor_store, _table(tmp_path, series[start:stop], name))
    assert result.exit_code == 0, result.output


def test_a_plain_ks_would_have_alarmed_on_the_test_table(sensor_store, series, tmp_path):
    table = _table(tmp_path, series[5000:6000], "test")
    result = _check(sensor_store, table, "--detectors", "quality,ks")
    assert result.exit_code == 8, result.output


def test_a_shifted_table_still_alarms_and_names_the_feature(sensor_store, series, tmp_path):
    shifted = series[5000:6000].copy()
    shifted[:, 2] += 16.0  # about two standard deviations of c, inside its training range
    result = _check(sensor_store, _table(tmp_path, shifted, "shifted"))
    assert result.exit_code == 8, result.output
    assert "ks_ess" in result.output


def test_effect_size_and_effective_size_are_reported(series):
    ref = capture_reference(series[:4000], None, FEATURES)
    result = make_detector("ks_ess").fit(ref).check(series[5000:6000])
    assert not result.is_drift
    assert all(f.threshold == 0.25 for f in result.features)
    assert all(0.0 <= f.statistic <= 1.0 for f in result.features)
    with pytest.raises(ValueError, match="min_effect"):
        make_detector("ks_ess", min_effect=0.0)
