"""Reading the model registry: models, versions, aliases, gate metrics, champion history.

The read side of ``engage models``; promotion.py changes aliases. Every function takes an
explicit ``MlflowClient``; MLflow refusals and unknown names become ``TrackingError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from engage.errors import TrackingError
from engage.tracking.uris import mask_uri

# The pipeline's registration step points "candidate" at every version it registers.
CANDIDATE_ALIAS = "candidate"
CHAMPION_ALIAS = "champion"
HISTORY_TAG = "engage.champion_history"
GATE_METRIC_TAG = "engage.gate_metric"
GATE_DIRECTION_TAG = "engage.gate_direction"
GATE_METRIC_PARAM = "tracking.registration.gate.metric"
GATE_DIRECTION_PARAM = "tracking.registration.gate.direction"
# Tags that tell a version's promotion story; ``show`` prints them.
HISTORY_TAG_PREFIXES = (
    "engage.promot",
    "engage.previous_champion",
    "engage.rollback",
    "engage.rolled_back",
    "engage.demot",
)

Direction = Literal["maximize", "minimize"]
_DIRECTIONS = ("maximize", "minimize")


@dataclass(frozen=True)
class GateMetric:
    """The metric two versions are compared on, and which way is better."""

    name: str
    direction: Direction
    source: str  # "--metric", "version tag" or "run params": where it was found

    def worse(self, value: float, than: float) -> bool:
        """Whether ``candidate`` is worse than ``champion`` on this metric."""
        return value < than if self.direction == "maximize" else value > than

    def describe(self) -> str:
        """One line comparing the two values, for promotion messages."""
        return f"{self.name} ({'higher' if self.direction == 'maximize' else 'lower'} is better)"


@dataclass(frozen=True)
class ModelSummary:
    """One registered model as `engage models list` shows it."""

    name: str
    versions: int
    champion: str | None
    candidate: str | None
    updated_ms: int


@dataclass(frozen=True)
class VersionView:
    """One model version as ``engage models show`` prints it."""

    name: str
    version: str
    run_id: str | None
    created_ms: int
    aliases: tuple[str, ...]
    gate: str | None
    metric: GateMetric | None
    metric_value: float | None
    history: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelView:
    """One registered model with its versions and aliases, for `engage models show`."""

    name: str
    aliases: Mapping[str, str]
    champion_history: tuple[str, ...]
    versions: tuple[VersionView, ...]


@dataclass(frozen=True)
class ModelRef:
    """``NAME``, ``NAME@alias`` or ``NAME/version``."""

    name: str
    version: str | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        # Registered model names cannot contain '/' (MLflow refuses them), aliases no '@'.
        """Parse ``NAME``, ``NAME@alias`` or ``NAME/version``; raises SpecError on anything else."""
        name, sep, version = text.partition("/")
        if sep:
            return cls(name, version=version)
        name, sep, alias = text.rpartition("@")
        return cls(name, alias=alias) if sep else cls(text)


def list_models(client: Any) -> list[ModelSummary]:
    """Every registered model with its version count, champion and candidate."""
    with refusals(client):
        models = _all_pages(lambda token: client.search_registered_models(page_token=token))
        out = []
        for model in sorted(models, key=lambda m: m.name):
            versions = _versions(client, model.name)
            found = model_aliases(model)
            out.append(
                ModelSummary(
                    model.name,
                    len(versions),
                    found.get(CHAMPION_ALIAS),
                    found.get(CANDIDATE_ALIAS),
                    int(model.last_updated_timestamp or 0),
                )
            )
    return out


def show_model(client: Any, ref: ModelRef) -> ModelView:
    """A registered model's versions (newest first), or only the one ``ref`` names."""
    model = registered_model(client, ref.name)
    if ref.version is not None or ref.alias is not None:
        versions = [get_version(client, ref.name, ref.version, ref.alias)]
    else:
        versions = _versions(client, ref.name)
        versions.sort(key=lambda v: int(v.version), reverse=True)
    found = model_aliases(model)
    # Searched versions come without their aliases; the registered model has them all.
    views = tuple(
        _view(client, v, tuple(sorted(a for a, n in found.items() if n == str(v.version))))
        for v in versions
    )
    return ModelView(model.name, found, tuple(champion_history(model)), views)


def get_version(
    client: Any, name: str, version: str | None = None, alias: str | None = None
) -> Any:
    """The ``ModelVersion`` named by number or alias (the candidate when neither is given)."""
    model = registered_model(client, name)
    if version is None:
        alias = alias or CANDIDATE_ALIAS
        found = model_aliases(model).get(alias)
        if found is None:
            listed = ", ".join(f"{a} -> {v}" for a, v in sorted(model_aliases(model).items()))
            raise TrackingError(
                f"model {name!r} has no version with alias {alias!r}",
                hint=f"its aliases: {listed}" if listed else "pass a version number: NAME/3",
            )
        version = found
    if not str(version).isdigit():
        raise TrackingError(
            f"model version must be a number, got {version!r}", hint=f"e.g. {name}/1"
        )
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version(name, str(version))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise TrackingError(refused(client, exc)) from None
    numbers = ", ".join(str(n) for n in sorted(int(v.version) for v in _versions(client, name)))
    raise TrackingError(
        f"model {name!r} has no version {version}",
        hint=f"its versions: {numbers}" if numbers else "it has no versions yet",
    )


