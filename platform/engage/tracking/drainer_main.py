"""The drainer process's entry point: ``python -m engage.tracking.drainer_main SPOOL``.

Started by :class:`engage.tracking.drain_process.DrainerProcess`, which documents the
line protocol on its standard streams. Runs at nice 19 once it has sent something: it only
ever waits on MLflow. Until then (importing MLflow, opening the store, creating the job's
run) it runs at the job's priority, because the job waits for that run's id.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engage.tracking import uris
from engage.tracking.drain import Drainer, DrainStatus


class ReportingDrainer(Drainer):
    """A Drainer that tells the job its transient errors and faults as they change."""

    def __init__(self, spool_path: Path, say: Callable[..., None]) -> None:
        super().__init__(spool_path, warn=lambda m: say(warn=m), in_process=True)
        self._say = say
        self._niced = False

    def drain_once(self) -> DrainStatus:
        """One pass, then tell the job what changed in the status; the process takes the
        lowest priority after the first pass that sent something or failed."""
        error, fault = self.status.error, self.status.fault
        status = super().drain_once()
        if not self._niced and (status.sent or status.error or status.fault):
            self._niced = True
            with contextlib.suppress(OSError):
                os.nice(19)
        if status.error != error:
            self._say(error=status.error)
        if status.fault is not None and fault is None:
            self._say(fault=[status.fault.message, status.fault.hint])
        return status


def main(argv: list[str] | None = None) -> None:
    """Drain the spool until told to stop or the job's end of the pipe closes."""
    parser = argparse.ArgumentParser(description="engage's drainer process")
    parser.add_argument("spool")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    # The job owns this process's lifetime: a terminal Ctrl-C reaches the whole process
    # group, and the job answers it by telling us to make a final drain and stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out_lock = threading.Lock()

    def say(**message: Any) -> None:
        with out_lock, contextlib.suppress(OSError, ValueError):
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    drainer = ReportingDrainer(Path(args.spool), say)
    final = [0.0]
    threading.Thread(target=_commands, args=(drainer, final), daemon=True).start()
    drainer.loop(args.interval)
    drainer.stop(final_drain_s=final[0])


def _commands(drainer: Drainer, final: list[float]) -> None:
    for line in sys.stdin:
        with contextlib.suppress(ValueError, TypeError):
            message = json.loads(line)
            if "uri" in message:
                uris.remember(message["uri"])
            if "down" in message:
                drainer.assume_down(str(message["down"]))
            if "stop" in message:
                final[0] = float(message["stop"])
                break
            drainer.wake()
    drainer.request_stop()


if __name__ == "__main__":
    main()
