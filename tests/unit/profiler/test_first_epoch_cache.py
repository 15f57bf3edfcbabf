"""A features cache built by the loader in the first epoch, batch by batch, as it reads.

The whole-job rate of a features cache paid its build before the first step (0.82 s of
2.74 s on the preprocessing-heavy job). Built in the first epoch instead, each batch's
windows go through the cacheable steps when the batch is first read (in the loader thread,
beside the training step) and stay in the cache; the model must see exactly the batches
it sees with the cache built up front.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from engage.data.preprocess import build_operators, fit_preprocess
from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import windows

# The preprocessing-heavy pipeline's kinds of step, small: every cacheable one, then the
# augmentations that run on every batch.
STEPS = [
    PreprocessStep(op="clip", params={"quantile": 0.01}),
    PreprocessStep(op="rolling", params={"size": 3, "stats": ["mean", "std", "max"]}),
    PreprocessStep(op="lag", params={"lags": [1, 2]}),
    PreprocessStep(op="spectral", params={"bins": 4}),
    PreprocessStep(op="jitter", params={"std": 0.05, "seed": 1}),
    PreprocessStep(op="scale", params={"std": 0.1, "seed": 2}),
]
N, BATCH = 70, 12  # 5 batches an epoch; neither a multiple of the 32-window pieces


def _fitted():
    return fit_preprocess(build_operators(STEPS), windows(n=N, window=24, features=3))


def _batches(store: WindowStore, config: LoaderConfig, fitted, steps: int) -> list:
    seen: list = []
    run_pipeline(store, config, fitted, lambda x, y: seen.append((x, y)), steps=steps, warmup=0)
    return seen


def test_the_first_epochs_build_gives_the_batches_of_the_cache_built_before(
    tmp_path: Path,
) -> None:
    fitted = _fitted()
    x, y = windows(n=N, window=24, features=3, seed=1), np.arange(N)
    steps = 3 * (N // BATCH)  # three epochs: the first builds, the others read
    before = _batches(
        WindowStore(x, y, tmp_path / "a"), LoaderConfig("features", 0, "cpu", BATCH), fitted, steps
    )
    for thread in (False, True):
        config = LoaderConfig("features", 0, "cpu", BATCH, None, 2, thread, "first_epoch")
        during = _batches(WindowStore(x, y, tmp_path / str(thread)), config, fitted, steps)

        assert len(during) == len(before) == steps
        for (a, ya), (b, yb) in zip(before, during, strict=True):
            assert torch.equal(a, b)  # bitwise: the same inputs to the model
            assert torch.equal(ya, yb)


def test_each_window_is_computed_once_and_the_cache_is_whole_after_the_first_epoch(
    tmp_path: Path,
) -> None:
    fitted = _fitted()
    x = windows(n=N, window=24, features=3, seed=1)
    store = WindowStore(x, np.arange(N), tmp_path)
    whole = WindowStore(x, np.arange(N), tmp_path / "whole").features(fitted)
    batches = N // BATCH
    config = LoaderConfig("features", 0, "cpu", BATCH, build="first_epoch")

    run_pipeline(store, config, fitted, steps=batches - 1, warmup=0)
    built = store.feature_seconds[id(fitted)]
    assert built > 0
    # one batch not read yet: the cache is not whole, and reading it computes only that one
    np.testing.assert_array_equal(store.feature_rows(fitted, 0, BATCH), whole[:BATCH])
    assert store.feature_seconds[id(fitted)] == built
    last = store.feature_rows(fitted, (batches - 1) * BATCH, batches * BATCH)
    np.testing.assert_array_equal(last, whole[(batches - 1) * BATCH : batches * BATCH])
    # the windows past the last whole batch (no batch reads them) complete the cache
    store.feature_rows(fitted, batches * BATCH, N)
    np.testing.assert_array_equal(store.features(fitted), whole)
    seconds = store.feature_seconds[id(fitted)]

    run_pipeline(store, config, fitted, steps=batches, warmup=0)  # a later epoch
    assert store.feature_seconds[id(fitted)] == seconds  # nothing computed again


def test_loader_worker_processes_read_a_cache_built_before(tmp_path: Path) -> None:
    fitted = _fitted()
    store = WindowStore(windows(n=N, window=24, features=3, seed=1), np.arange(N), tmp_path)
    config = LoaderConfig("features", 1, "cpu", BATCH, build="first_epoch")

    run_pipeline(store, config, fitted, steps=2, warmup=1)

    assert id(fitted) in store._features  # built whole before the first step


def test_a_transform_writes_into_the_rows_it_is_given_or_refuses_the_wrong_shape() -> None:
    cached, _ = _fitted().split_for_cache()
    x = windows(n=N, window=24, features=3, seed=1)
    whole, _ = cached.transform(x, train=False)
    rows = np.zeros_like(whole)

    got, _ = cached.transform(x[12:24], train=False, threads=2, out=rows[12:24])

    assert np.shares_memory(got, rows)
    np.testing.assert_array_equal(rows[12:24], whole[12:24])
    assert not rows[:12].any()
    with pytest.raises(ValueError, match="out is"):
        cached.transform(x[:12], train=False, out=rows[:11])
