"""One ``engage quickstart`` per test session, as a user runs it, shared by the e2e tests.

The quickstart trains, registers, serves and shows drift in about a minute on 2 cores when the
machine is idle; three test modules need it (the quickstart itself, the live monitor view
during its training, and ONNX export of its registered model), so it runs once here and
records what each of them looks at:

- from its train stage, ``engage monitor --once`` is polled (in this process) until the
  job's row shows an epoch (what tests/e2e/test_monitor_live.py asserts);
- once it has finished, one prediction is requested from the served endpoint, then the
  deployment is stopped, so no Ray Serve app outlives the fixture and competes for the two
  cores with the tests that follow (what tests/e2e/test_quickstart.py asserts);
- its ENGAGE_HOME, with version 1 of smart-home-occupancy, stays for the session (what
  tests/e2e/test_export_cli.py exports from; export only reads the store).

It runs beside other CPU-bound work (a new user's machine is rarely idle) and records how
much CPU that work got meanwhile, so the quickstart test can say it completed under load.
Under ``make test`` that work is the unit lane (tests/lanes.py names its process in
``ENGAGE_TESTS_OTHER_LANE``; its unit tests keep a core busy): a busy process of our own on
top of it would add no evidence and slow every lane. Run on its own, the module starts a
CPU-bound process at the same priority instead.

The fixture asserts nothing itself: each test asserts its own claims on what was recorded,
so a failure is reported by the test it concerns.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _inprocess import engage_in_process
from _quickstart import QuickstartSession, training_row

from tests.conftest import ENGAGE, REPO

_QUICKSTART_S = 600.0  # the whole command, serving and the drift demo included
_LIVE_S = 300.0  # how long the live view is polled for the job's training row (Ray Train's
# start-up, about a minute under load, comes before the first epoch)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    return env | {"ENGAGE_HOME": str(home), "COLUMNS": "200"}


def _monitor_once(home: Path) -> tuple[int, str]:
    """``engage monitor --once --home HOME``, run in this process: its exit code and output.

    In-process (tests/e2e/_inprocess.py), so a view costs its query and its rendering, not
    an interpreter start: on two loaded cores a fresh ``engage`` took 8-11 s to print,
    longer than the quickstart's epochs after the first (a view started at "epoch 1/" could
    print after training). The command's own start-up is covered by
    tests/e2e/test_monitor_cli.py.
    """
    view = engage_in_process("monitor", "--once", "--home", str(home), cwd=home.parent)
    return view.returncode, view.stdout + view.stderr


def _watch_training(session: QuickstartSession, proc: subprocess.Popen) -> list[str]:
    """Read the output up to the train stage, then poll the live view until the running
    job's row shows an epoch (or the job ends)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # one line per stage and epoch (not a terminal)
        lines.append(line)
        if line.lstrip().startswith("train:"):
            break
    deadline = time.monotonic() + _LIVE_S
    while proc.poll() is None and time.monotonic() < deadline:
        code, view = _monitor_once(session.home)
        session.monitor_views.append(view)
        if code != 0:
            session.monitor_failure = view
            break
        row = training_row(view)
        if row and row[2] == "running" and row[4] not in ("-", "0"):
            break  # an epoch in the train stage, or all of them done between two views
        time.sleep(0.5)
    return lines


def _ask_the_endpoint(session: QuickstartSession) -> None:
    """POST the example the quickstart printed to the served model and keep its JSON answer."""
    example = re.search(r"-d @(\S+example\.json)", session.stdout)
    if example is None:
        session.answer_failure = "the quickstart printed no example request"
        return
    request = urllib.request.Request(
        f"http://127.0.0.1:{session.port}/predict",
        data=Path(example.group(1)).read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            session.answer = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        session.answer_failure = f"{type(exc).__name__}: {exc}"


def _tree_cpu_seconds(root) -> float:
    """CPU seconds (user plus system) of ``root`` and its live descendants, and of the
    children they have reaped, so far."""
    import psutil

    total = 0.0
    with contextlib.suppress(psutil.Error):
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    return total


@contextlib.contextmanager
def _other_load() -> Iterator[Callable[[], float]]:
    """CPU-bound work beside the quickstart; yields how many CPU seconds it has taken since.

    The unit lane when ``make test`` runs the lanes (its pid in ``ENGAGE_TESTS_OTHER_LANE``),
    otherwise a busy process started here and stopped on exit.
    """
    import psutil

    hog = None
    try:
        root = psutil.Process(int(os.environ["ENGAGE_TESTS_OTHER_LANE"]))
    except (KeyError, ValueError, psutil.Error):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        root = psutil.Process(hog.pid)
    before = _tree_cpu_seconds(root)
    try:
        yield lambda: _tree_cpu_seconds(root) - before
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


@pytest.fixture(scope="session")
def quickstart_session(tmp_path_factory: pytest.TempPathFactory) -> QuickstartSession:
    """One ``engage quickstart`` (train, register, serve, drift demo) for the whole session."""
    folder = tmp_path_factory.mktemp("quickstart")
    shutil.copytree(REPO / "pipelines", folder / "pipelines")
    session = QuickstartSession(folder, _free_port())
    env = _env(session.home)
    # A new user's machine is rarely idle (issue 13): other CPU-bound work runs beside the
    # quickstart for its whole run.
    with _other_load() as other_cpu_seconds, tempfile.TemporaryFile("w+") as stderr:
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(ENGAGE), "quickstart", "--set", f"deploy.port={session.port}"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            head = _watch_training(session, proc)
            try:
                rest, _ = proc.communicate(timeout=_QUICKSTART_S)
            except subprocess.TimeoutExpired:  # recorded: each test says what it missed
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                rest = proc.communicate()[0] + f"\n[killed after {_QUICKSTART_S:.0f} s]\n"
            session.returncode = proc.returncode
            session.wall_seconds = time.monotonic() - started
            session.other_cpu_seconds = other_cpu_seconds()
            session.stdout = "".join(head) + rest
            if session.returncode == 0:
                _ask_the_endpoint(session)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stderr.seek(0)
            session.stderr = stderr.read()
            # the deployment outlives the command: stop it before the next tests run
            subprocess.run(
                [str(ENGAGE), "serve", "stop"], cwd=folder, env=env,
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            from engage.serve.cluster import stop_managed

            stop_managed(session.home)  # the managed head too, should a killed deploy leave it
    return session
