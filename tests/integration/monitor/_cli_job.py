"""A CLI job as a user starts it (``engage run ...``), with its output read line by line.

Plain helpers, no pytest. The job runs in its own session and is killed by process group at
the end, never by name; Ray's processes of an embedded cluster die with their driver.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from time import monotonic  # bound at import: unit tests may patch time.monotonic

import psutil

ENGAGE = Path(sys.executable).with_name("engage")


@dataclass
class CliJob:
    """``engage ARGS`` running in ``cwd``; ``lines`` grows as it prints (wall time, text)."""

    proc: subprocess.Popen
    lines: list[tuple[float, str]] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @classmethod
    def start(cls, args: list[str], cwd: Path, env: dict[str, str]) -> CliJob:
        proc = subprocess.Popen(
            [str(ENGAGE), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        job = cls(proc)
        job._reader = threading.Thread(target=job._read, daemon=True)
        job._reader.start()
        return job

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    @property
    def output(self) -> str:
        return "\n".join(text for _, text in self.lines)

    def wait_for_line(self, pattern: str, timeout_s: float) -> tuple[float, re.Match]:
        """The first output line matching ``pattern``: (when it was read, the match)."""
        regex, seen, deadline = re.compile(pattern), 0, monotonic() + timeout_s
        while True:
            for at, text in self.lines[seen:]:
                if match := regex.search(text):
                    return at, match
            seen = len(self.lines)
            if self.proc.poll() is not None and self._drained():
                raise AssertionError(
                    f"the job exited ({self.proc.returncode}) before printing {pattern!r}:\n"
                    f"{self.output[-4000:]}"
                )
            if monotonic() > deadline:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout_s:g} s:\n{self.output[-4000:]}"
                )
            time.sleep(0.1)

    def _drained(self) -> bool:
        return self._reader is None or not self._reader.is_alive()

    def wait(self, timeout_s: float) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        if self._reader is not None:
            self._reader.join(timeout=10)
        return rc

    def kill(self) -> None:
        """End the job if it still runs: SIGINT (engage's Ctrl-C path), then SIGKILL its tree."""
        if self.proc.poll() is not None:
            return
        tree = _tree(self.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for p in tree:  # Ray's processes of the embedded cluster, should any outlive the driver
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(tree, timeout=15)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
