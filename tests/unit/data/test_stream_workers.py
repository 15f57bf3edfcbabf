"""Streamed workers without Ray: each epoch's augmentation, and several workers.

A fake shard stands in for Ray Data's (its blocks are what the readers yield, and its
context what :func:`engage.data.streaming.train_dataset` leaves there). A streamed worker
augments every block with the epoch's draws and trains exactly as an in-memory worker
that augments its cached features at the start of the epoch; with two workers, each one
reading its own span (:func:`engage.data.streaming.rank_span`, what
:class:`engage.data.stream_ingest.StreamIngest` gives it) gets the batches the in-memory
path gives that worker, epoch after epoch.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from ray.data import DataContext

from engage.data.batch_order import epoch_order, shuffled_batches
from engage.data.preprocess import build_operators, fit_preprocess
from engage.data.streaming import AUGMENT_CONFIG, SPAN_CONFIG, rank_span
from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import ModelSpec, PreprocessStep, TrainSpec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, attach_shard, epoch_batches, make_worker, train_epoch


class _Drop:
    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


class _FakeShard:
    """What ``ray.train.get_dataset_shard`` returns: ``{"x", "y", "i"}`` blocks and the
    dataset's context."""

    def __init__(self, blocks: list[dict], augment=None, span=None) -> None:
        self.blocks = blocks
        self.context = DataContext()
        self.context.set_config(AUGMENT_CONFIG, augment)
        self.context.set_config(SPAN_CONFIG, span)

    def iter_torch_batches(self, batch_size: int, prefetch_batches: int):
        del batch_size, prefetch_batches
        for block in self.blocks:
            yield {k: torch.as_tensor(v) for k, v in block.items()}

    def get_context(self) -> DataContext:
        return self.context


def _array_blocks(x: np.ndarray, y: np.ndarray, size: int = 5) -> list[dict]:
    return [
        {"x": x[lo : lo + size], "y": y[lo : lo + size], "i": np.arange(lo, min(lo + size, len(y)))}
        for lo in range(0, len(y), size)
    ]


def _augmentation():
    """Jitter then scaling, fitted (nothing to fit) on no windows: all of it runs per epoch."""
    steps = [PreprocessStep(op="jitter", params={"std": 0.5, "seed": 1}),
             PreprocessStep(op="scale", params={"std": 0.3, "seed": 2})]  # fmt: skip
    return fit_preprocess(build_operators(steps), np.zeros((1, 4, 2), np.float32))


def _losses(streamed: bool, buffer: int, augment=None) -> tuple[float, ...]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] > 0).astype(np.int64)
    train = TrainSpec(seed=5, epochs=3, batch_size=16, num_workers=1)
    job = TrainJob(
        train, ModelSpec(name="mlp"), "classification", ModelShape(4, 2, 2), None, None, "",
        shuffle_buffer=buffer, streamed=64 if streamed else None,
        augment=None if streamed else augment,
    )  # fmt: skip
    data = {"val_x": x[64:], "val_y": y[64:]}
    if not streamed:
        data |= {"train_x": x[:64], "train_y": y[:64]}
    w = make_worker(job, data, Reporter(_Drop()))
    if streamed:
        attach_shard(w, _FakeShard(_array_blocks(x[:64], y[:64]), augment))
    resources = ResourceSampler("cpu", every_s=3600.0)
    return tuple(train_epoch(w, epoch, resources)["train_loss"] for epoch in (1, 2, 3))


