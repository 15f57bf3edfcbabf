"""The registry, the template check() and its error handling, and the public surface."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import engage.drift as drift
from engage.drift import DETECTORS, DriftResult, detector_names, make_detector
from engage.drift.base import DriftDetector, register_detector


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(KeyError, match=r"registered: .*cusum.*quality"):
        make_detector("page_hinkey")


def test_builtin_names_are_listed_without_importing_alibi() -> None:
    names = detector_names()

    assert {
        "cusum",
        "quality",
        "ks",
        "cvm",
        "mmd",
        "mmd_online",
        "lsdd_online",
        "cvm_online",
    } <= set(names)


def test_every_registered_detector_has_a_docstring_and_a_default_threshold() -> None:
    detector_names()
    for name, cls in DETECTORS.items():
        assert (cls.__doc__ or "").strip(), name
        assert cls.default_threshold > 0, name
        assert cls.threshold_meaning.strip(), name
        assert cls.kind in ("batch", "online"), name


@pytest.mark.parametrize("name", drift.__all__)
def test_every_public_name_imports(name: str) -> None:
    assert getattr(importlib.import_module("engage.drift"), name) is not None


class _Broken(DriftDetector):
    """Raises or returns NaN, for the template's error handling."""

    default_threshold = 0.05
    threshold_meaning = "p"

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def _fit(self, reference) -> None:
        pass

    def _check(self, x):
        if self.mode == "raise":
            raise RuntimeError("boom")
        return DriftResult(self.name, 0.1, 0.05, float("nan"), False, (), len(x))


_Broken.name = "broken"


@pytest.mark.parametrize(
    ("mode", "message"), [("raise", "RuntimeError: boom"), ("nan", "NaN p-value")]
)
def test_an_exception_or_a_nan_p_value_is_an_error_never_no_drift(
    gaussian_reference, mode: str, message: str
) -> None:
    result = _Broken(mode).fit(gaussian_reference).check(np.zeros((5, 3)))

    assert result.error is not None
    assert message in result.error
    assert result.is_drift is False


def test_check_before_fit_is_an_error() -> None:
    assert (
        make_detector("cusum").check(np.zeros((2, 3))).error
        == "detector used before fit(reference)"
    )


def test_a_wrong_number_of_features_is_an_error_result(gaussian_reference) -> None:
    result = make_detector("quality").fit(gaussian_reference).check(np.zeros((4, 5)))

    assert "expected rows with 3 features" in result.error


def test_names_register_once() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_detector("cusum")(_Broken)


def test_every_detector_module_in_the_list_registers_and_every_detector_is_listed() -> None:
    listed = {module.__name__ for module in drift.DETECTOR_MODULES}

    assert {cls.__module__ for _, cls in DETECTORS.items()} == listed
