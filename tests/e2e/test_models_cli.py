"""``engage models`` as a user runs it: list, show, promote, rollback and their errors.

The registry is built once through MLflow (three versions of ``occupancy`` whose runs log
val_accuracy 0.9, 0.95, 0.85 and the gate params engage logs), then copied into each
test's ENGAGE_HOME. The commands run in the test process (tests/e2e/_inprocess.py says
why); the missing ``--reason`` runs the installed ``engage`` as a process.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _inprocess import engage_in_process

pytestmark = pytest.mark.e2e

Engage = Callable[..., subprocess.CompletedProcess]
ACCURACIES = (0.9, 0.95, 0.85)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.entities import Metric, Param

    from engage.tracking.store import open_client

    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    client = open_client(f"sqlite:///{db}")
    experiment = client.create_experiment("e2e", (db.parent / "artifacts").as_uri())
    client.create_registered_model("occupancy")
    for accuracy in ACCURACIES:
        run = client.create_run(experiment).info
        gate = [
            Param("tracking.registration.gate.metric", "val_accuracy"),
            Param("tracking.registration.gate.direction", "maximize"),
        ]
        metric = Metric("val_accuracy", accuracy, int(time.time() * 1000), 0)
        client.log_batch(run.run_id, metrics=[metric], params=gate)
        tags = {"engage.gate": f"gate passed: val_accuracy = {accuracy} (needs >= 0.8)"}
        version = client.create_model_version(
            "occupancy", f"{run.artifact_uri}/model", run_id=run.run_id, tags=tags
        )
        client.set_registered_model_alias("occupancy", "candidate", version.version)
    return db


@pytest.fixture
def home(template: Path, tmp_path: Path) -> Path:
    """This test's ENGAGE_HOME (the ``run_engage`` fixture's), holding a copy of the registry."""
    home = tmp_path / ".engage"
    home.mkdir(exist_ok=True)
    shutil.copy(template, home / "mlflow.db")
    return home


@pytest.fixture
def engage(home: Path, tmp_path: Path) -> Engage:
    """``engage ARGS`` on ``home``, run in this process from tmp_path."""
    return lambda *args: engage_in_process(*args, cwd=tmp_path, env={"ENGAGE_HOME": str(home)})


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _fails(result: subprocess.CompletedProcess, code: int, *messages: str) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for message in messages:
        assert message in result.stderr


def test_promote_refuse_force_show_and_rollback(engage: Engage) -> None:
    listed = _ok(engage("models", "list"))
    assert "occupancy" in listed
    assert "│ 3        │ -        │ 3" in listed  # 3 versions, no champion, candidate 3

    first = _ok(engage("models", "promote", "occupancy", "--version", "2", "--reason", "best"))
    assert "occupancy version 2 is now the champion (first champion)" in first

    refused = engage("models", "promote", "occupancy", "--reason", "newer")
    _fails(refused, 5, "version 3 = 0.85 < champion version 2 = 0.95", "--force")

    forced = engage("models", "promote", "occupancy", "--reason", "data fix", "--force")
    assert "version 3 is now the champion (was version 2) (forced)" in _ok(forced)

    shown = _ok(engage("models", "show", "occupancy"))
    assert "champion history: 2 -> 3" in shown
    assert "engage.promotion_reason = data fix" in shown
    assert "val_accuracy (maximize)" in shown

    back = _ok(engage("models", "rollback", "occupancy", "--reason", "latency"))
    assert "champion rolled back: version 3 -> version 2" in back
    champion = _ok(engage("models", "show", "occupancy@champion"))
    assert "engage.rollback_reason = latency" in champion
    assert "engage.rolled_back_from = 3" in champion

    again = engage("models", "rollback", "occupancy", "--reason", "again")
    _fails(again, 5, "no previous champion to roll back to")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "nope"), "no registered model named 'nope'"),
        (("show", "occupancy/7"), "model 'occupancy' has no version 7"),
        (("show", "occupancy@gold"), "has no version with alias 'gold'"),
        (("promote", "nope", "--reason", "x"), "no registered model named 'nope'"),
        (("rollback", "occupancy", "--reason", "x"), "has no champion to roll back"),
        (("promote", "occupancy", "--reason", "x", "--direction", "up"), "needs --metric"),
    ],
    ids=["model", "version", "alias", "promote-model", "rollback-none", "direction"],
)
def test_bad_names_exit_5_with_one_message(engage: Engage, args: tuple[str, ...], message: str):
    _fails(engage("models", *args), 5, message)


def test_promote_requires_a_reason(run_engage: Engage, home: Path) -> None:
    result = run_engage("models", "promote", "occupancy")

    assert result.returncode == 2
    assert "--reason" in result.stderr
    assert "Traceback" not in result.stderr


def test_tracking_uri_flag_and_a_missing_store(
    engage: Engage, template: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    shutil.copy(template, elsewhere)
    empty = ("--home", str(tmp_path / "empty"))

    by_flag = _ok(engage("models", "list", "--tracking-uri", f"sqlite:///{elsewhere}"))
    _fails(engage("models", "show", "occupancy", *empty), 5, "no MLflow store at")

    assert "occupancy" in by_flag
    assert "no registered models yet" in _ok(engage("models", "list", *empty))
    assert not (tmp_path / "empty").exists()
