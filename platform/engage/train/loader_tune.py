"""``train.loader: auto``: pick the input pipeline's settings by timing the loader alone.

Before training, short timed trials of the loader (no model) try each candidate setting:
prefetch depth, loader worker processes (preprocessing parallelism), where the decoded
windows live (read from storage every epoch, or cached in memory) and, when the spec opts
in (``train.loader_search.tune_batch_size``), half and twice the batch. The trials reuse
the profiler's pipeline (:func:`engage.profiler.run_pipeline`), so ``engage profile`` and
the tuner measure the same thing.

A memory budget bounds the search: a share of the node's available memory, read with
psutil before every trial. A candidate whose prefetched batches and cache would take more
than the budget, or than what is still free less a reserve, is skipped (backed off), never
run; so the search cannot run the host out of memory. The whole search stops at its time
budget, and the candidates it did not reach are recorded as not tried.

The search itself is pure (:mod:`engage.train.loader_search`); :func:`tune_loader` times
real candidates through it, :func:`apply` gives the job the choice and :func:`record` writes
it as run parameters and every candidate's throughput as an artifact
(``loader_tuning.json``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from engage.train.loader_search import (
    Candidate,
    TuneResult,
    candidate_space,
    memory_budget,
    predicted_rate,
    two_phase_search,
)

ARTIFACT = "loader_tuning.json"
#: Timed batches per trial, after one warm-up batch: enough to average a few batches, few
#: enough that a dozen candidates fit in a few seconds.
TRIAL_STEPS = 6


class _Data(Protocol):
    """What :func:`tune_loader` reads of the prepared data (``PreparedData`` has it)."""

    train: Any  # a Split: x (windows, standardised) and y
    preprocess: Any  # FittedPreprocess or None
    train_windows: int  # the whole training split's windows (more than train.x when streamed)


def tune_loader(
    data: _Data,
    batch: int,
    cores: int,
    *,
    time_budget_s: float,
    memory_fraction: float,
    tune_batch: bool = False,
    folder: Path | None = None,
    threads: int = 1,
    compute_s_per_window: float = 0.0,
) -> TuneResult:
    """Time the loader alone on ``data``'s training windows under each candidate.

    The windows are those the data stage holds (the whole split in memory, or the sample
    of a streamed one); storage candidates read them back from batch-sized shards written
    under ``folder`` (a temporary folder when ``None``). A memory cache is sized for the
    part of the whole split (``data.train_windows``) not in memory yet, so a streamed
    split too large for the budget is never cached. Torch runs on ``threads`` threads, a training worker's CPUs, as
    ``engage profile`` measures (loader worker processes take one each, as in torch).
    Candidates are ranked by the training throughput their loader rate predicts with a
    step of ``compute_s_per_window`` seconds per window (:func:`predicted_rate`): loader
    workers overlap the step, inline loading does not.
    """
    from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline
    from engage.profiler.measure import torch_threads

    x, y = data.train.x, data.train.y
    window_bytes = int(x[0].nbytes) if len(x) else 0
    # A memory cache costs what is not in memory yet: nothing for an in-memory split, the
    # rest of the split beyond the data stage's sample for a streamed one.
    dataset_bytes = window_bytes * max(0, int(getattr(data, "train_windows", len(x))) - len(x))
    budget = memory_budget(memory_fraction)
    kinds = candidate_space(min(batch, max(1, len(x))), cores, tune_batch=tune_batch)
    kinds = [c for c in kinds if c.batch <= len(x)]
    prep = "cpu" if data.preprocess is not None else "none"
    with tempfile.TemporaryDirectory(prefix="engage-loader-") as tmp, torch_threads(threads):
        store = WindowStore(x, y, folder or Path(tmp))

        def rate(c: Candidate) -> float:
            """Samples per second of the loader alone under ``c``."""
            source = "cache" if c.cache == "memory" else "storage"
            config = LoaderConfig(source, c.workers, prep, c.batch, None, c.prefetch)
            stats = run_pipeline(store, config, data.preprocess, steps=TRIAL_STEPS, warmup=1)
            return stats.samples_per_s

        return two_phase_search(
            kinds,
            rate,
            budget_bytes=budget,
            footprint=lambda c: c.footprint(window_bytes, dataset_bytes),
            time_budget_s=time_budget_s,
            predict=lambda c, r: predicted_rate(c, r, compute_s_per_window),
        )


class RunRecorder(Protocol):
    """What :func:`record` needs of a run (``engage.tracking.PipelineRun`` has it)."""

    def log_params(self, resolved_spec: Mapping[str, Any]) -> None:
        """Spool parameters."""

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Spool a JSON artifact."""


