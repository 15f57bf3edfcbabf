"""Builders shared by the data tests: small clean tables and specs that point at them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from engage.spec.models import DataSpec


def clean_table(rows_per_group: int = 60, groups: tuple[str, ...] = ("a", "b")) -> pd.DataFrame:
    """Two sensors and a binary label per group, one row a minute, times as ISO text."""
    rng = np.random.default_rng(0)
    parts = []
    for g in groups:
        times = pd.date_range("2026-01-05", periods=rows_per_group, freq="min")
        x1 = rng.normal(20, 2, rows_per_group).round(3)
        parts.append(
            pd.DataFrame(
                {
                    "time": times.strftime("%Y-%m-%d %H:%M:%S"),
                    "site": g,
                    "x1": x1,
                    "x2": rng.normal(0, 1, rows_per_group).round(3),
                    "label": (x1 > 20).astype(int),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def file_spec(path: Path | str, kind: str = "csv", **overrides: object) -> DataSpec:
    """A DataSpec over a table like :func:`clean_table` written to ``path``."""
    data = {
        "source": {"type": kind, "path": str(path), "timestamp": "time", "group": "site"},
        "features": ["x1", "x2"],
        "target": "label",
        "task": "classification",
        "window": 5,
        "stride": 1,
    }
    data.update(overrides)
    return DataSpec.model_validate(data)


def synthetic_spec(**overrides: object) -> DataSpec:
    """The quickstart's data section: 4 households, 14 days, window 30, stride 5."""
    data = {
        "source": {"type": "synthetic"},
        "features": ["temperature", "humidity", "co2", "motion", "power"],
        "target": "occupied",
        "task": "classification",
        "window": 30,
        "stride": 5,
    }
    data.update(overrides)
    return DataSpec.model_validate(data)


def write(frame: pd.DataFrame, folder: Path, kind: str) -> Path:
    """Write ``frame`` as ``data.csv`` or ``data.parquet`` under ``folder``."""
    path = folder / f"data.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path
