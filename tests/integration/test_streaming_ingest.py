"""Streaming ingest on the shared Ray session (issue 14, item 1).

A multi-shard Parquet data set (8 shards of 2 households) whose windowed training split
(what the in-memory path would hand every worker) is 0.9 GiB is trained on for one epoch by
one Ray Train worker reading its Ray Data shard. The peak private memory (RSS less shared
pages, sampled with psutil) of the driver and of every process of the Ray session stays
below a fraction of that split: it is never materialised whole. The shared session's object store is not
shrunk for this test (it is shared); the bound is on what each process holds instead.
Then the real Ray Data shard iterator is read twice with the same seed: the same batches,
equal to the in-memory order of :mod:`engage.data.batch_order`; with augmentation, each
epoch's. With two workers, the streamed ingest (:class:`engage.data.stream_ingest.StreamIngest`)
gives each worker its in-memory batches.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import torch
import yaml

from engage.data import prepare
from engage.data.batch_order import shuffled_batches
from engage.data.streaming import AUGMENT_CONFIG, epoch_blocks, train_dataset
from engage.events import Discard, Reporter
from engage.runtime.pipeline import RunOptions, run_pipeline
from engage.spec import parse_spec
from engage.spec.models import DataSpec, ModelSpec, TrainSpec
from engage.train.builders import ModelShape

pytestmark = pytest.mark.integration

HOUSEHOLDS, ROWS, SHARDS = 16, 90_000, 8  # 1.44 M rows, two households per shard
FEATURES = ["f0", "f1", "f2", "f3"]
WINDOW = 60  # a window is 60 x 4 float32 = 960 bytes


def _write_shards(folder: Path) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    per = HOUSEHOLDS // SHARDS
    for s in range(SHARDS):
        parts = []
        for h in range(s * per, (s + 1) * per):
            values = rng.normal(0, 1, (ROWS, len(FEATURES))).astype(np.float32)
            frame = pd.DataFrame(values, columns=FEATURES)
            frame.insert(0, "household", f"h{h:02d}")
            frame.insert(0, "timestamp", pd.date_range("2026-01-01", periods=ROWS, freq="min"))
            frame["label"] = (values[:, 0] > 0).astype(np.int64)
            parts.append(frame)
        pd.concat(parts).to_parquet(folder / f"part-{s:02d}.parquet", index=False)


def _spec(folder: Path) -> str:
    return yaml.safe_dump(
        {
            "name": "streaming-ingest",
            "data": {
                "source": {"type": "parquet", "path": str(folder), "group": "household"},
                "features": FEATURES,
                "target": "label",
                "task": "classification",
                "window": WINDOW,
                "streaming": True,
                "shuffle_buffer": 4096,
            },
            "model": {"name": "mlp", "params": {"hidden": 16, "layers": 1}},
            "train": {"epochs": 1, "batch_size": 4096, "num_workers": 1, "seed": 7},
            "monitor": {"enabled": False},
            "export": {"formats": []},
            "tracking": {"experiment": "streaming-ingest"},
        }
    )


class _PeakMemory:
    """Samples the private memory of this process and of its descendants (the Ray session)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.driver = self.workers = 0
        self.heaviest = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _private(p: psutil.Process) -> int:
        info = p.memory_info()
        return info.rss - info.shared

    def _run(self) -> None:
        mine = self.me.cmdline()
        while not self._stop.is_set():
            self.driver = max(self.driver, self._private(self.me))
            for child in self.me.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # a process that ended meanwhile
                    cmdline = child.cmdline()
                    if cmdline == mine:
                        # Forked by subprocess and not yet exec'd: it still maps this
                        # process's memory (counted as the driver's), not memory of its own.
                        continue
                    private = self._private(child)
                    name = " ".join(cmdline)[:40].strip()
                    if private > self.workers:
                        self.workers, self.heaviest = private, name
            time.sleep(0.2)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def streamed(ray_local, tmp_path_factory) -> dict:
    """One streamed training run, with the peak memory of every process while it ran."""
    root = tmp_path_factory.mktemp("streaming")
    _write_shards(root / "shards")
    loaded = parse_spec(_spec(root / "shards"), origin=str(root / "spec.yaml"))
    home = root / ".engage"
    data = prepare(loaded.spec.data, loaded.base_dir)  # also imports what the data stage needs
    before = _PeakMemory._private(psutil.Process())
    with _PeakMemory() as peak:
        result = run_pipeline(loaded, RunOptions(tracking_uri=f"sqlite:///{home}/m.db", home=home))
    return {"data": data, "result": result, "peak": peak, "before": before}


