"""The input pipeline the profiler measures: window shards or a cache, preprocessing, compute.

A job's training windows are written once as batch-sized ``.npy`` shards (its storage);
:func:`run_pipeline` then streams them (throttled, cold), serves them from memory (the
cache of decoded windows) or serves the deterministic preprocessing's output from memory
(the cache of features: only augmentation runs per batch), preprocesses each batch inline,
in a loader thread of this process, in DataLoader workers or on the GPU, and runs the
training step, timing the wait for data apart from the compute. It is the same pipeline
whether the profiler isolates one stage or the benchmark runs a remedy end to end.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from engage.data.preprocess.ahead import Ahead
from engage.profiler import cores
from engage.profiler.throttle import read_throttled


@dataclass(frozen=True)
class LoaderConfig:
    """One way to feed the model.

    Attributes
    ----------
    source : str
        ``storage`` (read the shards every epoch), ``cache`` (decoded windows in memory) or
        ``features`` (the output of the preprocessing steps before the first augmentation,
        computed once by :meth:`WindowStore.features` and held in memory; each batch then
        runs only the augmentation and what follows it).
    workers : int
        DataLoader worker processes; 0 loads and preprocesses in this process (inline,
        between steps, or in a loader thread: ``thread``).
    preprocess : str
        ``none``, ``cpu`` (in the loader) or ``gpu`` (on the training device).
    batch : int
        Windows per step.
    bandwidth : float or None
        Storage read rate in bytes/s shared by all workers; ``None`` reads at full speed.
    prefetch : int
        Batches each DataLoader worker loads ahead (its ``prefetch_factor``), or the loader
        thread holds ready; unused inline.
    thread : bool
        With no workers, load and preprocess in a background thread of this process that
        keeps ``prefetch`` batches ready (:class:`engage.data.preprocess.ahead.Ahead`):
        torch releases the GIL inside its operators, so the batch is prepared on another
        core while the step computes, with no batch to copy across from a worker process.
    build : str
        When a ``features`` cache is computed: ``before`` the first step, the whole split
        at once on every core (:meth:`WindowStore.features`), or in the ``first_epoch``,
        by the loader batch by batch as each batch is first read (inline or in the loader
        thread; :meth:`WindowStore.feature_rows`), so the build overlaps the first epoch's
        steps. The same values either way. Loader worker processes (``workers``) fill no
        cache of this process's: with them the cache is built ``before``.
    """

    source: Literal["storage", "cache", "features"] = "storage"
    workers: int = 0
    preprocess: Literal["none", "cpu", "gpu"] = "cpu"
    batch: int = 128
    bandwidth: float | None = None
    prefetch: int = 2
    thread: bool = False
    build: Literal["before", "first_epoch"] = "before"


class WindowStore:
    """A job's raw training windows and labels, and their batch-sized shards on disk.

    Parameters
    ----------
    x, y : numpy.ndarray
        Raw (standardised) windows ``(n, window, features)`` and their labels.
    folder : Path
        Where shards are written, one subfolder per batch size.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, folder: Path) -> None:
        self.x, self.y, self.folder = x, y, Path(folder)
        self._features: dict[int, np.ndarray] = {}
        # caches being filled batch by batch (feature_rows): the rows and which are done
        self._partial: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: Seconds :meth:`features` (or every :meth:`feature_rows` that computed rows) took
        #: to compute each cache (the first epoch's extra work).
        self.feature_seconds: dict[int, float] = {}

    def features(self, fitted: Any) -> np.ndarray:
        """The cacheable part of ``fitted`` (:meth:`FittedPreprocess.split_for_cache`) over
        every window, computed on first use (timed in :attr:`feature_seconds`) and kept.

        The build runs on every core this process may use (the pieces side by side, one
        torch thread each), as training builds its cache
        (:func:`engage.train.loader_tune.cache_features`): it happens once, before the
        first epoch, when no step competes for the cores.
        """
        key = id(fitted)
        if key not in self._features:
            cached, _ = fitted.split_for_cache()
            t0 = time.perf_counter()
            self._features[key], _ = cached.transform(
                self.x, train=False, threads=cores.usable_cores()
            )
            self.feature_seconds[key] = time.perf_counter() - t0
        return self._features[key]

    def feature_rows(self, fitted: Any, lo: int, hi: int) -> np.ndarray:
        """Windows ``[lo, hi)`` of :meth:`features`, computing those not computed yet.

        What a loader that builds the cache in the first epoch reads: each batch's windows
        go through the cacheable steps when the batch is first read, on every core this
        process may use (the pieces side by side, as :meth:`features` builds the whole
        split), and are written into the cache; once every window is in, the cache is
        :meth:`features`'s. Each window's features depend on that window alone, so the
        values are those of the whole split built at once.
        """
        key = id(fitted)
        if key in self._features:
            return self._features[key][lo:hi]
        if key not in self._partial:
            window, width = fitted.split_for_cache()[0].output_shape(*self.x.shape[1:])
            rows = torch.empty((len(self.x), window, width), dtype=torch.float32).numpy()
            self._partial[key] = (rows, np.zeros(len(self.x), dtype=bool))
            self.feature_seconds[key] = 0.0
        rows, done = self._partial[key]
        if not done[lo:hi].all():
            t0 = time.perf_counter()
            cached, _ = fitted.split_for_cache()
            cached.transform(
                self.x[lo:hi], train=False, threads=cores.usable_cores(), out=rows[lo:hi]
            )
            done[lo:hi] = True
            self.feature_seconds[key] += time.perf_counter() - t0
            if done.all():
                self._features[key] = rows
                del self._partial[key]
        return rows[lo:hi]

    def batches(self, batch: int) -> int:
        """Full batches of ``batch`` windows."""
        return len(self.x) // batch

    def shards(self, batch: int) -> list[Path]:
        """The shard files for ``batch``, written on first use."""
        where = self.folder / str(batch)
        paths = [where / f"{i:05d}.npy" for i in range(self.batches(batch))]
        if not where.exists():
            where.mkdir(parents=True)
            for i, path in enumerate(paths):
                np.save(path, self.x[i * batch : (i + 1) * batch])
        return paths

    def shard_bytes(self, batch: int) -> int:
        """Size on disk of one shard of ``batch`` windows."""
        return self.shards(batch)[0].stat().st_size


