"""The ``engage`` command run inside the test process, for tests of what a command decides.

A fresh ``engage`` process pays its imports before it does anything: MLflow's store alone
is about 3 CPU-seconds here, and on two loaded cores a command that only looks a name up
took 3-24 s. Tests of a command's answers (its exit code, its messages, what it writes) run
the same Typer app through typer's ``CliRunner`` instead, with the environment and working
directory a subprocess would get; each module keeps at least one real ``engage`` process,
so the installed entry point and its start-up stay covered.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

_DROPPED = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")  # what the subprocess tests leave out too


def engage_in_process(
    *args: str, cwd: Path, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess:
    """Run ``engage ARGS`` in this process from ``cwd``, as ``main()`` would.

    ``env`` is laid over this process's environment for the call (a ``None`` value unsets
    a variable), without ``RAY_ADDRESS`` and ``MLFLOW_TRACKING_URI`` unless given, and with
    ``COLUMNS=200`` so messages are not wrapped. Returns a ``CompletedProcess`` (exit code,
    stdout, stderr) so the same assertions read a subprocess's result and this one's.
    The SIGTERM handler the command installs is restored afterwards.
    """
    from typer.testing import CliRunner

    from engage import env_vars
    from engage.cli.main import app

    env_vars.set_third_party_defaults()  # what main() does before the app
    overlay: dict[str, str | None] = {name: None for name in _DROPPED}
    overlay |= {"COLUMNS": "200", **(env or {})}
    term = signal.getsignal(signal.SIGTERM)
    try:
        with contextlib.chdir(cwd):
            result = CliRunner().invoke(app, list(args), env=overlay)
    finally:
        signal.signal(signal.SIGTERM, term)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a failure of the test harness, not an exit code to assert
    return subprocess.CompletedProcess(
        ["engage", *args], result.exit_code, result.stdout, result.stderr
    )
