"""Verified checkpoints: atomic writes, damaged ones skipped, pickled code refused, RNG restored.

Checkpoint folders are laid out by hand the way Ray Train keeps them
(``<run>/checkpoint_<timestamp>/``), so no Ray is needed.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from engage.train.checkpoint import (
    MANIFEST,
    PAYLOAD,
    CheckpointError,
    candidates,
    load_checkpoint,
    load_latest_valid,
    rng_state,
    set_rng_state,
    verify,
    write_checkpoint,
)

RAN: list[str] = []


def _observable(note: str) -> str:
    RAN.append(note)
    return note


class _RunsCode:
    """Pickles as a call of ``_observable``: loading it with pickle would run that call."""

    def __reduce__(self):
        return (_observable, ("code ran on load",))


def _state(epoch: int) -> dict:
    return {"model": {"w": torch.full((3,), float(epoch))}, "epoch": epoch, "metrics": {"l": 0.5}}


def _run(tmp_path: Path, epochs: int) -> list[Path]:
    """A run folder with one checkpoint per epoch, oldest first, named as Ray Train names them."""
    return [
        write_checkpoint(tmp_path / f"checkpoint_2026-12-01_10-00-0{e}.000000", _state(e))
        for e in range(1, epochs + 1)
    ]


def test_written_checkpoint_verifies_and_loads_its_state(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "checkpoint_a", _state(3))

    manifest = verify(path)
    state = load_checkpoint(path)

    assert manifest["epoch"] == 3
    assert set(manifest["files"]) == {PAYLOAD}
    assert state["epoch"] == 3
    assert torch.equal(state["model"]["w"], torch.full((3,), 3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_a"]  # no partial left


def test_write_refuses_a_folder_that_already_holds_files(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "checkpoint_a", _state(1))

    with pytest.raises(CheckpointError, match="not empty"):
        write_checkpoint(path, _state(2))


def test_truncated_latest_checkpoint_falls_back_to_the_previous(tmp_path, caplog) -> None:
    first, second = _run(tmp_path, 2)
    payload = second / PAYLOAD
    payload.write_bytes(payload.read_bytes()[: payload.stat().st_size // 2])

    with caplog.at_level(logging.WARNING, logger="engage.train.checkpoint"):
        restored = load_latest_valid(candidates(tmp_path))

    assert restored is not None
    assert restored.path == first
    assert restored.state["epoch"] == 1
    assert [p for p, _ in restored.skipped] == [second]
    assert "bytes" in restored.skipped[0][1]
    assert "skipping checkpoint" in caplog.text
    assert second.name in caplog.text


def test_flipped_byte_in_latest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    first, second = _run(tmp_path, 2)
    data = bytearray((second / PAYLOAD).read_bytes())
    data[len(data) // 2] ^= 0x01
    (second / PAYLOAD).write_bytes(bytes(data))

    restored = load_latest_valid(candidates(tmp_path))

    assert restored is not None
    assert restored.path == first
    assert "SHA-256" in restored.skipped[0][1]


def test_checkpoint_without_manifest_is_skipped(tmp_path: Path) -> None:
    first, second = _run(tmp_path, 2)
    (second / MANIFEST).unlink()

    restored = load_latest_valid(candidates(tmp_path))

    assert restored is not None
    assert restored.path == first
    assert "no manifest.json" in restored.skipped[0][1]


def test_pickled_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    # The manifest is valid: the hash alone does not make a payload safe to load.
    first = write_checkpoint(tmp_path / "checkpoint_1", _state(1))
    evil = write_checkpoint(tmp_path / "checkpoint_2", {"epoch": 2, "model": _RunsCode()})
    RAN.clear()

    with pytest.raises(CheckpointError, match="more than tensors"):
        load_checkpoint(evil)
    restored = load_latest_valid(candidates(tmp_path))

    assert RAN == []
    assert restored is not None
    assert restored.path == first


def test_no_valid_checkpoint_gives_none(tmp_path: Path) -> None:
    (only,) = _run(tmp_path, 1)
    (only / PAYLOAD).write_bytes(b"")

    assert load_latest_valid(candidates(tmp_path)) is None


def test_candidates_are_every_checkpoint_folder_newest_first(tmp_path: Path) -> None:
    # A complete folder Ray Train never registered (a worker died before its report was
    # processed) is a candidate too: it is verified like any other.
    one, two, three = _run(tmp_path, 3)
    (tmp_path / "other").mkdir()
    elsewhere = write_checkpoint(tmp_path / "remote" / "checkpoint_x", _state(9))

    assert candidates(tmp_path) == [three, two, one]
    assert candidates(tmp_path, latest=two) == [three, two, one]
    assert candidates(tmp_path, latest=elsewhere) == [elsewhere, three, two, one]


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    path = write_checkpoint(tmp_path / "checkpoint_r", {"rng": rng_state(), "epoch": 1})
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(9), np.random.seed(9), random.seed(9)

    set_rng_state(load_checkpoint(path)["rng"])

    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
