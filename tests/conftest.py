"""Shared fixtures: the engage command as a user runs it, and an isolated ENGAGE_HOME."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENGAGE = Path(sys.executable).with_name("engage")


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
