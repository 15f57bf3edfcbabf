"""Gradient communication of a DDP model: the compression hook a spec chooses, and its timing.

:func:`apply_comm` registers one of torch's DDP communication hooks on a model that
``prepare_model`` already wrapped (plain all-reduce, fp16 or bf16 compression, PowerSGD) and,
when the spec asks for timing, wraps it so that every bucket's all-reduce is timed. The
:class:`CommTimer` it returns gives, per step, the seconds spent in all-reduce (the sum over
buckets), the seconds the step was blocked on it after the backward pass had produced the last
bucket, and so the share of it that overlapped the backward pass. The bucket size is a DDP
constructor argument: :func:`ddp_kwargs` gives what ``prepare_model`` needs for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from engage.spec.models import CommSpec

Hook = Callable[[Any, dist.GradBucket], torch.futures.Future]


def ddp_kwargs(spec: CommSpec | None) -> dict[str, Any]:
    """Keyword arguments for DDP (``prepare_model(parallel_strategy_kwargs=...)``): the bucket
    size in MiB; empty without a spec, which keeps DDP's default of 25 MiB."""
    return {} if spec is None else {"bucket_cap_mb": spec.bucket_cap_mb}


def _hook_and_state(spec: CommSpec) -> tuple[Hook, Any]:
    """torch's hook for ``spec.compression`` and the state it is registered with."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if spec.compression == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=spec.powersgd_rank,
            start_powerSGD_iter=spec.powersgd_start_iter,
            # ...otherwise small models would only ever send uncompressed tensors.
            min_compression_rate=1,
            use_error_feedback=True,
            warm_start=True,
        )
        return powerSGD_hook.powerSGD_hook, state
    hooks = {
        "none": default_hooks.allreduce_hook,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
    }
    # The default hooks take the process group as their state; None is the default group.
    return hooks[spec.compression], None


@dataclass
class CommTimer:
    """Times each bucket's all-reduce through the hook; :meth:`step_metrics` sums a step.

    ``ready`` is when the backward pass handed over a bucket, ``done`` when its all-reduce
    finished. The time after the last bucket was handed over is the time the step waits
    on communication with no gradient work left to hide it.
    """

    clock: Callable[[], float] = time.perf_counter
    _spans: list[tuple[float, float]] = field(default_factory=list)
    _open: dict[int, float] = field(default_factory=dict)

    def wrap(self, hook: Hook) -> Hook:
        """``hook`` with each bucket's start and end recorded."""

        # No annotations: DDP compares them with its own types, and these would be strings.
        def timed(state, bucket):  # type: ignore[no-untyped-def]
            """Run ``hook`` on ``bucket``; record its start, and its end once its future is done."""
            start = self.clock()
            fut = hook(state, bucket)

            def finished(f: torch.futures.Future) -> Any:
                """Record the bucket's span and pass the reduced tensor on."""
                self._spans.append((start, self.clock()))
                return f.value()

            return fut.then(finished)

        return timed

    def step_metrics(self) -> dict[str, float]:
        """The step's communication figures, and a fresh start for the next step.

        ``allreduce_seconds``: all-reduce time summed over buckets; ``allreduce_blocked_seconds``:
        from the last bucket handed over to the last all-reduce done; ``allreduce_overlap``:
        the share of all-reduce time hidden behind the backward pass (1 when nothing was
        sent); ``allreduce_buckets``: the buckets sent.
        """
        spans, self._spans = self._spans, []
        if not spans:
            return {}
        total = sum(end - start for start, end in spans)
        blocked = max(0.0, max(end for _, end in spans) - max(start for start, _ in spans))
        overlap = 1.0 - min(1.0, blocked / total) if total > 0 else 1.0
        return {
            "allreduce_seconds": total,
            "allreduce_blocked_seconds": blocked,
            "allreduce_overlap": overlap,
            "allreduce_buckets": float(len(spans)),
        }


class _Untimed:
    """A wrapper that only forwards to the hook (when the spec turns timing off)."""

    def wrap(self, hook: Hook) -> Hook:
        """``hook`` behind a plain function (see :func:`apply_comm` for why)."""

        def forward(state, bucket):  # type: ignore[no-untyped-def]
            """Call the hook."""
            return hook(state, bucket)

        return forward


def apply_comm(model: nn.Module, spec: CommSpec | None) -> CommTimer | None:
    """Register ``spec``'s communication hook on a DDP-wrapped ``model``; returns its timer.

    Without a spec, or on a model that is not DDP (one worker: ``prepare_model`` leaves it
    unwrapped), nothing changes and the result is None; with ``spec.timing`` off the hook is
    registered untimed and the result is None too.

    Raises
    ------
    RuntimeError
        If the model already has a communication hook (DDP allows one).
    """
    if spec is None or not isinstance(model, nn.parallel.DistributedDataParallel):
        return None
    hook, state = _hook_and_state(spec)
    timer = CommTimer() if spec.timing else None
    # Always through a wrapper: DDP refuses torch's bf16 hook by name unless the backend is
    # NCCL 2.10+, but gloo reduces bf16 too (two gloo workers trained with it here).
    model.register_comm_hook(state, (timer or _Untimed()).wrap(hook))
    return timer
