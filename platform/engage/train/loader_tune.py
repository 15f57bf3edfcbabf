"""``train.loader: auto``: pick the input pipeline's settings by timing short trials.

Before training, short timed trials try each candidate setting: prefetch depth, loader
worker processes (preprocessing parallelism), a loader thread in the training process
(batches prepared on a second core while the step computes), where the decoded windows
live (read from storage every epoch, or cached in memory) and, when the spec opts in
(``train.loader_search.tune_batch_size``), half and twice the batch. The train stage times
each trial end to end, the loader with the job's training step, so that how far a thread
or worker overlaps the step is measured on the node as it is; without a step, a trial
times the loader alone and the overlap is predicted. The trials reuse the profiler's
pipeline (:func:`engage.profiler.run_pipeline`), so ``engage profile`` and the tuner
measure the same thing.

A memory budget bounds the search: a share of the node's available memory, read with
psutil before every trial. A candidate whose prefetched batches and cache would take more
than the budget, or than what is still free less a reserve, is skipped (backed off), never
run; so the search cannot run the host out of memory. The whole search stops at its time
budget, and the candidates it did not reach are recorded as not tried.

A job with window preprocessing also tries a cache of *features*: the output of the
preprocessing steps before the first augmentation, computed once and held in memory, so
that every epoch runs only the augmentation (with that epoch's draws) on it. Its trials
read the cache; the cost of building it, timed on the trial windows, is spread over the
spec's epochs when candidates are ranked.

The search itself is pure (:mod:`engage.train.loader_search`); :func:`tune_loader` times
real candidates through it, :func:`apply` gives the job the choice it can take and says
what it took, and :func:`record` writes the choice and what was applied as run parameters
and every candidate's throughput as an artifact (``loader_tuning.json``).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from engage.train.loader_search import (
    Candidate,
    TuneResult,
    amortized_rate,
    candidate_space,
    memory_budget,
    predicted_rate,
    two_phase_search,
)

ARTIFACT = "loader_tuning.json"
#: Timed batches per trial, after one warm-up batch: enough to average a few batches, few
#: enough that a dozen candidates fit in a few seconds.
TRIAL_STEPS = 6
#: Timed runs per trial; the fastest counts: on a shared node a burst of other work slows
#: one short run, and ranking on single runs let that noise pick the loader.
TRIAL_REPEATS = 2
#: Timed batches per trial timed end to end with the training step, after the queue's depth
#: plus two warm-up steps (so the batches a queue held ready before timing do not count as
#: prepared while the step ran).
TRIAL_STEPS_WITH_STEP = 16
#: Batches of the training windows the trials read (they cycle over them): a features
#: cache for the trials is built on these only, not on the whole split.
TRIAL_BATCHES = 16


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
    epochs: int = 1,
    free_cpus: float | None = None,
    step_fn: Any = None,
    features_only: bool = False,
) -> TuneResult:
    """Time the loader alone (or, with ``step_fn``, with the training step) on ``data``'s
    training windows under each candidate.

    The windows are those the data stage holds (the whole split in memory, or the sample of
    a streamed one); storage candidates read them back from batch-sized shards written under
    ``folder`` (a temporary folder when ``None``). A memory cache is sized for the part of
    the whole split (``data.train_windows``) not in memory yet, so a streamed split too
    large for the budget is never cached. Torch runs on ``threads`` threads, a training
    worker's CPUs, as ``engage profile`` measures (loader worker processes take one each, as
    in torch). Candidates are ranked by the training throughput their loader rate predicts
    with a step of ``compute_s_per_window`` seconds per window (:func:`predicted_rate`):
    loader workers overlap the step, inline loading does not. A ``features`` candidate (a
    job with window preprocessing) is timed reading its cache, and the cost of building the
    cache is spread over ``epochs`` (:func:`~engage.train.loader_search.amortized_rate`);
    its memory is the features of the whole split. ``free_cpus`` (the CPU capacity other
    processes leave, read before the trials) limits how much loader workers are predicted to
    overlap the step (:func:`~engage.train.loader_search.predicted_rate`).

    With ``step_fn`` (one training step on a batch: the job's model, loss and optimiser),
    each trial times the loader and the step together, end to end, and candidates are
    ranked by that measured rate instead: how far a loader thread or worker overlaps the
    step depends on the cores the node's other processes leave at that moment, which the
    measurement sees and the load average only estimates.

    ``features_only`` keeps only the ``features`` candidates: the train stage trains an
    in-memory split whose preprocessing augments on its features cache whatever the search
    ranks first, so the search spends its budget on the ways to feed that cache.
    """
    from engage.profiler.loader import LoaderConfig, WindowStore, run_pipeline
    from engage.profiler.measure import torch_threads

    x, y = data.train.x, data.train.y
    window_bytes = int(x[0].nbytes) if len(x) else 0
    total = int(getattr(data, "train_windows", len(x)))
    # A memory cache costs what is not in memory yet: nothing for an in-memory split, the
    # rest of the split beyond the data stage's sample for a streamed one.
    dataset_bytes = window_bytes * max(0, total - len(x))
    fitted = data.preprocess
    feature_bytes = 0
    if fitted is not None and len(x):
        window, features = fitted.split_for_cache()[0].output_shape(*x.shape[1:])
        feature_bytes = total * window * features * 4  # float32, the whole split
    budget = memory_budget(memory_fraction)
    kinds = candidate_space(
        min(batch, max(1, len(x))), cores, tune_batch=tune_batch, features=fitted is not None
    )
    kinds = [c for c in kinds if c.batch <= len(x)]
    if features_only and fitted is not None:
        kinds = [c for c in kinds if c.cache == "features"]
    prep = "cpu" if fitted is not None else "none"
    sources = {"memory": "cache", "storage": "storage", "features": "features"}
    trial_x = x[: TRIAL_BATCHES * max(c.batch for c in kinds)] if kinds else x
    with tempfile.TemporaryDirectory(prefix="engage-loader-") as tmp, torch_threads(threads):
        store = WindowStore(trial_x, y[: len(trial_x)], folder or Path(tmp))
        if kinds:  # untimed: the process's first batches (allocations, kernels) and the cache
            warm = LoaderConfig("cache", 0, prep, kinds[0].batch)
            run_pipeline(store, warm, fitted, steps=1, warmup=1)
            if fitted is not None:
                store.features(fitted)

        def rate(c: Candidate) -> float:
            """Samples per second of the loader alone under ``c``, or with ``step_fn`` end to
            end (over the spec's epochs, for a features cache)."""
            config = LoaderConfig(
                sources[c.cache], c.workers, prep, c.batch, None, c.prefetch, c.thread
            )
            steps, warmup = TRIAL_STEPS, 1
            if step_fn is not None:
                queued = c.prefetch * max(1, c.workers) if c.workers or c.thread else 0
                steps, warmup = TRIAL_STEPS_WITH_STEP, queued + 2
            runs = [
                run_pipeline(store, config, fitted, step_fn, steps, warmup).samples_per_s
                for _ in range(TRIAL_REPEATS)
            ]
            best = max(runs)  # the run other processes' bursts slowed least
            if c.cache != "features":
                return best
            first = store.feature_seconds[id(fitted)] / len(store.x)
            return amortized_rate(best, first, epochs)

        if step_fn is not None:
            result = two_phase_search(
                kinds,
                rate,
                budget_bytes=budget,
                footprint=lambda c: c.footprint(window_bytes, dataset_bytes, feature_bytes),
                time_budget_s=time_budget_s,
                loader_alone=False,
            )
            note = "trials timed end to end: the loader and the training step together"
            return dataclasses.replace(result, notes=(*result.notes, note))
        return two_phase_search(
            kinds,
            rate,
            budget_bytes=budget,
            footprint=lambda c: c.footprint(window_bytes, dataset_bytes, feature_bytes),
            time_budget_s=time_budget_s,
            predict=lambda c, r: predicted_rate(c, r, compute_s_per_window, free_cpus),
        )


class RunRecorder(Protocol):
    """What :func:`record` needs of a run (``engage.tracking.PipelineRun`` has it)."""

    def log_params(self, resolved_spec: Mapping[str, Any]) -> None:
        """Spool parameters."""

    def log_dict(self, data: Mapping[str, Any], artifact_file: str) -> None:
        """Spool a JSON artifact."""


def record(result: TuneResult, run: RunRecorder, applied: Mapping[str, str] | None = None) -> None:
    """Write the choice as ``loader.*`` parameters and the evidence as ``loader_tuning.json``;
    ``applied`` (from :func:`apply`) says which of the choice's settings training takes and
    why not the others (``loader.applied.*`` parameters, ``applied`` in the artifact)."""
    applied = dict(applied or {})
    run.log_params({**result.params(), **{f"loader.applied.{k}": v for k, v in applied.items()}})
    run.log_dict({**result.evidence(), "applied": applied}, ARTIFACT)


def summary(result: TuneResult) -> str:
    """One line for the console: the choice, its throughput and how many were timed."""
    n = sum(t.samples_per_s is not None for t in result.trials)
    c = result.chosen
    return (
        f"auto-tuned: prefetch {c.prefetch}, {c.workers} loader workers"
        f"{', a loader thread' if c.thread else ''}, batch {c.batch}, "
        f"cache in {c.cache} ({result.params()['loader.samples_per_s']} samples/s; "
        f"{n} of {len(result.trials)} candidates timed in {result.seconds:.1f} s)"
    )


def apply(result: TuneResult, job: Any, data: Any = None) -> tuple[Any, dict[str, str]]:
    """``job`` (a :class:`~engage.train.loop.TrainJob`) with the chosen settings that its
    training path takes, and what became of each setting (``applied``: the value taken, or
    ``not applied: why``).

    Taken: the prefetch depth of a streamed split; the batch size when the spec opted in
    (the chosen per-worker batch times the workers, as the global batch); a ``features``
    cache on an in-memory split with ``data`` given (:func:`cache_features`: workers then
    train on the cached deterministic features and augment them each epoch; the train
    stage does so for every in-memory split whose preprocessing augments, whatever the
    choice); a loader thread on such a cache (``TrainJob.augment_ahead``: each worker
    augments the next epoch's inputs in a background thread while the current epoch
    trains, :class:`~engage.data.preprocess.ahead.EpochInputs`; the same inputs, so the
    same batches). Loader worker processes have no place in the training loop: an
    in-memory split's preprocessing runs in the data stage (or, cached, once), a streamed
    split's in Ray Data's readers.
    """
    c, train = result.chosen, job.train
    applied: dict[str, str] = {}
    if train.loader_search.tune_batch_size:
        train = train.model_copy(update={"batch_size": c.batch * train.num_workers})
        applied["batch"] = str(c.batch)
    else:
        applied["batch"] = "not applied: train.loader_search.tune_batch_size is false"
    job = dataclasses.replace(job, train=train, prefetch_batches=c.prefetch)
    applied["prefetch"] = (
        str(c.prefetch)
        if job.streamed is not None
        else "not applied: an in-memory split is indexed in memory, nothing to prefetch"
    )
    applied["workers"] = (
        "not applied: preprocessing runs in the data stage or once into the cache, "
        "so the training loop has no loader workers"
        if c.workers
        else "0"
    )
    if job.augment is not None and job.streamed is None:
        applied["cache"] = (
            "features: an in-memory split whose preprocessing augments always trains on "
            "its cached deterministic features, augmented each epoch"
        )
    elif c.cache != "features":
        applied["cache"] = (
            f"{c.cache}: the data stage's windows as they are"
            if c.cache == "memory" or job.streamed is None
            else "storage: the streamed split is read every epoch"
        )
    elif job.streamed is not None:
        applied["cache"] = (
            "not applied: a streamed split's readers compute the deterministic features "
            "of every block each epoch (the split is never held whole to cache them)"
        )
    elif data is None or data.preprocess is None:
        applied["cache"] = "not applied: no prepared data to cache"
    else:
        job = cache_features(job, data)
        applied["cache"] = "features: deterministic features cached, augmentation each epoch"
    if not c.thread:
        applied["thread"] = "not chosen: the batches are prepared between steps"
    elif job.streamed is not None:
        applied["thread"] = (
            "not applied: a streamed split's blocks are read ahead by Ray Data's iterator "
            "(the prefetch depth) and augmented as they arrive"
        )
    elif job.augment is None:
        applied["thread"] = (
            "not applied: an in-memory split without augmentation is indexed in memory, "
            "there is nothing to prepare ahead"
        )
    else:
        job = dataclasses.replace(job, augment_ahead=True)
        applied["thread"] = (
            "the next epoch's augmentation runs in a background thread of each worker "
            "while the current epoch trains"
        )
    return job, applied


def cache_features(job: Any, data: Any, put: Any = None) -> Any:
    """``job`` training on a cache of ``data``'s deterministic features, augmented per epoch.

    The preprocessing steps before the first augmentation run once over the in-memory
    training split (:meth:`~engage.data.preprocess.FittedPreprocess.split_for_cache`); the
    workers receive that output as ``train_x`` (with the same labels and validation
    windows as before, through ``put``: ``ray.put`` by default) and run the rest, the
    augmentation, on it at the start of every epoch with that epoch's draws
    (``TrainJob.augment``). Without augmentation the cache is the data stage's input as
    it is, and nothing runs per epoch. On the CPU the cache is built on every usable core
    (:meth:`~engage.data.preprocess.FittedPreprocess.transform`'s ``threads``: the same
    values as on one).
    """
    fitted = data.preprocess
    if not fitted.augments:
        return job
    cached, per_epoch = fitted.split_for_cache()
    import torch

    from engage.profiler import cores

    # Once, before any worker trains: the pieces side by side on every core of the node.
    features, _ = cached.transform(
        data.train.x, train=False, device=torch.device(fitted.device), threads=cores.usable_cores()
    )
    arrays = {
        "train_x": features,
        "train_y": data.train.y,
        "val_x": data.model_inputs("val"),
        "val_y": data.val.y,
    }
    if put is None:
        import ray

        put = ray.put
    return dataclasses.replace(job, data_ref=put(arrays), augment=per_epoch)


def tune_for_job(job: Any, data: Any, run: RunRecorder | None = None) -> tuple[Any, TuneResult]:
    """Search the loader settings of ``job`` on its prepared ``data``, record them with
    ``run`` (when given) and return the job with the choice applied, and the result.

    The search is one worker's: its trials run the job's training step end to end
    (:func:`training_step`), and its loader may use the node's cores less the other
    workers' CPUs (``train.num_workers`` times ``resources_per_worker.CPU``), so a loader
    thread or process is tried only where a worker has a core to spare.

    Nothing is searched unless ``job.train.loader`` is ``auto``; the caller checks that.
    """
    from engage.profiler import cores
    from engage.profiler.measure import torch_threads

    train = job.train
    search_spec = train.loader_search
    batch = max(1, train.batch_size // train.num_workers)
    threads = int(train.resources_per_worker.get("CPU", 1) or 1)
    # One worker's share of the node: the other workers' CPUs are not its loader's to use.
    share = max(1, cores.usable_cores() - (train.num_workers - 1) * threads)
    with torch_threads(threads):
        compute = compute_seconds(job, data.model_inputs("train"), data.train.y, batch)
    result = tune_loader(  # trials end to end with the job's step: the overlap as it runs
        data,
        batch,
        share,
        threads=threads,
        time_budget_s=search_spec.time_budget_seconds,
        memory_fraction=search_spec.memory_fraction,
        tune_batch=search_spec.tune_batch_size,
        compute_s_per_window=compute / batch,
        epochs=train.epochs,
        step_fn=training_step(job),  # measured end to end: no CPU capacity to predict with
        features_only=getattr(data, "stream", None) is None
        and data.preprocess is not None
        and data.preprocess.augments,
    )
    step_note = f"training step alone: {compute * 1e3:.2f} ms per batch of {batch}"
    cores_note = (
        f"{share} of the node's {cores.usable_cores()} cores per worker "
        f"({train.num_workers} training workers of {threads} CPU each)"
    )
    result = dataclasses.replace(result, notes=(*result.notes, step_note, cores_note))
    job, applied = apply(result, job, data)
    if run is not None:
        record(result, run, applied)
    return job, result


def training_step(job: Any) -> Any:
    """One training step of ``job``'s model on a batch, as a closure ``step(x, y)``: the
    profiler's step (:func:`engage.profiler.compute.make_step`), for end-to-end trials."""
    from types import SimpleNamespace

    from engage.profiler.compute import make_step

    # make_step reads the model, train and task sections of a pipeline spec only
    spec = SimpleNamespace(model=job.model, train=job.train, data=SimpleNamespace(task=job.task))
    return make_step(spec, job.shape)  # type: ignore[arg-type]


def compute_seconds(job: Any, inputs: Any, y: Any, batch: int, steps: int = 3) -> float:
    """Seconds of one training step of ``job``'s model on a batch already in memory (the
    profiler's compute measurement, :func:`engage.profiler.measure.time_compute`)."""
    from types import SimpleNamespace

    from engage.profiler.measure import time_compute

    # time_compute reads the model, train and task sections of a pipeline spec only
    spec = SimpleNamespace(model=job.model, train=job.train, data=SimpleNamespace(task=job.task))
    return time_compute(spec, inputs, y, job.shape.outputs, batch, steps)  # type: ignore[arg-type]
