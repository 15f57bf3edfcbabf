"""Fixtures shared by the serving integration tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _tiny_model import register_versions


@pytest.fixture(scope="session")
def tiny_registry(tmp_path_factory) -> Path:
    """An engage home holding the two tiny registered versions, made once per session.

    Registering saves two torch.export models through MLflow (seconds of CPU); each test
    copies the result instead (:func:`tiny_home`). The copies' MLflow store points at the
    artifacts here, which nothing writes to after this fixture.
    """
    home = tmp_path_factory.mktemp("tiny-registry") / ".engage"
    home.mkdir()
    register_versions(home)
    return home


@pytest.fixture(scope="session")
def tiny_home(tiny_registry: Path) -> Callable[[Path], Path]:
    """``tiny_home(folder)``: a fresh engage home at ``folder/.engage`` with the tiny versions."""

    def make(folder: Path) -> Path:
        home = folder / ".engage"
        shutil.copytree(tiny_registry, home)
        return home

    return make
