"""``engage export`` on the quickstart's registered model: ONNX equivalence, as a user runs it.

The quickstart runs once per session (tests/e2e/conftest.py); each test exports from its
store. The export a user runs first is an ``engage`` process; the failures after it run the
same command in the test process (tests/e2e/_inprocess.py says why).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from _inprocess import engage_in_process
from _quickstart import QuickstartSession

from tests.conftest import ENGAGE

pytestmark = pytest.mark.e2e

MODEL = "smart-home-occupancy"


def _engage(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [str(ENGAGE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def home(quickstart_session: QuickstartSession) -> Path:
    """The session's quickstart store (tests/e2e/conftest.py); export only reads it.

    What export needs is the registered version; serving, the quickstart's last step, is
    tests/e2e/test_quickstart.py's to check.
    """
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    result = quickstart_session
    client = MlflowClient(f"sqlite:///{result.home}/mlflow.db")
    try:
        candidate = client.get_model_version_by_alias(MODEL, "candidate")
    except MlflowException as exc:
        pytest.fail(f"the quickstart registered no {MODEL}@candidate ({exc}):\n{result.stdout}")
    assert str(candidate.version) == "1", result.stdout + result.stderr
    return result.home


def test_onnx_equivalence_on_the_quickstart_model(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported"

    result = _engage(
        "export", f"{MODEL}@candidate", "--home", str(home), "--output", str(out), cwd=tmp_path
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert {p.name for p in out.iterdir()} == {
        "model.onnx",
        "model.torchscript.pt",
        "equivalence.json",
    }
    report = json.loads((out / "equivalence.json").read_text())
    onnx = report["onnx"]
    assert onnx["passed"]
    assert onnx["max_abs_diff"] < onnx["tolerance"] == 1e-4
    assert onnx["opset"] == 18
    assert onnx["dynamic_batch"]
    assert onnx["n"] == 256
    assert 1 in onnx["batch_sizes"]
    assert report["torchscript"]["passed"]
    assert "model.onnx" in result.stdout
    assert "pass" in result.stdout


def test_above_tolerance_exits_7_naming_format_and_diff(home: Path, tmp_path: Path) -> None:
    result = engage_in_process(
        "export", f"{MODEL}/1", "--home", str(home), "--format", "onnx",
        "--tolerance", "1e-12", "--output", str(tmp_path / "x"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 7, result.stdout + result.stderr
    assert "the onnx export differs from the torch model" in result.stderr
    assert "tolerance 1e-12" in result.stderr
    assert "FAIL" in result.stdout


def test_an_unknown_alias_lists_the_model_aliases(home: Path, tmp_path: Path) -> None:
    result = engage_in_process("export", f"{MODEL}@nope", "--home", str(home), cwd=tmp_path)

    assert result.returncode == 5
    assert "candidate -> 1" in result.stderr