def gate_metric(
    client: Any, version: Any, metric: str | None = None, direction: str | None = None
) -> GateMetric | None:
    """The metric to compare on: --metric > the version's tags > its run's gate params."""
    found = _tagged_metric(version) or _param_metric(client, version.run_id)
    if metric is None:
        if direction is not None:
            raise TrackingError("--direction needs --metric", hint="e.g. --metric val_loss")
        return found
    if direction is None and found is not None and found.name == metric:
        return found
    if direction is None:
        raise TrackingError(
            f"--metric {metric} needs --direction: is higher or lower better?",
            hint=f"--metric {metric} --direction maximize (or minimize)",
        )
    return GateMetric(metric, _direction(direction), "--metric")


def champion_history(model: Any) -> list[str]:
    """Versions that were champion, oldest first (the last one is normally the champion)."""
    raw = (model.tags or {}).get(HISTORY_TAG)
    try:
        history = json.loads(raw) if raw else []
    except json.JSONDecodeError:
        return []
    return [str(v) for v in history] if isinstance(history, list) else []


def _view(client: Any, version: Any, aliases: tuple[str, ...]) -> VersionView:
    metric = gate_metric(client, version)
    tags = dict(version.tags or {})
    return VersionView(
        name=version.name,
        version=str(version.version),
        run_id=version.run_id,
        created_ms=int(version.creation_timestamp or 0),
        aliases=aliases,
        gate=tags.get("engage.gate"),
        metric=metric,
        metric_value=metric_value(client, version.run_id, metric.name) if metric else None,
        history={k: v for k, v in sorted(tags.items()) if k.startswith(HISTORY_TAG_PREFIXES)},
    )


def _tagged_metric(version: Any) -> GateMetric | None:
    tags = version.tags or {}
    name, direction = tags.get(GATE_METRIC_TAG), tags.get(GATE_DIRECTION_TAG)
    if name and direction in _DIRECTIONS:
        return GateMetric(name, direction, "version tag")
    return None


def _param_metric(client: Any, run_id: str | None) -> GateMetric | None:
    run = _run(client, run_id)
    if run is None:
        return None
    params = run.data.params
    name, direction = params.get(GATE_METRIC_PARAM), params.get(GATE_DIRECTION_PARAM)
    if name and direction in _DIRECTIONS:
        return GateMetric(name, direction, "run params")
    return None


def metric_value(client: Any, run_id: str | None, metric: str) -> float | None:
    """The run's latest value of ``metric``; None when the run or the metric is missing."""
    run = _run(client, run_id)
    value = run.data.metrics.get(metric) if run is not None else None
    return None if value is None or math.isnan(value) else float(value)


def _run(client: Any, run_id: str | None) -> Any:
    from mlflow.exceptions import MlflowException

    if not run_id:
        return None
    try:
        return client.get_run(run_id)
    except MlflowException:
        return None  # a deleted run: its version stays listable, without metrics


def registered_model(client: Any, name: str) -> Any:
    """The ``RegisteredModel``; an unknown name lists the registered ones."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise TrackingError(refused(client, exc)) from None
    names = [m.name for m in list_models(client)]
    raise TrackingError(
        f"no registered model named {name!r} in {mask_uri(client.tracking_uri)}",
        hint=f"registered models: {', '.join(names)}"
        if names
        else "none is registered yet: a pipeline with tracking.registration registers one",
    )


def version_exists(client: Any, name: str, version: str) -> bool:
    """Whether ``name`` has a version ``version`` in the registry."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_model_version(name, version)
    except MlflowException:
        return False
    return True


def model_aliases(model: Any) -> dict[str, str]:
    """The aliases of ``name``, alias to version."""
    return {alias: str(v) for alias, v in (model.aliases or {}).items()}


def _versions(client: Any, name: str) -> list[Any]:
    with refusals(client):
        return _all_pages(
            lambda token: client.search_model_versions(f"name = '{name}'", page_token=token)
        )


def _all_pages(search: Callable[[str | None], Any]) -> list[Any]:
    found, token = [], None
    while True:
        page = search(token)
        found += list(page)
        token = page.token
        if not token:
            return found


@contextmanager
def refusals(client: Any) -> Iterator[None]:
    """Turn an ``MlflowException`` inside the block into a ``TrackingError``."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        raise TrackingError(refused(client, exc)) from None


def refused(client: Any, exc: Any) -> str:
    """The message for an MLflow refusal, naming the store (its URI masked)."""
    return f"MLflow registry at {mask_uri(client.tracking_uri)} refused: {exc.message}"


def _direction(text: str) -> Direction:
    if text not in _DIRECTIONS:
        raise TrackingError(f"--direction must be maximize or minimize, got {text!r}")
    return text  # type: ignore[return-value]


def fmt_value(value: float | None) -> str:
    """A metric value as the CLI prints it (four significant digits, or n/a)."""
    return "not logged" if value is None else f"{value:.6g}"
