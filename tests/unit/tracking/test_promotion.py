"""Champion promotion and rollback against a real SQLite MLflow registry."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest

from engage.errors import TrackingError
from engage.tracking.catalog import (
    CANDIDATE_ALIAS,
    CHAMPION_ALIAS,
    HISTORY_TAG,
    ModelRef,
    list_models,
    show_model,
)
from engage.tracking.promotion import promote, rollback
from engage.tracking.store import open_client

_names = itertools.count()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    home = tmp_path_factory.mktemp("registry")
    client = open_client(f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.create_experiment("promotion", (home / "artifacts").as_uri())
    return client, experiment


@pytest.fixture
def client(registry: tuple[Any, str]) -> Any:
    return registry[0]


@pytest.fixture
def model(registry: tuple[Any, str]) -> Any:
    """A fresh model name and a function that registers a version with a run metric."""
    client, experiment = registry
    name = f"model-{next(_names)}"
    client.create_registered_model(name)

    def add(
        value: float | None, metric="val_accuracy", direction="maximize", params=True, tags=None
    ):
        from mlflow.entities import Metric, Param

        run = client.create_run(experiment)
        now = int(time.time() * 1000)
        metrics = [Metric(metric, value, now, 0)] if value is not None else []
        gate = [
            Param("tracking.registration.gate.metric", metric),
            Param("tracking.registration.gate.direction", direction),
        ]
        client.log_batch(run.info.run_id, metrics=metrics, params=gate if params else [])
        version = client.create_model_version(
            name, f"{run.info.artifact_uri}/model", run_id=run.info.run_id, tags=tags or {}
        )
        client.set_registered_model_alias(name, CANDIDATE_ALIAS, version.version)
        return str(version.version)

    add.name = name
    return add


def _champion(client: Any, name: str) -> str:
    return str(client.get_model_version_by_alias(name, CHAMPION_ALIAS).version)


def _history(client: Any, name: str) -> list[str]:
    return json.loads(client.get_registered_model(name).tags[HISTORY_TAG])


def test_the_first_promotion_takes_the_candidate_and_records_who_and_why(
    client: Any, model: Any
) -> None:
    model(0.9)

    result = promote(client, model.name, "first release", user="ada")

    assert (result.version, result.previous, result.comparison) == ("1", None, None)
    tags = client.get_model_version(model.name, "1").tags
    assert tags["engage.promotion_reason"] == "first release"
    assert tags["engage.promoted_by"] == "ada"
    assert tags["engage.previous_champion"] == "none"
    assert tags["engage.promoted_at"].endswith("+00:00")
    assert _champion(client, model.name) == "1"
    assert _history(client, model.name) == ["1"]


def test_a_better_candidate_replaces_the_champion(client: Any, model: Any) -> None:
    model(0.9)
    promote(client, model.name, "first")
    model(0.95)

    result = promote(client, model.name, "better on val")

    assert result.previous == "1"
    assert (result.comparison.value, result.comparison.champion_value) == (0.95, 0.9)
    assert _champion(client, model.name) == "2"
    assert client.get_model_version(model.name, "2").tags["engage.previous_champion"] == "1"
    assert _history(client, model.name) == ["1", "2"]


def test_a_worse_candidate_is_refused_naming_both_values(client: Any, model: Any) -> None:
    model(0.95)
    promote(client, model.name, "first")
    model(0.85)

    with pytest.raises(TrackingError, match=r"version 2 = 0\.85 < champion version 1 = 0\.95"):
        promote(client, model.name, "try")

    assert _champion(client, model.name) == "1"
    assert "engage.promotion_reason" not in client.get_model_version(model.name, "2").tags


def test_force_promotes_a_worse_candidate_and_says_so(client: Any, model: Any) -> None:
    model(0.95)
    promote(client, model.name, "first")
    model(0.85)

    result = promote(client, model.name, "hotfix for a data bug", force=True)

    assert result.forced
    assert _champion(client, model.name) == "2"
    tags = client.get_model_version(model.name, "2").tags
    assert tags["engage.promotion_forced"] == "true"
    assert "0.85 < champion version 1 = 0.95" in tags["engage.promotion_comparison"]


@pytest.mark.parametrize(("second", "accepted"), [(0.2, True), (0.3, True), (0.4, False)])
def test_minimize_accepts_lower_or_equal_loss(
    client: Any, model: Any, second: float, accepted: bool
) -> None:
    model(0.3, metric="val_loss", direction="minimize")
    promote(client, model.name, "first")
    model(second, metric="val_loss", direction="minimize")

    if accepted:
        promote(client, model.name, "lower loss")
        assert _champion(client, model.name) == "2"
    else:
        with pytest.raises(TrackingError, match="lower is better"):
            promote(client, model.name, "higher loss")


def test_version_tags_name_the_metric_when_the_run_has_no_gate_params(
    client: Any, model: Any
) -> None:
    gate_tags = {"engage.gate_metric": "val_f1", "engage.gate_direction": "maximize"}
    model(0.8, metric="val_f1", params=False, tags=gate_tags)
    promote(client, model.name, "first")
    model(0.7, metric="val_f1", params=False, tags=gate_tags)

    with pytest.raises(TrackingError, match="val_f1"):
        promote(client, model.name, "worse f1")


def test_without_a_gate_metric_the_flags_decide(client: Any, model: Any) -> None:
    model(0.9, params=False)
    promote(client, model.name, "first")
    model(0.8, params=False)

    with pytest.raises(TrackingError, match="no gate metric to compare"):
        promote(client, model.name, "no metric")
    with pytest.raises(TrackingError, match="needs --direction"):
        promote(client, model.name, "half", metric="val_accuracy")
    result = promote(client, model.name, "ok", metric="val_accuracy", direction="minimize")

    assert result.comparison.metric.source == "--metric"
    assert _champion(client, model.name) == "2"


def test_a_champion_without_the_metric_cannot_be_compared(client: Any, model: Any) -> None:
    model(None)
    promote(client, model.name, "first")
    model(0.9)

    with pytest.raises(TrackingError, match="champion version 1's run has no metric"):
        promote(client, model.name, "compare")


def test_a_version_that_failed_its_gate_needs_force(client: Any, model: Any) -> None:
    model(0.5, tags={"engage.gate": "gate failed: val_accuracy = 0.5 (needs >= 0.8)"})

    with pytest.raises(TrackingError, match="failed its gate"):
        promote(client, model.name, "try")
    assert promote(client, model.name, "demo only", force=True).forced


def test_promoting_the_champion_again_is_an_error(client: Any, model: Any) -> None:
    model(0.9)
    promote(client, model.name, "first")

    with pytest.raises(TrackingError, match="already the champion"):
        promote(client, model.name, "again")


def test_a_reason_is_required(client: Any, model: Any) -> None:
    model(0.9)

    with pytest.raises(TrackingError, match="a reason is required"):
        promote(client, model.name, "  ")


def test_rollback_walks_back_through_the_champion_history(client: Any, model: Any) -> None:
    for value in (0.8, 0.85, 0.9):
        model(value)
        promote(client, model.name, f"release {value}")

    first = rollback(client, model.name, "latency regression", user="bob")
    second = rollback(client, model.name, "still bad")

    assert (first.rolled_back_from, first.version) == ("3", "2")
    assert (second.rolled_back_from, second.version) == ("2", "1")
    assert _champion(client, model.name) == "1"
    tags = client.get_model_version(model.name, "2").tags
    assert tags["engage.rollback_reason"] == "latency regression"
    assert tags["engage.rolled_back_from"] == "3"
    assert tags["engage.rolled_back_by"] == "bob"
    assert client.get_model_version(model.name, "3").tags["engage.demotion_reason"] == (
        "latency regression"
    )
    with pytest.raises(TrackingError, match="no previous champion"):
        rollback(client, model.name, "once more")


def test_rollback_needs_a_champion(client: Any, model: Any) -> None:
    model(0.9)

    with pytest.raises(TrackingError, match="has no champion to roll back"):
        rollback(client, model.name, "why")


def test_rollback_skips_a_deleted_version(client: Any, model: Any) -> None:
    for value in (0.8, 0.85, 0.9):
        model(value)
        promote(client, model.name, "release")
    client.delete_model_version(model.name, "2")

    assert rollback(client, model.name, "bad").version == "1"


def test_a_promotion_after_an_alias_moved_by_hand_keeps_it_in_the_history(
    client: Any, model: Any
) -> None:
    model(0.8)
    promote(client, model.name, "first")
    model(0.85)
    client.set_registered_model_alias(model.name, CHAMPION_ALIAS, "2")  # outside engage
    model(0.9)

    promote(client, model.name, "third")

    assert _history(client, model.name) == ["1", "2", "3"]
    assert rollback(client, model.name, "back").version == "2"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no-such-model", "no registered model named 'no-such-model'"),
        ("{name}/9", "has no version 9"),
        ("{name}/x", "version must be a number"),
        ("{name}@gold", "has no version with alias 'gold'"),
    ],
)
def test_unknown_names_raise_one_clear_tracking_error(
    client: Any, model: Any, ref: str, message: str
) -> None:
    model(0.9)

    with pytest.raises(TrackingError, match=message):
        show_model(client, ModelRef.parse(ref.format(name=model.name)))


def test_promote_an_unknown_version(client: Any, model: Any) -> None:
    model(0.9)

    with pytest.raises(TrackingError, match=r"has no version 5") as info:
        promote(client, model.name, "x", version="5")
    assert info.value.hint == "its versions: 1"


def test_list_and_show_report_aliases_metrics_and_history(client: Any, model: Any) -> None:
    model(0.9)
    promote(client, model.name, "first")
    model(0.95)

    summary = next(m for m in list_models(client) if m.name == model.name)
    view = show_model(client, ModelRef(model.name))
    only = show_model(client, ModelRef(model.name, alias=CHAMPION_ALIAS))

    assert (summary.versions, summary.champion, summary.candidate) == (2, "1", "2")
    assert [v.version for v in view.versions] == ["2", "1"]
    assert [v.aliases for v in view.versions] == [(CANDIDATE_ALIAS,), (CHAMPION_ALIAS,)]
    assert [v.metric_value for v in view.versions] == [0.95, 0.9]
    assert view.versions[0].metric.name == "val_accuracy"
    assert view.champion_history == ("1",)
    assert view.versions[1].history["engage.promotion_reason"] == "first"
    assert [v.version for v in only.versions] == ["1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("m", ModelRef("m")),
        ("m@champion", ModelRef("m", alias="champion")),
        ("m/3", ModelRef("m", version="3")),
    ],
)
def test_model_refs_parse(text: str, expected: ModelRef) -> None:
    assert ModelRef.parse(text) == expected


def test_bad_flags_are_refused_even_without_a_champion(client: Any, model: Any) -> None:
    model(0.9)

    with pytest.raises(TrackingError, match="--direction needs --metric"):
        promote(client, model.name, "x", direction="maximize")
    with pytest.raises(TrackingError, match="must be maximize or minimize"):
        promote(client, model.name, "x", metric="val_loss", direction="up")
    assert CHAMPION_ALIAS not in client.get_registered_model(model.name).aliases
