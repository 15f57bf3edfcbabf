"""A worker resumed from a verified checkpoint reproduces the uninterrupted run exactly.

The loop Ray Train runs (:func:`make_worker`, :func:`train_epoch`), in one process: the
checkpoint after epoch 1 is written and read back as a restarted worker would, into a new
worker whose RNG has moved on (as a fresh process's would). Dropout makes the torch RNG
state matter; the epoch's permutation comes from the data position.
"""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import torch

from engage.events import Event, Reporter
from engage.monitor.resources import ResourceSampler
from engage.spec.models import FaultSpec, ModelSpec, TrainSpec
from engage.train import recovery
from engage.train.builders import ModelShape
from engage.train.checkpoint import load_latest_valid, write_checkpoint
from engage.train.loop import TrainJob, make_worker, train_epoch
from engage.train.recovery import (
    KILLED_FILE,
    STARTS_FILE,
    apply_state,
    checkpoint_state,
    count_start,
    maybe_kill,
    restore,
)


class _Drop:
    """A transport that keeps nothing: these tests read the returned metrics."""

    def send(self, events: list[Event], wait: bool = False) -> None:
        del events, wait


def _worker():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 4, 2)).astype(np.float32)
    y = (x[:, -1, 0] > 0).astype(np.int64)
    data = {"train_x": x[:64], "train_y": y[:64], "val_x": x[64:], "val_y": y[64:]}
    spec = TrainSpec(num_workers=1, seed=7, batch_size=16, epochs=3)
    model = ModelSpec(name="mlp", params={"dropout": 0.3})
    job = TrainJob(spec, model, "classification", ModelShape(4, 2, 2), None, None, "")
    return make_worker(job, data, Reporter(_Drop()))


_QUALITY = ("train_loss", "val_loss", "val_accuracy")


def test_resumed_worker_reproduces_the_uninterrupted_epochs(tmp_path) -> None:
    resources = ResourceSampler("cpu", every_s=3600.0)
    straight = _worker()
    expected = [train_epoch(straight, e, resources) for e in (1, 2, 3)]

    first = _worker()
    epoch1 = train_epoch(first, 1, resources)
    write_checkpoint(tmp_path / "checkpoint_1", checkpoint_state(first, first.model, 1, epoch1))
    torch.rand(1000)  # the failed worker's RNG moved on; a new process starts elsewhere
    resumed = _worker()
    restored = load_latest_valid([tmp_path / "checkpoint_1"])
    start = apply_state(resumed, resumed.model, restored)
    got = [train_epoch(resumed, e, resources) for e in range(start, 4)]

    assert start == 2
    for want, have in zip(expected[1:], got, strict=True):
        assert {k: have[k] for k in _QUALITY} == {k: want[k] for k in _QUALITY}


class _Keep:
    """A transport that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, events: list[Event], wait: bool = False) -> None:
        del wait
        self.events.extend(events)


def _in_run(tmp_path, keep: _Keep | None = None, **faults: object):
    """A worker whose job has a Ray Train run folder (as ``trainer.fit`` sets it)."""
    w = _worker()
    train = w.job.train.model_copy(update={"faults": FaultSpec(**faults)} if faults else {})
    w.job = dataclasses.replace(w.job, train=train, checkpoint_root=str(tmp_path))
    w.reporter = Reporter(keep or _Keep())
    return w


def test_restore_skips_a_truncated_latest_checkpoint_in_the_run_folder(tmp_path) -> None:
    # Ray Train's latest is the damaged one; the folder beside it is the previous epoch's.
    resources, keep = ResourceSampler("cpu", every_s=3600.0), _Keep()
    w = _in_run(tmp_path, keep)
    for epoch in (1, 2):
        metrics = train_epoch(w, epoch, resources)
        folder = tmp_path / f"checkpoint_2026-12-01_10-00-0{epoch}.000000"
        write_checkpoint(folder, checkpoint_state(w, w.model, epoch, metrics))
    payload = folder / "model.pt"
    payload.write_bytes(payload.read_bytes()[:100])
    latest = type("Checkpoint", (), {"path": str(folder)})()

    start = restore(w, w.model, latest)
    w.reporter.flush(wait=True)

    skipped = [e for e in keep.events if e.name == "checkpoint_skipped"]
    assert start == 2
    assert [e.data["checkpoint"] for e in skipped] == [folder.name]


def test_restore_without_any_checkpoint_starts_at_epoch_one(tmp_path) -> None:
    assert restore(_in_run(tmp_path), _worker().model, None) == 1


def test_starts_are_counted_in_the_run_folder(tmp_path) -> None:
    job = _in_run(tmp_path).job

    assert [count_start(job), count_start(job)] == [1, 2]
    assert (tmp_path / STARTS_FILE).read_text().count("\n") == 2


def test_kill_fault_fires_once_on_the_last_rank(tmp_path, monkeypatch) -> None:
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(recovery.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    w = _in_run(tmp_path, kill_worker_at_epoch=2)

    maybe_kill(w, 1)  # another epoch
    maybe_kill(w, 2)
    maybe_kill(w, 2)  # the marker says it fired already

    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert "epoch 2 rank 0" in (tmp_path / KILLED_FILE).read_text()
