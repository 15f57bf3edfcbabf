"""Lineage capture: git state of a work tree, installed packages, the machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engage.tracking import lineage
from engage.tracking.lineage import (
    GitState,
    Lineage,
    capture_lineage,
    git_state,
    lineage_artifacts,
    lineage_tags,
    pip_freeze,
    system_info,
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit of train.py on branch ``main``."""
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "train.py").write_text("lr = 0.1\n", encoding="utf-8")
    _git(tmp_path, "add", "train.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def test_a_clean_tree_has_a_commit_a_branch_and_no_diff(repo: Path) -> None:
    state = git_state(repo)

    assert state == GitState(_git(repo, "rev-parse", "HEAD"), "main", False, "")


def test_a_modified_file_makes_the_tree_dirty_with_its_diff(repo: Path) -> None:
    (repo / "train.py").write_text("lr = 0.01\n", encoding="utf-8")

    state = git_state(repo)

    assert state.dirty
    assert "-lr = 0.1" in state.diff
    assert "+lr = 0.01" in state.diff


def test_staged_changes_and_untracked_files_are_both_seen(repo: Path) -> None:
    (repo / "model.py").write_text("x = 1\n", encoding="utf-8")
    _git(repo, "add", "model.py")
    (repo / "notes.txt").write_text("scratch\n", encoding="utf-8")

    state = git_state(repo)

    assert state.dirty
    assert "+x = 1" in state.diff
    assert state.untracked == ("notes.txt",)


def test_untracked_files_alone_do_not_make_the_tree_dirty(repo: Path) -> None:
    (repo / "notes.txt").write_text("scratch\n", encoding="utf-8")

    state = git_state(repo)

    assert not state.dirty
    assert state.untracked == ("notes.txt",)


def test_a_big_diff_is_capped_with_a_note(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lineage, "DIFF_CAP_BYTES", 200)
    (repo / "train.py").write_text("".join(f"line {i}\n" for i in range(500)), encoding="utf-8")

    state = git_state(repo)

    assert state.truncated
    assert state.diff.endswith("# engage: diff truncated at 200 bytes\n")
    assert len(state.diff) < 300


def test_a_repository_without_commits_has_no_commit(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("a = 1\n", encoding="utf-8")
    _git(tmp_path, "add", "a.py")

    state = git_state(tmp_path)

    assert state.commit is None
    assert state.dirty
    assert "+a = 1" in state.diff


def test_outside_a_repository_there_is_no_git_state(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    assert git_state(tmp_path / "absent") is None


def test_pip_freeze_lists_sorted_name_version_lines() -> None:
    import mlflow
    import torch

    lines = pip_freeze().splitlines()

    assert f"torch=={torch.__version__}" in lines
    assert f"mlflow=={mlflow.__version__}" in lines
    assert lines == sorted(lines, key=lambda line: line.split("==")[0].lower().replace("_", "-"))
    assert all(line.count("==") == 1 for line in lines)


def test_system_info_names_the_machine_and_the_versions() -> None:
    import torch

    info = system_info()

    assert {"python", "platform", "host", "cpu_count", "torch", "mlflow", "ray"} <= set(info)
    assert info["torch"] == torch.__version__
    assert info["cuda_available"] == torch.cuda.is_available()
    assert info["memory_total_bytes"] > 0
    assert all(value is not None for value in info.values())
    json.dumps(info)


def test_gpus_and_driver_come_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = (("NVIDIA H200", "550.54.15"), ("NVIDIA H200", "550.54.15"))
    monkeypatch.setattr(lineage, "_nvidia_smi", lambda: gpus)

    info = system_info()
    tags = Lineage(None, "", info).tags()

    assert info["gpus"] == ["NVIDIA H200", "NVIDIA H200"]
    assert info["gpu_driver"] == "550.54.15"
    assert tags["engage.gpus"] == "2 x NVIDIA H200"
    assert tags["engage.gpu_driver"] == "550.54.15"


def test_artifacts_and_tags_of_a_dirty_repository(repo: Path) -> None:
    (repo / "train.py").write_text("lr = 0.5\n", encoding="utf-8")

    captured = capture_lineage(repo)
    artifacts = captured.artifacts()
    tags = captured.tags()

    assert set(artifacts) == {
        "lineage/requirements.txt",
        "lineage/system.json",
        "lineage/git.json",
        "lineage/git.diff",
    }
    assert "+lr = 0.5" in artifacts["lineage/git.diff"]
    assert json.loads(artifacts["lineage/git.json"])["dirty"] is True
    assert json.loads(artifacts["lineage/system.json"])["host"] == tags["engage.host"]
    assert tags["mlflow.source.git.commit"] == _git(repo, "rev-parse", "HEAD")
    assert (tags["engage.git.branch"], tags["engage.git.dirty"]) == ("main", "true")
    assert all(isinstance(v, str) and v for v in tags.values())


def test_a_clean_repository_logs_no_diff_and_outside_git_no_git_tags(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("plain")

    assert "lineage/git.diff" not in lineage_artifacts(repo)
    assert lineage_tags(repo)["engage.git.dirty"] == "false"
    assert "lineage/git.json" not in lineage_artifacts(outside)
    assert not any(k.startswith(("engage.git", "mlflow.source")) for k in lineage_tags(outside))
