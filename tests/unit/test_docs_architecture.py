"""docs/architecture.md stays true: its extension example runs, its tables name real things."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_builder_example_runs_and_registers_a_usable_builder() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1
    code = blocks[0] + (
        "\nfrom engage.train.builders import ModelShape\n"
        "import torch\n"
        "model = get_builder('linear').make(ModelShape(6, 5, 2), LinearParams())\n"
        "assert model(torch.zeros(3, 6, 5)).shape == (3, 2)\n"
    )
    # A fresh interpreter, so the example's registration does not leak into other tests.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_registry_the_doc_names_exists() -> None:
    names = {
        "engage.runtime.kinds": "JOB_KINDS",
        "engage.train.builders": "MODEL_BUILDERS",
        "engage.data.sources": "SOURCES",
        "engage.drift.base": "DETECTORS",
        "engage.federated.aggregators": "AGGREGATORS",
    }
    text = DOC.read_text()
    for kind_module in (
        "engage.runtime.pipeline",
        "engage.federated.job",
    ):  # job kinds register on import
        importlib.import_module(kind_module)
    for module, attr in names.items():
        assert f"{module}.{attr}" in text
        assert getattr(importlib.import_module(module), attr).names()
