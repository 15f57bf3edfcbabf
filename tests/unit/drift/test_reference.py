"""Reference capture: statistics, kept rows, npz+json round trip, logging through a run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engage.drift import Reference, capture_reference, log_reference


def test_capture_keeps_raw_stats_and_last_rows(gaussian_reference: Reference) -> None:
    ref = gaussian_reference
    stats = ref.stats["b"]

    assert ref.features == ("a", "b", "c")
    assert ref.rows.shape == (500, 3)
    assert ref.outputs.shape == (500, 2)
    assert ref.window == 8
    assert abs(stats.mean - 10.0) < 0.3
    assert abs(stats.std - 2.0) < 0.2
    assert stats.min < stats.quantiles["0.5"] < stats.max
    assert stats.constant_window_rate == 0.0


def test_constant_windows_are_measured() -> None:
    x = np.random.default_rng(0).normal(size=(100, 4, 2))
    x[:30, :, 1] = 1.0

    ref = capture_reference(x, None, ["p", "q"])

    assert ref.stats["q"].constant_window_rate == 0.3


def test_save_and_load_round_trip_without_pickle(gaussian_reference: Reference, tmp_path) -> None:
    gaussian_reference.save(tmp_path)

    loaded = Reference.load(tmp_path)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["reference.json", "reference.npz"]
    assert json.loads((tmp_path / "reference.json").read_text())["features"] == ["a", "b", "c"]
    np.testing.assert_array_equal(loaded.rows, gaussian_reference.rows)
    np.testing.assert_array_equal(loaded.outputs, gaussian_reference.outputs)
    assert loaded.stats == gaussian_reference.stats


class _FakeRun:
    def __init__(self, into: Path) -> None:
        self.into, self.calls = into, []

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> int:
        self.calls.append(artifact_path)
        for f in Path(local_dir).iterdir():
            (self.into / f.name).write_bytes(f.read_bytes())
        return 7


def test_log_reference_spools_the_folder_under_reference(gaussian_reference, tmp_path) -> None:
    run = _FakeRun(tmp_path)

    seq = log_reference(run, gaussian_reference)

    assert seq == 7
    assert run.calls == ["reference"]
    assert Reference.load(tmp_path).features == gaussian_reference.features
