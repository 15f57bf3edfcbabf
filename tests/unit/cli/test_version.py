"""``engage --version`` and ``engage version`` print the installed distribution's version."""

from __future__ import annotations

import re
from importlib import metadata

import pytest
from typer.testing import CliRunner

from engage.cli import version as version_module
from engage.cli.main import app


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_prints_the_installed_version(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0
    assert result.output.strip() == f"engage {metadata.version('engage-ml')}"
    assert re.fullmatch(r"engage \d+\.\d+\.\d+\S*", result.output.strip())


def test_version_wins_over_a_command() -> None:
    """``--version`` is eager: it prints and exits before the command would run."""
    result = CliRunner().invoke(app, ["--version", "run", "no-such-file.yaml"])

    assert result.exit_code == 0
    assert result.output.startswith("engage ")


def test_an_uninstalled_tree_falls_back_to_the_package_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def _missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version_module.metadata, "version", _missing)

    import engage

    assert version_module.version_text() == f"engage {engage.__version__}"
