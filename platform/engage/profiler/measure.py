"""Measure each stage of a job's input pipeline alone, DS-Analyzer style.

The compute bound is the training step on batches already in memory; the loader is timed
alone from storage (cold, throttled to a bandwidth) and from the cache; preprocessing is
timed on one CPU core (at the batch and at twice it) and, where there is one, on the GPU;
a cheap probe times what a loader worker process adds to hand a model-ready batch across
(its transfer). Torch uses as many threads as a training worker has CPUs, as it would in
the job.
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
from engage.profiler.cores import usable_cores
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


FREE_SAMPLE_S = 0.5
"""Seconds over which :func:`free_cpus` samples what other processes keep busy."""


def node_busy_seconds() -> float:
    """CPU-seconds the usable cores have been busy since boot (``/proc/stat``: user, nice,
    system, irq, softirq and steal time; idle and iowait are not busy); 0.0 where there is
    no ``/proc/stat``."""
    try:
        cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
    except AttributeError:  # not on Linux
        cpus = None
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except OSError:
        return 0.0
    rows = [r for r in lines if r[0] != "cpu" and (cpus is None or r[0] in cpus)]
    # user nice system idle iowait irq softirq steal (guest time is within user already)
    ticks = sum(sum(int(v) for i, v in enumerate(r[1:9]) if i not in (3, 4)) for r in rows)
    return ticks / os.sysconf("SC_CLK_TCK")


def capacity_left(busy_s: float, own_s: float, seconds: float, cores: int) -> float:
    """Cores other processes left over ``seconds``: ``cores`` less the node's busy
    CPU-seconds ``busy_s`` that were not this process's own (``own_s``), per second;
    between 1 and ``cores``."""
    others = max(0.0, busy_s - own_s) / max(seconds, 1e-9)
    return min(float(cores), max(1.0, cores - others))


def free_cpus(interval: float = FREE_SAMPLE_S) -> float:
    """CPU capacity other processes leave this one: the usable cores less what the node's
    other processes kept busy over a sample of ``interval`` seconds, at least 1.

    This process's own CPU time over the sample is not counted: the 1-minute load average
    (what this read before) counted the calling process itself, so a benchmark that had
    been computing for the past minute read a core taken on an idle node. Where there is
    no ``/proc/stat``, the load average is all there is.
    """
    node0, own0, t0 = node_busy_seconds(), time.process_time(), time.perf_counter()
    if node0 <= 0.0:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this system
            return float(usable_cores())
        return capacity_left(load, 0.0, 1.0, usable_cores())  # load: busy cores, per second
    time.sleep(interval)
    busy, own = node_busy_seconds() - node0, time.process_time() - own0
    return capacity_left(busy, own, time.perf_counter() - t0, usable_cores())


def time_per_call(
    fn: Any, steps: int, warmup: int = 1, rounds: int = 3, min_round_s: float = 0.05
) -> float:
    """Seconds per call of ``fn``: the steps are split into ``rounds`` back-to-back rounds,
    and the fastest round's mean is returned.

    A mean, not a median, since throughput is what is predicted; the fastest round's, as
    ``timeit`` advises, because a slower round measures the machine's other processes
    (a descheduled step on a busy host), not the stage: one such stall among 20 steps of a
    0.3 ms model made it look slower than 2 ms of preprocessing.

    Each round lasts at least ``min_round_s`` (more calls than ``steps / rounds`` for a
    cheap ``fn``: calls go on until the round has run that long): a round of a few
    milliseconds is shorter than a scheduler slice, and the fastest of three such rounds
    measured a lucky burst (0.52-0.58 ms for a step the pipeline ran at 0.9-1.1 ms, on a
    loaded 2-core host) instead of the throughput the pipeline gets.
    """
    for _ in range(warmup):
        fn()
    rounds = max(1, min(rounds, steps))
    per_round = -(-steps // rounds)
    best = float("inf")
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while calls < per_round or time.perf_counter() - start < min_round_s:
            fn()
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def time_compute(
    spec: PipelineSpec, inputs: np.ndarray, y: np.ndarray, outputs: int, batch: int, steps: int
) -> float:
    """Seconds per training step of ``spec``'s model on in-memory model inputs.

    ``outputs`` is the model's output width (classes, or 1 for regression).
    """
    shape = ModelShape(inputs.shape[1], inputs.shape[2], outputs)
    step = make_step(spec, shape)
    x = torch.from_numpy(_rows(inputs, batch))
    t = torch.from_numpy(_rows(y, batch))
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


def _rows(a: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` rows of ``a``, repeated as often as it takes when it has fewer."""
    reps = -(-n // len(a)) if len(a) < n else 1
    return np.concatenate([a] * reps)[:n]


class _Copies(torch.utils.data.Dataset):
    """Item ``i`` is a fresh copy of one model-ready batch (what a loader worker returns)."""

    def __init__(self, sample: np.ndarray, n: int) -> None:
        self.sample, self.n = sample, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(self.sample.copy())


def _per_batch(sample: np.ndarray, steps: int, workers: int, warmup: int = 2) -> float:
    """Seconds per batch a DataLoader with ``workers`` processes serves copies of ``sample``."""
    kwargs = {"prefetch_factor": 2, "persistent_workers": True} if workers else {}
    loader = torch.utils.data.DataLoader(
        _Copies(sample, warmup + steps), batch_size=None, num_workers=workers, **kwargs
    )
    it = iter(loader)
    for _ in range(warmup):  # the worker's start-up is not per batch
        next(it)
    start = time.perf_counter()
    for _ in range(steps):
        next(it)
    elapsed = time.perf_counter() - start
    del it
    return elapsed / steps


def time_transfer(sample: np.ndarray, steps: int) -> float:
    """Seconds a loader worker process adds per batch to hand ``sample``-sized batches to
    this process: one worker's per-batch rate serving copies of ``sample`` (the copy into
    shared memory, the queue, the receiving side) minus the same copies served inline.

    The fastest of two tries each way (as :func:`time_per_call`), at least 0.
    """
    steps = max(2, steps)
    inline = min(_per_batch(sample, steps, 0) for _ in range(2))
    worker = min(_per_batch(sample, steps, 1) for _ in range(2))
    return max(0.0, worker - inline)


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
        prep_large = (
            time_preprocess(fitted, data.train.x, 2 * b, steps, "cpu")
            if fitted is not None and len(data.train.x) >= 2 * b
            else None
        )
        gpu = (
            time_preprocess(fitted, data.train.x, b, steps, "cuda")
            if torch.cuda.is_available()
            else None
        )
        compute = time_compute(spec, inputs, data.train.y, outputs, b, steps)
        large = time_compute(spec, inputs, data.train.y, outputs, 2 * b, steps)
        transfer = time_transfer(np.ascontiguousarray(_rows(inputs, b)), steps)
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
        transfer=transfer,
        preprocess_large=prep_large,
    )
