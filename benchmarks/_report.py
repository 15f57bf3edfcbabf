"""Writes one benchmark's section of docs/BENCHMARKS.md, leaving the others as they are."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import psutil

DOC = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
HEADER = """# Benchmarks

Every figure here is written by a script in `benchmarks/` (run them all with `make bench`).
Each section names the machine, the command, and a ratio against a baseline measured in
the same run. Benchmarks are measurements, not timed tests: CI does not run them.
"""


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = cpu
    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_section(key: str, body: str) -> None:
    """Replace the section between ``<!-- key -->`` markers (append it when new)."""
    text = DOC.read_text() if DOC.exists() else HEADER
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else f"{text.rstrip()}\n\n{block}\n"
    )
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