class _Batches(torch.utils.data.Dataset):
    """Item ``i`` is batch ``i``: read from storage or the cache, then preprocessed."""

    def __init__(self, store: WindowStore, config: LoaderConfig, fitted: Any) -> None:
        self.store, self.config, self.fitted = store, config, fitted
        self.paths = store.shards(config.batch) if config.source == "storage" else []
        share = max(1, config.workers)  # the rate is the storage's, shared by the readers
        self.rate = config.bandwidth / share if config.bandwidth else None
        self.cached = None  # the features (None: filled as read) and the steps still to run
        if config.source == "features" and fitted is not None:
            lazy = config.build == "first_epoch" and not config.workers
            features = None if lazy else store.features(fitted)
            self.cached = (features, fitted.split_for_cache()[1])

    def __len__(self) -> int:
        return self.store.batches(self.config.batch)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.config.batch
        fitted = self.fitted
        if self.config.source == "storage":
            x = np.load(io.BytesIO(read_throttled(self.paths[i], self.rate)))
        elif self.cached is not None:
            features, fitted = self.cached
            if features is None:  # the cache built as the first epoch reads it
                x = self.store.feature_rows(self.fitted, i * b, (i + 1) * b)
            else:
                x = features[i * b : (i + 1) * b]
        else:
            x = self.store.x[i * b : (i + 1) * b]
        if self.config.preprocess == "cpu" and fitted is not None and fitted.steps:
            x, _ = fitted.transform(x, train=True)
        return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(
            self.store.y[i * b : (i + 1) * b]
        )