def record(result: TuneResult, run: RunRecorder) -> None:
    """Write the choice as ``loader.*`` parameters and the evidence as ``loader_tuning.json``."""
    run.log_params(result.params())
    run.log_dict(result.evidence(), ARTIFACT)


def summary(result: TuneResult) -> str:
    """One line for the console: the choice, its throughput and how many were timed."""
    n = sum(t.samples_per_s is not None for t in result.trials)
    c = result.chosen
    return (
        f"auto-tuned: prefetch {c.prefetch}, {c.workers} loader workers, batch {c.batch}, "
        f"cache in {c.cache} ({result.params()['loader.samples_per_s']} samples/s; "
        f"{n} of {len(result.trials)} candidates timed in {result.seconds:.1f} s)"
    )


def apply(result: TuneResult, job: Any) -> Any:
    """``job`` (a :class:`~engage.train.loop.TrainJob`) with the chosen settings that its
    training path takes: the prefetch depth of a streamed split, and the batch size when the
    spec opted in (the chosen per-worker batch times the workers, as the global batch).
    """
    import dataclasses

    train = job.train
    if train.loader_search.tune_batch_size:
        train = train.model_copy(update={"batch_size": result.chosen.batch * train.num_workers})
    return dataclasses.replace(job, train=train, prefetch_batches=result.chosen.prefetch)


def tune_for_job(job: Any, data: Any, run: RunRecorder | None = None) -> tuple[Any, TuneResult]:
    """Search the loader settings of ``job`` on its prepared ``data``, record them with
    ``run`` (when given) and return the job with the choice applied, and the result.

    Nothing is searched unless ``job.train.loader`` is ``auto``; the caller checks that.
    """
    import dataclasses

    from engage.profiler.measure import torch_threads, usable_cores

    train = job.train
    search_spec = train.loader_search
    batch = max(1, train.batch_size // train.num_workers)
    threads = int(train.resources_per_worker.get("CPU", 1) or 1)
    with torch_threads(threads):
        compute = compute_seconds(job, data.model_inputs("train"), data.train.y, batch)
    result = tune_loader(
        data,
        batch,
        usable_cores(),
        threads=threads,
        time_budget_s=search_spec.time_budget_seconds,
        memory_fraction=search_spec.memory_fraction,
        tune_batch=search_spec.tune_batch_size,
        compute_s_per_window=compute / batch,
    )
    step_note = f"training step alone: {compute * 1e3:.2f} ms per batch of {batch}"
    result = dataclasses.replace(result, notes=(*result.notes, step_note))
    if run is not None:
        record(result, run)
    return apply(result, job), result


def compute_seconds(job: Any, inputs: Any, y: Any, batch: int, steps: int = 3) -> float:
    """Seconds of one training step of ``job``'s model on a batch already in memory (the
    profiler's compute measurement, :func:`engage.profiler.measure.time_compute`)."""
    from types import SimpleNamespace

    from engage.profiler.measure import time_compute

    # time_compute reads the model, train and task sections of a pipeline spec only
    spec = SimpleNamespace(model=job.model, train=job.train, data=SimpleNamespace(task=job.task))
    return time_compute(spec, inputs, y, job.shape.outputs, batch, steps)  # type: ignore[arg-type]
