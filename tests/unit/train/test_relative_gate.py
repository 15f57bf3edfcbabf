"""A registration gate relative to the run's naive baseline (``min_over_baseline``)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from engage.spec.models import GateSpec, RegistrationSpec
from engage.tracking import decide


def _decide(metrics: dict[str, float], **gate: object):
    return decide(RegistrationSpec(model_name="m", gate=GateSpec(**gate)), metrics)


def test_a_model_must_beat_its_baseline_by_the_margin() -> None:
    metrics = {"test_r2": 0.35, "baseline_test_r2": 0.3}

    passed = _decide(metrics, metric="test_r2", direction="maximize", min_over_baseline=0.05)
    failed = _decide(metrics, metric="test_r2", direction="maximize", min_over_baseline=0.1)

    assert passed.passed
    assert not failed.passed
    assert failed.threshold == pytest.approx(0.4)
    assert failed.explain() == "gate failed: test_r2 = 0.35 (needs >= 0.4; naive baseline 0.3)"


def test_a_minimised_metric_must_fall_below_the_baseline_by_the_margin() -> None:
    metrics = {"test_mae": 1.8, "baseline_test_mae": 2.0}

    assert _decide(metrics, metric="test_mae", direction="minimize", min_over_baseline=0.1).passed
    assert not _decide(
        metrics, metric="test_mae", direction="minimize", min_over_baseline=0.5
    ).passed


def test_threshold_and_margin_together_take_the_stricter_bound() -> None:
    metrics = {"val_accuracy": 0.85, "baseline_val_accuracy": 0.6}
    gate = {"metric": "val_accuracy", "direction": "maximize", "min_over_baseline": 0.0}

    assert _decide(metrics, threshold=0.8, **gate).passed
    assert not _decide(metrics, threshold=0.9, **gate).passed


def test_a_relative_gate_without_a_logged_baseline_fails_and_says_why() -> None:
    decision = _decide(
        {"test_r2": 0.9}, metric="test_r2", direction="maximize", min_over_baseline=0
    )

    assert not decision.passed
    assert math.isnan(decision.threshold)
    assert decision.explain() == "gate failed: test_r2 = 0.9 (no baseline_test_r2 to compare with)"


def test_the_absolute_gate_is_unchanged() -> None:
    metrics = {"val_accuracy": 0.91, "baseline_val_accuracy": 0.99}

    decision = _decide(metrics, metric="val_accuracy", threshold=0.8, direction="maximize")

    assert decision.passed  # the baseline does not count unless the gate asks for it
    assert decision.explain() == "gate passed: val_accuracy = 0.91 (needs >= 0.8)"


def test_a_gate_needs_a_threshold_or_a_margin() -> None:
    with pytest.raises(ValidationError, match="threshold, min_over_baseline or both"):
        GateSpec(metric="test_r2", direction="maximize")


def test_a_loss_has_no_baseline_to_be_relative_to() -> None:
    with pytest.raises(ValidationError, match="losses have none"):
        GateSpec(metric="val_loss", direction="minimize", min_over_baseline=0.0)
