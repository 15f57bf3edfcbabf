"""Reads throttled to a storage bandwidth, so a profile can play slow or remote storage.

``--bandwidth 20MB/s`` makes every read of a window shard take at least its size divided
by the rate: a token bucket that sleeps after each chunk, so the measured time includes
the real read and decode as well as the wait the rate imposes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from engage.errors import SpecError

_UNITS = {"": 1, "B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "KI": 2**10, "MI": 2**20, "GI": 2**30}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMG]I?)?B?(?:/S)?\s*$")
CHUNK = 1 << 16
"""Bytes read between two throttle checks."""


def parse_bandwidth(text: str) -> float:
    """Bytes per second from text such as ``50MB/s``, ``1.5GiB/s`` or ``800000``.

    Raises
    ------
    SpecError
        If the text is not a positive rate (the message names ``--bandwidth``).
    """
    match = _PATTERN.match(text.upper())
    rate = float(match.group(1)) * _UNITS[match.group(2) or ""] if match else 0.0
    if rate <= 0:
        raise SpecError(
            f"--bandwidth: got {text!r}; expected a positive rate such as 50MB/s or 1GiB/s"
        )
    return rate


def read_throttled(path: Path, bandwidth: float | None) -> bytes:
    """The bytes of ``path``, read no faster than ``bandwidth`` bytes/s (``None``: full speed)."""
    start = time.perf_counter()
    data = bytearray()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            data += chunk
            if bandwidth:
                due = start + len(data) / bandwidth
                time.sleep(max(0.0, due - time.perf_counter()))
    return bytes(data)
