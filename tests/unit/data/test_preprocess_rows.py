"""The row operator ``resample``: regular grids and filled gaps, against pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engage.data.preprocess import apply_rows, build_operators
from engage.errors import SpecError
from tests.unit.data._builders import file_spec


def _irregular(groups=("a", "b")) -> pd.DataFrame:
    """A validated-looking table with dropped minutes (gaps) in each group."""
    rng = np.random.default_rng(0)
    parts = []
    for k, g in enumerate(groups):
        minutes = np.sort(rng.choice(np.arange(90), size=50, replace=False))
        minutes[0] = 0
        times = pd.Timestamp("2026-01-05") + pd.to_timedelta(minutes + k, unit="min")
        x1 = rng.normal(20, 2, 50)
        parts.append(pd.DataFrame({"time": times, "site": g, "x1": x1, "x2": rng.normal(0, 1, 50)}))
        parts[-1]["label"] = (x1 > 20).astype(int)
    return pd.concat(parts, ignore_index=True)


def _reference(frame: pd.DataFrame, every: str, fill: str) -> pd.DataFrame:
    out = []
    for g, part in frame.groupby("site", sort=False):
        s = part.set_index("time")
        grid = pd.date_range(s.index[0], s.index[-1], freq=every)
        if fill == "linear":
            values = s[["x1", "x2"]].reindex(s.index.union(grid)).interpolate("time").reindex(grid)
        else:
            values = s[["x1", "x2"]].reindex(grid, method="ffill")
        labels = s["label"].reindex(grid, method="ffill")
        out.append(values.assign(site=g, label=labels.to_numpy()))
    return pd.concat(out)


@pytest.mark.parametrize("fill", ["linear", "ffill"])
@pytest.mark.parametrize("every", ["1min", "3min"])
def test_resample_matches_pandas_reindex_and_interpolate(fill: str, every: str) -> None:
    frame = _irregular()
    spec = file_spec(
        "x.csv", preprocess=[{"op": "resample", "params": {"every": every, "fill": fill}}]
    )

    got = apply_rows(frame, build_operators(spec.preprocess), spec)
    ref = _reference(frame, every, fill)

    assert list(got.columns) == list(frame.columns)
    assert got["time"].to_numpy().tolist() == ref.index.to_numpy().tolist()
    np.testing.assert_allclose(got[["x1", "x2"]].to_numpy(), ref[["x1", "x2"]].to_numpy())
    assert got["label"].tolist() == ref["label"].tolist()
    assert got["site"].tolist() == ref["site"].tolist()


def test_no_row_operator_leaves_the_table_as_it_is() -> None:
    frame = _irregular()
    spec = file_spec("x.csv", preprocess=[{"op": "clip", "params": {"low": 0}}])

    assert apply_rows(frame, build_operators(spec.preprocess), spec) is frame


def test_a_bad_step_names_its_field() -> None:
    spec = file_spec("x.csv", preprocess=[{"op": "resample", "params": {"every": "soon"}}])

    with pytest.raises(SpecError, match=r"data\.preprocess\[0\]\.params\.every"):
        build_operators(spec.preprocess)
