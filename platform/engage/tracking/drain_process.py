"""The drainer in its own process: MLflow's client off the job's GIL and CPU priority.

:class:`DrainerProcess` (the job's side) starts ``python -m engage.tracking.drainer_main
SPOOL`` (which runs at nice 19) and talks to it over its standard streams, one JSON object a line:

- to the child: ``{"uri": ...}`` (a whole tracking URI, password included, which the spool
  keeps masked; a pipe, so it is never on a command line or in an environment),
  ``{"down": error}`` (an outage already announced), ``{"wake": true}`` (retry now) and
  ``{"stop": seconds}`` (final drain, then exit);
  end of input (the job died) stops it too.
- to the job: ``{"warn": ...}`` (outage, lag and fault messages), ``{"error": ...}``
  (the last transient error, or null) and ``{"fault": [message, hint]}`` (a permanent
  fault: :meth:`engage.tracking.Drainer.flush` raises it).

The child takes the spool's file lock, so there is still one drainer per spool.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engage.errors import TrackingError
from engage.tracking import uris

_STOP_GRACE_S = 15.0  # beyond the final drain, for an in-flight request to time out


class DrainerProcess:
    """The job's handle on a drainer process; updates ``status`` from what the child says.

    Parameters
    ----------
    spool_path
        The spool the child drains.
    interval_s
        The child's pause between passes while MLflow is up.
    warn
        Called (from a reader thread) with each message the child warns.
    status
        The job-side DrainStatus to keep current (``error`` and ``fault``).
    """

    def __init__(
        self, spool_path: Path, interval_s: float, warn: Callable[[str], None], status: Any
    ) -> None:
        self._warn = warn
        self._status = status
        self.interval_s = interval_s
        self._write_lock = threading.Lock()
        command = [sys.executable, "-m", "engage.tracking.drainer_main", str(spool_path)]
        self._proc = subprocess.Popen(
            [*command, "--interval", str(interval_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name="engage-drainer-io", daemon=True)
        self._reader.start()
        for uri in uris.known():
            self._tell({"uri": uri})
        if status.error is not None:  # an outage the job already announced
            self._tell({"down": status.error})
        self._undo = uris.on_remember(lambda uri: self._tell({"uri": uri}))

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    def alive(self) -> bool:
        """Whether the child still runs."""
        return self._proc.poll() is None

    def wake(self) -> None:
        """Ask the child to retry now."""
        self._tell({"wake": True})

    def stop(self, final_drain_s: float) -> None:
        """Let the child drain for up to ``final_drain_s``, then end it (killed if stuck)."""
        self._undo()
        self._tell({"stop": final_drain_s})
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=final_drain_s + _STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)

    def _tell(self, message: dict[str, Any]) -> None:
        with self._write_lock, contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(json.dumps(message) + "\n")
            self._proc.stdin.flush()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "warn" in message:
                self._warn(message["warn"])
            if "error" in message:
                self._status.error = message["error"]
            if "fault" in message:
                self._status.fault = TrackingError(*message["fault"])
