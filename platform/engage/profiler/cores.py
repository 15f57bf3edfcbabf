"""The CPU cores this process may run on: what the profiler and the loader search divide."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity; the machine's count off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
