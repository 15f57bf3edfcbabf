"""``engage init DIR``: the scaffolded project loads, imports its builder and passes the data checks.

Nothing here trains: the end-to-end check (``engage run engage.yaml`` inside the project)
starts Ray and takes over a minute (90 s here), so it is a manual check, not a suite test.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from engage.cli.init import DATA_FILE, SPEC_FILE, project_name, scaffold, why_not_init
from engage.cli.main import app
from engage.data.checks import validate_frame
from engage.data.sources import load_frame
from engage.errors import SpecError
from engage.spec import load_spec
from engage.train.builders import MODEL_BUILDERS, ModelShape, get_builder

PROJECT_FILES = {SPEC_FILE, "my_model.py", "README.md", "notebook.ipynb", ".gitignore"}


@pytest.fixture
def isolated_builders(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let a test import a project's ``my_model.py`` without leaking its builder.

    Other tests (the spec reference, the registry meta tests) read the builder registry, so
    the registry's contents and the imported module are restored afterwards.
    """
    monkeypatch.setattr(MODEL_BUILDERS, "_items", dict(MODEL_BUILDERS._items))
    yield
    sys.modules.pop("my_model", None)


def test_init_writes_every_file(tmp_path: Path) -> None:
    target = tmp_path / "proj"

    result = CliRunner().invoke(app, ["init", str(target)])

    assert result.exit_code == 0, result.output
    assert {p.name for p in target.iterdir() if p.is_file()} == PROJECT_FILES
    assert (target / DATA_FILE).is_file()
    assert f"engage run {SPEC_FILE}" in result.output
    assert "{{" not in "".join(p.read_text() for p in target.iterdir() if p.is_file())


@pytest.mark.usefixtures("isolated_builders")
def test_the_spec_loads_and_imports_the_projects_builder(tmp_path: Path) -> None:
    scaffold(tmp_path / "my proj")

    loaded = load_spec(tmp_path / "my proj" / SPEC_FILE)

    assert loaded.spec.name == "my-proj"
    assert loaded.spec.model.name == "my-model"
    assert Path(loaded.spec.model.module) == (tmp_path / "my proj" / "my_model.py").resolve()
    model = get_builder("my-model").build(ModelShape(window=8, features=5, outputs=2), {})
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.usefixtures("isolated_builders")
def test_the_sample_csv_passes_the_data_checks(tmp_path: Path) -> None:
    scaffold(tmp_path)
    loaded = load_spec(tmp_path / SPEC_FILE)

    frame = validate_frame(load_frame(loaded.spec.data, loaded.base_dir), loaded.spec.data, "x")

    assert 200 <= len(frame) <= 1000
    assert set(frame["occupied"]) == {0, 1}


def test_the_notebook_is_valid_nbformat_4_json(tmp_path: Path) -> None:
    scaffold(tmp_path)

    notebook = json.loads((tmp_path / "notebook.ipynb").read_text())

    assert notebook["nbformat"] == 4
    kinds = [cell["cell_type"] for cell in notebook["cells"]]
    assert "markdown" in kinds
    assert "code" in kinds
    code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert f'engage("run", "{SPEC_FILE}"' in code
    assert all(c["outputs"] == [] for c in notebook["cells"] if c["cell_type"] == "code")


def test_a_non_empty_folder_is_refused_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")

    # a wide terminal: rich wraps the usage error's box at the width it finds (80 in a pipe)
    result = CliRunner().invoke(app, ["init", str(tmp_path)], env={"COLUMNS": "200"})

    assert result.exit_code == 2
    assert "not empty" in result.output
    assert "--force" in result.output
    assert not (tmp_path / SPEC_FILE).exists()


def test_force_writes_into_a_non_empty_folder_and_keeps_other_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")

    result = CliRunner().invoke(app, ["init", str(tmp_path), "--force"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / SPEC_FILE).is_file()
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_file_is_never_a_project_folder(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")

    assert "is a file" in (why_not_init(file, force=True) or "")


@pytest.mark.parametrize(
    ("folder", "name"), [("demo", "demo"), ("my proj!", "my-proj-"), ("__", "my-project")]
)
def test_project_names_are_valid_spec_names(tmp_path: Path, folder: str, name: str) -> None:
    assert project_name(tmp_path / folder) == name


@pytest.mark.usefixtures("isolated_builders")
def test_a_broken_model_module_is_a_located_spec_error(tmp_path: Path) -> None:
    scaffold(tmp_path)
    (tmp_path / "my_model.py").write_text("def broken(:\n")

    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / SPEC_FILE)

    assert "model.module" in info.value.message
    assert "SyntaxError at line 1" in info.value.message
    assert "my_model" not in sys.modules


@pytest.mark.usefixtures("isolated_builders")
def test_a_federated_client_builds_the_projects_model_from_its_module(tmp_path: Path) -> None:
    from engage.federated.client import build_model
    from engage.federated.simulation import local_training

    scaffold(tmp_path / "proj")
    loaded = load_spec(tmp_path / "proj" / SPEC_FILE)
    shape = ModelShape(window=8, features=5, outputs=2)
    fed = SimpleNamespace(
        local_epochs=1, batch_size=8, optimizer="adam", learning_rate=0.01,
        strategy="fedavg", mu=0.0, seed=0, max_update_bytes=1 << 20,
    )  # fmt: skip
    training = local_training(
        fed, loaded.spec.model, SimpleNamespace(shape=shape, task="classification")
    )
    # a Ray actor is a fresh process: the builder is not registered there until it imports
    MODEL_BUILDERS._items.pop("my-model")
    sys.modules.pop("my_model", None)

    model = build_model(training)

    assert "my-model" in MODEL_BUILDERS
    assert sum(p.numel() for p in model.parameters()) > 0
