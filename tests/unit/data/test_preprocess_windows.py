"""Window operators (clip, rolling, lag, spectral) against numpy/pandas references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from engage.data.preprocess import make_operator
from tests.unit.data._preprocess import DEVICES, run, windows


def _per_window(x: np.ndarray, fn) -> np.ndarray:
    """Apply ``fn`` (DataFrame -> DataFrame) to every window as a pandas frame."""
    return np.stack([fn(pd.DataFrame(w)).to_numpy() for w in x])


@pytest.mark.parametrize("device", DEVICES)
def test_clip_fixed_bounds_match_numpy(device: str) -> None:
    x = windows()
    op = make_operator("clip", {"low": -1.0, "high": 1.5})

    assert np.array_equal(run(op, x, device), np.clip(x, -1.0, 1.5))


@pytest.mark.parametrize("device", DEVICES)
def test_clip_quantile_is_fitted_on_the_training_windows_only(device: str) -> None:
    train, other = windows(seed=1), windows(seed=2) * 50
    op = make_operator("clip", {"quantile": 0.05})

    state = op.fit(torch.from_numpy(train).to(device))
    rows = train.reshape(-1, train.shape[-1]).astype(np.float64)
    low, high = np.quantile(rows, [0.05, 0.95], axis=0)

    np.testing.assert_allclose(state["low"].cpu().numpy(), low, rtol=1e-5)
    np.testing.assert_allclose(run(op, other, device, state), np.clip(other, low, high), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [2, 4, 12, 20])
def test_rolling_matches_pandas_rolling_with_partial_windows(device: str, size: int) -> None:
    x = windows()
    op = make_operator("rolling", {"size": size, "stats": ["mean", "std", "min", "max"]})
    f = x.shape[-1]

    got = run(op, x, device)

    def reference(w: pd.DataFrame) -> pd.DataFrame:
        r = w.rolling(size, min_periods=1)
        return pd.concat([w, r.mean(), r.std(ddof=0), r.min(), r.max()], axis=1)

    assert got.shape == (6, 12, 5 * f)
    np.testing.assert_allclose(got, _per_window(x, reference), rtol=1e-4, atol=1e-5)
    assert op.output_shape(12, f) == (12, 5 * f)


@pytest.mark.parametrize("device", DEVICES)
def test_lag_matches_pandas_shift_then_backfill(device: str) -> None:
    x = windows()
    op = make_operator("lag", {"lags": [1, 3, 11]})

    got = run(op, x, device)

    def reference(w: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([w, *(w.shift(k).bfill() for k in (1, 3, 11))], axis=1)

    np.testing.assert_allclose(got, _per_window(x, reference), rtol=1e-6)
    assert op.output_shape(12, 3) == (12, 12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("bins", "log"), [(None, False), (4, True)])
def test_spectral_matches_numpy_rfft_magnitudes(device: str, bins, log: bool) -> None:
    x = windows()
    params = {"bins": bins, "log": log, "append": True, "standardize": False}
    op = make_operator("spectral", params)

    got = run(op, x, device)
    mag = np.abs(np.fft.rfft(x.astype(np.float64), axis=1))[:, : bins or 7]
    mag = np.log1p(mag) if log else mag

    np.testing.assert_allclose(got[:, :12], x)
    np.testing.assert_allclose(got[:, 12:], mag, rtol=1e-4, atol=1e-5)
    assert op.output_shape(12, 3) == (12 + (bins or 7), 3)


@pytest.mark.parametrize("device", DEVICES)
def test_spectral_standardises_each_bin_with_train_statistics(device: str) -> None:
    train, other = windows(seed=3), windows(seed=4)
    op = make_operator("spectral", {"bins": 5, "append": False})

    state = op.fit(torch.from_numpy(train).to(device))
    got = run(op, other, device, state)

    ref_train = np.log1p(np.abs(np.fft.rfft(train.astype(np.float64), axis=1))[:, :5])
    ref_other = np.log1p(np.abs(np.fft.rfft(other.astype(np.float64), axis=1))[:, :5])
    expected = (ref_other - ref_train.mean(0)) / ref_train.std(0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
