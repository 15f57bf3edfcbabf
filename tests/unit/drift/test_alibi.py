"""alibi-detect behind engage's interface, at small sizes (configured once per module)."""

from __future__ import annotations

import numpy as np
import pytest

from engage.drift import make_detector
from engage.drift._alibi import corrected

pytest.importorskip("alibi_detect")


def _live(n: int, shift: float = 0.0) -> np.ndarray:
    x = np.random.default_rng(11).normal([0.0, 10.0, 100.0], [1.0, 2.0, 5.0], size=(n, 3))
    x[:, 1] += shift * 2.0
    return x


def test_bonferroni_and_fdr_corrections() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.5])

    np.testing.assert_allclose(corrected(p, "bonferroni"), [0.04, 0.16, 0.12, 1.0])
    np.testing.assert_allclose(corrected(p, "fdr"), [0.04, 0.0533333, 0.0533333, 0.5], rtol=1e-5)


@pytest.mark.parametrize("name", ["ks", "cvm"])
@pytest.mark.parametrize("correction", ["bonferroni", "fdr"])
def test_per_feature_tests_name_the_drifted_feature(gaussian_reference, name, correction) -> None:
    detector = make_detector(name, correction=correction).fit(gaussian_reference)

    quiet, shifted = detector.check(_live(200)), detector.check(_live(200, shift=1.0))

    assert not quiet.is_drift
    assert quiet.error is None
    assert shifted.is_drift
    assert shifted.drifted_features == ("b",)
    assert shifted.p_value < 0.05
    assert len(shifted.features) == 3


def test_a_nan_p_value_from_alibi_is_an_error_not_no_drift(gaussian_reference) -> None:
    """alibi-detect #221: NaN input gives NaN p-values that read as "no drift"."""
    x = _live(50)
    x[:, 0] = np.nan

    result = make_detector("ks").fit(gaussian_reference).check(x)

    assert result.error is not None
    assert not result.is_drift


def test_mmd_pytorch(gaussian_reference) -> None:
    detector = make_detector("mmd", n_permutations=50, n_ref=200).fit(gaussian_reference)

    assert detector.check(_live(100, shift=1.5)).is_drift


@pytest.fixture(scope="module")
def online(gaussian_reference):
    options = {"ert": 100, "window_size": 10, "n_bootstraps": 1000, "n_ref": 150}
    return {
        name: make_detector(name, **options).fit(gaussian_reference)
        for name in ("mmd_online", "lsdd_online", "cvm_online")
    }


@pytest.mark.parametrize("name", ["mmd_online", "lsdd_online", "cvm_online"])
def test_online_detectors_alarm_after_a_shift(online, name) -> None:
    detector = online[name]
    detector.reset()
    x = np.concatenate([_live(10), _live(60, shift=2.0)])

    result = detector.check(x)

    assert result.error is None
    assert result.is_drift
    assert result.alarm_index >= 5


def test_online_threshold_scale_moves_the_alarm_threshold(online) -> None:
    """Ratios above threshold_scale alarm: a huge scale silences the detector, and the
    reported statistic is relative to the scaled threshold."""
    detector = online["cvm_online"]
    x = np.concatenate([_live(10), _live(60, shift=2.0)])
    detector.reset()
    native = detector.check(x)
    try:
        detector.threshold_scale = 1e6
        detector.reset()
        silenced = detector.check(x)
    finally:
        detector.threshold_scale = 1.0

    assert native.is_drift
    assert not silenced.is_drift
    assert silenced.error is None
    assert 0 < silenced.statistic < 1e-3


def test_online_threshold_scale_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold_scale must be positive"):
        make_detector("cvm_online", threshold_scale=-1.0)