@pytest.mark.parametrize("buffer", [65_536, 24])
def test_a_streamed_worker_augments_each_epoch_exactly_as_in_memory(buffer: int) -> None:
    augment = _augmentation()

    streamed = _losses(streamed=True, buffer=buffer, augment=augment)

    assert streamed == _losses(streamed=False, buffer=buffer, augment=augment)
    assert streamed != _losses(streamed=True, buffer=buffer)  # the augmentation was applied


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize(("n", "buffer"), [(97, 10), (97, 200), (100, 25), (4, 8)])
def test_a_span_holds_the_whole_chunks_of_its_workers_positions(n, buffer, world) -> None:
    order = epoch_order(n, seed=1, epoch=1, buffer=buffer)
    per = n // world
    for rank in range(world):
        lo, hi = rank_span(n, world, rank, buffer)
        mine = order[rank * per : (rank + 1) * per]
        assert lo % buffer == 0
        assert hi == n or hi % buffer == 0
        assert bool(((mine >= lo) & (mine < hi)).all())
        if per:  # no chunk more than the positions need
            assert lo == int(rank * per // buffer * buffer)
            assert hi - lo <= per + 2 * buffer
    assert rank_span(n, 1, 0, buffer) == (0, n)


@pytest.mark.parametrize(("n", "buffer", "world"), [(97, 10, 2), (97, 10, 3), (97, 200, 2)])
def test_shuffled_batches_from_a_span_are_the_workers_slice_of_the_order(n, buffer, world):
    x = torch.arange(n, dtype=torch.float32)[:, None]
    y = torch.arange(n)
    per = n // world
    for rank in range(world):
        lo, hi = rank_span(n, world, rank, buffer)
        sizes = itertools.cycle([3, 7, 1])
        cuts = [lo]
        while cuts[-1] < hi:
            cuts.append(min(hi, cuts[-1] + next(sizes)))
        blocks = [(x[a:b], y[a:b]) for a, b in itertools.pairwise(cuts)]
        got = shuffled_batches(
            blocks, seed=4, epoch=2, buffer=buffer, batch=8, limit=per, first=rank * per, total=n
        )
        idx = epoch_order(n, seed=4, epoch=2, buffer=buffer)[rank * per : (rank + 1) * per]
        want = [(x[i], y[i]) for i in idx.split(8)]
        got = list(got)
        assert len(got) == len(want)
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(gx, wx)
            assert torch.equal(gy, wy)


def _worker(memory, streamed, buffer: int, rank: int, world: int):
    """Worker ``rank`` of ``world`` of the in-memory path (training on the cached features,
    augmented each epoch, as the train stage runs it) and of the streamed path (reading the
    blocks of its span, as StreamIngest's dataset yields them)."""
    cached, augment = memory.preprocess.split_for_cache()
    features, _ = cached.transform(memory.train.x, train=False)
    stream = streamed.stream
    _, window, features_n = memory.model_inputs("train").shape
    train = TrainSpec(seed=3, epochs=2, batch_size=8 * world, num_workers=world)
    shape = ModelShape(window, features_n, len(memory.classes))
    spec = (train, ModelSpec(name="mlp"), "classification", shape, None, None, "")
    val = {"val_x": memory.model_inputs("val"), "val_y": memory.val.y}
    in_memory = make_worker(
        TrainJob(*spec, shuffle_buffer=buffer, augment=augment),
        val | {"train_x": features, "train_y": memory.train.y},
        Reporter(_Drop()), rank=rank, world=world,
    )  # fmt: skip
    on_stream = make_worker(
        TrainJob(*spec, shuffle_buffer=buffer, streamed=stream.n_train),
        val | {"target_mean": 0.0, "target_std": 1.0},
        Reporter(_Drop()), rank=rank, world=world,
    )  # fmt: skip
    span = rank_span(stream.n_train, world, rank, buffer)
    blocks = [b for u in stream.units_in(span) for b in stream.blocks(u, span)]
    attach_shard(on_stream, _FakeShard(blocks, stream.augment, span))
    return in_memory, on_stream


@pytest.mark.parametrize("buffer", [64, 65_536])
@pytest.mark.parametrize("world", [2, 3])
def test_each_streamed_worker_gets_the_in_memory_batches_of_its_rank(both, buffer, world):
    memory, streamed = both
    n = streamed.stream.n_train
    assert n > 2 * 64  # several chunks of 64: a chunk straddles the workers' shares

    seen = []
    for rank in range(world):
        in_memory, on_stream = _worker(memory, streamed, buffer, rank, world)
        lo, hi = on_stream.span
        if buffer < n:
            assert hi - lo < n  # the worker reads its chunks, not the whole split
        for epoch in (1, 2):
            want = list(epoch_batches(in_memory, epoch))
            got = list(epoch_batches(on_stream, epoch))
            assert len(got) == len(want) == -(-(n // world) // 8)
            for (gx, gy), (wx, wy) in zip(got, want, strict=True):
                torch.testing.assert_close(gx, wx, rtol=0, atol=1e-5)
                assert torch.equal(gy, wy)
            seen.append(torch.cat([x for x, _ in got]))
    # Each epoch draws new noise and a new order: epoch 2's batches are not epoch 1's.
    assert not torch.allclose(seen[0], seen[1])


def test_a_shard_given_another_workers_span_is_refused(both) -> None:
    memory, streamed = both
    _, on_stream = _worker(memory, streamed, 64, 0, 2)
    stream = streamed.stream

    with pytest.raises(ValueError, match="worker 0 of 2 was given windows"):
        attach_shard(on_stream, _FakeShard([], stream.augment, rank_span(stream.n_train, 2, 1, 64)))


def test_the_trainer_hands_streamed_splits_to_workers_by_span() -> None:
    # The spans above are what the trainer's ingest gives out, one ordered dataset each: Ray
    # Data's own split deals blocks to whichever worker has fewest rows (2 workers, same
    # seed: rank 1 got none of its in-memory batches), an end-to-end run costs 40 s.
    from engage.data.stream_ingest import StreamIngest
    from engage.train.trainer import READER_CPUS, ingest_config

    ingest = ingest_config()

    assert isinstance(ingest, StreamIngest)
    assert ingest.reader_cpus == READER_CPUS
    assert ingest.ingest_options.preserve_order
