"""Augmentation (jitter, scale): the noise a seeded generator draws, train only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engage.data.preprocess import build_operators, fit_preprocess, make_operator
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import DEVICES, run, windows


def _gen(device: str, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


@pytest.mark.parametrize("device", DEVICES)
def test_jitter_adds_the_generators_normal_draws_times_std(device: str) -> None:
    x = windows()
    op = make_operator("jitter", {"std": 0.5, "seed": 3})

    got = run(op, x, device, generator=_gen(device, 3))
    z = torch.randn(x.shape, generator=_gen(device, 3), device=device).cpu().numpy()

    np.testing.assert_allclose(got, x + 0.5 * z, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_scale_multiplies_each_window_feature_by_one_factor(device: str) -> None:
    x = windows()
    op = make_operator("scale", {"std": 0.2})

    got = run(op, x, device, generator=_gen(device, 0))
    z = torch.randn((6, 1, 3), generator=_gen(device, 0), device=device).cpu().numpy()

    np.testing.assert_allclose(got, x * (1 + 0.2 * z), rtol=1e-6)


def test_augmentation_applies_to_train_only_and_repeats_with_the_seed() -> None:
    steps = [PreprocessStep(op="jitter", params={"std": 0.1, "seed": 7})]
    fitted = fit_preprocess(build_operators(steps), windows())
    x = windows(seed=9)

    first, _ = fitted.transform(x, train=True)
    again, _ = fitted.transform(x, train=True)
    served, _ = fitted.transform(x, train=False)

    assert not np.array_equal(first, x)
    assert np.array_equal(first, again)
    assert np.array_equal(served, x)
    assert len(fitted.module().ops) == 0


def test_jitter_and_scale_give_exactly_the_values_of_their_formulas() -> None:
    # Their noise is scaled in place (one pass fewer over a batch): the values, and so the
    # batches for a seed, are bit for bit those of x + std * z and x * (1 + std * z).
    x = torch.from_numpy(windows(n=40, window=33, features=7, seed=2))
    jitter = make_operator("jitter", {"std": 0.05, "seed": 1})
    scale = make_operator("scale", {"std": 0.1, "seed": 2})

    got_jitter = jitter.transform(x, {}, _gen("cpu", 1))
    got_scale = scale.transform(x, {}, _gen("cpu", 2))

    assert torch.equal(got_jitter, x + 0.05 * torch.randn(x.shape, generator=_gen("cpu", 1)))
    z = torch.randn((40, 1, 7), generator=_gen("cpu", 2))
    assert torch.equal(got_scale, x * (1.0 + 0.1 * z))
    assert torch.equal(x, torch.from_numpy(windows(n=40, window=33, features=7, seed=2)))
