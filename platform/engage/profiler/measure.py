"""Measure each stage of a job's input pipeline alone, DS-Analyzer style.

The compute bound is the training step on batches already in memory; the loader is timed
alone from storage (cold, throttled to a bandwidth) and from the cache; preprocessing is
timed on one CPU core (at the batch and at twice it) and, where there is one, on the GPU;
a cheap probe times what a loader worker process adds to hand a model-ready batch across
(its transfer), and another what the step and preprocessing in a worker process cost each
other when they run at once (their co-run slowdowns). When reads are throttled, the step is
also timed right after the thread idled as long as it waits for storage (a step after a wait
runs slower than one after another step). The stages that compute are timed in turns, round
by round, so that load on the machine meets each alike. Torch uses as many threads as a
training worker has CPUs, as it would in the job.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engage.profiler.compute import make_step
from engage.profiler.cores import usable_cores
from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline
from engage.profiler.verdict import FASTER_STORAGE, StageTimes
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


STAGE_ROUNDS = 5
"""Rounds each computing stage is timed in, taking turns with the others."""

STAGE_MIN_ROUND_S = 0.1
"""Seconds each of those rounds lasts at least: five of them time a cheap stage over
0.5 s, as long as the what-if benchmark times each pipeline it compares (a 1 ms step
timed over 0.25 s moved by 30% from one profile to the next on this 2-core VM)."""

ROTATE_BATCHES = 8
"""Distinct in-memory batches the compute stage cycles through, as training steps each
take a batch the loader has just made: one batch used over and over stays in the core's
caches, and the step on it came out 5-10% faster than on a fresh batch each step."""

MAX_IDLE_S = 0.1
"""Longest idle gap :func:`time_after_idle` sleeps: what a step loses after a wait stopped
growing well before it on the hosts measured (a 0.85 ms step took 2.2 ms after 10 ms idle
and 2.3 ms after 40 ms), and longer sleeps would only lengthen the profile."""

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


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    steps: int,
    warmup: int = 1,
    rounds: int = 3,
    min_round_s: float = 0.05,
) -> dict[str, float]:
    """Seconds per call of each of ``fns``: each one's ``steps`` are split into ``rounds``
    rounds, the stages take turns round by round (in reverse order on odd rounds), and each
    stage's median round mean is returned.

    Interleaved, so that load on the machine that comes and goes meets every stage alike:
    timed one stage after the other, a busy spell that covered all the rounds of one stage
    decided the comparison (under CI load a 0.3 ms model came out slower than 2 ms of
    preprocessing, and a preprocessing-bound job was called compute-bound).

    A round's mean, since throughput is what is predicted; the median round's, since the
    predictions are compared with pipelines timed over whole runs on the same machine: the
    fastest of five rounds measured the host at its quickest moment (on this shared 2-core
    host, 10-15% under the typical speed), which set a bound the loaders measured against
    it could not reach (0.60-0.65 of it in three runs; 0.72-0.94 against the median). The
    median still leaves out a round stalled by
    other processes (a descheduled step on a busy host): one such stall among 20 steps of
    a 0.3 ms model, in a mean over all of them, made it look slower than 2 ms of
    preprocessing.

    Each round lasts at least ``min_round_s`` (more calls than ``steps / rounds`` for a
    cheap stage: calls go on until the round has run that long): a round of a few
    milliseconds is shorter than a scheduler slice, and such rounds measured a lucky burst
    (0.52-0.58 ms for a step the pipeline ran at 0.9-1.1 ms, on a loaded 2-core host)
    instead of the throughput the pipeline gets.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    rounds = max(1, min(rounds, steps))
    per_round = -(-steps // rounds)
    means: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            fn = fns[name]
            calls, start = 0, time.perf_counter()
            while calls < per_round or time.perf_counter() - start < min_round_s:
                fn()
                calls += 1
            means[name].append((time.perf_counter() - start) / calls)
    return {name: float(np.median(m)) for name, m in means.items()}


def time_per_call(
    fn: Callable[[], Any], steps: int, warmup: int = 1, rounds: int = 3, min_round_s: float = 0.05
) -> float:
    """Seconds per call of ``fn`` alone: :func:`time_interleaved` with one stage."""
    return time_interleaved({"fn": fn}, steps, warmup, rounds, min_round_s)["fn"]


def compute_call(
    spec: PipelineSpec, inputs: np.ndarray, y: np.ndarray, outputs: int, batch: int
) -> Callable[[], Any]:
    """One training step of ``spec``'s model on a batch of in-memory model inputs, as a
    call of no arguments (``outputs``: the model's output width, classes or 1)."""
    shape = ModelShape(inputs.shape[1], inputs.shape[2], outputs)
    step = make_step(spec, shape)
    xs, ts = _batches(inputs, batch), _batches(y, batch)
    turn = itertools.count()

    def once() -> Any:
        """One step, on the next of the batches in turn (:data:`ROTATE_BATCHES`)."""
        i = next(turn) % len(xs)
        return step(xs[i], ts[i])

    return once


def time_compute(
    spec: PipelineSpec, inputs: np.ndarray, y: np.ndarray, outputs: int, batch: int, steps: int
) -> float:
    """Seconds per training step of ``spec``'s model on in-memory model inputs.

    ``outputs`` is the model's output width (classes, or 1 for regression).
    """
    return time_per_call(compute_call(spec, inputs, y, outputs, batch), steps)


def preprocess_call(fitted: Any, x: np.ndarray, batch: int, device: str) -> Callable[[], Any]:
    """One batch of ``x`` preprocessed (with augmentation) on ``device``, waited for on a
    GPU, as a call of no arguments."""
    chunk = x[:batch]
    dev = torch.device(device)

    def once() -> None:
        """One batch preprocessed, waited for on a GPU."""
        fitted.transform(chunk, train=True, device=dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    return once


def _batches(a: np.ndarray, n: int, count: int = ROTATE_BATCHES) -> list[torch.Tensor]:
    """Up to ``count`` distinct batches of ``n`` consecutive rows of ``a`` (one, its rows
    repeated, when ``a`` has fewer than ``n``)."""
    if len(a) < 2 * n:
        return [torch.from_numpy(np.ascontiguousarray(_rows(a, n)))]
    k = min(count, len(a) // n)
    return [torch.from_numpy(np.ascontiguousarray(a[i * n : (i + 1) * n])) for i in range(k)]


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

    The fastest of two tries each way, at least 0.
    """
    steps = max(2, steps)
    inline = min(_per_batch(sample, steps, 0) for _ in range(2))
    worker = min(_per_batch(sample, steps, 1) for _ in range(2))
    return max(0.0, worker - inline)


class _Timed(torch.utils.data.Dataset):
    """Item ``i`` is the seconds one call of ``fn`` took in the loader worker (the call's
    output stays there: what crosses is one number, not a batch)."""

    def __init__(self, fn: Callable[[], Any], n: int) -> None:
        self.fn, self.n = fn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        start = time.perf_counter()
        self.fn()
        return torch.tensor(time.perf_counter() - start, dtype=torch.float64)


def time_after_idle(
    fn: Callable[[], Any], gaps: tuple[float, ...], steps: int, warmup: int = 1
) -> dict[float, float]:
    """Median seconds of one call of ``fn`` right after this thread slept each of ``gaps``
    seconds (capped at :data:`MAX_IDLE_S`), and right after another call (gap 0).

    A loader that makes the training step wait for storage leaves the core idle, and the
    step that follows runs slower: the core's caches were cooled by other work, its clock
    dropped, or a virtual core was handed back to the host. On this 2-core VM a 0.85 ms step
    took 1.4 ms after 2 ms idle and 2.2 ms after 10 ms; the default pipeline's steps behind
    2 MB/s reads took 1.9-2.5 ms, and the what-if had charged them 0.85. The gaps take turns
    step by step (in reverse order on odd steps), so load that comes and goes meets each.
    Returns ``{gap: seconds}``, with the key 0.0 for the call after another call.
    """
    order = list(dict.fromkeys([0.0, *gaps]))
    for _ in range(warmup):
        fn()
    took: dict[float, list[float]] = {g: [] for g in order}
    for k in range(max(1, steps)):
        for gap in order if k % 2 == 0 else reversed(order):
            if gap > 0:
                time.sleep(min(gap, MAX_IDLE_S))
            start = time.perf_counter()
            fn()
            took[gap].append(time.perf_counter() - start)
    return {g: float(np.median(t)) for g, t in took.items()}


def time_corun(
    compute: Callable[[], Any], preprocess: Callable[[], Any], steps: int, warmup: int = 2
) -> tuple[float, float]:
    """Seconds per call of ``compute`` in this process and of ``preprocess`` in a loader
    worker process, the two running as a loader worker's pipeline runs them: the worker
    preprocesses ahead while this process computes, and this process waits when the worker
    is behind. Returns the medians ``(compute, preprocess)`` over ``steps`` steps.

    Against the stages timed alone, they give what two processes computing on the cores at
    once cost each other (memory bandwidth and caches shared, or a virtual machine's cores
    sharing physical ones): the loader-worker prediction left it out and came out high in
    every run of the benchmark (1.12-1.16x against 1.00-1.08x measured).
    """
    steps = max(1, steps)
    loader = torch.utils.data.DataLoader(
        _Timed(preprocess, warmup + steps + 2), batch_size=None, num_workers=1, prefetch_factor=2
    )
    it = iter(loader)
    worker, mine = [], []
    for k in range(warmup + steps):
        took = float(next(it))
        start = time.perf_counter()
        compute()
        if k >= warmup:  # the worker's start and first calls are not per step
            mine.append(time.perf_counter() - start)
            worker.append(took)
    del it
    return float(np.median(mine)), float(np.median(worker))


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
        # The stages that compute, timed in turns (time_interleaved says why).
        stages = {
            "compute": compute_call(spec, inputs, data.train.y, outputs, b),
            "compute_large": compute_call(spec, inputs, data.train.y, outputs, 2 * b),
        }
        if fitted is not None:
            stages["preprocess"] = preprocess_call(fitted, data.train.x, b, "cpu")
            if len(data.train.x) >= 2 * b:
                stages["preprocess_large"] = preprocess_call(fitted, data.train.x, 2 * b, "cpu")
            if torch.cuda.is_available():
                stages["preprocess_gpu"] = preprocess_call(fitted, data.train.x, b, "cuda")
        took = time_interleaved(stages, steps, rounds=STAGE_ROUNDS, min_round_s=STAGE_MIN_ROUND_S)
        corun = (1.0, 1.0)
        if "preprocess" in stages:  # the stages alone, then side by side
            c, p = time_corun(stages["compute"], stages["preprocess"], steps)
            corun = (c / took["compute"], p / took["preprocess"])
        transfer = time_transfer(np.ascontiguousarray(_rows(inputs, b)), steps)
        read = min(store.shard_bytes(b) / bandwidth, storage.step) if bandwidth else 0.0
        idle: tuple[tuple[float, float], ...] = ()
        if read > 0:  # the default waits ``read`` a step, 4x faster storage a quarter of it
            gaps = tuple(sorted({read, read / FASTER_STORAGE}))
            after = time_after_idle(stages["compute"], gaps, steps)
            idle = tuple((g, max(0.0, after[g] - after[0.0])) for g in gaps)
    return StageTimes(
        batch=b,
        storage=storage.step,
        read=read,
        cache=cache.step,
        preprocess=took.get("preprocess", 0.0),
        preprocess_gpu=took.get("preprocess_gpu"),
        compute=took["compute"],
        compute_large=took["compute_large"],
        cores=max(1, usable_cores() - cpus),
        bandwidth=bandwidth,
        free_cpus=free,
        transfer=transfer,
        preprocess_large=took.get("preprocess_large"),
        corun_compute=max(1.0, corun[0]),
        corun_preprocess=max(1.0, corun[1]),
        idle_penalty=idle,
    )
