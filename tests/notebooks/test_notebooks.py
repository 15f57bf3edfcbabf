"""The onboarding notebooks run top to bottom, as a user runs them, with small settings.

Each notebook in ``notebooks/`` is executed in memory by nbclient in a ``python3`` kernel of
this venv (ipykernel's own kernelspec: jupyter_client starts it with this interpreter), with
``ENGAGE_NOTEBOOK_SMALL=1`` (1-2 epochs, a few days of data) and ``ENGAGE_NOTEBOOK_DIR``
pointing at a temporary folder that holds everything the notebook writes (its ENGAGE_HOME
included). A failing cell fails the test (nbclient raises ``CellExecutionError``); so does a
notebook that leaves a process of its own running (a serving head, a Ray node: found by the
folders they name) or draws no plot. The notebooks stay in git without outputs; the structural test checks that cheaply.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXPECTED = [
    "01_quickstart.ipynb",
    "02_your_own_data_and_model.ipynb",
    "03_drift_and_degradation.ipynb",
    "04_federated_under_attack.ipynb",
    "05_laptop_to_cluster.ipynb",
]
_CELL_TIMEOUT_S = 300  # one cell; the dearest trains once or starts a two-node cluster
_EXIT_GRACE_S = 0.5  # for processes signalled by the last cell to finish exiting


def _ids() -> list[str]:
    return [p.stem for p in NOTEBOOKS]


def test_the_five_notebooks_ship_without_outputs_and_end_with_what_to_try_next() -> None:
    assert [p.name for p in NOTEBOOKS] == EXPECTED
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3", path.name
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), (
            f"{path.name}: clear the outputs before committing"
        )
        last = nb.cells[-1]
        assert last.cell_type == "markdown", path.name
        assert "What to try next" in last.source, path.name
        assert sum(c.cell_type == "markdown" for c in nb.cells) >= len(code) // 2, path.name


def _leftovers(folder: Path) -> list[str]:
    """Live processes whose command line names ``folder`` (what the notebook started there)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = p.info["cmdline"] or ()
        if any(str(folder) in part for part in cmdline):
            found.append(f"{p.info['pid']} {' '.join(cmdline)[:160]}")
    return found


def _still_running(folders: list[Path], grace_s: float) -> list[str]:
    """Processes naming one of ``folders`` that are still alive ``grace_s`` from now.

    Processes signalled by the last cell may need a moment to finish exiting: the check
    polls until none is left, and answers as soon as that is so.
    """
    deadline = time.monotonic() + grace_s
    while True:
        left = [p for folder in folders for p in _leftovers(folder)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


@pytest.mark.e2e
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids())
def test_the_notebook_runs_top_to_bottom(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "ENGAGE_HOME", "MPLBACKEND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENGAGE_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("ENGAGE_NOTEBOOK_DIR", str(work))
    monkeypatch.setenv("COLUMNS", "160")
    nb = nbformat.read(path, as_version=4)
    heads: set[str] = set()  # temp dirs of the serving heads engage started for the notebook

    def note_serving_head(**_: object) -> None:
        state = work / ".engage" / "serve" / "cluster.json"
        if state.exists():
            heads.add(json.loads(state.read_text())["temp_dir"])

    client = NotebookClient(
        nb,
        timeout=_CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
        on_cell_executed=note_serving_head,
    )

    started = time.monotonic()
    client.execute()  # CellExecutionError names the failing cell and its traceback
    seconds = time.monotonic() - started

    print(f"{path.name}: executed in {seconds:.1f} s")
    images = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert images, f"{path.name} drew no plot"
    # What the notebook started: under its folder, and the Ray clusters' temp dirs, kept
    # short (socket paths) under /tmp
    folders = [work, *map(Path, heads)]
    if (work / "ray_root.txt").exists():
        folders.append(Path((work / "ray_root.txt").read_text().strip()))
    left = _still_running(folders, grace_s=_EXIT_GRACE_S)
    assert not left, f"{path.name} left processes running: {left}"
