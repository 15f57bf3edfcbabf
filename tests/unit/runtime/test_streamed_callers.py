"""A streamed training split reaches only the job that trains from it (no Ray).

The pipeline job trains from the stream; a tuning job, `engage plan` or `engage profile`
needs every training window in memory, and would otherwise work on the driver's bounded
evaluation sample without a word. They stop with a located spec error instead, and
`engage validate` says as much before a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from engage.cli.main import app
from engage.errors import SpecError
from engage.runtime.kinds import job_class
from engage.runtime.options import RunOptions
from engage.runtime.stages import prepare_data
from engage.spec import load_spec
from tests.unit.data._builders import clean_table

TUNE = {
    "tune": {
        "space": {"train.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        "num_samples": 2,
        "metric": "val_loss",
    }
}


def _spec(folder: Path, **sections: object) -> Path:
    table = clean_table(rows_per_group=80, groups=tuple("abcd"))
    (folder / "shards").mkdir()
    for i, group in enumerate("abcd"):
        table[table.site == group].to_parquet(folder / "shards" / f"p{i}.parquet", index=False)
    spec = {
        "name": "streamed",
        "data": {
            "source": {"type": "parquet", "path": "shards", "timestamp": "time", "group": "site"},
            "features": ["x1", "x2"],
            "target": "label",
            "task": "classification",
            "window": 5,
            "stride": 1,
            "streaming": True,
        },
        "model": {"name": "mlp"},
        "train": {"epochs": 1, "batch_size": 8, "num_workers": 1},
        **sections,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_only_a_caller_that_trains_from_the_stream_gets_it(tmp_path: Path) -> None:
    loaded = load_spec(_spec(tmp_path))

    assert prepare_data(loaded, streamed=True).stream is not None
    with pytest.raises(SpecError) as caught:
        prepare_data(loaded)
    assert "data.streaming" in str(caught.value)
    assert "set data.streaming: false" in str(caught.value)


def test_validate_reports_the_streamed_split_and_refuses_it_for_a_tuning_spec(
    tmp_path: Path,
) -> None:
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "tuning").mkdir()
    runner = CliRunner()

    pipeline = runner.invoke(app, ["validate", str(_spec(tmp_path / "pipeline"))])
    tuning = runner.invoke(app, ["validate", str(_spec(tmp_path / "tuning", **TUNE))])

    assert pipeline.exit_code == 0, pipeline.output
    assert "train streams from its shards" in " ".join(pipeline.output.split())
    assert tuning.exit_code == 2, tuning.output
    assert "data.streaming" in tuning.output


def test_a_tuning_job_run_refuses_the_stream_though_it_extends_the_pipeline_job(
    tmp_path: Path,
) -> None:
    # The tuning kind is a PipelineJob subclass: its data stage must not inherit the
    # pipeline's permission to stream (its trials take the arrays in memory).
    tuning = job_class("tuning")(load_spec(_spec(tmp_path, **TUNE)), RunOptions(home=tmp_path))

    assert job_class("pipeline").trains_from_stream
    assert not tuning.trains_from_stream
    with pytest.raises(SpecError, match=r"data\.streaming"):
        tuning.prepare()
