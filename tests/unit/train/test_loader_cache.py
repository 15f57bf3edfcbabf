"""train.loader: auto's features cache: deterministic features once, augmentation per epoch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engage.data.preprocess import build_operators, fit_preprocess
from engage.events import Event, Reporter
from engage.spec.models import ModelSpec, PreprocessStep, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loader_search import (
    Candidate,
    TuneResult,
    amortized_rate,
    candidate_space,
)
from engage.train.loader_tune import apply, cache_features, tune_loader
from engage.train.loop import TrainJob, make_worker, memory_batches

STEPS = [
    PreprocessStep(op="rolling", params={"size": 3, "stats": ["mean"]}),
    PreprocessStep(op="spectral", params={"bins": 3}),
    PreprocessStep(op="jitter", params={"std": 0.1, "seed": 1}),
    PreprocessStep(op="scale", params={"std": 0.2, "seed": 2}),
]


class _Drop:
    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def _data(n: int = 64, window: int = 8, features: int = 2):
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(n + 16, window, features)).astype(np.float32)
    fitted = fit_preprocess(build_operators(STEPS), raw[:n])
    train = SimpleNamespace(x=raw[:n], y=(raw[:n, -1, 0] > 0).astype(np.int64))
    val = SimpleNamespace(x=raw[n:], y=(raw[n:, -1, 0] > 0).astype(np.int64))
    inputs = {"val": fitted.transform(val.x, train=False)[0]}
    return SimpleNamespace(
        train=train,
        val=val,
        preprocess=fitted,
        train_windows=n,
        model_inputs=lambda name: inputs[name],
    )


def _job(data, **train) -> TrainJob:
    window, features = data.preprocess.output_shape(*data.train.x.shape[1:])
    spec = TrainSpec(loader="auto", batch_size=16, num_workers=1, seed=5, **train)
    shape = ModelShape(window, features, 2)
    return TrainJob(spec, ModelSpec(name="mlp"), "classification", shape, None, None, "")


def _epoch_x(w, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The epoch's windows in the order the worker trains on them, and their labels."""
    xs, ys = zip(*memory_batches(w, epoch), strict=True)
    return torch.cat(xs), torch.cat(ys)


