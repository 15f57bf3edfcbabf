"""PipelineRun through the spool into a real SQLite store: tags, params, metrics, dataset,
model, status. Reads go through a client that first lets the drainer send everything."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path
from typing import Any

import mlflow.data
import mlflow.pytorch
import numpy as np
import pandas as pd
import pytest
import torch

from engage.events import Event
from engage.tracking import Drainer, PipelineRun, Spool
from engage.train.models import MLP, Standardized


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    repo = tmp_path_factory.mktemp("repo")
    _git(repo, "init", "-q")
    (repo / "spec.yaml").write_text("name: x\n")
    _git(repo, "add", "spec.yaml")
    _git(repo, "commit", "-q", "-m", "spec")
    return repo, _git(repo, "rev-parse", "HEAD")


class Drained:
    """A PipelineRun whose ``client`` is read only after the drainer emptied the spool."""

    def __init__(self, run: Drained, client: Any) -> None:
        self._run = run
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    @property
    def client(self) -> Any:
        drainer = Drainer(self._run.spool.path)
        assert drainer.flush(timeout_s=60)
        drainer.stop()
        return self._client

    @property
    def run_id(self) -> str:
        return self._run.ids().run_id


def _start(client: Any, tmp_path: Path, name: str, tags: dict, where: Path) -> Drained:
    spool = Spool(tmp_path / "spool.db")
    run = PipelineRun.start(spool, client.tracking_uri, "unit-tests", name, tags, where)
    return Drained(run, client)


@pytest.fixture
def run(client: Any, experiment_id: str, tmp_path: Path) -> Drained:
    return _start(client, tmp_path, "unit", {}, tmp_path)


def test_start_tags_the_git_commit_and_environment(
    client: Any, experiment_id: str, git_repo: tuple[Path, str], tmp_path: Path
) -> None:
    repo, commit = git_repo

    started = _start(client, tmp_path, "with-git", {"engage.pipeline": "p"}, repo)

    got = started.client.get_run(started.run_id)
    tags = got.data.tags
    assert tags["mlflow.source.git.commit"] == commit
    assert tags["mlflow.source.name"] == "engage"
    assert tags["mlflow.runName"] == "with-git"
    assert tags["engage.pipeline"] == "p"
    assert {"engage.version", "engage.python", "engage.torch"} <= set(tags)
    assert got.info.status == "RUNNING"
    assert started.ids().experiment_id == experiment_id
    assert started.ids().local_id == tags["engage.local_run_id"]


def test_start_outside_git_has_no_commit_tag(run: Drained) -> None:
    tags = run.client.get_run(run.run_id).data.tags

    assert "mlflow.source.git.commit" not in tags


def test_params_are_the_flattened_spec(run: Drained) -> None:
    spec = {
        "name": "p",
        "train": {"epochs": 3, "optim": {"lr": 0.01}},
        "data": {"features": ["a", "b"], "normalize": True},
        "tracking": {"registration": None},
    }

    run.log_params(spec)

    assert run.client.get_run(run.run_id).data.params == {
        "name": "p",
        "train.epochs": "3",
        "train.optim.lr": "0.01",
        "data.features": "['a', 'b']",
        "data.normalize": "True",
        "tracking.registration": "None",
    }


def test_more_params_than_one_batch_all_land(run: Drained) -> None:
    spec = {"grid": {f"p{i:03d}": i for i in range(250)}}

    run.log_params(spec)

    params = run.client.get_run(run.run_id).data.params
    assert len(params) == 250
    assert params["grid.p249"] == "249"


def test_metric_events_keep_their_timestamp_and_step(run: Drained) -> None:
    events = [
        Event("metric", "val_loss", 0.9, step=1, timestamp_ms=1_700_000_000_000),
        Event("metric", "val_loss", 0.5, step=2, timestamp_ms=1_700_000_060_000),
        Event("metric", "test_loss", 0.4, step=None, timestamp_ms=1_700_000_120_000),
        Event("progress", "epoch", None, step=2),
        Event("lifecycle", "started"),
    ]

    run.log_metric_events(events)

    history = run.client.get_metric_history(run.run_id, "val_loss")
    assert [(m.value, m.step, m.timestamp) for m in history] == [
        (0.9, 1, 1_700_000_000_000),
        (0.5, 2, 1_700_000_060_000),
    ]
    (test_loss,) = run.client.get_metric_history(run.run_id, "test_loss")
    assert (test_loss.step, test_loss.timestamp) == (0, 1_700_000_120_000)
    assert set(run.client.get_run(run.run_id).data.metrics) == {"val_loss", "test_loss"}


def test_more_metric_events_than_one_batch_all_land(run: Drained) -> None:
    events = [Event("metric", "m", float(i), step=i, timestamp_ms=1_000 + i) for i in range(2_345)]

    run.log_metric_events(events)

    history = run.client.get_metric_history(run.run_id, "m")
    assert sorted(m.step for m in history) == list(range(2_345))
    assert {m.step: m.value for m in history}[2_344] == 2_344.0


def test_dataset_input_carries_our_name_digest_and_context(run: Drained, tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "t": pd.date_range("2026-01-01", periods=5, freq="min"),
            "x": np.arange(5.0),
            "y": [0.0, 1.0, 0.0, 1.0, 0.0],
            "room": ["a", "b", "a", None, "b"],
        }
    )
    digest = "0123456789abcdef" * 4

    run.log_dataset(
        frame,
        name="sensors",
        source=str(tmp_path / "d.csv"),
        target="y",
        digest=digest,
        context="training",
    )

    (dataset_input,) = run.client.get_run(run.run_id).inputs.dataset_inputs
    dataset = dataset_input.dataset
    assert dataset.name == "sensors"
    assert digest.startswith(dataset.digest)
    assert len(dataset.digest) >= 16
    assert str(tmp_path / "d.csv") in dataset.source
    assert {(t.key, t.value) for t in dataset_input.tags} == {("mlflow.data.context", "training")}
    # The fields MLflow's own dataset entity has for the frame (its schema inferred from
    # every value: "room" is not required).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        theirs = mlflow.data.from_pandas(
            frame, source=str(tmp_path / "d.csv"), targets="y", name="sensors", digest=digest[:36]
        )._to_mlflow_entity()
    recorded = (dataset.schema, dataset.profile, dataset.source_type, dataset.source)
    assert recorded == (theirs.schema, theirs.profile, theirs.source_type, theirs.source)
    assert '"name": "room", "required": false' in dataset.schema


def test_text_and_dict_artifacts_are_logged(run: Drained, tmp_path: Path) -> None:
    run.log_text("name: x\n", "spec/spec.yaml")
    run.log_dict({"a": 1}, "spec/resolved.json")

    names = sorted(f.path for f in run.client.list_artifacts(run.run_id, "spec"))
    local = run.client.download_artifacts(run.run_id, "spec/resolved.json", str(tmp_path))

    assert names == ["spec/resolved.json", "spec/spec.yaml"]
    assert Path(local).read_text() == '{\n  "a": 1\n}'


def test_logged_model_loads_back_and_gives_the_same_output(
    run: Drained, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    core = MLP(window=4, features=3, outputs=2, hidden=8, layers=1, dropout=0.0)
    model = Standardized(core, torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 1.0, 2.0])).eval()
    example = np.random.default_rng(0).normal(size=(5, 4, 3)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(example)).numpy()

    seq = run.log_model(model, input_example=example, output_example=expected)
    # models:/<id> resolves through MLflow's global URI; point it at this store for the load.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run.client.tracking_uri)
    uri = run.model_uri(seq)
    loaded = mlflow.pytorch.load_model(uri)

    model_id = uri.removeprefix("models:/")
    with torch.no_grad():
        np.testing.assert_allclose(loaded(torch.from_numpy(example)).numpy(), expected, rtol=1e-6)
    # A batch size the example did not have: the exported graph keeps the batch dynamic.
    bigger = np.concatenate([example] * 3)
    assert loaded(torch.from_numpy(bigger)).shape == (15, 2)
    outputs = run.client.get_run(run.run_id).outputs.model_outputs
    assert [o.model_id for o in outputs] == [model_id]
    assert run.client.get_logged_model(model_id).status.name == "READY"


@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED"])
def test_end_sets_the_status(run: Drained, status: str) -> None:
    run.end(status)

    info = run.client.get_run(run.run_id).info
    assert info.status == status
    assert info.end_time is not None


def test_child_run_is_nested_under_its_parent(run: Drained, tmp_path: Path) -> None:
    child = run.child("round-1", {"engage.round": "1"}, tmp_path)

    tags = run.client.get_run(child.ids().run_id).data.tags

    assert tags["mlflow.parentRunId"] == run.run_id
    assert tags["engage.round"] == "1"


class _FullSpool:
    path = Path("/full/spool.db")

    def end_run(self, run: str, status: str) -> None:
        from engage.errors import TrackingError

        raise TrackingError(f"the tracking spool at {self.path} refused a write: disk full")


def test_ending_a_failed_run_on_a_full_disk_keeps_the_real_error() -> None:
    # Issue 11 item 3: end_run in the runner's `finally` replaced the job's own error.
    run = PipelineRun(_FullSpool(), "local", "sqlite:///x.db", "exp")

    def failing_job() -> None:
        try:
            raise ValueError("the real cause")
        finally:
            run.end("FAILED")

    with pytest.warns(UserWarning, match="disk full"):  # noqa: SIM117 (the order matters)
        with pytest.raises(ValueError, match="the real cause"):
            failing_job()


def test_ending_a_finished_run_on_a_full_disk_is_a_tracking_error() -> None:
    from engage.errors import TrackingError

    run = PipelineRun(_FullSpool(), "local", "sqlite:///x.db", "exp")

    with pytest.raises(TrackingError, match=r"/full/spool\.db"):
        run.end("FINISHED")
