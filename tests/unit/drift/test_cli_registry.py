"""``engage drift check --model NAME@alias`` against a registered model's logged reference.

The ``store`` fixture (conftest.py) is one file-based MLflow store per module: version 1
(alias ``champion``) has a logged reference, version 2 (``unmonitored``) none.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from tests.unit.drift.conftest import MODEL

main = importlib.import_module("engage.cli.main")


def _parquet(tmp_path: Path, shift: float = 0.0) -> Path:
    rng = np.random.default_rng(4)
    x = rng.normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(300, 3))
    x[:, 2] += shift * 5.0
    path = tmp_path / "current.parquet"
    pd.DataFrame(x, columns=["a", "b", "c"]).assign(request_id="r").to_parquet(path)
    return path


def _check(store: str, model: str, data: Path, where: str = "--tracking-uri"):
    args = ["drift", "check", "--model", model, "--data", str(data), where, store]
    result = CliRunner().invoke(main.app, args)
    return result, " ".join(result.output.split())


def _rows(output: str) -> dict[str, list[str]]:
    """The report table's rows by feature: [detector, statistic, p-value, threshold, drift]."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0] in ("a", "b", "c"):
            rows.setdefault(cells[0], []).append(cells[1:])
    return rows


def test_no_drift_exits_0_with_a_row_per_feature_and_detector(store, tmp_path) -> None:
    result, text = _check(store, f"{MODEL}@champion", _parquet(tmp_path))

    assert result.exit_code == 0, result.output
    assert f"against {MODEL} version 1 (run " in text
    rows = _rows(result.output)
    assert set(rows) == {"a", "b", "c"}
    assert sorted(r[0] for r in rows["c"]) == ["ks_ess", "quality"]
    assert all(r[-1] == "no" for rs in rows.values() for r in rs)
    assert "no drift: 2 detector(s) checked" in text


def test_drift_exits_8_and_names_the_feature_that_moved(store, tmp_path) -> None:
    result, text = _check(store, f"{MODEL}@champion", _parquet(tmp_path, shift=1.0))

    assert result.exit_code == 8, result.output
    ks = {f: next(r for r in rs if r[0] == "ks_ess") for f, rs in _rows(result.output).items()}
    assert ks["c"][-1] == "yes"
    assert float(ks["c"][2]) < 0.05
    assert (ks["a"][-1], ks["b"][-1]) == ("no", "no")
    assert "error: drift detected" in text
    assert "ks_ess in c" in text


def test_a_version_number_works_like_an_alias(store, tmp_path) -> None:
    result, _ = _check(store, f"{MODEL}/1", _parquet(tmp_path))

    assert result.exit_code == 0, result.output


def test_an_unknown_alias_names_the_aliases_there_are(store, tmp_path) -> None:
    result, text = _check(store, f"{MODEL}@prod", _parquet(tmp_path))

    assert result.exit_code == 5, result.output
    assert f"model '{MODEL}' has no version with alias 'prod'" in text
    assert "champion -> 1" in text


def test_an_unknown_model_names_the_registered_ones(store, tmp_path) -> None:
    result, text = _check(store, "nope@champion", _parquet(tmp_path))

    assert result.exit_code == 5, result.output
    assert "no registered model named 'nope'" in text
    assert f"registered models: {MODEL}" in text


def test_a_version_without_a_reference_says_so(store, tmp_path) -> None:
    result, text = _check(store, f"{MODEL}@unmonitored", _parquet(tmp_path))

    assert result.exit_code == 5, result.output
    assert f"{MODEL} version 2" in text
    assert "no usable 'reference/' artifact" in text


def test_a_bad_parquet_file_is_a_data_error_naming_the_file(store, tmp_path) -> None:
    bad = tmp_path / "current.parquet"
    bad.write_bytes(b"not a parquet file")

    result, text = _check(store, f"{MODEL}@champion", bad)

    assert result.exit_code == 3, result.output
    assert f"{bad}: cannot read it" in text


def test_a_missing_data_file_is_a_data_error(store, tmp_path) -> None:
    result, text = _check(store, f"{MODEL}@champion", tmp_path / "absent.parquet")

    assert result.exit_code == 3, result.output
    assert "absent.parquet: no such file" in text


def test_no_store_at_home_is_a_tracking_error_not_a_new_store(tmp_path) -> None:
    empty = tmp_path / ".engage"

    result, text = _check(str(empty), f"{MODEL}@champion", _parquet(tmp_path), where="--home")

    assert result.exit_code == 5, result.output
    assert "no MLflow store at" in text
    assert not (empty / "mlflow.db").exists()


def test_the_command_leaves_the_working_directory_empty(store, tmp_path, monkeypatch) -> None:
    # MLflow 3's file registry reads each version through a bare MlflowClient(), whose
    # default store is ./mlflow.db: engage pins that default to the store it was given.
    data = _parquet(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    result, _ = _check(store, f"{MODEL}@champion", data)

    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in cwd.iterdir()) == []