def test_the_cached_features_augmented_each_epoch_are_what_recomputing_gives() -> None:
    data = _data()
    job = cache_features(_job(data), data, put=lambda arrays: arrays)
    w = make_worker(job, job.data_ref, Reporter(_Drop()))
    served, _ = data.preprocess.transform(data.train.x, train=False)

    np.testing.assert_allclose(job.data_ref["train_x"], served, rtol=1e-6, atol=1e-6)
    seen = {}
    for epoch in (1, 2):
        x, y = _epoch_x(w, epoch)
        whole, _ = data.preprocess.transform(data.train.x, train=True, epoch=epoch)
        idx = _order(w, epoch)
        np.testing.assert_allclose(x.numpy(), whole[idx], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(y.numpy(), data.train.y[idx])
        seen[epoch] = x
    assert not torch.allclose(seen[1], seen[2])  # new draws each epoch


def _order(w, epoch: int) -> np.ndarray:
    from engage.data.batch_order import epoch_order

    order = epoch_order(len(w.y), w.job.train.seed, epoch, w.job.shuffle_buffer)
    return order[: w.n_per].numpy()


def test_without_augmentation_the_job_is_left_as_it_is() -> None:
    data = _data()
    plain = fit_preprocess(build_operators(STEPS[:2]), data.train.x)
    data.preprocess = plain
    job = _job(data)

    assert cache_features(job, data, put=lambda a: pytest.fail("nothing to cache")) is job


def test_a_features_choice_is_applied_in_memory_and_refused_on_a_stream(monkeypatch) -> None:
    import dataclasses

    import ray

    monkeypatch.setattr(ray, "put", lambda arrays: arrays)  # no cluster: arrays as they are
    data = _data()
    result = TuneResult(Candidate(2, 0, 16, "features"), (), 2**30)

    job, said = apply(result, _job(data), data)
    stream_job, stream_said = apply(result, dataclasses.replace(_job(data), streamed=64), data)

    assert job.augment is not None
    assert said["cache"].startswith("features")
    assert stream_job.augment is None
    assert stream_said["cache"].startswith("not applied")


def test_features_are_tried_first_sized_for_the_whole_split_and_amortised() -> None:
    space = candidate_space(32, cores=2, features=True)

    assert [c.cache for c in space[:2]] == ["features", "features"]
    assert "features" not in {c.cache for c in candidate_space(32, cores=2)}
    c = Candidate(1, 0, 32, "features")
    assert c.footprint(100, 5_000, 70_000) == 1 * 32 * 100 * 2 + 70_000
    assert amortized_rate(1000.0, 0.0, 3) == pytest.approx(1000.0)
    # a cache that costs 3 ms per window to build, over 3 epochs: 1 ms more per window
    assert amortized_rate(1000.0, 0.003, 3) == pytest.approx(500.0)


def test_real_trials_time_the_features_cache_and_it_wins_over_epochs(tmp_path) -> None:
    data = _data(n=256)

    result = tune_loader(
        data, 32, cores=1, time_budget_s=3.0, memory_fraction=0.5, folder=tmp_path, epochs=20
    )

    timed = {t.candidate.cache: t.samples_per_s for t in result.trials if t.samples_per_s}
    assert {"features", "memory", "storage"} <= set(timed)
    assert result.chosen.cache == "features"


def test_loader_workers_overlap_the_step_only_with_cpus_to_spare() -> None:
    from engage.train.loader_search import predicted_rate

    one = Candidate(2, 1, 32, "features")
    load, step = 0.004, 0.001  # seconds per window: loading 4 ms, the step 1 ms

    spare = predicted_rate(one, 1 / load, step, free_cpus=2.0)
    none = predicted_rate(one, 1 / load, step, free_cpus=1.0)
    half = predicted_rate(Candidate(2, 2, 32), 1 / load, step, free_cpus=2.0)

    assert spare == pytest.approx(1 / load)  # the slower of the two
    assert none == pytest.approx(1 / (load + step))  # one CPU for all: the sum, as inline
    assert half == pytest.approx(1 / (load + 0.5 * step))
    assert predicted_rate(one, 1 / load, step) == pytest.approx(spare)  # unknown: all free


def test_a_loader_thread_is_tried_after_inline_when_a_core_is_spare() -> None:
    space = candidate_space(32, cores=2, features=True)

    assert space[:3] == [
        Candidate(1, 0, 32, "features"),
        Candidate(2, 0, 32, "features", thread=True),
        Candidate(2, 1, 32, "features"),
    ]
    assert not any(c.thread for c in candidate_space(32, cores=1, features=True))
    # a thread's queue has depths to try; inline loading has none
    from engage.train.loader_search import prefetch_variants

    assert [c.prefetch for c in prefetch_variants(Candidate(2, 0, 32, thread=True))] == [1, 4, 8]


def test_a_thread_on_the_features_cache_counts_the_next_epochs_inputs_too() -> None:
    inline = Candidate(1, 0, 32, "features")
    thread = Candidate(2, 0, 32, "features", thread=True)

    assert thread.footprint(100, 5_000, 70_000) == 2 * 32 * 100 * 2 + 2 * 70_000
    assert inline.footprint(100, 5_000, 70_000) == 32 * 100 * 2 + 70_000


def test_a_loader_thread_overlaps_the_step_like_a_worker_with_a_spare_cpu() -> None:
    from engage.train.loader_search import predicted_rate

    thread = Candidate(2, 0, 32, "features", thread=True)
    load, step = 0.004, 0.001

    assert predicted_rate(thread, 1 / load, step, free_cpus=2.0) == pytest.approx(1 / load)
    assert predicted_rate(thread, 1 / load, step, free_cpus=1.0) == pytest.approx(1 / (load + step))
    assert predicted_rate(thread, 1 / load, step) == pytest.approx(1 / load)


def test_a_thread_choice_prepares_the_next_epoch_ahead_with_the_same_batches(monkeypatch) -> None:
    import ray

    monkeypatch.setattr(ray, "put", lambda arrays: arrays)
    data = _data()
    inline = TuneResult(Candidate(1, 0, 16, "features"), (), 2**30)
    thread = TuneResult(Candidate(2, 0, 16, "features", thread=True), (), 2**30)

    job, said = apply(thread, _job(data, epochs=3), data)
    plain, plain_said = apply(inline, _job(data, epochs=3), data)
    w = make_worker(job, job.data_ref, Reporter(_Drop()))
    w_plain = make_worker(plain, plain.data_ref, Reporter(_Drop()))

    assert job.augment_ahead
    assert not plain.augment_ahead
    assert said["thread"].startswith("the next epoch")
    assert plain_said["thread"].startswith("not chosen")
    for epoch in (1, 2, 3):
        x, y = _epoch_x(w, epoch)
        x_plain, y_plain = _epoch_x(w_plain, epoch)
        assert torch.equal(x, x_plain)
        assert torch.equal(y, y_plain)
    assert w.inputs is not None
    assert w.inputs.ahead == {}


def test_a_thread_choice_is_not_applied_to_a_stream(monkeypatch) -> None:
    import dataclasses

    import ray

    monkeypatch.setattr(ray, "put", lambda arrays: arrays)
    data = _data()
    thread = TuneResult(Candidate(2, 0, 16, "features", thread=True), (), 2**30)

    job, said = apply(thread, dataclasses.replace(_job(data), streamed=64), data)

    assert not job.augment_ahead
    assert said["thread"].startswith("not applied")


def test_trials_with_the_training_step_are_timed_end_to_end_thread_included(tmp_path) -> None:
    data = _data(n=256)
    calls: list[int] = []

    result = tune_loader(
        data, 32, cores=2, time_budget_s=30.0, memory_fraction=0.5, folder=tmp_path, epochs=3,
        step_fn=lambda x, y: calls.append(len(y)),
    )  # fmt: skip

    timed = [t for t in result.trials if t.samples_per_s]
    assert timed
    assert all(t.loader_samples_per_s is None for t in timed)
    assert set(calls) == {32}
    assert any(t.candidate.thread for t in timed)
    assert any("end to end" in note for note in result.notes)


def test_an_in_memory_split_that_augments_searches_only_what_training_takes(tmp_path) -> None:
    # The train stage always trains such a split on its features cache: the search spends
    # its budget on the ways to feed that cache (inline, a thread, worker processes).
    data = _data(n=256)

    result = tune_loader(
        data, 32, cores=2, time_budget_s=30.0, memory_fraction=0.5, folder=tmp_path,
        features_only=True,
    )  # fmt: skip

    assert {t.candidate.cache for t in result.trials} == {"features"}
    assert {(t.candidate.workers, t.candidate.thread) for t in result.trials} >= {
        (0, False),
        (0, True),
        (1, False),
    }
