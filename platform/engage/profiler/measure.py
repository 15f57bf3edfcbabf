"""Measure each stage of a job's input pipeline alone, DS-Analyzer style.

The compute bound is the training step on batches already in memory; the loader is timed
alone from storage (cold, throttled to a bandwidth) and from the cache; preprocessing is
timed on one CPU core and, where there is one, on the GPU. Torch uses as many threads as
a training worker has CPUs, as it would in the job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engage.profiler.compute import make_step
from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline
from engage.profiler.verdict import StageTimes
from engage.spec.models import PipelineSpec
from engage.train.builders import ModelShape


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch threads, restoring the previous count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def free_cpus() -> float:
    """CPU capacity other processes leave: usable cores minus the 1-minute load, at least 1."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system
        return float(usable_cores())
    return min(float(usable_cores()), max(1.0, usable_cores() - load))


def time_per_call(fn: Any, steps: int, warmup: int = 1, rounds: int = 3) -> float:
    """Seconds per call of ``fn``: the steps are split into ``rounds`` back-to-back rounds,
    and the fastest round's mean is returned.

    A mean, not a median, since throughput is what is predicted; the fastest round's, as
    ``timeit`` advises, because a slower round measures the machine's other processes
    (a descheduled step on a busy host), not the stage: one such stall among 20 steps of a
    0.3 ms model made it look slower than 2 ms of preprocessing.
    """
    for _ in range(warmup):
        fn()
    rounds = max(1, min(rounds, steps))
    per_round = -(-steps // rounds)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            fn()
        best = min(best, (time.perf_counter() - start) / per_round)
    return best


def time_compute(
    spec: PipelineSpec, inputs: np.ndarray, y: np.ndarray, outputs: int, batch: int, steps: int
) -> float:
    """Seconds per training step of ``spec``'s model on in-memory model inputs.

    ``outputs`` is the model's output width (classes, or 1 for regression).
    """
    shape = ModelShape(inputs.shape[1], inputs.shape[2], outputs)
    step = make_step(spec, shape)
    reps = -(-batch // len(inputs)) if len(inputs) < batch else 1
    x = torch.from_numpy(np.concatenate([inputs] * reps)[:batch])
    t = torch.from_numpy(np.concatenate([y] * reps)[:batch])
    return time_per_call(lambda: step(x, t), steps)


def time_preprocess(fitted: Any, x: np.ndarray, batch: int, steps: int, device: str) -> float:
    """Seconds to preprocess one batch (with augmentation) on ``device``."""
    if fitted is None:
        return 0.0
    chunk = x[:batch]
    dev = torch.device(device)

    def once() -> None:
        """One batch preprocessed, waited for on a GPU."""
        fitted.transform(chunk, train=True, device=dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    return time_per_call(once, steps)


def measure(
    spec: PipelineSpec,
    data: Any,
    folder: Path,
    bandwidth: float | None = None,
    steps: int = 10,
    batch: int | None = None,
) -> StageTimes:
    """Time every stage of ``spec``'s input pipeline on its prepared ``data``.

    Parameters
    ----------
    spec : PipelineSpec
        The job: model, task, batch size, workers' CPUs.
    data : PreparedData
        Its prepared splits (raw windows and fitted preprocessing).
    folder : Path
        Where the training windows are written as shards (the storage read back).
    bandwidth : float, optional
        Storage read rate in bytes/s; ``None`` reads at full speed.
    steps : int
        Timed steps per measurement.
    batch : int, optional
        Windows per step; default the spec's per-worker batch.
    """
    free = free_cpus()  # before the measurements below add their own load
    train = spec.train
    b = batch or max(1, -(-train.batch_size // train.num_workers))
    b = min(b, len(data.train.x))
    store = WindowStore(data.train.x, data.train.y, folder)
    fitted = data.preprocess
    cpus = int(train.resources_per_worker.get("CPU", 1) or 1)
    inputs = data.model_inputs("train")
    outputs = len(data.classes) if data.classes else 1
    with torch_threads(cpus):
        storage = run_pipeline(store, LoaderConfig("storage", 0, "none", b, bandwidth), steps=steps)
        cache = run_pipeline(store, LoaderConfig("cache", 0, "none", b), steps=steps)
        prep = time_preprocess(fitted, data.train.x, b, steps, "cpu")
        gpu = (
            time_preprocess(fitted, data.train.x, b, steps, "cuda")
            if torch.cuda.is_available()
            else None
        )
        compute = time_compute(spec, inputs, data.train.y, outputs, b, steps)
        large = time_compute(spec, inputs, data.train.y, outputs, 2 * b, steps)
    read = store.shard_bytes(b) / bandwidth if bandwidth else 0.0
    return StageTimes(
        batch=b,
        storage=storage.step,
        read=min(read, storage.step),
        cache=cache.step,
        preprocess=prep,
        preprocess_gpu=gpu if fitted is not None else None,
        compute=compute,
        compute_large=large,
        cores=max(1, usable_cores() - cpus),
        bandwidth=bandwidth,
        free_cpus=free,
    )
