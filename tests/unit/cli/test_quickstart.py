"""``engage quickstart`` outside a checkout: the spec it runs is written where the user is."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from engage.cli.quickstart import (
    REPO_SPEC,
    USER_SPEC,
    print_next_steps,
    quickstart_spec_path,
)

PACKAGED = (resources.files("engage") / "resources" / USER_SPEC).read_text(encoding="utf-8")


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_a_checkout_keeps_its_pipelines_spec(cwd: Path, tmp_path: Path) -> None:
    (cwd / REPO_SPEC).parent.mkdir()
    (cwd / REPO_SPEC).write_text("name: x\n")

    assert quickstart_spec_path(cwd, tmp_path / "home") == REPO_SPEC
    assert not (cwd / USER_SPEC).exists()


def test_outside_a_checkout_the_spec_is_written_to_the_working_directory(
    cwd: Path, tmp_path: Path
) -> None:
    spec = quickstart_spec_path(cwd, tmp_path / "home")

    assert spec == Path(USER_SPEC)
    assert (cwd / USER_SPEC).read_text() == PACKAGED


def test_an_identical_copy_is_reused(cwd: Path, tmp_path: Path) -> None:
    (cwd / USER_SPEC).write_text(PACKAGED)

    assert quickstart_spec_path(cwd, tmp_path / "home") == Path(USER_SPEC)
    assert not (tmp_path / "home").exists()


def test_a_users_own_quickstart_yaml_is_never_overwritten(cwd: Path, tmp_path: Path) -> None:
    (cwd / USER_SPEC).write_text("name: mine\n")

    spec = quickstart_spec_path(cwd, tmp_path / "home")

    assert (cwd / USER_SPEC).read_text() == "name: mine\n"
    assert spec == tmp_path / "home" / USER_SPEC
    assert spec.read_text() == PACKAGED


def test_the_packaged_spec_points_at_no_checkout_path() -> None:
    assert "docs/spec.md" not in PACKAGED
    assert "pipelines/" not in PACKAGED


def _next_steps(spec: Path) -> str:
    console = Console(record=True, width=200)
    result = SimpleNamespace(registration=object(), deployment=None)
    print_next_steps(console, result, spec)
    return console.export_text()


def test_try_next_names_the_spec_that_ran() -> None:
    text = _next_steps(Path(USER_SPEC))

    assert "engage run quickstart.yaml --set train.epochs=10" in text
    assert "cp quickstart.yaml my.yaml" in text
    assert "engage init" in text
    assert "pipelines/" not in text
    assert "docs/spec.md" not in text


def test_try_next_in_a_checkout_names_the_pipelines_spec() -> None:
    assert "engage run pipelines/quickstart.yaml" in _next_steps(REPO_SPEC)


def test_a_failed_deploy_still_says_what_to_try_next(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from engage.cli import quickstart as command
    from engage.cli import run as run_module
    from engage.errors import DeployError

    (cwd / REPO_SPEC).parent.mkdir()
    (cwd / REPO_SPEC).write_text("name: x\n")
    finished = SimpleNamespace(registration=object(), deployment=None)

    def failing_run(*args: object) -> None:
        raise DeployError(
            "port 8000 is in use", hint="engage deploy m/1 --port N", run_result=finished
        )

    monkeypatch.setattr(run_module, "run_file", failing_run)
    with pytest.raises(typer.Exit) as exited:
        command.quickstart()

    assert exited.value.exit_code == DeployError.exit_code == 11
    captured = capsys.readouterr()
    assert "Try next" in captured.out
    assert "engage run pipelines/quickstart.yaml" in captured.out
    assert "port 8000 is in use" in captured.err
