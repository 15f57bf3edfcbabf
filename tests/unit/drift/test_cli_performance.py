"""``engage drift performance``: served predictions joined to delayed labels vs the baseline.

The ``store`` fixture (conftest.py) registers ``sensors`` version 1 (alias ``champion``),
whose run logged ``test_accuracy`` 0.9 and a reference with 2-column outputs. Predictions
come from a parquet file or from a serve sample store written by the serving app's own
writer; 400 labelled requests give a 95% CI of about +-0.03 around the accuracy.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from engage.serve.sampling import Sample, SqliteSampleStore
from tests.unit.drift.conftest import BASELINE_ACCURACY, MODEL

main = importlib.import_module("engage.cli.main")
N = 400


def _traffic(accuracy: float, seed: int = 1) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Request ids, predicted classes and labels, ``accuracy`` of them right."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, N)
    wrong = rng.permutation(N) < round(N * (1 - accuracy))
    return [f"req-{i}" for i in range(N)], np.where(wrong, 1 - labels, labels), labels


def _files(tmp_path: Path, accuracy: float, extra_labels: int = 0) -> tuple[Path, Path]:
    ids, predicted, labels = _traffic(accuracy)
    outputs = np.random.default_rng(2).normal(size=(N, 2))
    preds = tmp_path / "predictions.parquet"
    pd.DataFrame({"request_id": ids, "prediction": predicted, "outputs": list(outputs)}).to_parquet(
        preds
    )
    unknown = [f"unknown-{i}" for i in range(extra_labels)]
    frame = pd.DataFrame({"request_id": ids + unknown, "label": [*labels, *[0] * extra_labels]})
    path = tmp_path / "labels.parquet"
    frame.to_parquet(path)
    return preds, path


def _run(store: str, labels: Path, *extra: str):
    args = ["drift", "performance", "--model", f"{MODEL}@champion", "--labels", str(labels)]
    result = CliRunner().invoke(main.app, [*args, "--tracking-uri", store, *extra])
    return result, " ".join(result.output.split())


def _squash(text: str) -> str:
    """Without whitespace: the console wraps long paths anywhere."""
    return "".join(text.split())


def test_accuracy_at_the_baseline_is_no_decay_exit_0(store, tmp_path) -> None:
    preds, labels = _files(tmp_path, accuracy=BASELINE_ACCURACY)

    result, text = _run(store, labels, "--predictions", str(preds))

    assert result.exit_code == 0, result.output
    assert "baseline accuracy: 0.9 (test_accuracy)" in text
    assert f"accuracy over the newest {N}: 0.9 (95% CI" in text
    assert f"joined {N} labelled predictions; 0 label(s) matched no prediction" in text
    assert "no decay: accuracy 0.9" in text
    assert "label-free proxy (prediction_shift): no shift" in text


def test_accuracy_well_below_the_baseline_is_decay_exit_8(store, tmp_path) -> None:
    preds, labels = _files(tmp_path, accuracy=0.7)

    result, text = _run(store, labels, "--predictions", str(preds))

    assert result.exit_code == 8, result.output
    assert "performance decay: accuracy 0.7 (CI" in text
    assert "lies below baseline 0.9 - 0.02 = 0.88" in text


def test_labels_matching_no_prediction_are_counted(store, tmp_path) -> None:
    preds, labels = _files(tmp_path, accuracy=BASELINE_ACCURACY, extra_labels=25)

    result, text = _run(store, labels, "--predictions", str(preds))

    assert result.exit_code == 0, result.output
    assert f"joined {N} labelled predictions; 25 label(s) matched no prediction" in text


def test_a_labels_file_without_the_label_column_is_exit_3_naming_file_and_column(
    store, tmp_path
) -> None:
    preds, _ = _files(tmp_path, accuracy=BASELINE_ACCURACY)
    bad = tmp_path / "bad-labels.parquet"
    pd.DataFrame({"request_id": ["a"], "truth": [1]}).to_parquet(bad)

    result, text = _run(store, bad, "--predictions", str(preds))

    assert result.exit_code == 3, result.output
    assert _squash(f"{bad}: no column 'label' (columns: request_id, truth)") in _squash(text)


def test_an_unreadable_labels_file_is_exit_3(store, tmp_path) -> None:
    preds, _ = _files(tmp_path, accuracy=BASELINE_ACCURACY)
    bad = tmp_path / "labels.parquet"
    bad.write_bytes(b"not parquet")

    result, text = _run(store, bad, "--predictions", str(preds))

    assert result.exit_code == 3, result.output
    assert _squash(f"{bad}: cannot read it") in _squash(text)


def test_too_few_labels_is_no_verdict_exit_9(store, tmp_path) -> None:
    preds, _ = _files(tmp_path, accuracy=BASELINE_ACCURACY)
    few = tmp_path / "few.parquet"
    pd.DataFrame({"request_id": ["req-0", "req-1"], "label": [0, 1]}).to_parquet(few)

    result, text = _run(store, few, "--predictions", str(preds))

    assert result.exit_code == 9, result.output
    assert "only 2 labelled predictions (need 30)" in text


def test_served_samples_of_the_version_are_the_default_predictions(store, tmp_path) -> None:
    ids, predicted, labels = _traffic(accuracy=0.7)
    home = tmp_path / "home"
    writer = SqliteSampleStore(home / "serve" / MODEL / "samples.sqlite")
    window = np.zeros((8, 3), np.float32)
    rows = [
        Sample(i, window, [1.0 - p, float(p)], str(p), MODEL, "1", float(t))
        for t, (i, p) in enumerate(zip(ids, predicted, strict=True))
    ]
    rows.append(Sample("canary-0", window, [0.0, 1.0], "1", MODEL, "2", 0.0))
    writer.consume(rows)
    writer.close()
    labels_path = tmp_path / "labels.parquet"
    pd.DataFrame({"request_id": ids, "label": labels}).to_parquet(labels_path)

    result, text = _run(store, labels_path, "--home", str(home))

    assert result.exit_code == 8, result.output
    assert "samples.sqlite" in text
    assert f"joined {N} labelled predictions" in text
    assert "skipped 1 sample(s) served by other versions" in text


def test_no_served_samples_says_where_it_looked(store, tmp_path) -> None:
    _, labels = _files(tmp_path, accuracy=BASELINE_ACCURACY)
    home = tmp_path / "empty-home"

    result, text = _run(store, labels, "--home", str(home))

    assert result.exit_code == 3, result.output
    where = home / "serve" / MODEL / "samples.sqlite"
    assert _squash(f"{where}: no served samples here") in _squash(text)
