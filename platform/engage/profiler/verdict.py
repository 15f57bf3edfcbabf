"""From stage times to a verdict and the predicted speedup of each remedy.

The default pipeline loads, preprocesses and computes one after the other, so a step
takes ``storage + preprocess + compute`` (and what the step loses after idling through the
reads); the largest term names the bound. Each remedy changes one term (or overlaps them)
and its predicted speedup is the ratio of the per-sample times, in the style of
DS-Analyzer's differential what-if analysis.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from engage.profiler.loader import LoaderConfig

STORAGE, PREPROCESSING, COMPUTE = "storage-bound", "preprocessing-bound", "compute-bound"
FASTER_STORAGE = 4.0
"""How much faster the "faster storage" remedy's storage is than the measured one."""


@dataclass(frozen=True)
class StageTimes:
    """Seconds per step of each stage measured alone, at ``batch`` windows per step.

    Attributes
    ----------
    batch : int
        Windows per step.
    storage : float
        Loader alone, reading shards from storage (cold, throttled when ``bandwidth``).
    read : float
        The part of ``storage`` the bandwidth alone imposes (shard bytes / bandwidth).
    cache : float
        Loader alone, serving decoded windows from memory.
    preprocess : float
        The job's preprocessing of one batch on one CPU core (0 without any).
    preprocess_gpu : float or None
        The same on the GPU; ``None`` without one.
    compute : float
        The training step alone on batches in memory.
    compute_large : float
        The training step at ``2 * batch``.
    cores : int
        CPU cores the loader's workers may use.
    bandwidth : float or None
        The storage rate the reads were throttled to, in bytes/s.
    free_cpus : float or None
        CPU capacity other processes leave to the job (cores minus their load); ``None``
        when unknown (then the workers and the training step are taken to have theirs).
    transfer : float
        What a loader worker process adds per batch to hand a model-ready batch to the
        training process (copy into shared memory, the queue, the receiving side), timed
        as a worker's per-batch rate minus the same batch served inline; 0 when unmeasured.
    preprocess_large : float or None
        Preprocessing of ``2 * batch`` windows on one CPU core; ``None`` when unmeasured
        (then taken as twice ``preprocess``).
    corun_compute, corun_preprocess : float
        How much slower the training step and the preprocessing run while a loader worker
        process preprocesses beside the step (each against its time alone, at least 1;
        1 when unmeasured): what overlapping them costs on shared cores and memory.
    idle_penalty : tuple of (float, float)
        ``(idle seconds, extra seconds)`` pairs, gaps ascending: how much longer the
        training step takes right after its thread idled that long waiting for storage
        (a step after a wait runs slower than one after another step); empty when reads
        are not throttled (then the loader leaves no idle wait to measure).
    """

    batch: int
    storage: float
    read: float
    cache: float
    preprocess: float
    preprocess_gpu: float | None
    compute: float
    compute_large: float
    cores: int
    bandwidth: float | None = None
    free_cpus: float | None = None
    transfer: float = 0.0
    preprocess_large: float | None = None
    corun_compute: float = 1.0
    corun_preprocess: float = 1.0
    idle_penalty: tuple[tuple[float, float], ...] = ()

    @property
    def step(self) -> float:
        """Predicted step of the default pipeline (load, preprocess and compute in turn; the
        step after the thread idled for the reads)."""
        return self.storage + self.preprocess + self.compute + self.after_idle(self.read)

    def after_idle(self, gap: float) -> float:
        """Seconds the training step takes longer after its thread idled ``gap`` seconds:
        linear between the measured gaps (none after no wait), the longest one's beyond it."""
        if gap <= 0 or not self.idle_penalty:
            return 0.0
        pairs = sorted(self.idle_penalty)
        gaps = [0.0] + [g for g, _ in pairs]
        extra = [0.0] + [e for _, e in pairs]
        return float(np.interp(gap, gaps, extra))

    @property
    def stall_ratio(self) -> float:
        """Predicted share of a default step spent waiting for data."""
        return (self.storage + self.preprocess) / self.step if self.step else 0.0

    def as_dict(self) -> dict:
        """Plain values, for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Remedy:
    """One change to the pipeline and what the profile predicts it gains.

    Attributes
    ----------
    name : str
        Short name (``more CPU workers``, ``cache decoded windows``, ...).
    config : LoaderConfig
        The pipeline with the remedy applied (what the benchmark measures).
    speedup : float or None
        Predicted samples/s over the default pipeline's; ``None`` when it does not apply.
    note : str
        Why, in a few words.
    key : str
        A name that does not change with the machine (``loader_workers``, ``cache``,
        ``gpu_preprocess``, ``double_batch``, ``faster_storage``), for metric names.
    """

    name: str
    config: LoaderConfig
    speedup: float | None
    note: str
    key: str = ""


def classify(t: StageTimes) -> str:
    """The bound of the default pipeline: the stage with the largest time per step."""
    terms = {STORAGE: t.storage, PREPROCESSING: t.preprocess, COMPUTE: t.compute}
    return max(terms, key=terms.get)


def default_config(t: StageTimes, preprocess: bool) -> LoaderConfig:
    """The pipeline as it runs by default: storage, inline loading, CPU preprocessing."""
    return LoaderConfig("storage", 0, "cpu" if preprocess else "none", t.batch, t.bandwidth)


def remedies(t: StageTimes, preprocess: bool = True) -> list[Remedy]:
    """Each remedy with its predicted speedup over the default pipeline, best first."""
    base = default_config(t, preprocess)
    now = t.step
    workers = max(1, t.cores)
    # Overlap needs spare CPU: the loader's CPU work (reads' waits excluded) and the step
    # share whatever capacity the machine's other processes leave.
    free = t.free_cpus if t.free_cpus is not None else workers + 1.0
    # A worker is another process: each batch also crosses to the training process
    # (t.transfer), CPU work on the worker's side of the pipeline and on the shared cores.
    # The step and the worker's preprocessing, run at once, slow each other down (measured
    # side by side, which on a loaded node includes waiting for a core: so the CPU-work
    # term, which takes the load from ``free``, keeps the times alone). No idle penalty: with
    # workers reading ahead the step waits only when reads bound the cycle, and then the
    # step's extra time hides inside the read it waits for.
    cpu_work = t.storage - t.read + t.preprocess + t.transfer + t.compute
    loader = (t.storage + t.preprocess * t.corun_preprocess + t.transfer) / workers
    step = t.compute * t.corun_compute
    overlapped = max(step, t.read, loader, cpu_work / max(free, 1.0))
    # Reads 4x faster leave the step a quarter of the idle wait before it.
    faster = t.storage - t.read * (1.0 - 1.0 / FASTER_STORAGE)
    faster += t.after_idle(t.read / FASTER_STORAGE)
    # The larger batch's preprocessing as measured at that size (not linear in windows:
    # a batch of features twice as large no longer fits the same caches).
    prep_large = t.preprocess_large if t.preprocess_large is not None else 2 * t.preprocess
    larger = 2 * t.storage + prep_large + t.compute_large + t.after_idle(2 * t.read)
    larger /= 2 * t.batch
    out = [
        Remedy(
            f"{workers} CPU loader worker(s)",
            LoaderConfig("storage", workers, base.preprocess, t.batch, t.bandwidth),
            now / overlapped,
            "loads and preprocesses beside the training step",
            "loader_workers",
        ),
        Remedy(
            "cache decoded windows",
            LoaderConfig("cache", 0, base.preprocess, t.batch, t.bandwidth),
            now / (t.cache + t.preprocess + t.compute),  # no wait: no idle penalty
            "reads storage once, then serves windows from memory",
            "cache",
        ),
        Remedy(
            "preprocess on the GPU",
            LoaderConfig("storage", 0, "gpu", t.batch, t.bandwidth),
            None
            if t.preprocess_gpu is None
            else now / (t.storage + t.preprocess_gpu + t.compute + t.after_idle(t.read)),
            "no GPU here"
            if t.preprocess_gpu is None
            else "window operators run as torch on the GPU",
            "gpu_preprocess",
        ),
        Remedy(
            "double the batch",
            LoaderConfig("storage", 0, base.preprocess, 2 * t.batch, t.bandwidth),
            (now / t.batch) / larger,
            "amortises per-step overhead of the model",
            "double_batch",
        ),
        Remedy(
            f"{FASTER_STORAGE:g}x faster storage",
            LoaderConfig(
                "storage",
                0,
                base.preprocess,
                t.batch,
                t.bandwidth * FASTER_STORAGE if t.bandwidth else None,
            ),
            now / (faster + t.preprocess + t.compute),
            "storage read at full speed already"
            if not t.bandwidth
            else "reads take a quarter of the time",
            "faster_storage",
        ),
    ]
    if not preprocess:
        out = [r for r in out if r.key != "gpu_preprocess"]
    return sorted(out, key=lambda r: -(r.speedup or 0.0))
