"""``model.module``: a user's file is imported once per process, and clear errors otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engage.train.plugins import ModelModuleError, import_model_module


@pytest.fixture
def forget() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


def test_a_file_is_imported_once(tmp_path: Path, forget: list[str]) -> None:
    file = tmp_path / "engage_plugin_once.py"
    file.write_text("import itertools\nCOUNT = next(itertools.count())\n")
    forget.append("engage_plugin_once")

    first = import_model_module(file)
    second = import_model_module(str(file))

    assert first is second
    assert sys.modules["engage_plugin_once"] is first


def test_a_missing_or_non_python_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")

    with pytest.raises(ModelModuleError, match="is not a Python file"):
        import_model_module(tmp_path / "absent.py")
    with pytest.raises(ModelModuleError, match="is not a Python file"):
        import_model_module(tmp_path / "notes.txt")


def test_a_name_taken_by_another_module_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "json.py"
    file.write_text("X = 1\n")

    with pytest.raises(ModelModuleError, match=r"'json' is taken .*rename json\.py"):
        import_model_module(file)


def test_an_error_on_import_names_the_file_and_leaves_no_half_module(tmp_path: Path) -> None:
    file = tmp_path / "engage_plugin_broken.py"
    file.write_text("raise RuntimeError('no GPU here')\n")

    with pytest.raises(ModelModuleError, match=r"engage_plugin_broken\.py failed on import: "):
        import_model_module(file)

    assert "engage_plugin_broken" not in sys.modules
