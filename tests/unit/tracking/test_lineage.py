"""Lineage: the git commit of a folder and the spec flattened into run parameters."""

from __future__ import annotations

from pathlib import Path

from engage.tracking.lineage import flatten, git_commit


def test_flatten_joins_nested_keys_with_dots() -> None:
    tree = {"train": {"epochs": 3, "optim": {"name": "adam", "lr": 0.001}}, "name": "p"}

    assert flatten(tree) == {
        "train.epochs": "3",
        "train.optim.name": "adam",
        "train.optim.lr": "0.001",
        "name": "p",
    }


def test_flatten_keeps_lists_and_empty_dicts_as_text() -> None:
    tree = {"features": ["a", "b"], "params": {}, "split": [{"x": 1}], "none": None}

    assert flatten(tree) == {
        "features": "['a', 'b']",
        "params": "{}",
        "split": "[{'x': 1}]",
        "none": "None",
    }


def test_flatten_applies_a_prefix() -> None:
    assert flatten({"a": {"b": 1}}, "spec.") == {"spec.a.b": "1"}


def test_git_commit_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None


def test_git_commit_is_none_for_a_missing_folder(tmp_path: Path) -> None:
    assert git_commit(tmp_path / "absent") is None
