"""The deploy's own process (``python -m engage.serve.deploy_job``), started early or not.

A pipeline's deploy stage serves from a subprocess (engage.runtime.deploy says why). A job
that trains on the serving head starts it when it joins the head (:func:`start_early`): it
connects and starts Serve's controller and proxies while the job trains, then waits for
the deploy stage to hand it the registered version (:func:`run_deploy`).
:func:`cancel_early` ends it when nothing will be deployed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engage.spec.models import DeploySpec


@dataclass
class _Process:
    """A deploy subprocess started early, and the files its output goes to (a pipe that
    nobody reads while the job trains could fill up and stall it)."""

    popen: subprocess.Popen
    stdout: IO[str]
    stderr: IO[str]

    def finish(self, options: dict[str, Any], timeout_s: float) -> tuple[str, str, int] | None:
        """Send the deploy's options, wait: (stdout, stderr, exit code); None if it had ended.

        Raises
        ------
        subprocess.TimeoutExpired
            It did not finish within ``timeout_s`` (it is killed).
        """
        try:
            self.popen.stdin.write(json.dumps(options) + "\n")
            self.popen.stdin.flush()
        except OSError:  # it ended since it was started (a new one will deploy)
            self.stop()
            return None
        try:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()
            self.popen.wait(timeout=timeout_s)
        except BaseException:  # a time-out or Ctrl-C: the deploy must not go on without us
            self.popen.kill()
            self.stop()
            raise
        self.stdout.seek(0)
        self.stderr.seek(0)
        output = self.stdout.read(), self.stderr.read(), self.popen.returncode
        self.stop()
        return output

    def stop(self) -> None:
        """End it: no model will come (closed input), killed if it does not exit at once."""
        try:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()
            self.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.stdout.close()
        self.stderr.close()


_EARLY: dict[Path, _Process] = {}  # home -> deploy subprocess started by start_early
_COMMAND = (sys.executable, "-m", "engage.serve.deploy_job")


def start_early(spec: DeploySpec, home: Path, address: str | None = None) -> None:
    """Start the deploy subprocess of ``home`` now: it joins the cluster and starts Serve.

    For a job that trains on the serving head and deploys afterwards: Serve's controller
    and proxies start while the job trains, and :func:`deploy` then only hands over the
    model. :func:`cancel_early` ends it when there will be no deploy (and at exit).
    """
    cancel_early(home)
    out, err = (tempfile.TemporaryFile("w+") for _ in range(2))  # noqa: SIM115 - see stop
    try:
        popen = subprocess.Popen(_COMMAND, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
    except OSError:  # only a head start: the deploy starts its own process later
        out.close()
        err.close()
        return
    atexit.unregister(cancel_early)  # registered once, however many jobs this process runs
    atexit.register(cancel_early)
    _EARLY[home] = _Process(popen, out, err)
    first = {"spec": spec.model_dump(mode="json"), "home": str(home), "address": address}
    with contextlib.suppress(OSError):  # it died at once: the deploy will say why
        popen.stdin.write(json.dumps(first) + "\n")
        popen.stdin.flush()


def cancel_early(home: Path | None = None) -> None:
    """Stop the early deploy subprocess of ``home`` (of every home when None), if any."""
    for key in [home] if home is not None else list(_EARLY):
        process = _EARLY.pop(key, None)
        if process is not None:
            process.stop()


def run_deploy(options: dict[str, Any], timeout_s: float) -> tuple[str, str, int]:
    """Deploy with ``options`` (a ``model`` included): (stdout, stderr, exit code).

    In the process :func:`start_early` started for this home when it still runs, else in
    a new one.

    Raises
    ------
    subprocess.TimeoutExpired
        The deploy did not finish within its time-out.
    """
    early = _EARLY.pop(Path(options["home"]), None)
    finished = early.finish(options, timeout_s) if early is not None else None
    if finished is not None:
        return finished
    done = subprocess.run(
        list(_COMMAND), input=json.dumps(options), capture_output=True, text=True,
        timeout=timeout_s,
    )  # fmt: skip
    return done.stdout, done.stderr, done.returncode
