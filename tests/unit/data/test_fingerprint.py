"""Dataset fingerprints: content digests stable across processes, sensitive to any change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engage.data import DatasetFingerprint, fingerprint, generate_smart_living, table_digest

from ._builders import clean_table, file_spec, synthetic_spec

_DIGEST_SCRIPT = """
from engage.data import generate_smart_living, table_digest
print(table_digest(generate_smart_living(2, 2, 9, "2026-01-05", 1.0)))
"""


def test_digest_is_stable_across_processes() -> None:
    runs = [
        subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    ]
    here = table_digest(generate_smart_living(2, 2, 9, "2026-01-05", 1.0))

    assert runs[0] == runs[1] == here
    assert len(here) == 64


def test_digest_changes_with_any_value() -> None:
    table = clean_table()
    changed = table.copy()
    changed.loc[37, "x2"] += 0.001

    assert table_digest(table) != table_digest(changed)
    assert table_digest(table) == table_digest(table.copy())


def test_digest_changes_with_a_dtype_or_a_column_name() -> None:
    table = clean_table()

    assert table_digest(table) != table_digest(table.astype({"label": np.float64}))
    assert table_digest(table) != table_digest(table.rename(columns={"x1": "y1"}))


def test_digest_ignores_the_index() -> None:
    table = clean_table()

    assert table_digest(table) == table_digest(table.set_axis(np.arange(len(table)) + 5))


def test_synthetic_fingerprint_records_the_generator_parameters() -> None:
    spec = synthetic_spec(source={"type": "synthetic", "households": 2, "days": 1, "seed": 4})
    frame = generate_smart_living(2, 1, 4, "2026-01-05", 1.0)

    fp = fingerprint(frame, spec, Path("."))

    assert isinstance(fp, DatasetFingerprint)
    assert fp.name == "synthetic-smart-living"
    assert fp.source == "synthetic"
    assert fp.rows == 2 * 1440
    assert fp.params == {"households": 2, "days": 1, "seed": 4, "start": "2026-01-05", "noise": 1.0}
    assert fp.schema["timestamp"] == "datetime64[ns]"
    assert fp.schema["co2"] == "float64"


def test_file_fingerprint_names_the_file_and_has_no_params(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2]})

    fp = fingerprint(frame, file_spec("sub/readings.csv"), tmp_path)

    assert fp.name == "readings"
    assert fp.source == str((tmp_path / "sub" / "readings.csv").resolve())
    assert fp.params == {}
    assert fp.schema == {"a": "int64"}
