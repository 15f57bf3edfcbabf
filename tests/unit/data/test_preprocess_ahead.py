"""Batches and epoch inputs prepared ahead in a background thread: same items, overlapped."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from engage.data.preprocess import build_operators, fit_preprocess
from engage.data.preprocess.ahead import Ahead, EpochInputs
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import windows

STEPS = [
    PreprocessStep(op="rolling", params={"size": 3, "stats": ["mean"]}),
    PreprocessStep(op="jitter", params={"std": 0.1, "seed": 1}),
    PreprocessStep(op="scale", params={"std": 0.2, "seed": 2}),
]


def test_items_come_in_the_sources_order_and_the_thread_stops_on_close() -> None:
    ahead = Ahead(iter(range(10)), depth=2)

    got = [next(ahead) for _ in range(4)]
    ahead.close()

    assert got == [0, 1, 2, 3]
    assert not ahead.thread.is_alive()
    assert list(Ahead(iter(range(5)), depth=3)) == [0, 1, 2, 3, 4]  # then it ends


def test_the_next_item_is_prepared_while_the_consumer_holds_this_one() -> None:
    made = [threading.Event() for _ in range(3)]

    def source():
        for k, event in enumerate(made):
            event.set()
            yield k

    ahead = Ahead(source(), depth=1)
    assert next(ahead) == 0
    # the consumer has not asked for item 1: the thread made it meanwhile
    assert made[1].wait(timeout=10.0)
    assert list(ahead) == [1, 2]


def test_an_error_in_the_source_reaches_the_consumer() -> None:
    def source():
        yield 1
        raise ValueError("bad batch")

    ahead = Ahead(source(), depth=2)

    assert next(ahead) == 1
    with pytest.raises(ValueError, match="bad batch"):
        next(ahead)


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth"):
        Ahead(iter(()), depth=0)


def test_each_epochs_inputs_equal_augmenting_the_features_then_and_the_next_is_ahead() -> None:
    fitted = fit_preprocess(build_operators(STEPS), windows(n=40))
    cached, per_epoch = fitted.split_for_cache()
    features = torch.from_numpy(cached.transform(windows(n=30, seed=5), train=False)[0])

    inputs = EpochInputs(features, per_epoch, last=3)
    got = {e: inputs.get(e) for e in (1, 2, 3)}

    for epoch, x in got.items():
        want, _ = fitted.transform(windows(n=30, seed=5), train=True, epoch=epoch)
        np.testing.assert_array_equal(
            x.numpy(), per_epoch.transform(features.numpy(), True, epoch=epoch)[0]
        )
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6, atol=1e-6)
    assert inputs.ahead == {}  # nothing prepared past the last epoch
    inputs.close()


def test_a_resumed_run_starts_at_its_epoch_and_prepares_the_one_after() -> None:
    fitted = fit_preprocess(build_operators(STEPS[1:]), windows(n=20))
    features = torch.from_numpy(windows(n=20, seed=2))
    inputs = EpochInputs(features, fitted, last=5)

    third = inputs.get(3)

    assert set(inputs.ahead) == {4}
    np.testing.assert_array_equal(
        third.numpy(), fitted.transform(features.numpy(), True, epoch=3)[0]
    )
    np.testing.assert_array_equal(
        inputs.get(4).numpy(), fitted.transform(features.numpy(), True, epoch=4)[0]
    )
    inputs.close()


def test_a_loader_thread_serves_the_inline_loaders_batches(tmp_path: Path) -> None:
    from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline

    fitted = fit_preprocess(build_operators(STEPS), windows(n=64))
    store = WindowStore(windows(n=64, seed=1), np.arange(64), tmp_path)
    seen: dict[bool, list] = {False: [], True: []}
    for thread in (False, True):
        config = LoaderConfig("features", 0, "cpu", 8, None, 2, thread=thread)
        run_pipeline(store, config, fitted, lambda x, y, t=thread: seen[t].append((x, y)), steps=10)

    assert len(seen[True]) == len(seen[False]) == 12
    for (a, ya), (b, yb) in zip(seen[False], seen[True], strict=True):
        assert torch.equal(a, b)
        assert torch.equal(ya, yb)


def test_the_run_counts_the_cpu_of_the_training_thread_and_of_the_loader_thread(
    tmp_path: Path,
) -> None:
    from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline

    fitted = fit_preprocess(build_operators(STEPS), windows(n=64))
    store = WindowStore(windows(n=64, seed=1), np.arange(64), tmp_path)
    config = LoaderConfig("features", 0, "cpu", 8, None, 2, thread=True)

    threaded = run_pipeline(store, config, fitted, lambda x, y: None, steps=10)
    inline = run_pipeline(store, LoaderConfig("features", 0, "cpu", 8), fitted, steps=10)

    assert threaded.loader_cpu is not None
    assert threaded.loader_cpu > 0
    assert threaded.main_cpu > 0
    assert inline.loader_cpu is None  # inline, the training thread does it all
    assert inline.main_cpu > 0
