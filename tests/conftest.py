"""Shared fixtures: the engage command as a user runs it, and an isolated ENGAGE_HOME.

Also the session's one background set-up hook: a test module that defines
``start_in_background(tmp_path_factory)`` and ``stop_background()`` (today the watched
Prometheus job, tests/integration/monitor/test_watched_job.py) runs after every other test,
and its set-up is started when the unit tests begin, so a set-up that mostly waits overlaps
tests that keep one of the two cores busy instead of adding its minutes to theirs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGAGE = Path(sys.executable).with_name("engage")


_STARTS_BACKGROUND = pytest.StashKey[list]()  # modules whose set-up this test starts


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread for the torch work the tests do in the pytest process itself.

    ``make test`` runs lanes side by side and they keep the cores busy: torch's default of
    one intra-op thread per core made every in-process op wait for a thread another lane
    had descheduled (tests/unit/train beside a busy core: 16.8 s, with one thread 11.9 s).
    Subprocesses (``engage`` as a user runs it, notebooks' kernels, Ray's workers) keep
    their own defaults.

    The clusters engage starts in the tests (each ``engage run``'s embedded one, the
    serving heads) start without Ray's dashboard (``ENGAGE_RAY_DASHBOARD=0``, inherited by
    subprocesses): no test reads it, and each start costs 3-4 CPU-seconds less (a bare
    local cluster, 4 tasks and 5 s idle: 7.1-7.7 CPU-s with it, 3.2-4.0 without).
    """
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("ENGAGE_RAY_DASHBOARD", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run modules with a background set-up last; start those set-ups with the unit tests."""
    deferred = [item for item in items if _background_module(item) is not None]
    if not deferred:
        return
    rest = [item for item in items if _background_module(item) is None]
    unit = REPO / "tests" / "unit"
    first_unit = next((item for item in rest if item.path.is_relative_to(unit)), None)
    items[:] = rest + deferred
    modules = list(dict.fromkeys(_background_module(item) for item in deferred))
    for module in modules:  # also when the module's own fixture starts it (no unit tests)
        config.add_cleanup(module.stop_background)
    if first_unit is not None:
        first_unit.stash[_STARTS_BACKGROUND] = modules


def _background_module(item: pytest.Item) -> Any:
    module = getattr(item, "module", None)
    return module if hasattr(module, "start_in_background") else None


@pytest.fixture(autouse=True)
def _background_setups(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Start the background set-ups that pytest_collection_modifyitems gave this test."""
    for module in request.node.stash.get(_STARTS_BACKGROUND, ()):
        module.start_in_background(tmp_path_factory)


@pytest.fixture
def engage_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a CLI run that writes only under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["ENGAGE_HOME"] = str(tmp_path / ".engage")
    env["COLUMNS"] = "200"
    return env


@pytest.fixture
def run_engage(
    tmp_path: Path, engage_env: dict[str, str]
) -> Callable[..., subprocess.CompletedProcess]:
    """Run ``engage ARGS`` in tmp_path (with pipelines/ copied in) and capture its output."""
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines", dirs_exist_ok=True)

    def run(
        *args: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(ENGAGE), *args],
            cwd=tmp_path,
            env={**engage_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
