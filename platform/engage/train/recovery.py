"""Recovery in the training loop: checkpoints written and restored, restarts counted.

Rank 0 writes a verified checkpoint (:mod:`engage.train.checkpoint`) with every report
that carries one; after a worker failure, Ray Train restarts every worker and
:func:`restore` loads the newest valid checkpoint of the run into each. The run folder
(``TrainJob.checkpoint_root``) also holds a line per start of rank 0, so a restart is known
(and reported) even when no checkpoint exists yet, and the kill fault's marker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from torch import nn

from engage.train.checkpoint import (
    Restored,
    candidates,
    load_latest_valid,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from engage.train.sharding import is_sharded, load_state

# ``w`` below is an ``engage.train.loop.Worker`` and ``job`` a ``TrainJob``; they are typed
# ``Any`` because the loop imports this module (no import circle).

STARTS_FILE = "engage-starts.txt"  # one line per start of rank 0: a second line is a restart
KILLED_FILE = "engage-fault-killed.txt"  # the kill fault fired already in this job


def restore(w: Any, core: nn.Module, checkpoint: Any = None) -> int:
    """Resume from the newest valid checkpoint after a worker restart; returns the next epoch.

    Every checkpoint folder of the run (``w.job.checkpoint_root``) is a candidate, newest
    first, not only Ray Train's latest, ``checkpoint`` (``ray.train.get_checkpoint()``;
    :func:`~engage.train.checkpoint.candidates` says why); a damaged one is skipped with a
    warning. No valid one (or none yet): epoch 1.
    """
    root = Path(w.job.checkpoint_root) if w.job.checkpoint_root else None
    paths = candidates(root) if root is not None and root.is_dir() else []
    with contextlib.ExitStack() as stack:
        if checkpoint is not None and not Path(checkpoint.path).is_dir():  # remote storage
            paths.insert(0, Path(stack.enter_context(checkpoint.as_directory())))
        elif checkpoint is not None and Path(checkpoint.path) not in paths:
            paths.insert(0, Path(checkpoint.path))
        restored = load_latest_valid(paths)
    if restored is None:
        if paths:
            w.reporter.lifecycle("checkpoint_invalid", detail="no valid checkpoint; epoch 1")
        return 1
    return apply_state(w, core, restored)


def apply_state(w: Any, core: nn.Module, restored: Restored) -> int:
    """Load a restored checkpoint into the worker (model, optimiser, scaler, RNG); rank 0
    reports each skipped checkpoint. Returns the epoch to train next (the data position).
    """
    state = restored.state
    if is_sharded(w.model):  # FSDP: each rank cuts its shard of the full state
        load_state(w.model, w.optimizer, state["model"], state["optimizer"])
    else:
        core.load_state_dict(state["model"])
        w.optimizer.load_state_dict(state["optimizer"])
    w.precision.load_state_dict(state.get("scaler", {}))
    if "rng" in state:
        set_rng_state(state["rng"])
    if w.rank == 0:
        for path, reason in restored.skipped:
            w.reporter.lifecycle("checkpoint_skipped", checkpoint=path.name, reason=reason)
    return int(state.get("position", {}).get("epoch", int(state["epoch"]) + 1))


def checkpoint_state(
    w: Any, core: nn.Module, epoch: int, metrics: dict, full: tuple[dict, dict] | None = None
) -> dict[str, Any]:
    """What a checkpoint after ``epoch`` holds: tensors and plain containers only.

    ``full`` is the model and optimiser state an FSDP worker gathered
    (:func:`~engage.train.sharding.gather_state`); without it, ``core``'s and the optimiser's own.
    """
    model, optimizer = full or (core.state_dict(), w.optimizer.state_dict())
    return {
        "model": model,
        "optimizer": optimizer,
        "scaler": w.precision.state_dict(),
        "rng": rng_state(),
        "epoch": epoch,
        "position": {"epoch": epoch + 1, "step": 0},
        "metrics": metrics,
    }


def report_epoch(metrics: dict[str, float], epoch: int, job: Any, rank: int, state: Any) -> None:
    """Report an epoch's metrics to Ray Train; rank 0 adds a checkpoint every
    ``train.checkpoint_every`` epochs and after the last, built by calling ``state()``."""
    import ray.train

    if rank != 0 or not checkpoint_due(job, epoch):
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        folder = write_checkpoint(Path(d) / "checkpoint", state())
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def checkpoint_due(job: Any, epoch: int) -> bool:
    """Whether a checkpoint follows ``epoch``: every ``train.checkpoint_every`` and the last."""
    return epoch % job.train.checkpoint_every == 0 or epoch == job.train.epochs


def sharded_checkpoint(w: Any, epoch: int) -> bool:
    """Whether every rank must gather the full state after ``epoch`` (an FSDP model and a
    checkpoint due): rank 0 alone cannot, the gather is a collective."""
    return is_sharded(w.model) and checkpoint_due(w.job, epoch)


def count_start(job: Any) -> int:
    """Record one start of rank 0 in the run folder; returns which start this is (1 = first)."""
    if job.checkpoint_root is None:
        return 1
    path = Path(job.checkpoint_root) / STARTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{time.time():.3f}\n")
    return len(path.read_text().splitlines())


def maybe_kill(w: Any, epoch: int) -> None:
    """Fault injection (``train.faults.kill_worker_at_epoch``): SIGKILL this worker process,
    the last-ranked one, once per job; the kill time goes to the run folder first."""
    faults, root = w.job.train.faults, w.job.checkpoint_root
    if faults is None or faults.kill_worker_at_epoch != epoch or root is None:
        return
    marker = Path(root) / KILLED_FILE
    if w.rank != w.world - 1 or marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{time.time():.6f} epoch {epoch} rank {w.rank} pid {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
