"""The ``engage`` app's own parts: third-party noise kept out, ``engage models builders``."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engage import env_vars
from engage.cli.main import app

# ``engage.cli`` re-exports the entry-point function as ``main``: fetch the module itself.
main = importlib.import_module("engage.cli.main")


def _passes(message: str) -> bool:
    record = logging.LogRecord(main._RAY_AUTH_LOGGER, logging.WARNING, "", 0, message, (), None)
    return main._DropRayAuthEnabledNotice().filter(record)


def test_rays_opt_out_notice_is_dropped_and_its_disabled_warning_kept() -> None:
    assert not _passes(
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to "
        "opt out. For more information, see https://docs.ray.io/en/latest/ray-security/"
    )
    assert _passes("Token authentication is disabled for this Ray cluster. Anyone with ...")


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false"),
        ("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0"),
        ("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25"),
    ],
)
def test_third_party_defaults_apply_only_where_the_user_set_nothing(
    name: str, default: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "")  # recorded, so the value set below is undone after the test
    monkeypatch.delenv(name)
    env_vars.set_third_party_defaults()
    assert env_vars.os.environ[name] == default

    monkeypatch.setenv(name, "user's own")
    env_vars.set_third_party_defaults()
    assert env_vars.os.environ[name] == "user's own"


def test_models_builders_lists_every_registered_builder() -> None:
    result = CliRunner().invoke(app, ["models", "builders"], terminal_width=200)

    assert result.exit_code == 0, result.output
    for name in ("mlp", "gru", "cnn1d"):
        assert f" {name} " in result.output


def test_models_builders_with_a_missing_module_is_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["models", "builders", "--module", str(tmp_path / "x.py")])

    assert result.exit_code == 2
    assert "is not a Python file" in " ".join(result.output.split())