def test_training_on_the_stream_completes_with_bounded_memory(streamed) -> None:
    data = streamed["data"]
    split_bytes = data.train_windows * WINDOW * len(FEATURES) * 4
    peak = streamed["peak"]

    assert split_bytes > 0.85 * 2**30  # the in-memory path would hand a worker >0.85 GiB
    assert streamed["result"].metrics["test_accuracy"] > 0.5
    print(f"split {split_bytes / 2**20:.0f} MiB; peak private memory: driver +"
          f"{(peak.driver - streamed['before']) / 2**20:.0f} MiB, any Ray process "
          f"{peak.workers / 2**20:.0f} MiB ({peak.heaviest})")  # fmt: skip
    assert peak.driver - streamed["before"] < 0.5 * split_bytes, peak.driver
    # A worker holding the split would need all of it beside its ~0.3 GiB of torch and Ray.
    assert peak.workers < 0.6 * split_bytes, peak.workers


def _preprocessed_spec(folder: Path, streaming: bool) -> DataSpec:
    """A small sharded set with row and window operators, augmentation among them."""
    rng = np.random.default_rng(1)
    if not folder.exists():
        folder.mkdir(parents=True)
        for s in range(2):
            parts = []
            for h in range(2 * s, 2 * s + 2):
                values = rng.normal(0, 1, (3000, 2)).astype(np.float32)
                frame = pd.DataFrame(values, columns=FEATURES[:2])
                frame.insert(0, "household", f"h{h}")
                frame.insert(0, "timestamp", pd.date_range("2026-01-01", periods=3000, freq="min"))
                frame["label"] = (values[:, 0] > 0).astype(np.int64)
                parts.append(frame.drop(index=[10, 11, 500]))
            pd.concat(parts).to_parquet(folder / f"part-{s}.parquet", index=False)
    steps = [
        {"op": "resample", "params": {"every": "1min"}},
        {"op": "rolling", "params": {"size": 4, "stats": ["mean", "max"]}},
        {"op": "jitter", "params": {"std": 0.1, "seed": 2}},
        {"op": "spectral", "params": {"bins": 4}},
    ]
    data = {"source": {"type": "parquet", "path": str(folder), "group": "household"},
            "features": FEATURES[:2], "target": "label", "task": "classification",
            "window": 16, "streaming": streaming, "preprocess": steps}  # fmt: skip
    return DataSpec.model_validate(data)


def test_the_ray_data_shard_gives_the_same_batches_for_the_same_seed(streamed, tmp_path) -> None:
    import ray.data

    data = streamed["data"]
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    reads = []
    for _ in range(2):
        blocks = (
            (b["x"], b["y"]) for b in train_dataset(data.stream).iter_torch_batches(batch_size=4096)
        )
        got = shuffled_batches(blocks, seed=7, epoch=1, buffer=4096, batch=512, limit=60_000)
        reads.append([next(got) for _ in range(4)])
    direct = ((torch.from_numpy(b["x"]), torch.from_numpy(b["y"])) for b in data.stream.blocks(0))
    expected = shuffled_batches(direct, seed=7, epoch=1, buffer=4096, batch=512, limit=60_000)

    for (ax, ay), (bx, by) in zip(*reads, strict=True):
        assert torch.equal(ax, bx)
        assert torch.equal(ay, by)
    for (ax, ay), (ex, ey) in zip(reads[0], itertools.islice(expected, 4), strict=True):
        assert torch.equal(ax, ex)
        assert torch.equal(ay, ey)

    # data.preprocess on the stream: the Ray Data readers' blocks, augmented with each
    # epoch's draws as a worker augments them, are that epoch's in-memory model inputs.
    folder = tmp_path / "pre"
    memory, pre = (prepare(_preprocessed_spec(folder, s), tmp_path) for s in (False, True))
    dataset = train_dataset(pre.stream)
    augment = dataset.context.get_config(AUGMENT_CONFIG)
    assert augment is not None
    inputs = {}
    for epoch in (1, 2):
        read = dataset.iter_torch_batches(batch_size=4096)
        got = list(epoch_blocks(read, augment, epoch, pre.stream.n_train))
        inputs[epoch], _ = memory.preprocess.transform(memory.train.x, train=True, epoch=epoch)
        np.testing.assert_allclose(
            torch.cat([x for x, _ in got]).numpy(), inputs[epoch], rtol=0, atol=1e-5
        )
        np.testing.assert_array_equal(torch.cat([y for _, y in got]).numpy(), memory.train.y)
    np.testing.assert_array_equal(inputs[1], memory.model_inputs("train"))
    assert np.abs(inputs[2] - inputs[1]).mean() > 0.01  # epoch 2 draws new noise


