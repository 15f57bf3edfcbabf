"""Augmentation per epoch, and the cacheable (deterministic) part of a fitted preprocessing."""

from __future__ import annotations

import numpy as np

from engage.data.preprocess import build_operators, fit_preprocess
from engage.data.preprocess.fitted import CHUNK
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import windows

HEAVY = [
    PreprocessStep(op="clip", params={"quantile": 0.01}),
    PreprocessStep(op="rolling", params={"size": 3, "stats": ["mean", "max"]}),
    PreprocessStep(op="spectral", params={"bins": 4}),
    PreprocessStep(op="jitter", params={"std": 0.1, "seed": 1}),
    PreprocessStep(op="scale", params={"std": 0.2, "seed": 2}),
]


def _fitted(steps=HEAVY, n: int = 40):
    return fit_preprocess(build_operators(steps), windows(n=n))


def test_each_epoch_draws_new_noise_and_the_same_epoch_repeats() -> None:
    fitted, x = _fitted(), windows(n=20, seed=3)

    one, _ = fitted.transform(x, train=True, epoch=1)
    two, _ = fitted.transform(x, train=True, epoch=2)
    two_again, _ = fitted.transform(x, train=True, epoch=2)
    default, _ = fitted.transform(x, train=True)

    assert not np.allclose(one, two)
    assert np.array_equal(two, two_again)
    assert np.array_equal(one, default)  # epoch 1 is what a transform without an epoch draws


def test_evaluation_and_serving_never_augment_whatever_the_epoch() -> None:
    fitted, x = _fitted(), windows(n=10, seed=4)

    first, _ = fitted.transform(x, train=False, epoch=1)
    later, _ = fitted.transform(x, train=False, epoch=5)

    assert np.array_equal(first, later)
    assert not any(op.train_only for op in fitted.module().ops)


def test_a_split_in_pieces_gets_each_epochs_draws_of_the_whole() -> None:
    steps = [PreprocessStep(op="jitter", params={"std": 0.1, "seed": 5})]
    fitted = fit_preprocess(build_operators(steps), windows())
    x = np.zeros((CHUNK + 100, 4, 2), np.float32)  # two chunks, the second partial
    whole, _ = fitted.transform(x, train=True, epoch=3)

    cut = CHUNK - 37  # a piece that ends inside the first chunk, one across the boundary
    parts = [
        fitted.transform(x[lo:hi], train=True, start=lo, total=len(x), epoch=3)[0]
        for lo, hi in ((0, cut), (cut, len(x)))
    ]

    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_the_cached_part_then_the_epoch_part_is_the_whole_transform() -> None:
    fitted, x = _fitted(), windows(n=30, seed=6)
    cached, per_epoch = fitted.split_for_cache()

    assert [s.op.name for s in cached.steps] == ["clip", "rolling", "spectral"]
    assert [s.op.name for s in per_epoch.steps] == ["jitter", "scale"]
    features, _ = cached.transform(x, train=True)  # nothing in it augments
    for epoch in (1, 2):
        want, _ = fitted.transform(x, train=True, epoch=epoch)
        got, _ = per_epoch.transform(features, train=True, epoch=epoch)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    served, _ = fitted.transform(x, train=False)
    np.testing.assert_array_equal(features, served)


def test_operators_after_an_augmentation_run_every_epoch_not_from_the_cache() -> None:
    steps = [
        PreprocessStep(op="lag", params={"lags": [1]}),
        PreprocessStep(op="jitter", params={"std": 0.1, "seed": 1}),
        PreprocessStep(op="spectral", params={"bins": 3, "standardize": False}),
    ]
    fitted, x = _fitted(steps), windows(n=12, seed=7)
    cached, per_epoch = fitted.split_for_cache()

    assert [s.op.name for s in cached.steps] == ["lag"]
    assert [s.op.name for s in per_epoch.steps] == ["jitter", "spectral"]
    features, _ = cached.transform(x, train=True)
    got, _ = per_epoch.transform(features, train=True, epoch=4)
    want, _ = fitted.transform(x, train=True, epoch=4)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert per_epoch.output_shape(*features.shape[1:]) == fitted.output_shape(*x.shape[1:])


def test_without_augmentation_everything_is_cacheable() -> None:
    steps = [PreprocessStep(op="rolling", params={"size": 2})]
    fitted = _fitted(steps)
    cached, per_epoch = fitted.split_for_cache()

    assert not fitted.augments
    assert _fitted().augments
    assert len(cached.steps) == 1
    assert per_epoch.steps == ()


def test_the_cpu_runs_deterministic_steps_in_pieces_with_the_whole_batchs_result() -> None:
    import torch

    from engage.data.preprocess.fitted import PIECE

    fitted = _fitted(HEAVY[:3])
    x = windows(n=PIECE + 44, seed=8)
    whole = torch.from_numpy(x)
    for step in fitted.steps:
        whole = step.op.transform(whole, step.state)

    got, _ = fitted.transform(x, train=False)

    np.testing.assert_allclose(got, whole.numpy(), rtol=1e-6, atol=1e-6)