@dataclass(frozen=True)
class RunStats:
    """What one pipeline run measured, per step (seconds) and overall.

    Attributes
    ----------
    step : float
        Mean wall time of a step (data wait plus compute).
    wait : float
        Mean time blocked on the next batch (including GPU preprocessing).
    compute : float
        Mean time of the training step itself.
    samples_per_s : float
        Windows per second through the whole pipeline.
    main_cpu : float
        CPU seconds of the training thread per step (its ``thread_time``: waiting takes
        none, so on a busy node this is the work the thread did, not the time it took).
    loader_cpu : float or None
        CPU seconds of the loader thread per step (None without one; loader worker
        processes are not counted).
    process_cpu : float
        CPU seconds of this whole process per step, every thread of it (the training and
        loader threads, and the threads a batch's preprocessing runs its pieces on);
        loader worker processes are not counted.
    """

    step: float
    wait: float
    compute: float
    samples_per_s: float
    main_cpu: float = 0.0
    loader_cpu: float | None = None
    process_cpu: float = 0.0

    @property
    def stall_ratio(self) -> float:
        """Share of each step spent waiting for data."""
        return self.wait / self.step if self.step else 0.0


def run_pipeline(
    store: WindowStore,
    config: LoaderConfig,
    fitted: Any = None,
    step_fn: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
    steps: int = 20,
    warmup: int = 2,
    min_seconds: float = 0.0,
) -> RunStats:
    """Feed ``steps`` batches through ``config`` (and ``step_fn``, when given) and time them.

    Parameters
    ----------
    store : WindowStore
        The job's windows.
    config : LoaderConfig
        How to load and where to preprocess.
    fitted : FittedPreprocess, optional
        The job's window preprocessing; ``None`` for none.
    step_fn : callable, optional
        One training step on a batch; ``None`` measures the loader alone.
    steps, warmup : int
        Timed steps, after ``warmup`` untimed ones (worker start-up, first allocations).
    min_seconds : float
        Go on past ``steps`` until the timed steps have lasted this long: 20 steps of a
        pipeline that serves a batch in under a millisecond last less than a scheduler
        slice, and one descheduling then decides the run's rate.
    """
    dataset = _Batches(store, config, fitted)
    kwargs = (
        {"prefetch_factor": max(1, config.prefetch), "persistent_workers": True}
        if config.workers
        else {}
    )
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=config.workers, **kwargs
    )
    device = torch.device("cuda" if config.preprocess == "gpu" else "cpu")
    on_gpu = fitted
    if config.source == "features" and fitted is not None:  # the cache holds the rest's input
        on_gpu = fitted.split_for_cache()[1]
    waits, computes, it = [], [], _cycle(loader)
    if config.thread and not config.workers:
        it = Ahead(it, max(1, config.prefetch))
    cpu0 = loader0 = process0 = started = 0.0
    k = 0
    while k < warmup + steps or time.perf_counter() - started < min_seconds:
        if k == warmup:
            cpu0, process0 = time.thread_time(), time.process_time()
            loader0 = it.cpu_seconds if isinstance(it, Ahead) else 0.0
            started = time.perf_counter()
        t0 = time.perf_counter()
        x, y = next(it)
        if config.preprocess == "gpu" and on_gpu is not None and on_gpu.steps:
            x = _on_gpu(on_gpu, x, device)
        t1 = time.perf_counter()
        if step_fn is not None:
            step_fn(x, y)
        t2 = time.perf_counter()
        if k >= warmup:
            waits.append(t1 - t0)
            computes.append(t2 - t1)
        k += 1
    timed = max(1, len(waits))
    main_cpu = (time.thread_time() - cpu0) / timed
    process_cpu = (time.process_time() - process0) / timed
    loader_cpu = (it.cpu_seconds - loader0) / timed if isinstance(it, Ahead) else None
    it.close()  # ends the epoch loop, so persistent workers shut down with the loader
    wait, compute = float(np.mean(waits)), float(np.mean(computes))
    return RunStats(
        wait + compute,
        wait,
        compute,
        config.batch / (wait + compute),
        main_cpu,
        loader_cpu,
        process_cpu,
    )


def _cycle(loader: torch.utils.data.DataLoader):
    """Batches of ``loader`` epoch after epoch (each epoch re-reads storage)."""
    while True:
        yield from loader


def _on_gpu(fitted: Any, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Preprocess ``x`` on the GPU, synchronised so the time is the device's."""
    out, _ = fitted.transform(x.numpy(), train=True, device=device)
    torch.cuda.synchronize()
    return torch.from_numpy(out)
