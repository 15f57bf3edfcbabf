"""Bad input through the CLI as a user meets it: one located message, an exit code, no run.

Every command here fails before Ray would start. As a guard, RAY_ADDRESS names no cluster:
if a bad input were ever accepted, the run fails fast with exit 4 instead of starting Ray.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.e2e

Engage = Callable[..., subprocess.CompletedProcess]
GUARD = {"RAY_ADDRESS": "no-cluster-here", "COLUMNS": "500"}
ROWS = 200

SPEC = """\
name: bad-input
data:
  source: {type: csv, path: data.csv, timestamp: time}
  features: [x1, x2]
  target: label
  task: classification
  window: 5
model:
  name: mlp
train:
  epochs: 1
  batch_size: BATCH
  num_workers: 1
"""


def _table(rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "time": pd.date_range("2026-01-05", periods=rows, freq="min").strftime(
                "%Y-%m-%d %H:%M:%S"
            ),
            "x1": rng.normal(20, 2, rows).round(3),
            "x2": rng.normal(0, 1, rows).round(3),
            "label": np.arange(rows) % 2,
        }
    )


def _write(folder: Path, table: pd.DataFrame, batch_size: int = 16) -> Path:
    table.to_csv(folder / "data.csv", index=False)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.replace("BATCH", str(batch_size)), encoding="utf-8")
    return spec


def _flat(text: str) -> str:
    """The output with line wrapping undone, so assertions do not depend on the width."""
    return " ".join(text.split())


def _assert_no_run(tmp_path: Path) -> None:
    db = tmp_path / ".engage" / "mlflow.db"
    if not db.exists():
        return
    with sqlite3.connect(db) as conn:
        (runs,) = conn.execute("SELECT COUNT(*) FROM runs").fetchone()
    assert runs == 0


def _assert_clean_failure(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "internal error" not in result.stderr
    return _flat(result.stderr)


def test_validate_quickstart_prints_split_sizes(run_engage: Engage) -> None:
    result = run_engage("validate", "pipelines/quickstart.yaml", env=GUARD)

    assert result.returncode == 0, result.stderr
    out = _flat(result.stdout)
    assert "valid spec for pipeline 'quickstart'" in out
    sizes = re.search(r"train ([\d,]+) / val ([\d,]+) / test ([\d,]+) windows", out)
    assert sizes is not None, out
    assert all(int(s.replace(",", "")) > 0 for s in sizes.groups())


def test_malformed_spec_is_located_and_creates_nothing(run_engage: Engage, tmp_path: Path) -> None:
    text = (tmp_path / "pipelines" / "quickstart.yaml").read_text()
    bad = text.replace("  num_workers: 2", "  num_workers: 0\n  wrokers: 3")
    assert bad != text
    (tmp_path / "bad.yaml").write_text(bad)
    line = bad.splitlines().index("  num_workers: 0") + 1

    result = run_engage("run", "bad.yaml", env=GUARD)

    err = _assert_clean_failure(result, 2)
    assert f"bad.yaml:{line}: train.num_workers: got 0; expected >= 1" in err
    assert f"bad.yaml:{line + 1}: train.wrokers: unknown key" in err
    assert "num_workers" in err.split("train.wrokers: unknown key")[1]  # lists the valid keys
    _assert_no_run(tmp_path)


def test_bad_override_names_the_override(run_engage: Engage, tmp_path: Path) -> None:
    result = run_engage("run", "pipelines/quickstart.yaml", "--set", "train.epochs=abc", env=GUARD)

    err = _assert_clean_failure(result, 2)
    assert "--set train.epochs=abc: train.epochs: got 'abc'; expected an integer" in err
    _assert_no_run(tmp_path)


def _break_missing_column(t: pd.DataFrame) -> pd.DataFrame:
    return t.drop(columns="x2")


def _break_nan(t: pd.DataFrame) -> pd.DataFrame:
    t.loc[36, "x2"] = np.nan  # data row 37, file line 38
    return t


def _break_text(t: pd.DataFrame) -> pd.DataFrame:
    t["x1"] = t["x1"].astype(object)
    t.loc[11, "x1"] = "warm"  # data row 12, file line 13
    return t


def _break_length(t: pd.DataFrame) -> pd.DataFrame:
    return t.head(4)  # window 5 needs 5 rows


@pytest.mark.parametrize(
    ("breaks", "expected"),
    [
        (_break_missing_column, ["missing column(s) 'x2'", "present: 'time', 'x1', 'label'"]),
        (_break_nan, ["column 'x2' has NaN at row 37 (file line 38) (1 row in all)"]),
        (_break_text, ["column 'x1' is not numeric: row 12 (file line 13) has 'warm'"]),
        (_break_length, ["the table has 4 rows, fewer than window + horizon = 5 + 0 = 5"]),
    ],
    ids=["missing-column", "nan", "not-numeric", "too-few-rows"],
)
def test_bad_data_is_named_by_column_and_row_and_creates_no_run(
    run_engage: Engage,
    tmp_path: Path,
    breaks: Callable[[pd.DataFrame], pd.DataFrame],
    expected: list[str],
) -> None:
    _write(tmp_path, breaks(_table()))

    result = run_engage("run", "spec.yaml", env=GUARD)

    err = _assert_clean_failure(result, 3)
    assert "invalid input data" in err
    assert str(tmp_path / "data.csv") in err
    for text in expected:
        assert text in err
    _assert_no_run(tmp_path)


def test_too_few_rows_for_the_splits_is_a_data_error(run_engage: Engage, tmp_path: Path) -> None:
    _write(tmp_path, _table(8), batch_size=1)  # enough for one window, not for three splits

    result = run_engage("run", "spec.yaml", env=GUARD)

    err = _assert_clean_failure(result, 3)
    assert "split has no samples" in err
    assert "data.window" in err
    _assert_no_run(tmp_path)


def test_batch_larger_than_the_training_split_is_located(
    run_engage: Engage, tmp_path: Path
) -> None:
    spec = _write(tmp_path, _table(), batch_size=5000)
    line = spec.read_text().splitlines().index("  batch_size: 5000") + 1

    result = run_engage("run", "spec.yaml", env=GUARD)

    err = _assert_clean_failure(result, 2)
    assert (
        f"spec.yaml:{line}: train.batch_size: batch_size 5000 is larger than the training split"
        in err
    )
    assert re.search(r"\((\d+) windows\); expected at most \1", err), err
    _assert_no_run(tmp_path)