def _rank_batches(job_data, world: int, shards: list, epoch: int) -> list[list[tuple]]:
    """Every worker's batches of ``epoch``, each reading its shard in a thread of its own
    (the splits of one ``streaming_split`` must be read together)."""
    from concurrent.futures import ThreadPoolExecutor

    from engage.train.loop import attach_shard, epoch_batches, make_worker

    job, data = job_data
    workers = [
        make_worker(job, data, Reporter(Discard()), rank=r, world=world) for r in range(world)
    ]
    for w, shard in zip(workers, shards, strict=True):
        attach_shard(w, shard)
    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(lambda w: list(epoch_batches(w, epoch)), workers))


def test_two_streamed_workers_get_the_in_memory_batches_of_their_ranks(ray_local, tmp_path):
    """Ray Train's ingest of a streamed split (StreamIngest, as ``configure`` is called by
    Ray Train with two workers) gives each worker the in-memory path's batches of its rank,
    augmented with each epoch's draws; Ray Data's default streaming split does not."""
    from ray.train import DataConfig

    from engage.data.stream_ingest import StreamIngest
    from engage.train.loader_tune import cache_features
    from engage.train.loop import TrainJob, epoch_batches, make_worker

    spec = _preprocessed_spec(tmp_path / "pre", True).model_copy(update={"shuffle_buffer": 2048})
    memory = prepare(spec.model_copy(update={"streaming": False}), tmp_path)
    streamed = prepare(spec, tmp_path)
    n, world = streamed.stream.n_train, 2
    assert n > 3 * 2048  # the chunk of 2048 at position n // 2 is read by both workers
    _, window, features = memory.model_inputs("train").shape
    train = TrainSpec(seed=7, epochs=2, batch_size=256, num_workers=world)
    common = (train, ModelSpec(name="mlp"), "classification", ModelShape(window, features, 2))
    val = {"val_x": memory.model_inputs("val"), "val_y": memory.val.y}
    job = TrainJob(*common, None, None, "", shuffle_buffer=2048)
    staged = cache_features(job, memory, put=lambda arrays: arrays)  # as the train stage runs it
    stream_job = TrainJob(*common, None, None, "", shuffle_buffer=2048, streamed=n)
    stream_data = val | {"target_mean": 0.0, "target_std": 1.0}
    dataset = train_dataset(streamed.stream)
    ingest = StreamIngest().configure({"train": dataset}, world, None, None)
    options = DataConfig.default_ingest_options()
    options.preserve_order = True  # what engage's trainer asked of Ray Data's split so far
    split = DataConfig(datasets_to_split=["train"], execution_options=options)

    for epoch in (1, 2):
        want = []
        for rank in range(world):
            w = make_worker(staged, staged.data_ref, Reporter(Discard()), rank=rank, world=world)
            want.append(list(epoch_batches(w, epoch)))
        got = _rank_batches((stream_job, stream_data), world, [s["train"] for s in ingest], epoch)
        for rank in range(world):
            assert len(got[rank]) == len(want[rank]) == -(-(n // world) // 128)
            for (gx, gy), (wx, wy) in zip(got[rank], want[rank], strict=True):
                torch.testing.assert_close(gx, wx, rtol=0, atol=1e-5)
                assert torch.equal(gy, wy)
        dealt = split.configure({"train": dataset}, world, None, None)
        other = _rank_batches((stream_job, stream_data), world, [s["train"] for s in dealt], epoch)
        same = [
            sum(torch.equal(a[1], b[1]) for a, b in zip(other[r], want[r], strict=False))
            for r in range(world)
        ]
        print(f"epoch {epoch}: Ray Data's streaming split: batches with the in-memory labels "
              f"per rank {same} of {[len(b) for b in want]}")  # fmt: skip
