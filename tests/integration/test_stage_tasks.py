"""The data stage and the evaluation as one named Ray task each (``data.resources``,
``evaluate.resources``): the same prepared data and the same metrics as in the driver.

System lane: the shared local Ray session (``ray_local``); a few seconds of tasks.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from engage.errors import SpecError
from engage.events import FanOut, Reporter
from engage.runtime import stages
from engage.spec import parse_spec
from engage.train.builders import ModelShape
from engage.train.loop import TrainJob, build_model
from engage.train.trainer import TrainOutcome
from tests.unit.spec.specs import MINIMAL

pytestmark = pytest.mark.integration

SMALL = ("data.source.households=1", "data.source.days=2", "train.batch_size=32")


def _loaded(*overrides: str):
    return parse_spec(MINIMAL, overrides=(*SMALL, *overrides))


def _finished(names: set[str]) -> set[str]:
    """Which of ``names`` the State API lists as finished tasks (its task events lag a
    moment). Asked by name: the shared session holds more tasks than a listing returns."""
    import ray
    from ray.util import state

    found = set()
    for name in names:
        tasks = state.list_tasks(
            address=ray.get_runtime_context().gcs_address,  # other Ray instances may run here
            filters=[("name", "=", name), ("state", "=", "FINISHED")],
            raise_on_missing_output=False,
        )
        found |= {t.name for t in tasks}
    return found


def _assert_same_data(remote, local) -> None:
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(remote, split).x, getattr(local, split).x)
        np.testing.assert_array_equal(getattr(remote, split).y, getattr(local, split).y)
    np.testing.assert_array_equal(remote.normalization.mean, local.normalization.mean)
    np.testing.assert_array_equal(remote.normalization.std, local.normalization.std)
    pd.testing.assert_frame_equal(remote.frame, local.frame)
    assert remote.fingerprint == local.fingerprint
    assert (remote.features, remote.target, remote.classes) == (
        local.features,
        local.target,
        local.classes,
    )


def test_the_data_stage_and_the_evaluation_in_ray_tasks_equal_the_driver(ray_local) -> None:
    # Arrange
    driver = _loaded()
    placed = _loaded("data.resources={CPU: 0.5}", "evaluate.resources={CPU: 0.5}")
    local = stages.prepare_data(driver, streamed=True)

    # Act (data): prepared in a Ray task, back through the object store.
    remote = stages.prepare_data_on_cluster(placed, streamed=True)

    # Assert
    _assert_same_data(remote, local)
    assert remote.train.x.flags.writeable  # not a read-only view of the object store

    # Arrange (evaluation): one model's weights, scored in the driver and in a task.
    spec = driver.spec
    shape = ModelShape(*local.model_inputs("train").shape[1:], len(local.classes))
    job = TrainJob(spec.train, spec.model, spec.data.task, shape, None, None, "")
    outcome = TrainOutcome("", {"model": build_model(job).state_dict()}, 0.0)

    # Act
    _, in_driver = stages.evaluate(driver, local, outcome, Reporter(FanOut([])))
    _, in_task = stages.evaluate(placed, remote, outcome, Reporter(FanOut([])))

    # Assert: the same metrics, and both tasks ran under their names.
    assert in_task.keys() == in_driver.keys()
    assert {"test_loss", "test_accuracy"} <= in_task.keys()
    for key, value in in_driver.items():
        assert in_task[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    wanted = {"engage.prepare_data", "engage.evaluate"}
    deadline = time.monotonic() + 30
    while (found := _finished(wanted)) != wanted:
        assert time.monotonic() < deadline, found
        time.sleep(0.5)


def test_a_spec_error_in_the_data_task_reaches_the_driver_as_itself(ray_local) -> None:
    # A batch larger than the training split is found once the data is prepared: in the task.
    loaded = _loaded("data.resources={CPU: 0.5}", "train.batch_size=100000")

    with pytest.raises(SpecError, match="batch_size 100000 is larger than the training split"):
        stages.prepare_data_on_cluster(loaded, streamed=True)
