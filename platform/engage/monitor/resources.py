"""What a training worker reports about its own process: CPU, memory and its GPU."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psutil

_EVERY_S = 2.0


class ResourceSampler:
    """Reports the worker's resource use at most every ``every_s`` seconds."""

    def __init__(self, device: Any, every_s: float = _EVERY_S) -> None:
        self._process = psutil.Process()
        self._device = device
        self._every = every_s
        self._last = 0.0

    def maybe_report(self, reporter: Any, step: int) -> None:
        """Report :meth:`sample` through ``reporter`` at ``step`` unless the last report is under
        ``every_s`` seconds old.
        """
        now = time.monotonic()
        if now - self._last < self._every:
            return
        self._last = now
        reporter.metrics(self.sample(), step=step)

    def sample(self) -> dict[str, float]:
        """The process's CPU seconds (user + system) and resident memory; on a CUDA device also
        the device's used memory (all processes) and, where NVML is present, its utilisation.
        """
        cpu = self._process.cpu_times()
        out = {
            "worker_cpu_seconds": cpu.user + cpu.system,
            "worker_resident_memory_bytes": float(self._process.memory_info().rss),
        }
        if getattr(self._device, "type", "cpu") == "cuda":
            out.update(_gpu(self._device))
        return out


def _gpu(device: Any) -> dict[str, float]:
    import torch

    out: dict[str, float] = {}
    free, total = torch.cuda.mem_get_info(device)
    out["gpu_memory_used_bytes"] = float(total - free)
    with contextlib.suppress(Exception):  # needs NVML (pynvml); absent on some images
        out["gpu_utilization_ratio"] = torch.cuda.utilization(device) / 100.0
    return out
