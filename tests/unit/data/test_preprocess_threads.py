"""A whole split preprocessed on several threads: the same values, on every usable core.

The features cache of ``train.loader: auto`` runs the deterministic steps over the whole
training split once before the first epoch; torch releases the GIL inside its operators,
so the split's pieces run on threads side by side and the build takes a fraction of its
time on one core, with every window's values exactly what one thread gives.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from engage.data.preprocess import build_operators, fit_preprocess
from engage.data.preprocess.fitted import CHUNK, PIECE, FittedPreprocess
from engage.spec.models import PreprocessStep
from tests.unit.data._preprocess import windows

STEPS = [
    PreprocessStep(op="clip", params={"quantile": 0.01}),
    PreprocessStep(op="rolling", params={"size": 3, "stats": ["mean", "std", "max"]}),
    PreprocessStep(op="lag", params={"lags": [1, 2]}),
    PreprocessStep(op="spectral", params={"bins": 4}),
    PreprocessStep(op="jitter", params={"std": 0.1, "seed": 1}),
    PreprocessStep(op="scale", params={"std": 0.2, "seed": 2}),
]


def _spy_threads(monkeypatch) -> set[int]:
    """The ids of the threads that run :meth:`FittedPreprocess._run` from now on; the
    first call of each of the first two pool threads waits for the other, so they are
    seen at work at the same time (a pool that ran everything on one thread fails with
    ``BrokenBarrierError`` after 10 s)."""
    seen: set[int] = set()
    lock = threading.Lock()
    both = threading.Barrier(2, timeout=10)
    run = FittedPreprocess._run

    def spy(self, *args, **kwargs):
        me = threading.get_ident()
        with lock:
            first = me not in seen and len(seen) < 2
            seen.add(me)
        if first and threading.current_thread() is not threading.main_thread():
            both.wait()
        return run(self, *args, **kwargs)

    monkeypatch.setattr(FittedPreprocess, "_run", spy)
    return seen


@pytest.mark.parametrize("train", [False, True])
def test_a_split_on_two_threads_is_exactly_what_one_thread_gives(monkeypatch, train) -> None:
    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))
    # Pieces of PIECE windows without augmentation, chunks of CHUNK with it (each chunk's
    # draws are one generator's): three of either, the last partial.
    x = windows(n=(2 * CHUNK if train else 2 * PIECE) + 17, window=24, seed=3)
    one, _ = fitted.transform(x, train=train, epoch=2)
    seen = _spy_threads(monkeypatch)

    two, notes = fitted.transform(x, train=train, epoch=2, threads=2)

    assert np.array_equal(one, two)
    assert notes == ()
    assert len(seen) == 2
    assert threading.get_ident() not in seen


def test_a_streamed_block_on_threads_keeps_its_chunks_draws(monkeypatch) -> None:
    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))
    x = windows(n=CHUNK + 300, window=24, seed=4)
    whole, _ = fitted.transform(x, train=True, epoch=3)
    cut = CHUNK - 37  # a block that starts inside the first chunk and crosses into the next

    part, _ = fitted.transform(x[cut:], train=True, start=cut, total=len(x), epoch=3, threads=2)

    assert np.array_equal(part, whole[cut:])


def test_torch_threads_of_the_caller_are_kept() -> None:
    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fitted.transform(windows(n=3 * PIECE, window=24), train=False, threads=2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_features_cache_is_built_on_every_usable_core(monkeypatch, tmp_path: Path) -> None:
    from engage.profiler import cores
    from engage.profiler.loader import WindowStore

    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))
    x = windows(n=3 * PIECE, window=24, seed=5)
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    seen = _spy_threads(monkeypatch)

    got = WindowStore(x, np.zeros(len(x)), tmp_path).features(fitted)

    cached, _ = fitted.split_for_cache()
    monkeypatch.undo()
    assert np.array_equal(got, cached.transform(x, train=False)[0])
    assert len(seen) == 2


def test_the_training_features_cache_is_built_on_every_usable_core(monkeypatch) -> None:
    from types import SimpleNamespace

    from engage.profiler import cores
    from engage.spec.models import ModelSpec, TrainSpec
    from engage.train.builders import ModelShape
    from engage.train.loader_tune import cache_features
    from engage.train.loop import TrainJob

    fitted = fit_preprocess(build_operators(STEPS), windows(n=64, window=24))
    x = windows(n=3 * PIECE, window=24, seed=6)
    data = SimpleNamespace(
        preprocess=fitted,
        train=SimpleNamespace(x=x, y=np.zeros(len(x), np.int64)),
        val=SimpleNamespace(y=np.zeros(0, np.int64)),
        model_inputs=lambda split: np.zeros((0, 1, 1), np.float32),
    )
    shape = ModelShape(*fitted.output_shape(24, 3), 2)
    job = TrainJob(TrainSpec(), ModelSpec(name="mlp"), "classification", shape, None, None, "")
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    seen = _spy_threads(monkeypatch)

    got = cache_features(job, data, put=lambda arrays: arrays)

    monkeypatch.undo()
    cached, _ = fitted.split_for_cache()
    assert np.array_equal(got.data_ref["train_x"], cached.transform(x, train=False)[0])
    assert len(seen) == 2
